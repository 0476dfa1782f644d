// The one top-k queue: the inverted-index searches (BM25 and SPLADE, uint32 document numbers)
// and the exact and IVF dense scans (int64 rows) all keep their best k in it.
//
// Contract: entries are ordered by score, higher first; equal scores are broken by the lower
// internal document id (earlier insertion). The queue keeps the k best entries seen; while it
// is full, threshold() is the score of its worst entry and a document can only enter with a
// score strictly greater than the threshold (or an equal score and a lower id, which cannot
// happen when documents are visited in increasing id order, as every algorithm here does).
// So a candidate whose score upper bound is <= threshold() can be skipped safely.
//
// A floor (set_floor) is a score known to be below the final k-th best: at least k documents
// score more. Scores at or below it never enter, and threshold() is the floor until the queue
// is full, so pruning starts from it instead of from nothing. The result is unchanged.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace ragfind::common {

/// A document (or row) and its score.
template <class Id>
struct Scored {
  float score;
  Id doc;
};
using ScoredDoc = Scored<std::uint32_t>;

/// a ranks before b.
template <class Id>
inline bool ranks_before(const Scored<Id>& a, const Scored<Id>& b) {
  return a.score > b.score || (a.score == b.score && a.doc < b.doc);
}

struct RanksBefore {
  template <class Id>
  bool operator()(const Scored<Id>& a, const Scored<Id>& b) const {
    return ranks_before(a, b);
  }
};

/// The k best entries offered, by ranks_before.
template <class Id>
class BasicTopKQueue {
 public:
  using Entry = Scored<Id>;
  explicit BasicTopKQueue(std::size_t k) : k_(k) { heap_.reserve(k < 4096 ? k : 4096); }

  bool full() const { return heap_.size() >= k_; }
  std::size_t k() const { return k_; }

  /// Scores at or below this cannot enter: the worst entry's when full, else the floor (-inf
  /// without one).
  float threshold() const { return full() ? heap_.front().score : floor_; }

  /// Sets the floor: the caller guarantees that at least k documents it will offer score more
  /// than `f` (set before any insert).
  void set_floor(float f) {
    floor_ = f;
    has_floor_ = true;
  }

  /// Empties the queue for a new search of the k best, keeping its memory (no floor).
  void reset(std::size_t k) {
    k_ = k;
    heap_.clear();
    floor_ = -std::numeric_limits<float>::infinity();
    has_floor_ = false;
  }

  /// Offers a document; returns true if it entered.
  bool insert(float score, Id doc) {
    Entry e{score, doc};
    if (!full()) {
      if (has_floor_ && !(score > floor_)) return false;
      heap_.push_back(e);
      std::push_heap(heap_.begin(), heap_.end(), RanksBefore{});
      return true;
    }
    if (!ranks_before(e, heap_.front())) return false;
    replace_worst(e);
    return true;
  }

  /// The entries best first; empties the queue.
  /// (Callers may offer documents in any order: the comparison includes the doc id.)
  void finalize(std::vector<Entry>& out) {
    std::sort(heap_.begin(), heap_.end(), RanksBefore{});
    out.swap(heap_);
    heap_.clear();
  }

  /// The entries in heap order (to merge one queue into another).
  const std::vector<Entry>& entries() const { return heap_; }

 private:
  // The front (worst) entry replaced by e, sifted down once (pop_heap + push_heap would walk
  // the heap twice).
  void replace_worst(const Entry& e) {
    Entry* h = heap_.data();
    const std::size_t n = heap_.size();
    std::size_t i = 0;
    for (;;) {
      std::size_t c = 2 * i + 1;
      if (c >= n) break;
      if (c + 1 < n && ranks_before(h[c], h[c + 1])) ++c;  // the worse child
      if (!ranks_before(e, h[c])) break;
      h[i] = h[c];
      i = c;
    }
    h[i] = e;
  }

  std::size_t k_;
  float floor_ = -std::numeric_limits<float>::infinity();
  bool has_floor_ = false;
  std::vector<Entry> heap_;  // a heap whose front is the worst entry
};

using TopKQueue = BasicTopKQueue<std::uint32_t>;

}  // namespace ragfind::common
