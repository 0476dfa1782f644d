// The tile kernels of the learned-sparse index's term-at-a-time scorer: the weighted sum of
// several uint16 columns of quantised impacts over a tile of documents, the scatter of one
// posting list's weighted impacts into the tile, and the scan of a tile for scores above the
// queue threshold. Every level forms each document's sum in the same term order, multiplying
// and then adding in float32 (never a fused multiply-add), so all levels, and the
// posting-by-posting scorer, give bit-identical sums.
#pragma once

#include <cstdint>

namespace ragfind::splade {

struct ImpactColumnKernels {
  /// acc[i] = w[0] * cols[0][from + i] + w[1] * cols[1][from + i] + ... (left to right, each
  /// product rounded before it is added) for i < n; m >= 1 columns.
  void (*sum_columns)(float* acc, const std::uint16_t* const* cols, const float* w, std::uint32_t m, std::uint32_t from,
                      std::uint32_t n);
  /// acc[docs[j] - lo] += w * stored[j] (product rounded, then added) for j from pos while
  /// j < end and docs[j] < hi; returns where it stopped. The docs are one list's postings:
  /// increasing, so distinct, and >= lo from pos on. Scanning to the tile end while scattering
  /// streams the list once, where a search for the tile end first would wait on dependent
  /// cache misses.
  std::uint64_t (*scatter_add)(float* acc, const std::uint32_t* docs, const std::uint32_t* stored, std::uint64_t pos,
                               std::uint64_t end, std::uint32_t lo, std::uint32_t hi, float w);
  /// The first i in [from, n) with acc[i] > threshold, or n.
  std::uint32_t (*next_above)(const float* acc, std::uint32_t from, std::uint32_t n, float threshold);
};

/// The kernels of the active SIMD level (ragfind/common/cpu.hpp).
const ImpactColumnKernels& impact_column_kernels();

}  // namespace ragfind::splade
