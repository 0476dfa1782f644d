// Scalar reference of the RaBitQ bit-plane scan: per 64-bit word of a code, the popcount of the
// word and of its AND with each of the four query planes, weighted 1, 2, 4, 8.
#include "kernels.hpp"

namespace ragfind::dense::kernels {
namespace {

void scan(const uint64_t* codes, size_t n, size_t words, const uint64_t* planes, uint32_t* sums, uint32_t* pops) {
  const uint64_t *p0 = planes, *p1 = planes + words, *p2 = planes + 2 * words, *p3 = planes + 3 * words;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t* c = codes + i * words;
    uint32_t s = 0, p = 0;
    for (size_t w = 0; w < words; ++w) {
      const uint64_t x = c[w];
      p += static_cast<uint32_t>(__builtin_popcountll(x));
      s += static_cast<uint32_t>(__builtin_popcountll(x & p0[w]) + 2 * __builtin_popcountll(x & p1[w]) +
                                 4 * __builtin_popcountll(x & p2[w]) + 8 * __builtin_popcountll(x & p3[w]));
    }
    sums[i] = s;
    pops[i] = p;
  }
}

}  // namespace

const RabitqScanKernels rabitq_scan_scalar = {"scalar", scan};

}  // namespace ragfind::dense::kernels
