// AVX-512 (F + BW) RaBitQ bit-plane scan. Compiled with -mavx512bw and friends; only reached when
// the CPU reports them.
//
// Why the loop looks like this: as the AVX2 kernel (nibble look-ups with vpshufb, the four
// planes weighted while still bytes, vpsadbw into 64-bit lanes), 512 bits at a time; the last
// part of a code is a masked load, so a 384-dimension code (six words) is one step. The
// build's AVX-512 level does not assume VPOPCNTDQ, so the byte look-ups are the level's kernel;
// a second one counts with vpopcntq (function-level target, picked by dispatch.cpp only when the
// CPU reports AVX512_VPOPCNTDQ).
#include <immintrin.h>

#include "kernels.hpp"

namespace ragfind::dense::kernels {
namespace {

inline __m512i popcount_bytes(__m512i v, __m512i lut, __m512i nib) {
  const __m512i lo = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, nib));
  const __m512i hi = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), nib));
  return _mm512_add_epi8(lo, hi);
}

void scan(const uint64_t* codes, size_t n, size_t words, const uint64_t* planes, uint32_t* sums, uint32_t* pops) {
  const __m512i lut = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4));
  const __m512i nib = _mm512_set1_epi8(0x0f);
  const __m512i zero = _mm512_setzero_si512();
  const uint64_t *p0 = planes, *p1 = planes + words, *p2 = planes + 2 * words, *p3 = planes + 3 * words;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t* c = codes + i * words;
    __m512i acc_s = zero, acc_p = zero;
    for (size_t w = 0; w < words; w += 8) {
      const __mmask8 m = words - w >= 8 ? __mmask8(0xff) : static_cast<__mmask8>((1u << (words - w)) - 1);
      const __m512i x = _mm512_maskz_loadu_epi64(m, c + w);
      auto plane = [&](const uint64_t* p) {
        return popcount_bytes(_mm512_and_si512(x, _mm512_maskz_loadu_epi64(m, p + w)), lut, nib);
      };
      __m512i t = plane(p3);
      t = _mm512_add_epi8(_mm512_add_epi8(t, t), plane(p2));
      t = _mm512_add_epi8(_mm512_add_epi8(t, t), plane(p1));
      t = _mm512_add_epi8(_mm512_add_epi8(t, t), plane(p0));
      acc_s = _mm512_add_epi64(acc_s, _mm512_sad_epu8(t, zero));
      acc_p = _mm512_add_epi64(acc_p, _mm512_sad_epu8(popcount_bytes(x, lut, nib), zero));
    }
    // One horizontal sum for both: the set-bit count in the high 32 bits of each lane.
    const auto both =
        static_cast<uint64_t>(_mm512_reduce_add_epi64(_mm512_add_epi64(acc_s, _mm512_slli_epi64(acc_p, 32))));
    sums[i] = static_cast<uint32_t>(both);
    pops[i] = static_cast<uint32_t>(both >> 32);
  }
}

__attribute__((target("avx512vpopcntdq"))) inline __m512i popcount_and(__m512i x, const uint64_t* p, __mmask8 m) {
  return _mm512_popcnt_epi64(_mm512_and_si512(x, _mm512_maskz_loadu_epi64(m, p)));
}

__attribute__((target("avx512vpopcntdq"))) void scan_vpopcnt(const uint64_t* codes, size_t n, size_t words,
                                                             const uint64_t* planes, uint32_t* sums, uint32_t* pops) {
  const uint64_t *p0 = planes, *p1 = planes + words, *p2 = planes + 2 * words, *p3 = planes + 3 * words;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t* c = codes + i * words;
    __m512i acc = _mm512_setzero_si512();
    for (size_t w = 0; w < words; w += 8) {
      const __mmask8 m = words - w >= 8 ? __mmask8(0xff) : static_cast<__mmask8>((1u << (words - w)) - 1);
      const __m512i x = _mm512_maskz_loadu_epi64(m, c + w);
      __m512i t = popcount_and(x, p3 + w, m);
      t = _mm512_add_epi64(_mm512_add_epi64(t, t), popcount_and(x, p2 + w, m));
      t = _mm512_add_epi64(_mm512_add_epi64(t, t), popcount_and(x, p1 + w, m));
      t = _mm512_add_epi64(_mm512_add_epi64(t, t), popcount_and(x, p0 + w, m));
      // The set-bit count rides in the high 32 bits of each lane: one horizontal sum for both.
      acc = _mm512_add_epi64(acc, _mm512_add_epi64(t, _mm512_slli_epi64(_mm512_popcnt_epi64(x), 32)));
    }
    const auto both = static_cast<uint64_t>(_mm512_reduce_add_epi64(acc));
    sums[i] = static_cast<uint32_t>(both);
    pops[i] = static_cast<uint32_t>(both >> 32);
  }
}

}  // namespace

const RabitqScanKernels rabitq_scan_avx512 = {"avx512", scan};
const RabitqScanKernels rabitq_scan_avx512_vpopcnt = {"avx512-vpopcntdq", scan_vpopcnt};

}  // namespace ragfind::dense::kernels
