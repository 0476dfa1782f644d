// AVX2 RaBitQ bit-plane scan. Compiled with -mavx2 (which brings popcnt); only reached when the
// CPU reports it.
//
// Why the loop looks like this: a code is read 256 bits at a time; the popcount of each byte
// comes from two vpshufb look-ups of its nibbles (Mula et al.), the four planes' counts are
// weighted 1, 2, 4, 8 while still bytes (at most 8 * 15 = 120, no overflow) and vpsadbw adds
// the bytes into 64-bit lanes. Words left over (d not a multiple of 256) use popcnt.
#include <immintrin.h>

#include "kernels.hpp"

namespace ragfind::dense::kernels {
namespace {

inline __m256i popcount_bytes(__m256i v, __m256i lut, __m256i nib) {
  const __m256i lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, nib));
  const __m256i hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), nib));
  return _mm256_add_epi8(lo, hi);
}

void scan(const uint64_t* codes, size_t n, size_t words, const uint64_t* planes, uint32_t* sums, uint32_t* pops) {
  const __m256i lut = _mm256_setr_epi8(0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4,  //
                                       0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4);
  const __m256i nib = _mm256_set1_epi8(0x0f);
  const __m256i zero = _mm256_setzero_si256();
  const size_t wv = words / 4 * 4;
  const uint64_t *p0 = planes, *p1 = planes + words, *p2 = planes + 2 * words, *p3 = planes + 3 * words;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t* c = codes + i * words;
    __m256i acc_s = zero, acc_p = zero;
    for (size_t w = 0; w < wv; w += 4) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + w));
      auto plane = [&](const uint64_t* p) {
        return popcount_bytes(_mm256_and_si256(x, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + w))), lut,
                              nib);
      };
      __m256i t = plane(p3);
      t = _mm256_add_epi8(_mm256_add_epi8(t, t), plane(p2));
      t = _mm256_add_epi8(_mm256_add_epi8(t, t), plane(p1));
      t = _mm256_add_epi8(_mm256_add_epi8(t, t), plane(p0));
      acc_s = _mm256_add_epi64(acc_s, _mm256_sad_epu8(t, zero));
      acc_p = _mm256_add_epi64(acc_p, _mm256_sad_epu8(popcount_bytes(x, lut, nib), zero));
    }
    // One horizontal sum for both: the set-bit count in the high 32 bits of each lane.
    const __m256i acc = _mm256_add_epi64(acc_s, _mm256_slli_epi64(acc_p, 32));
    const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
    const auto both = static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_add_epi64(h, _mm_unpackhi_epi64(h, h))));
    uint64_t s = both & 0xffffffffu, p = both >> 32;
    for (size_t w = wv; w < words; ++w) {
      const uint64_t x = c[w];
      p += static_cast<uint64_t>(_mm_popcnt_u64(x));
      s += static_cast<uint64_t>(_mm_popcnt_u64(x & p0[w]) + 2 * _mm_popcnt_u64(x & p1[w]) +
                                 4 * _mm_popcnt_u64(x & p2[w]) + 8 * _mm_popcnt_u64(x & p3[w]));
    }
    sums[i] = static_cast<uint32_t>(s);
    pops[i] = static_cast<uint32_t>(p);
  }
}

}  // namespace

const RabitqScanKernels rabitq_scan_avx2 = {"avx2", scan};

}  // namespace ragfind::dense::kernels
