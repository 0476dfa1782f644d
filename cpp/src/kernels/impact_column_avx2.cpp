// Impact-column kernels, AVX2: 16 uint16 impacts per step, widened to int32 and converted to
// float, multiplied and then added (kept unfused: the file is built with -mfma, so contraction is
// switched off here and the sums stay bit-identical to the scalar level and the posting path).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <immintrin.h>

#include "impact_column_kernels.hpp"

namespace ragfind::kernels {
namespace {

template <bool Assign>
void run(float* acc, const std::uint16_t* col, float w, std::uint32_t n) {
  const __m256 vw = _mm256_set1_ps(w);
  std::uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(col + i));
    const __m256 lo = _mm256_mul_ps(vw, _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(c))));
    const __m256 hi = _mm256_mul_ps(vw, _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(c, 1))));
    if (Assign) {
      _mm256_storeu_ps(acc + i, lo);
      _mm256_storeu_ps(acc + i + 8, hi);
    } else {
      _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), lo));
      _mm256_storeu_ps(acc + i + 8, _mm256_add_ps(_mm256_loadu_ps(acc + i + 8), hi));
    }
  }
  for (; i < n; ++i) {
    const float p = w * static_cast<float>(col[i]);
    acc[i] = Assign ? p : acc[i] + p;
  }
}

void add_column(float* acc, const std::uint16_t* col, float w, std::uint32_t n, bool assign) {
  if (assign)
    run<true>(acc, col, w, n);
  else
    run<false>(acc, col, w, n);
}

// 8 scores per compare; a movemask finds the first one above the threshold.
std::uint32_t next_above(const float* acc, std::uint32_t from, std::uint32_t n, float threshold) {
  const __m256 th = _mm256_set1_ps(threshold);
  std::uint32_t i = from;
  for (; i + 8 <= n; i += 8) {
    const int m = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(acc + i), th, _CMP_GT_OQ));
    if (m != 0) return i + static_cast<std::uint32_t>(__builtin_ctz(static_cast<unsigned>(m)));
  }
  while (i < n && !(acc[i] > threshold)) ++i;
  return i;
}

}  // namespace

const ImpactColumnKernels impact_column_avx2 = {add_column, next_above};

}  // namespace ragfind::kernels
