// Block-max MaxScore (Ding and Suel, SIGIR 2011; as PISA's block_max_maxscore_query.hpp) over
// one compressed segment, generic over the scorer like the algorithms of maxscore.hpp: MaxScore,
// and before probing the non-essential lists for a candidate, their whole-list bounds are
// replaced by the bounds of the blocks that may hold the candidate (found without touching
// the postings), so most candidates are dropped after scoring the essential lists alone.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "ragfind/common/topk_queue.hpp"
#include "ragfind/inverted/maxscore.hpp"
#include "ragfind/inverted/segment.hpp"

namespace ragfind::inverted {

/// Block-max MaxScore top-k of one compressed segment. As maxscore_compressed_segment, and:
/// blocks(slot, &n) gives the n block summaries of a list (one per compression block; nullptr
/// when it has none, e.g. a short list: it is then bounded by its whole-list bound), and
/// block_weight(const BlockInfo&) an upper bound of the scorer over one block's postings.
/// Never inlined: inlined into a caller's dispatch, it took GCC's inlining budget from the
/// cursor calls of its own loops (counted with tools/callgrind/run.sh bm25_queries).
template <class W, class ListBound, class Blocks, class BlockWeight, class A = AllDocs>
[[gnu::noinline]] void blockmax_segment(const Segment& seg, const std::vector<std::uint32_t>& query,
                                        const std::vector<float>& weights, ListBound&& list_bound, Blocks&& blocks,
                                        BlockWeight&& block_weight, W wt, TopKQueue& heap, A allowed = {}) {
  struct BCursor {
    PostingCursor pc;
    std::size_t slot;
    float weight;
    double bound;
    const BlockInfo* blk;  // nullptr: bounded by the whole list
    std::size_t nblk, bi, bound_bi;
    double blk_bound;  // bound of block bound_bi
    double cur_bb;     // the block bound for the current candidate
  };
  const double inflate = 1.0 + 1e-6 * static_cast<double>(query.size() + 4);
  thread_local std::vector<ListInSegment> terms;
  thread_local std::vector<BCursor> cur_store;
  thread_local std::vector<double> cum_store;
  segment_lists(seg, query, weights, inflate, list_bound, terms);
  if (terms.empty()) return;
  const std::size_t n = terms.size();
  if (cur_store.size() < n) cur_store.resize(n);
  cum_store.resize(n);
  BCursor* const cur = cur_store.data();
  double* const cum = cum_store.data();
  for (std::size_t i = 0; i < n; ++i) {
    BCursor& c = cur[i];
    c.pc.reset(seg, terms[i].slot, wt.prefetch());
    c.slot = terms[i].slot;
    c.weight = terms[i].weight;
    c.bound = terms[i].bound;
    c.blk = blocks(terms[i].slot, &c.nblk);
    c.bi = 0;
    c.bound_bi = static_cast<std::size_t>(-1);
    c.blk_bound = c.bound;
    c.cur_bb = c.bound;
  }
  double acc = 0;
  for (std::size_t i = 0; i < n; ++i) cum[i] = (acc += cur[i].bound);
  // The bound of block c.bi (cached per cursor).
  auto current_bound = [&](BCursor& c) -> double {
    if (c.bound_bi != c.bi) {
      const BlockInfo& b = c.blk[c.bi];
      const double v = static_cast<double>(c.weight) * block_weight(b) * inflate;
      c.blk_bound = v < c.bound ? v : c.bound;
      c.bound_bi = c.bi;
    }
    return c.blk_bound;
  };
  // The bound of the block of c that may hold doc (0 past its last block).
  auto block_bound = [&](BCursor& c, std::uint32_t doc) -> double {
    if (!c.blk) return c.bound;
    while (c.bi < c.nblk && c.blk[c.bi].last_doc < doc) ++c.bi;
    if (c.bi == c.nblk) return 0.0;
    return current_bound(c);
  };
  float theta = heap.threshold();
  std::size_t first_ess = 0;
  while (first_ess < n && cum[first_ess] <= theta) ++first_ess;
  std::uint32_t checked_to = 0;
  bool first = true;
  while (first_ess < n) {
    std::uint32_t doc = PostingCursor::kEnd;
    for (std::size_t i = first_ess; i < n; ++i) doc = std::min(doc, cur[i].pc.doc());
    if (doc == PostingCursor::kEnd) break;
    if (doc > checked_to || first) {
      first = false;
      // Up to the end of the shortest current block of the essential lists, no document
      // scores more than the sum of those blocks' bounds plus the non-essential lists' bounds:
      // when that cannot beat the threshold, the whole range is skipped unscored.
      double ub = first_ess > 0 ? cum[first_ess - 1] : 0.0;
      std::uint32_t range_end = 0xFFFFFFFFu;
      for (std::size_t i = first_ess; i < n; ++i) {
        BCursor& c = cur[i];
        if (c.pc.doc() == PostingCursor::kEnd) continue;
        if (!c.blk) {
          ub += c.bound;
          continue;
        }
        c.bi = static_cast<std::size_t>(c.pc.block_index());
        ub += current_bound(c);
        range_end = std::min(range_end, c.blk[c.bi].last_doc);
      }
      if (ub <= theta) {
        if (range_end == 0xFFFFFFFFu) break;  // no list can reach the threshold any more
        for (std::size_t i = first_ess; i < n; ++i) cur[i].pc.next_geq(range_end + 1);
        continue;
      }
      checked_to = range_end;  // checked once per range: the threshold only rises meanwhile
    }
    if constexpr (!std::is_same_v<A, AllDocs>) {
      if (!allowed(doc)) {
        for (std::size_t i = first_ess; i < n; ++i)
          if (cur[i].pc.doc() == doc) cur[i].pc.next();
        continue;
      }
    }
    float score = 0.0f;
    for (std::size_t i = first_ess; i < n; ++i) {
      BCursor& c = cur[i];
      if (c.pc.doc() == doc) {
        c.pc.prefetch_ahead(kPrefetch);
        score += c.weight * wt(doc, c.pc.tf());
        c.pc.next();
      }
    }
    // Whole-list bounds of the non-essential lists swapped for block bounds, highest first.
    double ub = static_cast<double>(score) + (first_ess > 0 ? cum[first_ess - 1] : 0.0);
    bool alive = ub > theta;
    for (std::size_t i = first_ess; alive && i-- > 0;) {
      cur[i].cur_bb = block_bound(cur[i], doc);
      ub -= cur[i].bound - cur[i].cur_bb;
      alive = ub > theta;
    }
    if (!alive) continue;
    double rest = ub - static_cast<double>(score);  // the block bounds of lists not probed yet
    for (std::size_t i = first_ess; i-- > 0;) {
      BCursor& c = cur[i];
      rest -= c.cur_bb;
      c.pc.next_geq(doc);
      if (c.pc.doc() == doc) score += c.weight * wt(doc, c.pc.tf());
      if (static_cast<double>(score) + rest <= theta) {
        alive = false;
        break;
      }
    }
    if (alive && heap.insert(score, seg.base + doc) && heap.full()) {
      theta = heap.threshold();
      while (first_ess < n && cum[first_ess] <= theta) ++first_ess;
    }
  }
}

}  // namespace ragfind::inverted
