// Structural check of an hnswlib graph file before hnswlib's own loader sees it.
//
// hnswlib (0.8) reads its saved graph without validating it: neighbour ids, list lengths, the
// entry point and the per-element record size are trusted, so a file whose checksums were
// recomputed after tampering can make a later search or add read or write out of bounds. This
// parser walks the same layout hnswlib writes (HierarchicalNSW::saveIndex) and rejects anything
// hnswlib could not have produced for a vector of `dim` float32 values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ragfind::dense {

/// What a valid graph holds, as read from its header and records.
struct GraphSummary {
  uint64_t max_elements = 0;
  uint64_t count = 0;  // elements stored, deleted ones included
  uint64_t M = 0;
  uint64_t ef_construction = 0;
  int32_t max_level = -1;
  std::vector<uint64_t> labels;  // label of each stored element, in storage order
  std::vector<uint8_t> deleted;  // 1 where the element is marked deleted
};

/// Parses and checks an hnswlib graph of float32 vectors of dimension `dim`; throws
/// std::invalid_argument naming the first inconsistency.
GraphSummary check_graph(const uint8_t* data, size_t size, size_t dim);

}  // namespace ragfind::dense
