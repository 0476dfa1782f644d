// AArch64 Advanced SIMD (NEON) similarity kernels. NEON is mandatory on AArch64, so this file
// needs no extra flags; CMake compiles it (defining RAGFIND_HAVE_NEON) on aarch64 targets only.
//
// Why the loops look like this: the shapes follow avx2.cpp at 4 lanes. f32 rows are
// read one after the other with four independent accumulators (one sequential stream); the f16
// and int8 row kernels, where decoding costs instructions, process 4 rows per pass and load
// each query slice once for all four. NEON has no masked loads, so tails shorter than one
// vector go through a zero-padded copy and no row is ever over-read. AArch64 has 32 vector
// registers, so the batch tile is 4 queries x 4 rows (16 accumulators, 8 loads per 16 FMAs)
// instead of AVX2's 4 x 2. float16 is decoded with fcvtl (vcvt_f32_f16, exact for every
// input, subnormals included); int8 x int16 products are widened into int32 with smlal.
#include <arm_neon.h>

#include <cstring>

#include "kernels.hpp"

namespace ragfind::dense::kernels {
namespace {

// Horizontal sums of four accumulators, as one vector {sum(a), sum(b), sum(c), sum(d)}.
inline float32x4_t hsum4(float32x4_t a, float32x4_t b, float32x4_t c, float32x4_t d) {
  return vpaddq_f32(vpaddq_f32(a, b), vpaddq_f32(c, d));
}

// Software prefetch of rows a few groups ahead of the scan (see avx2.cpp).
inline void prefetch_bytes(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(c + o, 0, 3);
}

// The first `rem` floats of p, zero-filled to 4 (0 <= rem < 4).
inline float32x4_t load_f32_tail(const float* p, size_t rem) {
  float buf[4] = {0.f, 0.f, 0.f, 0.f};
  std::memcpy(buf, p, rem * sizeof(float));
  return vld1q_f32(buf);
}

float dot_f32(const float* a, const float* b, size_t d) {
  float32x4_t s0 = vdupq_n_f32(0.f), s1 = vdupq_n_f32(0.f), s2 = vdupq_n_f32(0.f), s3 = vdupq_n_f32(0.f);
  size_t j = 0;
  for (; j + 16 <= d; j += 16) {
    s0 = vfmaq_f32(s0, vld1q_f32(a + j), vld1q_f32(b + j));
    s1 = vfmaq_f32(s1, vld1q_f32(a + j + 4), vld1q_f32(b + j + 4));
    s2 = vfmaq_f32(s2, vld1q_f32(a + j + 8), vld1q_f32(b + j + 8));
    s3 = vfmaq_f32(s3, vld1q_f32(a + j + 12), vld1q_f32(b + j + 12));
  }
  for (; j + 4 <= d; j += 4) s0 = vfmaq_f32(s0, vld1q_f32(a + j), vld1q_f32(b + j));
  if (j < d) s1 = vfmaq_f32(s1, load_f32_tail(a + j, d - j), load_f32_tail(b + j, d - j));
  return vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
}

float l2sq_f32(const float* a, const float* b, size_t d) {
  float32x4_t s0 = vdupq_n_f32(0.f), s1 = vdupq_n_f32(0.f), s2 = vdupq_n_f32(0.f), s3 = vdupq_n_f32(0.f);
  size_t j = 0;
  for (; j + 16 <= d; j += 16) {
    const float32x4_t t0 = vsubq_f32(vld1q_f32(a + j), vld1q_f32(b + j));
    const float32x4_t t1 = vsubq_f32(vld1q_f32(a + j + 4), vld1q_f32(b + j + 4));
    const float32x4_t t2 = vsubq_f32(vld1q_f32(a + j + 8), vld1q_f32(b + j + 8));
    const float32x4_t t3 = vsubq_f32(vld1q_f32(a + j + 12), vld1q_f32(b + j + 12));
    s0 = vfmaq_f32(s0, t0, t0);
    s1 = vfmaq_f32(s1, t1, t1);
    s2 = vfmaq_f32(s2, t2, t2);
    s3 = vfmaq_f32(s3, t3, t3);
  }
  for (; j + 4 <= d; j += 4) {
    const float32x4_t t = vsubq_f32(vld1q_f32(a + j), vld1q_f32(b + j));
    s0 = vfmaq_f32(s0, t, t);
  }
  if (j < d) {
    const float32x4_t t = vsubq_f32(load_f32_tail(a + j, d - j), load_f32_tail(b + j, d - j));
    s1 = vfmaq_f32(s1, t, t);
  }
  return vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
}

// One row at a time, as on AVX2: a single sequential stream for the hardware prefetcher.
void dot_rows_f32(const float* q, const float* X, size_t n, size_t d, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = dot_f32(q, X + i * d, d);
}

void l2_rows_f32(const float* q, const float* X, size_t n, size_t d, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = l2sq_f32(q, X + i * d, d);
}

// 8 float16 values as two float32 vectors (low and high halves).
inline void load_f16x8(const uint16_t* p, float32x4_t& lo, float32x4_t& hi) {
  const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(p));
  lo = vcvt_f32_f16(vget_low_f16(h));
  hi = vcvt_high_f32_f16(h);
}

inline void load_f16x8_tail(const uint16_t* p, size_t rem, float32x4_t& lo, float32x4_t& hi) {
  uint16_t buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::memcpy(buf, p, rem * sizeof(uint16_t));
  load_f16x8(buf, lo, hi);
}

template <bool kL2>
inline float32x4_t step(float32x4_t x, float32x4_t qv, float32x4_t acc) {
  if (kL2) {
    const float32x4_t t = vsubq_f32(x, qv);
    return vfmaq_f32(acc, t, t);
  }
  return vfmaq_f32(acc, x, qv);
}

// Rows of float16 in 8-element steps (one 128-bit load decodes into two float32 vectors);
// two accumulators per row, 4 rows per pass.
template <bool kL2>
void rows_f16(const float* q, const uint16_t* X, size_t n, size_t d, float* out) {
  const size_t dv = d & ~size_t(7);
  const size_t rem = d - dv;
  float qtail[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  std::memcpy(qtail, q + dv, rem * sizeof(float));
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const uint16_t* x[4] = {X + i * d, X + (i + 1) * d, X + (i + 2) * d, X + (i + 3) * d};
    if (i + 12 <= n) prefetch_bytes(x[0] + 8 * d, 4 * d * sizeof(uint16_t));
    float32x4_t a[4], b[4];
    for (int r = 0; r < 4; ++r) a[r] = b[r] = vdupq_n_f32(0.f);
    for (size_t j = 0; j < dv; j += 8) {
      const float32x4_t q0 = vld1q_f32(q + j), q1 = vld1q_f32(q + j + 4);
      for (int r = 0; r < 4; ++r) {
        float32x4_t lo, hi;
        load_f16x8(x[r] + j, lo, hi);
        a[r] = step<kL2>(lo, q0, a[r]);
        b[r] = step<kL2>(hi, q1, b[r]);
      }
    }
    if (rem) {
      const float32x4_t q0 = vld1q_f32(qtail), q1 = vld1q_f32(qtail + 4);
      for (int r = 0; r < 4; ++r) {
        float32x4_t lo, hi;
        load_f16x8_tail(x[r] + dv, rem, lo, hi);
        a[r] = step<kL2>(lo, q0, a[r]);
        b[r] = step<kL2>(hi, q1, b[r]);
      }
    }
    vst1q_f32(out + i,
              hsum4(vaddq_f32(a[0], b[0]), vaddq_f32(a[1], b[1]), vaddq_f32(a[2], b[2]), vaddq_f32(a[3], b[3])));
  }
  for (; i < n; ++i) {
    const uint16_t* x = X + i * d;
    float32x4_t a = vdupq_n_f32(0.f), b = vdupq_n_f32(0.f), lo, hi;
    for (size_t j = 0; j < dv; j += 8) {
      load_f16x8(x + j, lo, hi);
      a = step<kL2>(lo, vld1q_f32(q + j), a);
      b = step<kL2>(hi, vld1q_f32(q + j + 4), b);
    }
    if (rem) {
      load_f16x8_tail(x + dv, rem, lo, hi);
      a = step<kL2>(lo, vld1q_f32(qtail), a);
      b = step<kL2>(hi, vld1q_f32(qtail + 4), b);
    }
    out[i] = vaddvq_f32(vaddq_f32(a, b));
  }
}

void dot_rows_f16(const float* q, const uint16_t* X, size_t n, size_t d, float* out) {
  rows_f16<false>(q, X, n, d, out);
}

void l2_rows_f16(const float* q, const uint16_t* X, size_t n, size_t d, float* out) { rows_f16<true>(q, X, n, d, out); }

// 16 int8 x int16 products added into two int32x4 accumulators (smlal/smlal2 on each half of
// the sign-extended int8 vector): per lane 4 products per 16 elements, the same per-lane count
// as AVX2's vpmaddwd, so kI8ChunkElems bounds the int32 sums identically (512 products of
// at most 127 * 16383 per lane per chunk).
inline void madd_i8x16(const int8_t* x, int16x8_t q0, int16x8_t q1, int32x4_t& a, int32x4_t& b) {
  const int8x16_t v = vld1q_s8(x);
  const int16x8_t x0 = vmovl_s8(vget_low_s8(v));
  const int16x8_t x1 = vmovl_high_s8(v);
  a = vmlal_s16(a, vget_low_s16(x0), vget_low_s16(q0));
  b = vmlal_high_s16(b, x0, q0);
  a = vmlal_s16(a, vget_low_s16(x1), vget_low_s16(q1));
  b = vmlal_high_s16(b, x1, q1);
}

// Exact sum of both accumulators' lanes (which may together exceed int32).
inline int64_t hsum_exact(int32x4_t a, int32x4_t b) { return vaddlvq_s32(a) + vaddlvq_s32(b); }

void dot_rows_i8(const int16_t* q, const int8_t* X, size_t n, size_t d, float* out) {
  const size_t dv = d & ~size_t(15);
  const size_t rem = d - dv;
  int16_t qtail[16] = {0};
  std::memcpy(qtail, q + dv, rem * sizeof(int16_t));
  const int16x8_t qt0 = vld1q_s16(qtail), qt1 = vld1q_s16(qtail + 8);
  auto tail = [rem](const int8_t* p, int16x8_t q0, int16x8_t q1) {
    int8_t buf[16] = {0};
    std::memcpy(buf, p, rem);
    int32x4_t a = vdupq_n_s32(0), b = vdupq_n_s32(0);
    madd_i8x16(buf, q0, q1, a, b);
    return hsum_exact(a, b);
  };
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const int8_t* x[4] = {X + i * d, X + (i + 1) * d, X + (i + 2) * d, X + (i + 3) * d};
    if (i + 12 <= n) prefetch_bytes(x[0] + 8 * d, 4 * d);
    int64_t t[4] = {0, 0, 0, 0};
    for (size_t c = 0; c < dv; c += kI8ChunkElems) {
      const size_t ce = c + kI8ChunkElems < dv ? c + kI8ChunkElems : dv;
      int32x4_t a[4], b[4];
      for (int r = 0; r < 4; ++r) a[r] = b[r] = vdupq_n_s32(0);
      for (size_t j = c; j < ce; j += 16) {
        const int16x8_t q0 = vld1q_s16(q + j), q1 = vld1q_s16(q + j + 8);
        for (int r = 0; r < 4; ++r) madd_i8x16(x[r] + j, q0, q1, a[r], b[r]);
      }
      for (int r = 0; r < 4; ++r) t[r] += hsum_exact(a[r], b[r]);
    }
    if (rem)
      for (int r = 0; r < 4; ++r) t[r] += tail(x[r] + dv, qt0, qt1);
    for (int r = 0; r < 4; ++r) out[i + r] = static_cast<float>(t[r]);
  }
  for (; i < n; ++i) {
    const int8_t* x = X + i * d;
    int64_t t = 0;
    for (size_t c = 0; c < dv; c += kI8ChunkElems) {
      const size_t ce = c + kI8ChunkElems < dv ? c + kI8ChunkElems : dv;
      int32x4_t a = vdupq_n_s32(0), b = vdupq_n_s32(0);
      for (size_t j = c; j < ce; j += 16) madd_i8x16(x + j, vld1q_s16(q + j), vld1q_s16(q + j + 8), a, b);
      t += hsum_exact(a, b);
    }
    if (rem) t += tail(x + dv, qt0, qt1);
    out[i] = static_cast<float>(t);
  }
}

// 4 queries x 4 rows of accumulators; the d tail (< 4) is folded in with zero-padded copies
// of the four query and four row tails, made once per tile. The unroll pragmas keep acc[][] in
// registers: without them GCC 12 kept the array on the stack and stored it every step.
void dot_tile_f32(const float* Q, size_t nq, const float* X, size_t nx, size_t d, float* out, size_t ldo) {
  const size_t dv = d & ~size_t(3);
  const size_t rem = d - dv;
  size_t i = 0;
  for (; i + 4 <= nq; i += 4) {
    const float* q[4] = {Q + i * d, Q + (i + 1) * d, Q + (i + 2) * d, Q + (i + 3) * d};
    size_t jr = 0;
    for (; jr + 4 <= nx; jr += 4) {
      const float* x[4] = {X + jr * d, X + (jr + 1) * d, X + (jr + 2) * d, X + (jr + 3) * d};
      float32x4_t acc[4][4];
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r)
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) acc[r][c] = vdupq_n_f32(0.f);
      for (size_t j = 0; j < dv; j += 4) {
        float32x4_t xv[4];
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) xv[c] = vld1q_f32(x[c] + j);
#pragma GCC unroll 4
        for (int r = 0; r < 4; ++r) {
          const float32x4_t qv = vld1q_f32(q[r] + j);
#pragma GCC unroll 4
          for (int c = 0; c < 4; ++c) acc[r][c] = vfmaq_f32(acc[r][c], qv, xv[c]);
        }
      }
      if (rem) {
        float32x4_t xv[4];
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) xv[c] = load_f32_tail(x[c] + dv, rem);
#pragma GCC unroll 4
        for (int r = 0; r < 4; ++r) {
          const float32x4_t qv = load_f32_tail(q[r] + dv, rem);
#pragma GCC unroll 4
          for (int c = 0; c < 4; ++c) acc[r][c] = vfmaq_f32(acc[r][c], qv, xv[c]);
        }
      }
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r)
        vst1q_f32(out + (i + r) * ldo + jr, hsum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
    }
    for (; jr < nx; ++jr) {
      const float* x0 = X + jr * d;
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) out[(i + r) * ldo + jr] = dot_f32(q[r], x0, d);
    }
  }
  for (; i < nq; ++i) dot_rows_f32(Q + i * d, X, nx, d, out + i * ldo);
}

void f16_to_f32(const uint16_t* in, float* out, size_t n) {
  size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    float32x4_t lo, hi;
    load_f16x8(in + j, lo, hi);
    vst1q_f32(out + j, lo);
    vst1q_f32(out + j + 4, hi);
  }
  for (; j < n; ++j) out[j] = half_to_float(in[j]);
}

void i8_to_f32(const int8_t* in, float* out, size_t n) {
  size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const int16x8_t v = vmovl_s8(vld1_s8(in + j));
    vst1q_f32(out + j, vcvtq_f32_s32(vmovl_s16(vget_low_s16(v))));
    vst1q_f32(out + j + 4, vcvtq_f32_s32(vmovl_high_s16(v)));
  }
  for (; j < n; ++j) out[j] = static_cast<float>(in[j]);
}

}  // namespace

extern const SimilarityKernels similarity_neon = {
    "neon",      dot_f32,     l2sq_f32,     dot_rows_f32, l2_rows_f32, dot_rows_f16,
    l2_rows_f16, dot_rows_i8, dot_tile_f32, f16_to_f32,   i8_to_f32,
};

}  // namespace ragfind::dense::kernels
