// Scalar reference of the 4-bit fast scan: one table look-up per row and sub-space, summed in
// 32 bits (the SIMD levels sum in 16-bit lanes; mpad <= 256 keeps 255 * mpad below 2^16, so
// the sums agree exactly).
#include "kernels.hpp"

namespace ragfind::dense {

// Four rows at a time: their sums are independent chains, so the adds overlap while each row
// is still summed in order of j (the bits the contract names).
void pq8_scan_ref(const uint8_t* codes, size_t n, size_t m, const float* lut, float* out) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const uint8_t* c = codes + i * m;
    float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
    for (size_t j = 0; j < m; ++j) {
      const float* t = lut + j * 256;
      s0 += t[c[j]];
      s1 += t[c[m + j]];
      s2 += t[c[2 * m + j]];
      s3 += t[c[3 * m + j]];
    }
    out[i] = s0;
    out[i + 1] = s1;
    out[i + 2] = s2;
    out[i + 3] = s3;
  }
  for (; i < n; ++i) {
    const uint8_t* c = codes + i * m;
    float s = 0.f;
    for (size_t j = 0; j < m; ++j) s += lut[j * 256 + c[j]];
    out[i] = s;
  }
}

}  // namespace ragfind::dense

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

const Pq4ScanKernels pq4_scan_scalar = {"scalar", scan, pq8_scan_ref};

}  // namespace ragfind::dense::kernels
