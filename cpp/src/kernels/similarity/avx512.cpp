// AVX-512 (F/BW/DQ/VL) similarity kernels; the int8 dot product additionally has a VNNI
// variant (vpdpwssd) compiled with a target attribute and chosen only when cpu_features()
// reports avx512vnni, because the AVX512 level does not imply VNNI.
//
// Same shapes as the AVX2 file (4 rows per pass sharing each query slice; a 4x2 register
// tile for batches), 16 lanes wide. Tails use masked loads, which never fault on the
// masked-off bytes, so rows are never over-read.
// GCC 12 reports false -W(maybe-)uninitialized warnings inside its own avx512fintrin.h
// reductions (_mm512_reduce_add_*); they are not about this code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "kernels.hpp"

namespace ragfind::dense::kernels {
namespace {

// Software prefetch of rows a couple of groups ahead (see avx2.cpp).
inline void prefetch_bytes(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(c + o, _MM_HINT_T0);
}

inline __mmask16 mask16(size_t rem) { return static_cast<__mmask16>((1u << rem) - 1u); }
inline __mmask32 mask32(size_t rem) { return static_cast<__mmask32>((uint64_t(1) << rem) - 1u); }

float dot_f32(const float* a, const float* b, size_t d) {
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  size_t j = 0;
  for (; j + 32 <= d; j += 32) {
    s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + j), _mm512_loadu_ps(b + j), s0);
    s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + j + 16), _mm512_loadu_ps(b + j + 16), s1);
  }
  for (; j + 16 <= d; j += 16) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + j), _mm512_loadu_ps(b + j), s0);
  if (j < d) {
    const __mmask16 m = mask16(d - j);
    s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + j), _mm512_maskz_loadu_ps(m, b + j), s1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

float l2sq_f32(const float* a, const float* b, size_t d) {
  __m512 s0 = _mm512_setzero_ps();
  size_t j = 0;
  for (; j + 16 <= d; j += 16) {
    const __m512 t = _mm512_sub_ps(_mm512_loadu_ps(a + j), _mm512_loadu_ps(b + j));
    s0 = _mm512_fmadd_ps(t, t, s0);
  }
  if (j < d) {
    const __mmask16 m = mask16(d - j);
    const __m512 t = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, a + j), _mm512_maskz_loadu_ps(m, b + j));
    s0 = _mm512_fmadd_ps(t, t, s0);
  }
  return _mm512_reduce_add_ps(s0);
}

// Loads 16 values of a row as float32: plain floats or float16 bits.
inline __m512 load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 load16(const uint16_t* p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }

// 4 rows per pass; kL2 selects |x - q|^2 over x . q.
template <bool kL2, typename T>
void rows(const float* q, const T* X, size_t n, size_t d, float* out) {
  const size_t dv = d & ~size_t(15);
  const __mmask16 full = 0xFFFF, mt = mask16(d - dv);
  auto step = [](__m512 x, __m512 qv, __m512 acc) {
    if (kL2) {
      const __m512 t = _mm512_sub_ps(x, qv);
      return _mm512_fmadd_ps(t, t, acc);
    }
    return _mm512_fmadd_ps(x, qv, acc);
  };
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const T* x0 = X + i * d;
    const T* x1 = x0 + d;
    const T* x2 = x1 + d;
    const T* x3 = x2 + d;
    if (i + 12 <= n) prefetch_bytes(x0 + 8 * d, 4 * d * sizeof(T));
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    size_t j = 0;
    for (; j < dv; j += 16) {
      const __m512 qv = _mm512_loadu_ps(q + j);
      a0 = step(load16(x0 + j, full), qv, a0);
      a1 = step(load16(x1 + j, full), qv, a1);
      a2 = step(load16(x2 + j, full), qv, a2);
      a3 = step(load16(x3 + j, full), qv, a3);
    }
    if (j < d) {
      const __m512 qv = _mm512_maskz_loadu_ps(mt, q + j);
      a0 = step(load16(x0 + j, mt), qv, a0);
      a1 = step(load16(x1 + j, mt), qv, a1);
      a2 = step(load16(x2 + j, mt), qv, a2);
      a3 = step(load16(x3 + j, mt), qv, a3);
    }
    out[i] = _mm512_reduce_add_ps(a0);
    out[i + 1] = _mm512_reduce_add_ps(a1);
    out[i + 2] = _mm512_reduce_add_ps(a2);
    out[i + 3] = _mm512_reduce_add_ps(a3);
  }
  for (; i < n; ++i) {
    const T* x = X + i * d;
    __m512 a = _mm512_setzero_ps();
    size_t j = 0;
    for (; j < dv; j += 16) a = step(load16(x + j, full), _mm512_loadu_ps(q + j), a);
    if (j < d) a = step(load16(x + j, mt), _mm512_maskz_loadu_ps(mt, q + j), a);
    out[i] = _mm512_reduce_add_ps(a);
  }
}

// f32 rows one at a time, as in the AVX2 file (one sequential stream for the prefetcher).
void dot_rows_f32(const float* q, const float* X, size_t n, size_t d, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = dot_f32(q, X + i * d, d);
}
void l2_rows_f32(const float* q, const float* X, size_t n, size_t d, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = l2sq_f32(q, X + i * d, d);
}
void dot_rows_f16(const float* q, const uint16_t* X, size_t n, size_t d, float* out) { rows<false>(q, X, n, d, out); }
void l2_rows_f16(const float* q, const uint16_t* X, size_t n, size_t d, float* out) { rows<true>(q, X, n, d, out); }

inline int64_t hsum_epi32_exact(__m512i v) {
  const __m512i w = _mm512_add_epi64(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(v)),
                                     _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(v, 1)));
  return _mm512_reduce_add_epi64(w);
}

// int8 rows against an int16 query, 32 elements per step. The accumulate step is either
// vpmaddwd + vpaddd (AVX512BW) or the fused vpdpwssd (VNNI); both are exact in int32 within
// a chunk of kI8ChunkElems (per lane at most kI8ChunkElems/16 products).
#define RAGFIND_I8_ROWS_BODY(ACC)                                                                             \
  const size_t dv = d & ~size_t(31);                                                                          \
  const __mmask32 mt = mask32(d - dv);                                                                        \
  for (size_t i = 0; i < n; ++i) {                                                                            \
    const int8_t* x = X + i * d;                                                                              \
    if (i + 8 < n) prefetch_bytes(x + 8 * d, d);                                                              \
    int64_t t = 0;                                                                                            \
    for (size_t c = 0; c < dv; c += kI8ChunkElems) {                                                          \
      const size_t ce = c + kI8ChunkElems < dv ? c + kI8ChunkElems : dv;                                      \
      __m512i a0 = _mm512_setzero_si512();                                                                    \
      for (size_t j = c; j < ce; j += 32) {                                                                   \
        const __m512i xv = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + j))); \
        a0 = ACC(a0, xv, _mm512_loadu_si512(q + j));                                                          \
      }                                                                                                       \
      t += hsum_epi32_exact(a0);                                                                              \
    }                                                                                                         \
    if (dv < d) {                                                                                             \
      const __m512i xv = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(mt, x + dv));                           \
      t += hsum_epi32_exact(ACC(_mm512_setzero_si512(), xv, _mm512_maskz_loadu_epi16(mt, q + dv)));           \
    }                                                                                                         \
    out[i] = static_cast<float>(t);                                                                           \
  }

inline __m512i acc_madd(__m512i acc, __m512i a, __m512i b) { return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b)); }

void dot_rows_i8_bw(const int16_t* q, const int8_t* X, size_t n, size_t d, float* out) {
  RAGFIND_I8_ROWS_BODY(acc_madd)
}

__attribute__((target("avx512vnni"))) inline __m512i acc_vnni(__m512i acc, __m512i a, __m512i b) {
  return _mm512_dpwssd_epi32(acc, a, b);
}

__attribute__((target("avx512vnni"))) void dot_rows_i8_vnni(const int16_t* q, const int8_t* X, size_t n, size_t d,
                                                            float* out) {
  RAGFIND_I8_ROWS_BODY(acc_vnni)
}
#undef RAGFIND_I8_ROWS_BODY

void dot_rows_i8(const int16_t* q, const int8_t* X, size_t n, size_t d, float* out) {
  static const bool vnni = common::cpu_features().avx512vnni;
  if (vnni) dot_rows_i8_vnni(q, X, n, d, out);
  else dot_rows_i8_bw(q, X, n, d, out);
}

void dot_tile_f32(const float* Q, size_t nq, const float* X, size_t nx, size_t d, float* out, size_t ldo) {
  const size_t dv = d & ~size_t(15);
  const __mmask16 mt = mask16(d - dv);
  size_t i = 0;
  for (; i + 4 <= nq; i += 4) {
    const float* q0 = Q + i * d;
    size_t jr = 0;
    for (; jr + 2 <= nx; jr += 2) {
      const float* x0 = X + jr * d;
      const float* x1 = x0 + d;
      __m512 acc[4][2];
      for (int r = 0; r < 4; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
      size_t j = 0;
      for (; j < dv; j += 16) {
        const __m512 xa = _mm512_loadu_ps(x0 + j), xb = _mm512_loadu_ps(x1 + j);
        for (int r = 0; r < 4; ++r) {
          const __m512 qv = _mm512_loadu_ps(q0 + r * d + j);
          acc[r][0] = _mm512_fmadd_ps(qv, xa, acc[r][0]);
          acc[r][1] = _mm512_fmadd_ps(qv, xb, acc[r][1]);
        }
      }
      if (j < d) {
        const __m512 xa = _mm512_maskz_loadu_ps(mt, x0 + j), xb = _mm512_maskz_loadu_ps(mt, x1 + j);
        for (int r = 0; r < 4; ++r) {
          const __m512 qv = _mm512_maskz_loadu_ps(mt, q0 + r * d + j);
          acc[r][0] = _mm512_fmadd_ps(qv, xa, acc[r][0]);
          acc[r][1] = _mm512_fmadd_ps(qv, xb, acc[r][1]);
        }
      }
      for (int r = 0; r < 4; ++r) {
        out[(i + r) * ldo + jr] = _mm512_reduce_add_ps(acc[r][0]);
        out[(i + r) * ldo + jr + 1] = _mm512_reduce_add_ps(acc[r][1]);
      }
    }
    for (; jr < nx; ++jr)
      for (int r = 0; r < 4; ++r) out[(i + r) * ldo + jr] = dot_f32(q0 + r * d, X + jr * d, d);
  }
  for (; i < nq; ++i) dot_rows_f32(Q + i * d, X, nx, d, out + i * ldo);
}

void f16_to_f32(const uint16_t* in, float* out, size_t n) {
  size_t j = 0;
  for (; j + 16 <= n; j += 16) _mm512_storeu_ps(out + j, load16(in + j, 0xFFFF));
  if (j < n) _mm512_mask_storeu_ps(out + j, mask16(n - j), load16(in + j, mask16(n - j)));
}

void i8_to_f32(const int8_t* in, float* out, size_t n) {
  size_t j = 0;
  for (; j + 16 <= n; j += 16)
    _mm512_storeu_ps(
        out + j, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + j)))));
  if (j < n) {
    const __mmask16 m = mask16(n - j);
    _mm512_mask_storeu_ps(out + j, m, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, in + j))));
  }
}

}  // namespace

extern const SimilarityKernels similarity_avx512 = {
    "avx512",    dot_f32,     l2sq_f32,     dot_rows_f32, l2_rows_f32, dot_rows_f16,
    l2_rows_f16, dot_rows_i8, dot_tile_f32, f16_to_f32,   i8_to_f32,
};

}  // namespace ragfind::dense::kernels
