// Impact-column kernels, AVX2: 32 documents per block, their 4 x 8 partial sums kept in
// registers while every column is added (one pass over the tile instead of one per column).
// uint16 impacts are widened to int32 and converted to float, multiplied and then added (kept
// unfused: the file is built with -mfma, so contraction is switched off here and the sums stay
// bit-identical to the scalar level and the posting path).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <immintrin.h>

#include "kernels.hpp"

namespace ragfind::splade::kernels {
namespace {

inline __m256 term(const std::uint16_t* p, __m256 w) {
  const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_mul_ps(w, _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(c)));
}

void sum_columns(float* acc, const std::uint16_t* const* cols, const float* w, std::uint32_t m, std::uint32_t from,
                 std::uint32_t n) {
  std::uint32_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const std::uint16_t* p = cols[0] + from + i;
    __m256 w0 = _mm256_set1_ps(w[0]);
    __m256 a0 = term(p, w0), a1 = term(p + 8, w0), a2 = term(p + 16, w0), a3 = term(p + 24, w0);
    for (std::uint32_t c = 1; c < m; ++c) {
      p = cols[c] + from + i;
      const __m256 wc = _mm256_set1_ps(w[c]);
      a0 = _mm256_add_ps(a0, term(p, wc));
      a1 = _mm256_add_ps(a1, term(p + 8, wc));
      a2 = _mm256_add_ps(a2, term(p + 16, wc));
      a3 = _mm256_add_ps(a3, term(p + 24, wc));
    }
    _mm256_storeu_ps(acc + i, a0);
    _mm256_storeu_ps(acc + i + 8, a1);
    _mm256_storeu_ps(acc + i + 16, a2);
    _mm256_storeu_ps(acc + i + 24, a3);
  }
  sum_columns_each(acc, cols, w, m, from, i, n);
}

// 8 scores per compare; a movemask finds the first one above the threshold.
std::uint32_t next_above(const float* acc, std::uint32_t from, std::uint32_t n, float threshold) {
  const __m256 th = _mm256_set1_ps(threshold);
  std::uint32_t i = from;
  for (; i + 8 <= n; i += 8) {
    const int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(acc + i), th, _CMP_GT_OQ));
    if (mask != 0) return i + static_cast<std::uint32_t>(__builtin_ctz(static_cast<unsigned>(mask)));
  }
  return next_above_each(acc, i, n, threshold);
}

}  // namespace

// No scatter instruction in AVX2: postings are scattered one at a time.
const ImpactColumnKernels impact_column_avx2 = {sum_columns, scatter_add_each, next_above};

}  // namespace ragfind::splade::kernels
