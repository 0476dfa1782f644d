// The dense impact-column kernel of the learned-sparse index: acc[i] (+)= w * column[i] over a
// tile of uint16 quantised impacts. Every level multiplies and then adds in float32 (never a
// fused multiply-add), so all levels, and the posting-by-posting scorer, give bit-identical sums.
#pragma once

#include <cstdint>

namespace ragfind {

struct ImpactColumnKernels {
  /// acc[i] = w * col[i] when assign, else acc[i] += w * col[i], for i < n.
  void (*add_column)(float* acc, const std::uint16_t* col, float w, std::uint32_t n, bool assign);
};

/// The kernels of the active SIMD level (ragfind/cpu.hpp).
const ImpactColumnKernels& impact_column_kernels();

}  // namespace ragfind
