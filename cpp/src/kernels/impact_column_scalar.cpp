// Impact-column kernel, baseline build: plain loops (the compiler vectorises them with the
// baseline ISA); separate multiply and add, as every level.
#include "impact_column_kernels.hpp"

namespace ragfind::kernels {
namespace {

void add_column(float* __restrict acc, const std::uint16_t* __restrict col, float w, std::uint32_t n, bool assign) {
  if (assign) {
    for (std::uint32_t i = 0; i < n; ++i) acc[i] = w * static_cast<float>(col[i]);
  } else {
    for (std::uint32_t i = 0; i < n; ++i) acc[i] += w * static_cast<float>(col[i]);
  }
}

std::uint32_t next_above(const float* acc, std::uint32_t from, std::uint32_t n, float threshold) {
  while (from < n && !(acc[from] > threshold)) ++from;
  return from;
}

}  // namespace

const ImpactColumnKernels impact_column_scalar = {add_column, next_above};

}  // namespace ragfind::kernels
