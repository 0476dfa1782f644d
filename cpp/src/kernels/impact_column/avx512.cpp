// Impact-column kernels, AVX-512: the column sum as the AVX2 level with 16-float registers, 64
// documents per block, and a masked block for the tile's last < 64 documents; the posting
// scatter with gather/scatter instructions (AVX2 has no scatter). Multiply and add stay unfused
// (contraction off: -mfma is on for this file) for sums bit-identical to every other level.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
// GCC 12's conversion intrinsics start from _mm512_undefined_*(): a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "kernels.hpp"

namespace ragfind::splade::kernels {
namespace {

inline __m512 term(const std::uint16_t* p, __m512 w) {
  const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_mul_ps(w, _mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(c)));
}

// Masked lanes read nothing (no fault past the column's end) and add 0 * 0.
inline __m512 term_masked(const std::uint16_t* p, __m512 w, __mmask16 k) {
  const __m256i c = _mm256_maskz_loadu_epi16(k, p);
  return _mm512_mul_ps(w, _mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(c)));
}

void sum_columns(float* acc, const std::uint16_t* const* cols, const float* w, std::uint32_t m, std::uint32_t from,
                 std::uint32_t n) {
  std::uint32_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const std::uint16_t* p = cols[0] + from + i;
    const __m512 w0 = _mm512_set1_ps(w[0]);
    __m512 a0 = term(p, w0), a1 = term(p + 16, w0), a2 = term(p + 32, w0), a3 = term(p + 48, w0);
    for (std::uint32_t c = 1; c < m; ++c) {
      p = cols[c] + from + i;
      const __m512 wc = _mm512_set1_ps(w[c]);
      a0 = _mm512_add_ps(a0, term(p, wc));
      a1 = _mm512_add_ps(a1, term(p + 16, wc));
      a2 = _mm512_add_ps(a2, term(p + 32, wc));
      a3 = _mm512_add_ps(a3, term(p + 48, wc));
    }
    _mm512_storeu_ps(acc + i, a0);
    _mm512_storeu_ps(acc + i + 16, a1);
    _mm512_storeu_ps(acc + i + 32, a2);
    _mm512_storeu_ps(acc + i + 48, a3);
  }
  for (; i < n; i += 16) {
    const std::uint32_t left = n - i;
    const __mmask16 k = left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
    __m512 a = term_masked(cols[0] + from + i, _mm512_set1_ps(w[0]), k);
    for (std::uint32_t c = 1; c < m; ++c)
      a = _mm512_add_ps(a, term_masked(cols[c] + from + i, _mm512_set1_ps(w[c]), k));
    _mm512_mask_storeu_ps(acc + i, k, a);
  }
}

// 16 postings per step: gather their accumulators, add the products, scatter them back (lanes
// at or past the tile end masked off). The documents of one list are distinct, so the 16
// lanes never collide.
std::uint64_t scatter_add(float* acc, const std::uint32_t* docs, const std::uint32_t* stored, std::uint64_t pos,
                          std::uint64_t end, std::uint32_t lo, std::uint32_t hi, float w) {
  const __m512 vw = _mm512_set1_ps(w);
  const __m512i vlo = _mm512_set1_epi32(static_cast<int>(lo));
  const __m512i vhi = _mm512_set1_epi32(static_cast<int>(hi));
  for (; pos + 16 <= end; pos += 16) {
    const __m512i doc = _mm512_loadu_si512(docs + pos);
    const __mmask16 in = _mm512_cmplt_epu32_mask(doc, vhi);  // a prefix: the docs increase
    const __m512i d = _mm512_sub_epi32(doc, vlo);
    const __m512 p = _mm512_mul_ps(vw, _mm512_cvtepu32_ps(_mm512_loadu_si512(stored + pos)));
    if (in == 0xFFFF) {
      _mm512_i32scatter_ps(acc, d, _mm512_add_ps(_mm512_i32gather_ps(d, acc, 4), p), 4);
      continue;
    }
    const __m512 old = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), in, d, acc, 4);
    _mm512_mask_i32scatter_ps(acc, in, d, _mm512_add_ps(old, p), 4);
    return pos + static_cast<std::uint64_t>(__builtin_popcount(static_cast<unsigned>(in)));
  }
  return scatter_add_each(acc, docs, stored, pos, end, lo, hi, w);
}

// 16 scores per compare; the mask's lowest set bit is the first score above the threshold.
std::uint32_t next_above(const float* acc, std::uint32_t from, std::uint32_t n, float threshold) {
  const __m512 th = _mm512_set1_ps(threshold);
  std::uint32_t i = from;
  for (; i + 16 <= n; i += 16) {
    const __mmask16 mask = _mm512_cmp_ps_mask(_mm512_loadu_ps(acc + i), th, _CMP_GT_OQ);
    if (mask != 0) return i + static_cast<std::uint32_t>(__builtin_ctz(static_cast<unsigned>(mask)));
  }
  return next_above_each(acc, i, n, threshold);
}

}  // namespace

const ImpactColumnKernels impact_column_avx512 = {sum_columns, scatter_add, next_above};

}  // namespace ragfind::splade::kernels
