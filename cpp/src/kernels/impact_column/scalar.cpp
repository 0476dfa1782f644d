// Impact-column kernel, baseline build: one pass over the tile per column (the compiler
// vectorises each pass with the baseline ISA); separate multiply and add, as every level. The
// scatter and the scan are the shared one-at-a-time loops of kernels.hpp.
#include "kernels.hpp"

namespace ragfind::splade::kernels {
namespace {

void sum_columns(float* __restrict acc, const std::uint16_t* const* cols, const float* w, std::uint32_t m,
                 std::uint32_t from, std::uint32_t n) {
  const std::uint16_t* __restrict first = cols[0] + from;
  for (std::uint32_t i = 0; i < n; ++i) acc[i] = w[0] * static_cast<float>(first[i]);
  for (std::uint32_t c = 1; c < m; ++c) {
    const std::uint16_t* __restrict col = cols[c] + from;
    const float wc = w[c];
    for (std::uint32_t i = 0; i < n; ++i) acc[i] += wc * static_cast<float>(col[i]);
  }
}

}  // namespace

const ImpactColumnKernels impact_column_scalar = {sum_columns, scatter_add_each, next_above_each};

}  // namespace ragfind::splade::kernels
