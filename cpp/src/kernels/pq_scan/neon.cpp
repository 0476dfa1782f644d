// NEON 4-bit fast scan (AArch64 baseline).
//
// Why the loop looks like this: tbl (vqtbl1q_u8) looks up 16 bytes in one sub-space's 16-byte
// table, so each step handles one sub-space: low nibbles give rows 0-15, high nibbles rows
// 16-31, widened into 16-bit accumulators with vaddw (four of them, eight rows each).
#include <arm_neon.h>

#include "kernels.hpp"

namespace ragfind::dense::kernels {
namespace {

void scan(const uint8_t* blocks, size_t nblocks, size_t mpad, const uint8_t* lut8, uint16_t* out) {
  const uint8x16_t nib = vdupq_n_u8(0x0f);
  for (size_t b = 0; b < nblocks; ++b) {
    const uint8_t* blk = blocks + b * mpad * 16;
    uint16x8_t a0 = vdupq_n_u16(0), a1 = a0, a2 = a0, a3 = a0;
    for (size_t j = 0; j < mpad; ++j) {
      const uint8x16_t t = vld1q_u8(lut8 + j * 16);
      const uint8x16_t c = vld1q_u8(blk + j * 16);
      const uint8x16_t lo = vqtbl1q_u8(t, vandq_u8(c, nib));
      const uint8x16_t hi = vqtbl1q_u8(t, vshrq_n_u8(c, 4));
      a0 = vaddw_u8(a0, vget_low_u8(lo));
      a1 = vaddw_high_u8(a1, lo);
      a2 = vaddw_u8(a2, vget_low_u8(hi));
      a3 = vaddw_high_u8(a3, hi);
    }
    uint16_t* o = out + b * kPqBlock;
    vst1q_u16(o, a0);
    vst1q_u16(o + 8, a1);
    vst1q_u16(o + 16, a2);
    vst1q_u16(o + 24, a3);
  }
}

}  // namespace

// 8-bit codes: the portable kernel at every level (no gather version yet).
const Pq4ScanKernels pq4_scan_neon = {"neon", scan, pq8_scan_ref};

}  // namespace ragfind::dense::kernels
