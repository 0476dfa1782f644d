// Scalar reference for the similarity kernels: plain loops, the ground truth every SIMD
// level is tested against. Compiled with the baseline flags (no vector ISA assumed).
#include <cstring>

#include "kernels.hpp"

namespace ragfind::dense {

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1Fu) {
    bits = sign | 0x7F800000u | (mant << 13);  // inf / NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);  // normal: rebias 15 -> 127
  } else if (mant == 0) {
    bits = sign;  // +-0
  } else {
    // Subnormal half: normalise the mantissa.
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((mant & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

namespace kernels {
namespace {

float dot_f32(const float* a, const float* b, size_t d) {
  float s = 0.f;
  for (size_t j = 0; j < d; ++j) s += a[j] * b[j];
  return s;
}

float l2sq_f32(const float* a, const float* b, size_t d) {
  float s = 0.f;
  for (size_t j = 0; j < d; ++j) {
    const float t = a[j] - b[j];
    s += t * t;
  }
  return s;
}

void dot_rows_f32(const float* q, const float* X, size_t n, size_t d, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = dot_f32(q, X + i * d, d);
}

void l2_rows_f32(const float* q, const float* X, size_t n, size_t d, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = l2sq_f32(q, X + i * d, d);
}

void dot_rows_f16(const float* q, const uint16_t* X, size_t n, size_t d, float* out) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t* x = X + i * d;
    float s = 0.f;
    for (size_t j = 0; j < d; ++j) s += q[j] * half_to_float(x[j]);
    out[i] = s;
  }
}

void l2_rows_f16(const float* q, const uint16_t* X, size_t n, size_t d, float* out) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t* x = X + i * d;
    float s = 0.f;
    for (size_t j = 0; j < d; ++j) {
      const float t = q[j] - half_to_float(x[j]);
      s += t * t;
    }
    out[i] = s;
  }
}

void dot_rows_i8(const int16_t* q, const int8_t* X, size_t n, size_t d, float* out) {
  for (size_t i = 0; i < n; ++i) {
    const int8_t* x = X + i * d;
    int64_t s = 0;  // exact; the SIMD levels reach the same integer through int32 chunks
    for (size_t j = 0; j < d; ++j) s += static_cast<int32_t>(q[j]) * static_cast<int32_t>(x[j]);
    out[i] = static_cast<float>(s);
  }
}

void dot_tile_f32(const float* Q, size_t nq, const float* X, size_t nx, size_t d, float* out, size_t ldo) {
  for (size_t i = 0; i < nq; ++i)
    for (size_t j = 0; j < nx; ++j) out[i * ldo + j] = dot_f32(Q + i * d, X + j * d, d);
}

void f16_to_f32(const uint16_t* in, float* out, size_t n) {
  for (size_t j = 0; j < n; ++j) out[j] = half_to_float(in[j]);
}

void i8_to_f32(const int8_t* in, float* out, size_t n) {
  for (size_t j = 0; j < n; ++j) out[j] = static_cast<float>(in[j]);
}

}  // namespace

extern const SimilarityKernels similarity_scalar = {
    "scalar",    dot_f32,     l2sq_f32,     dot_rows_f32, l2_rows_f32, dot_rows_f16,
    l2_rows_f16, dot_rows_i8, dot_tile_f32, f16_to_f32,   i8_to_f32,
};

}  // namespace kernels
}  // namespace ragfind::dense
