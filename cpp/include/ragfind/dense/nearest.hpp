// Nearest-centroid kernels (the IVF assignment step): for each row x, the centroid c with the
// largest x . c + bias[c], found without writing the n x nc score matrix: centroids packed into
// panels, a register-tiled multiply-add micro-kernel, a running argmax per row.
//
// Every level computes a score as the same chain of fused multiply-adds in the order of the
// dimensions (acc = fma(x[k], c[k], acc) for k = 0..d-1 from acc = 0) and then adds the bias,
// so scores, and hence assignments, are bit-identical at every SIMD level, for every blocking
// and thread count. Ties go to the lower centroid; a NaN score never wins; a row whose scores
// are all NaN or -inf gets centroid 0. One table per SIMD level, chosen at run time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ragfind/common/cpu.hpp"

namespace ragfind::dense {

using common::SimdLevel;

/// Centroids in the layout of one kernel table: panels of `width` centroids, panel p (centroids
/// [p * width, ...)) at data[p * width * d], stored k-major as d rows of wp floats, where wp is
/// `width`, or for the last panel the centroids left rounded up to `lanes`. Padding centroids
/// are zero with bias -inf, so they never win.
struct CentroidPanels {
  std::vector<float> data;
  std::vector<float> bias;  // nc rounded up to lanes entries
  size_t nc = 0, d = 0, lanes = 1, width = 1;
};

/// One SIMD level's nearest-centroid kernel.
struct NearestKernels {
  const char* name;
  size_t lanes;  // centroids per SIMD vector
  size_t width;  // centroids per panel, a multiple of lanes
  /// out[i] = argmax_c X[i] . c + bias[c] over P's centroids, for the n rows of X (n x P.d).
  void (*nearest_f32)(const float* X, size_t n, const CentroidPanels& P, int64_t* out);
};

/// The kernel for the active SIMD level.
const NearestKernels& nearest_kernels();

/// The kernel compiled for `level` (falls back to the next lower compiled+supported level).
const NearestKernels& nearest_kernels_at(SimdLevel level);

/// Packs nc x d row-major centroids and their bias (nullptr: zeros) for K.
CentroidPanels pack_centroids(const NearestKernels& K, const float* C, size_t nc, size_t d, const float* bias);

}  // namespace ragfind::dense
