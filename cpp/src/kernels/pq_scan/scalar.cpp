// Scalar reference of the 4-bit fast scan: one table look-up per row and sub-space, summed in
// 32 bits (the SIMD levels sum in 16-bit lanes; mpad <= 256 keeps 255 * mpad below 2^16, so
// the sums agree exactly).
#include "kernels.hpp"

namespace ragfind::dense::kernels {
namespace {

void scan(const uint8_t* blocks, size_t nblocks, size_t mpad, const uint8_t* lut8, uint16_t* out) {
  for (size_t b = 0; b < nblocks; ++b) {
    const uint8_t* blk = blocks + b * mpad * 16;
    uint32_t acc[kPqBlock] = {};
    for (size_t j = 0; j < mpad; ++j) {
      const uint8_t* c = blk + j * 16;
      const uint8_t* t = lut8 + j * 16;
      for (size_t i = 0; i < 16; ++i) {
        acc[i] += t[c[i] & 15];
        acc[i + 16] += t[c[i] >> 4];
      }
    }
    for (size_t i = 0; i < kPqBlock; ++i) out[b * kPqBlock + i] = static_cast<uint16_t>(acc[i]);
  }
}

}  // namespace

const Pq4ScanKernels pq4_scan_scalar = {"scalar", scan};

}  // namespace ragfind::dense::kernels
