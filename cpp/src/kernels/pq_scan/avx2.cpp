// AVX2 4-bit fast scan. Compiled with -mavx2; only reached when the CPU reports it.
//
// Why the loop looks like this: one 256-bit register holds the 16-byte tables of two
// sub-spaces (one per 128-bit lane, as vpshufb looks up within a lane), and one load brings
// the same two sub-spaces' codes of all 32 rows of the block. Low nibbles look up rows 0-15,
// high nibbles rows 16-31; the bytes are widened to 16 bits against zero and summed in four
// accumulators (rows 0-7, 8-15, 16-23, 24-31); at the end the two lanes (the two sub-spaces
// of each pair) are added.
#include <immintrin.h>

#include "kernels.hpp"

namespace ragfind::dense::kernels {
namespace {

void scan(const uint8_t* blocks, size_t nblocks, size_t mpad, const uint8_t* lut8, uint16_t* out) {
  const __m256i nib = _mm256_set1_epi8(0x0f);
  const __m256i zero = _mm256_setzero_si256();
  for (size_t b = 0; b < nblocks; ++b) {
    const uint8_t* blk = blocks + b * mpad * 16;
    __m256i a0 = zero, a1 = zero, a2 = zero, a3 = zero;
    for (size_t j = 0; j < mpad; j += 2) {
      const __m256i t = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lut8 + j * 16));
      const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + j * 16));
      const __m256i lo = _mm256_shuffle_epi8(t, _mm256_and_si256(c, nib));
      const __m256i hi = _mm256_shuffle_epi8(t, _mm256_and_si256(_mm256_srli_epi16(c, 4), nib));
      a0 = _mm256_add_epi16(a0, _mm256_unpacklo_epi8(lo, zero));
      a1 = _mm256_add_epi16(a1, _mm256_unpackhi_epi8(lo, zero));
      a2 = _mm256_add_epi16(a2, _mm256_unpacklo_epi8(hi, zero));
      a3 = _mm256_add_epi16(a3, _mm256_unpackhi_epi8(hi, zero));
    }
    __m128i* o = reinterpret_cast<__m128i*>(out + b * kPqBlock);
    _mm_storeu_si128(o + 0, _mm_add_epi16(_mm256_castsi256_si128(a0), _mm256_extracti128_si256(a0, 1)));
    _mm_storeu_si128(o + 1, _mm_add_epi16(_mm256_castsi256_si128(a1), _mm256_extracti128_si256(a1, 1)));
    _mm_storeu_si128(o + 2, _mm_add_epi16(_mm256_castsi256_si128(a2), _mm256_extracti128_si256(a2, 1)));
    _mm_storeu_si128(o + 3, _mm_add_epi16(_mm256_castsi256_si128(a3), _mm256_extracti128_si256(a3, 1)));
  }
}

}  // namespace

// 8-bit codes: the portable kernel at every level (no gather version yet).
const Pq4ScanKernels pq4_scan_avx2 = {"avx2", scan, pq8_scan_ref};

}  // namespace ragfind::dense::kernels
