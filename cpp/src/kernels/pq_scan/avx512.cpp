// AVX-512 (F + BW) 4-bit fast scan. Compiled with -mavx512bw and friends; only reached when the
// CPU reports them.
//
// Why the loop looks like this: as the AVX2 kernel, with four sub-spaces per 512-bit register
// (vpshufb looks up within each 128-bit lane, one sub-space's 16-byte table per lane); mpad is
// a multiple of 4, so there is no tail. The four lanes of each accumulator are added at the end.
#include <immintrin.h>

#include "kernels.hpp"

namespace ragfind::dense::kernels {
namespace {

inline __m128i lanes_sum(__m512i a) {
  const __m256i h = _mm256_add_epi16(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64(a, 1));
  return _mm_add_epi16(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

void scan(const uint8_t* blocks, size_t nblocks, size_t mpad, const uint8_t* lut8, uint16_t* out) {
  const __m512i nib = _mm512_set1_epi8(0x0f);
  const __m512i zero = _mm512_setzero_si512();
  for (size_t b = 0; b < nblocks; ++b) {
    const uint8_t* blk = blocks + b * mpad * 16;
    __m512i a0 = zero, a1 = zero, a2 = zero, a3 = zero;
    for (size_t j = 0; j < mpad; j += 4) {
      const __m512i t = _mm512_loadu_si512(lut8 + j * 16);
      const __m512i c = _mm512_loadu_si512(blk + j * 16);
      const __m512i lo = _mm512_shuffle_epi8(t, _mm512_and_si512(c, nib));
      const __m512i hi = _mm512_shuffle_epi8(t, _mm512_and_si512(_mm512_srli_epi16(c, 4), nib));
      a0 = _mm512_add_epi16(a0, _mm512_unpacklo_epi8(lo, zero));
      a1 = _mm512_add_epi16(a1, _mm512_unpackhi_epi8(lo, zero));
      a2 = _mm512_add_epi16(a2, _mm512_unpacklo_epi8(hi, zero));
      a3 = _mm512_add_epi16(a3, _mm512_unpackhi_epi8(hi, zero));
    }
    __m128i* o = reinterpret_cast<__m128i*>(out + b * kPqBlock);
    _mm_storeu_si128(o + 0, lanes_sum(a0));
    _mm_storeu_si128(o + 1, lanes_sum(a1));
    _mm_storeu_si128(o + 2, lanes_sum(a2));
    _mm_storeu_si128(o + 3, lanes_sum(a3));
  }
}

}  // namespace

// 8-bit codes: the portable kernel at every level (no gather version yet).
const Pq4ScanKernels pq4_scan_avx512 = {"avx512", scan, pq8_scan_ref};

}  // namespace ragfind::dense::kernels
