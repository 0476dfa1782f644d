// Top-k with MaxScore dynamic pruning (Turtle and Flood, 1995; as in PISA's
// query/algorithm/maxscore_query.hpp), exact.
//
// Query terms are sorted by their score upper bound in the segment. The longest prefix whose
// bounds sum to at most the queue threshold is "non-essential": a document matching only
// those terms cannot enter the top-k, so candidates are drawn from the essential lists only,
// and the non-essential lists are probed (skipping forward) only while the partial score plus
// the remaining bounds can still beat the threshold. Bounds are inflated by a tiny relative
// margin so that float rounding never prunes a document that belongs in the result.
//
// The essential lists are merged a window of documents at a time (each list's postings in
// the window scored in one loop, then merged by doc without branches), and the candidates then
// go through the probes document at a time, in doc order.
//
// Dead and filtered-out documents (a byte mask per slot) are skipped as candidates before any
// scoring; a bound over all postings stays a valid bound over the allowed ones. A small allowed
// set is scored directly instead (direct_segment): per allowed document, per query term, a
// galloping search of the term's postings, in the exhaustive search's summation order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "ragfind/bm25/index.hpp"

namespace ragfind::bm25 {

namespace {

// How many postings ahead a cursor prefetches the length code of the document it will score.
constexpr std::uint32_t kPrefetch = 16;

constexpr std::uint32_t kEnd = PostingCursor::kEnd;

// A query term in a segment, before its cursor is opened (sorted by bound first: cursors hold
// a decoded block each and are not cheap to move).
struct TermInSegment {
  std::size_t slot;
  float weight;
  double bound;
};

// The query terms the segment has, with their score bounds (weight x list bound, inflated),
// sorted by bound: the order MaxScore and block-max MaxScore split essential lists in.
template <class ListBound>
void segment_terms(const InvertedIndex::Prepared& q, const Segment& seg, double inflate, ListBound&& list_bound,
                   std::vector<TermInSegment>& terms) {
  terms.clear();
  for (std::size_t i = 0; i < q.terms.size(); ++i) {
    const std::int64_t slot = seg.slot_of(q.terms[i]);
    if (slot < 0) continue;
    const auto s = static_cast<std::size_t>(slot);
    terms.push_back({s, q.weights[i], static_cast<double>(q.weights[i]) * list_bound(s) * inflate});
  }
  std::sort(terms.begin(), terms.end(),
            [](const TermInSegment& a, const TermInSegment& b) { return a.bound < b.bound; });
}

// A float at or below which a score s cannot pass `s + rest > theta` (rest summed in double):
// a few float ulps under theta - rest, so the float test never rejects a score the double
// test would keep; -inf when every score passes.
inline float pass_limit(float theta, double rest) {
  const double d = static_cast<double>(theta) - rest;
  if (!(d > 0.0)) return -std::numeric_limits<float>::infinity();
  return static_cast<float>(d) * (1.0f - 4 * std::numeric_limits<float>::epsilon());
}

struct Cursor {
  PostingCursor pc;
  float weight;
  double bound;
};

}  // namespace

namespace {

// One pass over a list: the largest document-side weight of any posting (the MaxScore bound)
// and the first `levels` of the kKthLevels-ranked largest among the live postings (0 for a
// rank past their count).
template <Method M>
void scan_list(const Segment& seg, std::size_t slot, const Weigher<M>& wt, const std::uint8_t* live, std::size_t levels,
               float* bound, float* kth) {
  // The largest weights seen so far, at most twice the largest rank wanted: when full, that
  // rank's worth is kept and its smallest becomes the bar a new weight must pass.
  const std::size_t keep = kKthLevels[levels - 1];
  float top[2 * kKthLevels.back()];  // 8 KB on the stack (a thread_local costs a lookup per use)
  std::size_t count = 0;
  float best = 0.0f, bar = 0.0f;
  for_each_posting(seg, slot, [&](std::uint32_t d, std::uint32_t tf) {
    const float v = wt(d, tf);
    best = v > best ? v : best;
    if (v > bar && (!live || live[d])) {
      top[count++] = v;
      if (count == 2 * keep) {
        std::nth_element(top, top + (keep - 1), top + count, std::greater<float>());
        count = keep;
        bar = top[keep - 1];
      }
    }
  });
  *bound = best;
  // Largest rank first, each selection within the previous one's top.
  float* end = top + count;
  for (std::size_t l = levels; l-- > 0;) {
    const std::size_t r = kKthLevels[l];
    if (count < r) {
      kth[l] = 0.0f;
      continue;
    }
    std::nth_element(top, top + (r - 1), end, std::greater<float>());
    kth[l] = top[r - 1];
    end = top + r;
  }
}

// The ranks computed with every bound (the top 100 is cheap to keep while scanning); the top
// 1000 only when a search asks for it.
constexpr std::size_t kCheapLevels = 2;

bool read_cell(const std::atomic<std::uint64_t>& cell, std::uint32_t epoch, float* v) {
  const std::uint64_t cached = cell.load(std::memory_order_acquire);
  if ((cached >> 32) != epoch) return false;
  const auto bits = static_cast<std::uint32_t>(cached);
  std::memcpy(v, &bits, 4);
  return true;
}

void write_cell(std::atomic<std::uint64_t>& cell, std::uint32_t epoch, float v) {
  std::uint32_t bits;
  std::memcpy(&bits, &v, 4);
  cell.store((static_cast<std::uint64_t>(epoch) << 32) | bits, std::memory_order_release);
}

}  // namespace

float InvertedIndex::scan_term(const Segment& seg, std::size_t slot, const Prepared& q, std::size_t levels,
                               float* kth) const {
  const std::uint8_t* live = seg.num_dead > 0 ? live_.data() + seg.base : nullptr;
  float bound = 0.0f;
  switch (params_.method) {
    case Method::Lucene: scan_list(seg, slot, weigher<Method::Lucene>(q, seg), live, levels, &bound, kth); break;
    case Method::Robertson: scan_list(seg, slot, weigher<Method::Robertson>(q, seg), live, levels, &bound, kth); break;
    case Method::Atire: scan_list(seg, slot, weigher<Method::Atire>(q, seg), live, levels, &bound, kth); break;
    case Method::BM25L: scan_list(seg, slot, weigher<Method::BM25L>(q, seg), live, levels, &bound, kth); break;
    case Method::BM25Plus: scan_list(seg, slot, weigher<Method::BM25Plus>(q, seg), live, levels, &bound, kth); break;
  }
  std::atomic<std::uint64_t>* cells = seg.kth_cache.get() + slot * kKthLevels.size();
  for (std::size_t l = 0; l < levels; ++l) write_cell(cells[l], q.epoch, kth[l]);
  write_cell(seg.bound_cache[slot], q.epoch, bound);
  return bound;
}

float InvertedIndex::term_bound(const Segment& seg, std::size_t slot, const Prepared& q) const {
  float v;
  if (read_cell(seg.bound_cache[slot], q.epoch, &v)) return v;
  std::array<float, kKthLevels.size()> kth;
  return scan_term(seg, slot, q, kCheapLevels, kth.data());
}

float InvertedIndex::term_kth(const Segment& seg, std::size_t slot, const Prepared& q, std::size_t level) const {
  float v;
  if (read_cell(seg.kth_cache[slot * kKthLevels.size() + level], q.epoch, &v)) return v;
  std::array<float, kKthLevels.size()> kth;
  scan_term(seg, slot, q, level < kCheapLevels ? kCheapLevels : kKthLevels.size(), kth.data());
  return kth[level];
}

float InvertedIndex::score_floor(const Prepared& q, std::size_t k, const Segment& seg) const {
  std::size_t level = 0;
  while (level < kKthLevels.size() && kKthLevels[level] < k) ++level;
  if (level == kKthLevels.size()) return -std::numeric_limits<float>::infinity();
  // A document's score is a sum of non-negative products weight * w(d, tf), and float addition
  // of non-negative terms never falls below one of them: the kKthLevels[level] documents with
  // the largest w(d, tf) in one list score at least weight * that k-th weight.
  float best = 0.0f;
  for (std::size_t i = 0; i < q.terms.size(); ++i) {
    if (static_cast<std::uint64_t>(df(q.terms[i])) < kKthLevels[level]) continue;
    const std::int64_t slot = seg.slot_of(q.terms[i]);
    if (slot < 0) continue;
    const float v = q.weights[i] * term_kth(seg, static_cast<std::size_t>(slot), q, level);
    best = v > best ? v : best;
  }
  if (best <= 0.0f) return -std::numeric_limits<float>::infinity();
  // Strictly below it (documents at exactly that score belong in the result), with a margin.
  return best * (1.0f - 1e-5f);
}

template <Method M, bool Filtered>
void InvertedIndex::maxscore_segment(const Prepared& q, const Segment& seg, const std::uint8_t* allow,
                                     TopKQueue& heap) const {
  const Weigher<M> wt = weigher<M>(q, seg);
  const double inflate = 1.0 + 1e-6 * static_cast<double>(q.terms.size() + 4);
  thread_local std::vector<TermInSegment> terms;
  // Thread-local storage, used through plain pointers (a thread_local in a shared library is
  // looked up again after every call the compiler cannot see through).
  thread_local std::vector<Cursor> cur_store;
  thread_local std::vector<double> cum_store;
  segment_terms(
      q, seg, inflate, [&](std::size_t slot) { return term_bound(seg, slot, q); }, terms);
  if (terms.empty()) return;
  const std::size_t n = terms.size();
  if (cur_store.size() < n) cur_store.resize(n);
  cum_store.resize(n);
  Cursor* const cur = cur_store.data();
  double* const cum = cum_store.data();
  for (std::size_t i = 0; i < n; ++i) {
    cur[i].pc.reset(seg, terms[i].slot, wt.code);
    cur[i].weight = terms[i].weight;
    cur[i].bound = terms[i].bound;
  }
  double acc = 0;
  for (std::size_t i = 0; i < n; ++i) cum[i] = (acc += cur[i].bound);
  float theta = heap.threshold();
  std::size_t first_ess = 0;
  while (first_ess < n && cum[first_ess] <= theta) ++first_ess;
  // A candidate's first test (its score plus the non-essential bounds against theta) in float:
  // a few ulps under theta minus those bounds, so it never rejects a score the double test
  // keeps. About half of the candidates fail it at 1M top-10.
  float pass = pass_limit(theta, first_ess > 0 ? cum[first_ess - 1] : 0.0);
  // Probes the non-essential lists for a candidate and offers it to the queue.
  auto finish = [&](std::uint32_t doc, float score) {
    if (score <= pass) return;
    // The first list is probed without its double test: a score passing `pass` nearly always
    // passes it too, and probing one list too many costs no exactness (the tests only prune).
    for (std::size_t i = first_ess; i-- > 0;) {
      if (i + 1 < first_ess && static_cast<double>(score) + cum[i] <= theta) return;
      Cursor& c = cur[i];
      c.pc.next_geq(doc);
      if (c.pc.doc() == doc) score += c.weight * wt(doc, c.pc.tf());
    }
    // Docs come in increasing order, so an equal score never displaces an entry (queue contract).
    if (score <= theta) return;
    if (heap.insert(score, seg.base + doc) && heap.full()) {
      theta = heap.threshold();
      while (first_ess < n && cum[first_ess] <= theta) ++first_ess;
      pass = pass_limit(theta, first_ess > 0 ? cum[first_ess - 1] : 0.0);
    }
  };
  // The essential lists are read a window of documents at a time, [lo, hi], hi the end of
  // the first essential cursor's current block: each list's postings in the window are scored
  // in one loop, the lists are merged by doc without branches (a document in several gets its
  // shares summed in list order, as a document at a time would sum them), and the candidates
  // passing the first test are kept without a branch. The essential lists rarely share a
  // document, so comparing their cursors per posting (a run of 1.6 candidates on average at
  // 1M) spent most of its time on unpredictable branches.
  //
  // A window's candidates are probed after the whole window is read. A list the threshold
  // makes non-essential meanwhile is past the window already, so probing it for them finds
  // nothing and its share is counted once.
  thread_local std::vector<std::uint32_t> cand_doc_store;
  thread_local std::vector<float> cand_score_store;
  thread_local std::vector<std::uint32_t> merge_doc_store;
  thread_local std::vector<float> merge_score_store;
  // A window holds at most the rest of one block per essential list.
  const std::size_t cap = n * kPostingBlock;
  if (cand_doc_store.size() < cap) {
    cand_doc_store.resize(cap);
    cand_score_store.resize(cap);
    merge_doc_store.resize(3 * cap);
    merge_score_store.resize(3 * cap);
  }
  std::uint32_t* const cand_doc = cand_doc_store.data();
  float* const cand_score = cand_score_store.data();
  // Three buffers, rotated by the merges.
  std::uint32_t* const mdoc[3] = {merge_doc_store.data(), merge_doc_store.data() + cap,
                                  merge_doc_store.data() + 2 * cap};
  float* const mscore[3] = {merge_score_store.data(), merge_score_store.data() + cap,
                            merge_score_store.data() + 2 * cap};
  while (first_ess < n) {
    std::uint32_t lo = kEnd, hi = kEnd;
    for (std::size_t i = first_ess; i < n; ++i) {
      lo = std::min(lo, cur[i].pc.doc());
      hi = std::min(hi, cur[i].pc.block_last());
    }
    if (lo == kEnd) break;
    // Candidates whose essential score passes the first test, in doc order (kept without a
    // branch: about half fail it, unpredictably).
    std::size_t m = 0;
    auto keep = [&](std::uint32_t doc, float score) {
      cand_doc[m] = doc;
      cand_score[m] = score;
      bool ok = score > pass;
      if constexpr (Filtered) ok = ok && allow[doc];
      m += ok;
    };
    if (first_ess + 1 == n) {
      Cursor& c = cur[first_ess];
      c.pc.scan_until(hi, [&](std::uint32_t doc, std::uint32_t tf) { keep(doc, c.weight * wt(doc, tf)); });
    } else {
      // A list's scored postings in the window, into (docs, scores); their count.
      auto read_window = [&](Cursor& c, std::uint32_t* docs, float* scores) {
        std::size_t k = 0;
        c.pc.scan_until(hi, [&](std::uint32_t doc, std::uint32_t tf) {
          docs[k] = doc;
          scores[k] = c.weight * wt(doc, tf);
          ++k;
        });
        return k;
      };
      // The first list's scored postings, then each next list's merged in.
      std::uint32_t* ad = mdoc[0];
      float* as = mscore[0];
      std::size_t na = read_window(cur[first_ess], ad, as);
      std::uint32_t* bd = mdoc[1];
      float* bs = mscore[1];
      std::uint32_t* od = mdoc[2];
      float* os = mscore[2];
      for (std::size_t i = first_ess + 1; i < n; ++i) {
        const std::size_t nb = read_window(cur[i], bd, bs);
        if (nb == 0) continue;
        if (na == 0) {
          std::swap(ad, bd);
          std::swap(as, bs);
          na = nb;
          continue;
        }
        // Without branches on the order (the lists interleave unpredictably): x * 1 is x and
        // x + 0 is x, so a document in one list keeps its exact score, and one in both gets the
        // sum in list order.
        std::size_t x = 0, y = 0, o = 0;
        while (x < na && y < nb) {
          const std::uint32_t da = ad[x], db = bd[y];
          const bool ta = da <= db, tb = db <= da;
          od[o] = ta ? da : db;
          os[o] = as[x] * static_cast<float>(ta) + bs[y] * static_cast<float>(tb);
          x += ta;
          y += tb;
          ++o;
        }
        for (; x < na; ++x, ++o) od[o] = ad[x], os[o] = as[x];
        for (; y < nb; ++y, ++o) od[o] = bd[y], os[o] = bs[y];
        std::swap(ad, od);
        std::swap(as, os);
        na = o;
      }
      for (std::size_t x = 0; x < na; ++x) keep(ad[x], as[x]);
    }
    for (std::size_t j = 0; j < m; ++j) finish(cand_doc[j], cand_score[j]);
  }
}

// Block-max MaxScore (Ding and Suel, SIGIR 2011; as PISA's block_max_maxscore_query.hpp): MaxScore
// as above, and before probing the non-essential lists for a candidate, their whole-list bounds
// are replaced by the bounds of the blocks that may hold the candidate (found without touching
// the postings), so most candidates are dropped after scoring the essential lists alone.
template <Method M>
const BlockInfo* InvertedIndex::blocks_of(const Segment& seg, std::size_t slot, std::size_t* n) const {
  const std::uint64_t first = seg.list_block[slot];
  const std::uint64_t count =
      seg.offsets[slot + 1] - seg.offsets[slot] >= kBlockMinPostings ? seg.list_block[slot + 1] - first : 0;
  *n = count;
  if (count == 0) return nullptr;
  BlockInfo* out = seg.blocks.get() + first;
  std::atomic<std::uint64_t>& state = seg.block_state[slot];
  const std::uint64_t ready = (static_cast<std::uint64_t>(epoch_) << 2) | 2;
  std::uint64_t s = state.load(std::memory_order_acquire);
  if (s == ready) return out;
  // Within an epoch the blocks only go from absent to ready; a rebuild for a new epoch happens
  // after a mutation, which has exclusive access, so readers never see them change.
  if ((s & 3) == 1 || !state.compare_exchange_strong(s, ready - 1, std::memory_order_acq_rel)) {
    return state.load(std::memory_order_acquire) == ready ? out : nullptr;
  }
  const Weigher<M> wt(params_, avgdl(), codes_.code.data() + seg.base, doc_len_.data() + seg.base, &table_);
  const std::uint32_t* len = doc_len_.data() + seg.base;
  // One block of maxima per compression block (kBlockSize == kPostingBlock).
  PostingCursor c;
  c.reset(seg, slot);
  for (std::uint64_t b = 0; b < count; ++b, c.next_block()) {
    const std::uint32_t* docs = c.block_docs();
    const std::uint32_t* tfs = c.block_tfs();
    const std::uint32_t m = c.block_size();
    std::uint32_t max_tf = 0, min_len = 0xFFFFFFFFu;
    float best = 0.0f;
    for (std::uint32_t i = 0; i < m; ++i) {
      const std::uint32_t d = docs[i];
      max_tf = std::max(max_tf, tfs[i]);
      min_len = std::min(min_len, len[d]);
      const float v = wt(d, tfs[i]);
      best = v > best ? v : best;
    }
    out[b] = {docs[m - 1], max_tf, min_len, best};
  }
  state.store(ready, std::memory_order_release);
  return out;
}

template <Method M, bool Filtered>
void InvertedIndex::blockmax_segment(const Prepared& q, const Segment& seg, const std::uint8_t* allow,
                                     TopKQueue& heap) const {
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
  const DocWeight<M> dw(params_);
  const Weigher<M> wt = weigher<M>(q, seg);
  const double inflate = 1.0 + 1e-6 * static_cast<double>(q.terms.size() + 4);
  // Searches with the index's own statistics use the exact block maxima; others (another
  // avgdl) bound each block by its largest tf and shortest document.
  const bool own_stats = q.avgdl == avgdl();
  thread_local std::vector<TermInSegment> terms;
  thread_local std::vector<BCursor> cur_store;
  thread_local std::vector<double> cum_store;
  segment_terms(
      q, seg, inflate, [&](std::size_t slot) { return term_bound(seg, slot, q); }, terms);
  if (terms.empty()) return;
  const std::size_t n = terms.size();
  if (cur_store.size() < n) cur_store.resize(n);
  cum_store.resize(n);
  BCursor* const cur = cur_store.data();
  double* const cum = cum_store.data();
  for (std::size_t i = 0; i < n; ++i) {
    BCursor& c = cur[i];
    c.pc.reset(seg, terms[i].slot, wt.code);
    c.slot = terms[i].slot;
    c.weight = terms[i].weight;
    c.bound = terms[i].bound;
    c.blk = blocks_of<M>(seg, terms[i].slot, &c.nblk);
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
      double v;
      if (own_stats) {
        v = static_cast<double>(c.weight) * b.max_weight * inflate;
      } else {
        v = static_cast<double>(c.weight) * dw(b.max_tf, doc_norm(params_, b.min_len, q.avgdl)) * inflate;
      }
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
    std::uint32_t doc = kEnd;
    for (std::size_t i = first_ess; i < n; ++i) doc = std::min(doc, cur[i].pc.doc());
    if (doc == kEnd) break;
    if (doc > checked_to || first) {
      first = false;
      // Up to the end of the shortest current block of the essential lists, no document
      // scores more than the sum of those blocks' bounds plus the non-essential lists' bounds:
      // when that cannot beat the threshold, the whole range is skipped unscored.
      double ub = first_ess > 0 ? cum[first_ess - 1] : 0.0;
      std::uint32_t range_end = 0xFFFFFFFFu;
      for (std::size_t i = first_ess; i < n; ++i) {
        BCursor& c = cur[i];
        if (c.pc.doc() == kEnd) continue;
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
    if constexpr (Filtered) {
      if (!allow[doc]) {
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

template <Method M>
void InvertedIndex::direct_segment(const Prepared& q, const Segment& seg, const std::uint32_t* docs, std::size_t count,
                                   TopKQueue& heap) const {
  const Weigher<M> wt = weigher<M>(q, seg);
  thread_local std::vector<Cursor> cur_store;
  std::size_t n = 0;
  for (std::size_t i = 0; i < q.terms.size(); ++i) {
    const std::int64_t slot = seg.slot_of(q.terms[i]);
    if (slot < 0) continue;
    if (cur_store.size() <= n) cur_store.resize(n + 1);
    Cursor* const cur = cur_store.data();
    cur[n].pc.reset(seg, static_cast<std::size_t>(slot));
    cur[n].weight = q.weights[i];
    cur[n].bound = 0.0;
    ++n;
  }
  if (n == 0) return;
  Cursor* const cur = cur_store.data();
  for (std::size_t j = 0; j < count; ++j) {
    const std::uint32_t doc = docs[j] - seg.base;
    float score = 0.0f;
    bool matched = false;
    for (std::size_t i = 0; i < n; ++i) {
      Cursor& c = cur[i];
      c.pc.next_geq(doc);
      if (c.pc.doc() == doc) {
        score += c.weight * wt(doc, c.pc.tf());
        matched = true;
      }
    }
    // As the exhaustive scan: matching documents score > 0 (every weight is > 0).
    if (matched && score > 0.0f) heap.insert(score, docs[j]);
  }
}

template <Method M>
void InvertedIndex::search_impl(const Prepared& q, std::size_t k, Algorithm algorithm, const AllowedSet* allowed,
                                std::vector<ScoredDoc>& out) const {
  TopKQueue heap(k);
  const bool many_terms = q.terms.size() > kMaxScoreMaxTerms;
  bool direct = algorithm == Algorithm::Direct;
  if (allowed && algorithm == Algorithm::Auto) {
    // Direct costs about one galloping search per allowed document and term; the others touch
    // every posting of the query terms.
    std::uint64_t postings = 0;
    double direct_cost = 0;
    const double a = static_cast<double>(allowed->count);
    for (std::uint32_t t : q.terms) {
      const double p = static_cast<double>(df(t));
      postings += df(t);
      direct_cost += a * (2.0 + std::log2(1.0 + p / (a + 1.0)));
    }
    direct = direct_cost * 4.0 < static_cast<double>(postings);
  }
  if (direct) {
    // Allowed (or, without a filter, live) slots per segment, in increasing order.
    thread_local std::vector<std::uint32_t> live_docs;
    const std::uint32_t* docs = nullptr;
    std::size_t count = 0;
    if (allowed && allowed->docs) {
      docs = allowed->docs;
      count = allowed->count;
    } else {
      const std::uint8_t* listed = allowed ? allowed->mask : live_.data();  // an unlisted filter too
      live_docs.clear();
      for (std::uint32_t d = 0; d < num_slots(); ++d)
        if (listed[d]) live_docs.push_back(d);
      docs = live_docs.data();
      count = live_docs.size();
    }
    std::size_t j = 0;
    for (const auto& seg : segments_) {
      const std::uint32_t end = seg->base + seg->num_docs;
      std::size_t e = j;
      while (e < count && docs[e] < end) ++e;
      if (e > j) direct_segment<M>(q, *seg, docs + j, e - j, heap);
      j = e;
    }
  } else {
    auto pruned = [&](const Segment& seg) {
      return algorithm == Algorithm::MaxScore || algorithm == Algorithm::BlockMax ||
             (algorithm == Algorithm::Auto && !many_terms && seg.num_docs > kSmallSegmentDocs);
    };
    // The floor holds for every live document, not for a filtered subset. It is taken from the
    // segments that prune (a floor from one segment holds for the whole search); term-at-a-time
    // scoring of small segments would not use one, nor pay for one.
    if (!allowed) {
      float floor = -std::numeric_limits<float>::infinity();
      for (const auto& seg : segments_)
        if (pruned(*seg)) floor = std::max(floor, score_floor(q, k, *seg));
      if (floor > -std::numeric_limits<float>::infinity()) heap.set_floor(floor);
    }
    // Segments in increasing doc-id order, as the MaxScore threshold test assumes.
    for (const auto& seg : segments_) {
      const std::uint8_t* allow = allowed ? allowed->mask : (seg->num_dead > 0 ? live_.data() : nullptr);
      if (allow) allow += seg->base;
      if (!pruned(*seg)) {
        if (allow) exhaustive_segment<M, true>(q, *seg, allow, heap);
        else exhaustive_segment<M, false>(q, *seg, nullptr, heap);
      } else if (algorithm == Algorithm::BlockMax) {
        if (allow) blockmax_segment<M, true>(q, *seg, allow, heap);
        else blockmax_segment<M, false>(q, *seg, nullptr, heap);
      } else {
        if (allow) maxscore_segment<M, true>(q, *seg, allow, heap);
        else maxscore_segment<M, false>(q, *seg, nullptr, heap);
      }
    }
  }
  heap.finalize(out);
  if (q.constant != 0.0)
    for (auto& e : out) e.score = static_cast<float>(static_cast<double>(e.score) + q.constant);
}

void InvertedIndex::search(const std::vector<QueryTerm>& query, std::size_t k, std::vector<ScoredDoc>& out,
                           Algorithm algorithm, const AllowedSet* allowed, const CollectionStats* stats) const {
  out.clear();
  if (k == 0 || num_docs() == 0) return;
  if (allowed && allowed->count == 0) return;
  const Prepared q = stats ? prepare(query, *stats) : prepare(query);
  if (q.terms.empty()) return;
  k = std::min<std::size_t>(k, allowed ? allowed->count : num_docs());
  switch (params_.method) {
    case Method::Lucene: search_impl<Method::Lucene>(q, k, algorithm, allowed, out); break;
    case Method::Robertson: search_impl<Method::Robertson>(q, k, algorithm, allowed, out); break;
    case Method::Atire: search_impl<Method::Atire>(q, k, algorithm, allowed, out); break;
    case Method::BM25L: search_impl<Method::BM25L>(q, k, algorithm, allowed, out); break;
    case Method::BM25Plus: search_impl<Method::BM25Plus>(q, k, algorithm, allowed, out); break;
  }
}

}  // namespace ragfind::bm25
