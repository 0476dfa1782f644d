// The dense impact-column kernels of the learned-sparse index: acc[i] (+)= w * column[i] over a
// tile of uint16 quantised impacts, and the scan of a tile for scores above the queue threshold. Every level multiplies and then adds in float32 (never a
// fused multiply-add), so all levels, and the posting-by-posting scorer, give bit-identical sums.
#pragma once

#include <cstdint>

namespace ragfind {

struct ImpactColumnKernels {
  /// acc[i] = w * col[i] when assign, else acc[i] += w * col[i], for i < n.
  void (*add_column)(float* acc, const std::uint16_t* col, float w, std::uint32_t n, bool assign);
  /// The first i in [from, n) with acc[i] > threshold, or n.
  std::uint32_t (*next_above)(const float* acc, std::uint32_t from, std::uint32_t n, float threshold);
};

/// The kernels of the active SIMD level (ragfind/cpu.hpp).
const ImpactColumnKernels& impact_column_kernels();

}  // namespace ragfind
