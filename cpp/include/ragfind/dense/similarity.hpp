// Similarity kernels for dense vectors: one table of function pointers per SIMD level.
//
// Storage formats scanned against float32 queries:
//   f32  rows of `d` floats;
//   f16  rows of `d` IEEE binary16 values (uint16_t bits), decoded with F16C (x86) or
//        fcvtl (NEON) where available;
//   i8   rows of `d` int8 values with one float scale per row (x ~= scale * q, symmetric);
//        the query is quantised to int16 (scale max|q|/16383, nearly lossless) so the dot
//        product is an exact integer computation (vpmaddwd / vpdpwssd / smlal).
// Every kernel is compiled per ISA (cpp/src/kernels/similarity/<isa>.cpp) and chosen at run
// time through similarity_kernels() (see cpu.hpp for the dispatch rules).
#pragma once

#include <cstddef>
#include <cstdint>

#include "ragfind/common/cpu.hpp"

namespace ragfind::dense {

using common::SimdLevel;

/// Implementations of every similarity kernel for one SIMD level.
struct SimilarityKernels {
  const char* name;
  /// Dot product of two float32 vectors of length d.
  float (*dot_f32)(const float* a, const float* b, size_t d);
  /// Squared L2 distance of two float32 vectors of length d.
  float (*l2sq_f32)(const float* a, const float* b, size_t d);
  /// out[i] = q . X[i] for n rows of d floats.
  void (*dot_rows_f32)(const float* q, const float* X, size_t n, size_t d, float* out);
  /// out[i] = |q - X[i]|^2 for n rows of d floats.
  void (*l2_rows_f32)(const float* q, const float* X, size_t n, size_t d, float* out);
  /// out[i] = q . X[i] for n rows of d float16 values.
  void (*dot_rows_f16)(const float* q, const uint16_t* X, size_t n, size_t d, float* out);
  /// out[i] = |q - X[i]|^2 for n rows of d float16 values.
  void (*l2_rows_f16)(const float* q, const uint16_t* X, size_t n, size_t d, float* out);
  /// out[i] = sum_j q[j] * X[i][j] computed exactly in integers (int32 partial sums over
  /// chunks of at most 4096 elements, so no overflow for |q| <= 16383, |X| <= 127), as float.
  void (*dot_rows_i8)(const int16_t* q, const int8_t* X, size_t n, size_t d, float* out);
  /// out[i * ldo + j] = Q[i] . X[j] for nq query rows and nx data rows (register-blocked).
  void (*dot_tile_f32)(const float* Q, size_t nq, const float* X, size_t nx, size_t d, float* out, size_t ldo);
  /// Decodes n float16 values to float32.
  void (*f16_to_f32)(const uint16_t* in, float* out, size_t n);
  /// Converts n int8 values to float32 (no scaling).
  void (*i8_to_f32)(const int8_t* in, float* out, size_t n);
};

/// The kernels for the active SIMD level (best supported unless forced lower).
const SimilarityKernels& similarity_kernels();

/// The kernels compiled for `level` (falls back to the next lower compiled+supported level).
const SimilarityKernels& similarity_kernels_at(SimdLevel level);

/// Scalar float16 (binary16 bits) to float32 conversion, exact for every input.
float half_to_float(uint16_t h);

}  // namespace ragfind::dense
