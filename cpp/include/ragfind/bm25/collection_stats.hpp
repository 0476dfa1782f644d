// Collection statistics given from outside an index: the N, total length and per-term df of a
// larger collection the index is one shard of. A shard searched with the statistics of the
// whole collection scores every document exactly as an index over the whole collection would,
// so per-shard top lists merge by score into the global top list.
#pragma once

#include <cstdint>
#include <vector>

namespace ragfind::bm25 {

/// The term id a query term unknown to this index carries in a search with CollectionStats: it
/// has no postings here, but its global df still counts in the bm25l / bm25+ constant.
inline constexpr std::uint32_t kForeignTerm = 0xFFFFFFFFu;

struct CollectionStats {
  std::uint64_t num_docs = 0;   // live documents of the whole collection
  std::uint64_t total_len = 0;  // their total length
  /// Document frequency of each query term, aligned with the (distinct) query terms searched.
  std::vector<std::uint64_t> df;

  double avgdl() const { return num_docs ? static_cast<double>(total_len) / static_cast<double>(num_docs) : 0.0; }
};

}  // namespace ragfind::bm25
