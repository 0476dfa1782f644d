// The posting segment every inverted index stores: a term directory, per term a run of
// (local doc id, value) in increasing doc order, flat or block-compressed (postings.hpp), and
// the per-list score caches the pruned query algorithms fill. What a value means is the
// scorer's business: BM25 stores term frequencies, the learned sparse index quantised impacts.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "ragfind/common/buffer.hpp"
#include "ragfind/inverted/postings.hpp"

namespace ragfind::inverted {

using common::Buffer;

/// The ranks whose per-list document-side weights are kept for threshold estimation: a query
/// term's weight times the k-th largest weight of its list is a score that k documents reach,
/// so a search for the top k (k <= rank) starts pruning at the best such product over its terms
/// instead of at nothing (Petri, Moffat, Mackenzie, Culpepper and Shane, 2019, "Accelerated
/// query processing via similarity score prediction": the single-term estimate).
inline constexpr std::array<std::uint32_t, 3> kKthLevels = {10, 100, 1000};

/// One block of a posting list: its last local doc id, the largest tf and the shortest document
/// in it, and the largest document-side weight of its postings under the index's own
/// statistics at the epoch the blocks were built (the tight bound). The term-frequency
/// component grows with tf and falls with the document length under every variant and any
/// (k1, b >= 0, avgdl), so tfc(max_tf, L(min_len)) bounds every posting of the block whatever
/// statistics a search uses (the bound for a search with other collection statistics).
struct BlockInfo {
  std::uint32_t last_doc;
  std::uint32_t max_tf;
  std::uint32_t min_len;
  float max_weight;
};

/// Frees what calloc returned (the lazily zeroed per-term caches).
struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

/// Postings of a contiguous range of documents [base, base + num_docs), with the per-list
/// caches the query algorithms fill on first use.
struct Segment {
  std::uint32_t base = 0;
  std::uint32_t num_docs = 0;
  // Term directory: dense (offsets indexed by term id, size num_terms + 1) when term_ids is
  // empty, else sparse (term_ids sorted, offsets[i] for term_ids[i], size term_ids.size() + 1).
  Buffer<std::uint32_t> term_ids;
  Buffer<std::uint64_t> offsets;
  // Postings, either flat (the learned sparse index: docs and values per posting) or, when
  // `compressed` (BM25, whose values are term frequencies), in blocks (postings.hpp): the blocks of directory slot s
  // are list_block[s] .. list_block[s + 1], block b's packed words start at blk_word[b] (one more entry than blocks),
  // its gap and tf bit widths are blk_bits[2b], blk_bits[2b + 1].
  Buffer<std::uint32_t> docs;    // local doc ids (0 .. num_docs - 1)
  Buffer<std::uint32_t> values;  // what the scorer reads: a tf (BM25) or a quantised impact
  bool compressed = false;
  Buffer<std::uint32_t> blk_last;
  Buffer<std::uint32_t> blk_word;
  Buffer<std::uint8_t> blk_bits;
  Buffer<std::uint32_t> packed;
  std::vector<std::uint64_t> list_block;  // derived from offsets (set_list_blocks)
  // Forward index, once has_forward: the (sorted, distinct) term ids of local doc d are
  // fwd_terms[fwd_offsets[d] .. fwd_offsets[d + 1]). Built on the segment's first delete.
  bool has_forward = false;
  std::vector<std::uint64_t> fwd_offsets;
  std::vector<std::uint32_t> fwd_terms;
  std::uint32_t num_dead = 0;
  std::uint64_t dead_postings = 0;
  // The statistics epoch of the last delete here: rank floors cached before it are stale.
  std::uint32_t deleted_epoch = 0;
  std::shared_ptr<const void> keepalive;  // the mapped file the buffers may borrow from
  // Per directory entry: (epoch << 32) | bits of the max document-side weight at that epoch.
  // Zeroed by calloc (the pages of terms never queried stay untouched, costing no memory).
  mutable std::unique_ptr<std::atomic<std::uint64_t>[], FreeDeleter> bound_cache;
  // Per directory entry and kKthLevels rank: (epoch << 32) | bits of the rank-th largest
  // document-side weight among the live postings (0 when the list is shorter). Zeroed the same
  // way: only queried terms cost memory.
  mutable std::unique_ptr<std::atomic<std::uint64_t>[], FreeDeleter> kth_cache;
  // Block maxima, built per term on first use at each statistics epoch (block_state:
  // (epoch << 2) | 0 none, 1 being built, 2 ready): one per compression block, so the blocks
  // of directory slot s are blocks[list_block[s] .. list_block[s + 1]) (none for lists
  // shorter than kBlockMinPostings). Allocated uninitialised, so only the blocks of queried
  // terms cost memory.
  mutable std::unique_ptr<BlockInfo[]> blocks;
  mutable std::unique_ptr<std::atomic<std::uint64_t>[], FreeDeleter> block_state;

  std::size_t num_postings() const {
    return compressed ? (offsets.empty() ? 0 : offsets[offsets.size() - 1]) : docs.size();
  }
  std::uint64_t num_blocks() const { return blk_last.size(); }
  /// Derives list_block from offsets (ceil(list length / kPostingBlock) blocks per slot).
  void set_list_blocks();
  std::size_t directory_size() const { return offsets.empty() ? 0 : offsets.size() - 1; }
  /// Directory slot of a term, or -1 when the segment has no postings for it.
  std::int64_t slot_of(std::uint32_t term) const;
  void reset_bounds();
  /// Builds the forward index from the postings if it is not there yet.
  void ensure_forward();
};

template <class F>
void for_each_posting(const Segment& seg, std::size_t slot, F&& f) {
  PostingCursor c;
  c.reset(seg, slot);
  for (; c.doc() != PostingCursor::kEnd; c.next_block()) {
    const std::uint32_t* d = c.block_docs();
    const std::uint32_t* t = c.block_tfs();
    for (std::uint32_t i = 0, n = c.block_size(); i < n; ++i) f(d[i], t[i]);
  }
}

/// Encodes a segment's flat docs and values (each >= 1) into blocks (dropping the flat arrays).
void compress_segment(Segment& seg);

}  // namespace ragfind::inverted
