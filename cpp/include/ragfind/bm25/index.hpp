// The BM25 inverted index: segments of block-compressed postings plus the global collection
// statistics every score is computed from.
//
// Layout. Each segment holds postings for a contiguous range of internal document ids
// [base, base + num_docs): per term a run of (local doc id, tf) in increasing doc order. The
// term directory holds posting counts (offsets); the postings themselves are blocks of 128
// with bit-packed doc gaps and tfs (inverted/postings.hpp), read through a PostingCursor that
// skips whole blocks by their last doc id; a mapped index file uses the blocks in place. (The
// learned sparse index stores the same inverted::Segment with flat docs/values instead.) add() builds one new segment
// from the batch and merges trailing segments whose sizes are within a factor of two (so there
// are O(log N) segments and each posting is copied O(log N) times).
//
// Deletes are tombstones: delete_documents() clears the document's bit in the live map and
// takes it out of N, the total length and the df of each of its terms (found through the
// segment's forward index, doc -> term ids, built by transposing the segment's postings on its
// first delete, so read-only indexes never pay its memory), in O(its postings) after that; its
// postings stay until
// compact() rewrites a segment whose dead fraction passed kCompactDeadFraction (or that is
// all dead) without them, renumbering the later documents in order. Every query skips dead
// documents. Internal document numbers ("slots") therefore include dead ones until then.
//
// Statistics are global and live: df, N and avgdl count live documents only, are read at query
// time, and the per-document length codes (appended to on an add, chosen again otherwise) and
// their weight table (length_codes.hpp) are brought up to date after every change, so every
// score equals the score of a fresh build over the live documents.
// The per-term score upper bounds used by MaxScore depend on avgdl, so they are cached per
// segment and stamped with the statistics epoch. A write changes avgdl a little; a stale entry
// is then rescaled, not recomputed: every variant's document-side weight is a concave function
// of tf / L with value 0 at 0, and L = 1 - b + b * dl / avgdl moves by a factor between 1 and
// avgdl_then / avgdl_now, so a weight moves by at most that factor too (bounds() in
// query_maxscore.cpp). An entry is recomputed once avgdl drifted past kBoundDrift, after a
// parameter change, and (for the rank floors, which count live documents) after a delete in
// its segment.
//
// Thread safety: const methods may run concurrently (the bound cache uses atomics); mutating
// methods need exclusive access (bm25::Store holds the reader-writer lock, store.hpp).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ragfind/bm25/collection_stats.hpp"
#include "ragfind/bm25/length_codes.hpp"
#include "ragfind/bm25/scoring.hpp"
#include "ragfind/common/buffer.hpp"
#include "ragfind/common/topk_queue.hpp"
#include "ragfind/inverted/segment.hpp"
#include "ragfind/text/string_table.hpp"

namespace ragfind::bm25 {

// BM25 is a scorer over the shared inverted segments; these are the names it reads unqualified.
using common::Buffer;
using common::RanksBefore;
using common::ScoredDoc;
using common::TopKQueue;
using inverted::BlockInfo;
using inverted::compress_segment;
using inverted::for_each_posting;
using inverted::kKthLevels;
using inverted::kPostingBlock;
using inverted::PostingCursor;
using inverted::PostingsWriter;
using inverted::Segment;
using text::StringTable;

/// How search() finds the top-k: Auto picks per segment (term-at-a-time over a dense
/// accumulator for segments up to kSmallSegmentDocs documents or queries of more than
/// kMaxScoreMaxTerms terms, MaxScore otherwise); the others force one algorithm (tests compare
/// them). BlockMax (block-max MaxScore) is not picked by Auto: on the corpora measured
/// (bench/engines.md) its block bounds were too close to the list bounds to pay for themselves.
enum class Algorithm { Auto = 0, MaxScore = 1, Exhaustive = 2, Direct = 3, BlockMax = 4 };
inline constexpr std::uint32_t kSmallSegmentDocs = 1u << 16;
/// MaxScore scans every essential cursor for each candidate document, so its cost grows with
/// terms x documents; past this many terms term-at-a-time (linear in the postings) is cheaper
/// and keeps pasted-document queries bounded (RELIABILITY.md, resource limits).
inline constexpr std::size_t kMaxScoreMaxTerms = 64;
/// Block maxima (BlockMax) cover posting lists of at least kBlockMinPostings postings, one per
/// compression block (postings.hpp) of kBlockSize postings.
inline constexpr std::uint32_t kBlockSize = kPostingBlock;
inline constexpr std::uint64_t kBlockMinPostings = 256;
/// Indexes of up to this many slots also keep a float norm per slot: term-at-a-time scoring of
/// small segments reads it without the code table's branches (1 MB at most).
inline constexpr std::uint32_t kFloatNormSlots = 1u << 18;
/// compact() rewrites a segment once more than this fraction of its documents is dead.
inline constexpr double kCompactDeadFraction = 0.25;

/// The documents a search may return (besides being live): a byte per slot (mask) and the same
/// set as sorted slots (docs), for scoring a small allowed set directly.
struct AllowedSet {
  const std::uint8_t* mask = nullptr;   // num_slots() bytes, 1 = allowed; dead slots are 0
  const std::uint32_t* docs = nullptr;  // nullptr: not listed (a large set), read mask instead
  std::size_t count = 0;
};

/// A query term: vocabulary id and how many times it occurs in the query.
struct QueryTerm {
  std::uint32_t term;
  std::uint32_t count;
};

/// One term's part in a score, as explain() reports it.
struct TermExplanation {
  std::uint32_t term;
  std::uint32_t query_count;
  std::uint64_t df;
  double idf;
  std::uint32_t tf;
  double length_norm;
  double tf_component;
  double contribution;  // query_count * idf * tf_component
};

class InvertedIndex {
 public:
  explicit InvertedIndex(Params params);
  InvertedIndex(const InvertedIndex&) = delete;
  InvertedIndex& operator=(const InvertedIndex&) = delete;

  const Params& params() const { return params_; }
  /// Changes the variant or its parameters (scores change accordingly).
  void set_params(const Params& p);

  /// Live documents.
  std::uint32_t num_docs() const { return num_live_; }
  /// Internal document numbers in use, dead ones included.
  std::uint32_t num_slots() const { return static_cast<std::uint32_t>(doc_len_.size()); }
  bool is_live(std::uint32_t slot) const { return live_[slot] != 0; }
  const std::uint8_t* live_mask() const { return live_.data(); }
  std::size_t num_terms() const { return vocab_.size(); }
  /// Postings of live documents.
  std::uint64_t num_postings() const;
  std::uint64_t total_len() const { return total_len_; }
  double avgdl() const { return num_live_ ? static_cast<double>(total_len_) / num_live_ : 0.0; }
  std::uint64_t df(std::uint32_t term) const { return term < df_.size() ? df_[term] : 0; }
  std::uint32_t doc_len(std::uint32_t doc) const { return doc_len_[doc]; }
  const Buffer<std::uint32_t>& doc_lengths() const { return doc_len_; }
  const std::vector<std::unique_ptr<Segment>>& segments() const { return segments_; }
  std::size_t memory_bytes() const;

  StringTable& vocab() { return vocab_; }
  const StringTable& vocab() const { return vocab_; }

  /// Appends n documents given as term-id token streams: tokens of doc i are
  /// terms[doc_offsets[i] .. doc_offsets[i + 1]); counted (may be null) says which tokens count
  /// towards the document length (all when null). Term ids must be < num_terms().
  void add_documents(const std::uint32_t* terms, const std::uint8_t* counted, const std::size_t* doc_offsets,
                     std::size_t n);

  /// Bulk adds in chunks: add_chunk() builds a segment per chunk aside (same arguments as
  /// add_documents), commit_chunks() merges them into one and makes them searchable,
  /// abort_chunks() drops them. Nothing is visible before commit_chunks().
  void add_chunk(const std::uint32_t* terms, const std::uint8_t* counted, const std::size_t* doc_offsets,
                 std::size_t n);
  void commit_chunks();
  void abort_chunks();

  /// Marks the given live slots dead (sorted, unique) and updates N, the total length and df.
  void delete_documents(const std::vector<std::uint32_t>& docs);
  /// Rewrites the segments past the dead-fraction threshold (every segment with a dead
  /// document when `all`) without their dead documents; the slots after them move down in
  /// order. Returns the dropped slots (sorted; empty when nothing changed).
  std::vector<std::uint32_t> compact(bool all = false);

  /// Installs a loaded single-segment index (used by the file loader).
  void install(Buffer<std::uint32_t> doc_len, std::unique_ptr<Segment> seg, std::shared_ptr<const void> keepalive);

  /// Merges duplicates, drops unknown terms; the query-side weights (count * idf) and the
  /// constant every document gets (non-zero for bm25l / bm25+).
  struct Prepared {
    std::vector<std::uint32_t> terms;
    std::vector<float> weights;     // count * idf, for the float fast path
    std::vector<double> weights_d;  // the same in double
    double constant = 0.0;
    const WeightTable* table = nullptr;  // norms and weights per length code, for this avgdl
    const float* norm = nullptr;         // per-slot norms, when kept (own statistics only)
    std::uint32_t epoch = 0;             // the statistics epoch the bound cache is stamped with
    std::shared_ptr<const void> hold;    // keeps an override's table alive
    double avgdl = 0.0;                  // the average length the length norms use (block bounds follow it)
  };
  Prepared prepare(const std::vector<QueryTerm>& query) const;
  /// prepare() with the collection's statistics instead of this index's: query terms must be
  /// distinct (kForeignTerm for one unknown here), stats.df aligned with them.
  Prepared prepare(const std::vector<QueryTerm>& query, const CollectionStats& stats) const;

  /// Exact top-k among documents matching at least one term (see Algorithm); MaxScore prunes
  /// dynamically, Exhaustive scores every posting (the reference the pruned search is tested
  /// against). Results follow the TopKQueue contract.
  /// With `allowed`, only allowed documents are scored (Direct scores them one by one, by a
  /// search of each query term's posting list; Auto picks it when that is cheaper).
  /// With `stats`, scores use the given collection statistics (see prepare).
  void search(const std::vector<QueryTerm>& query, std::size_t k, std::vector<ScoredDoc>& out,
              Algorithm algorithm = Algorithm::Auto, const AllowedSet* allowed = nullptr,
              const CollectionStats* stats = nullptr) const;
  /// Every slot's score in double precision (documents matching nothing get the constant;
  /// dead slots get a value to ignore). out has num_slots() entries.
  void score_all(const std::vector<QueryTerm>& query, double* out) const;
  /// Term frequency of a term in a document (0 when absent).
  std::uint32_t term_frequency(std::uint32_t term, std::uint32_t doc) const;
  /// Per-term breakdown of score(query, doc); the contributions sum to score_all's value.
  std::vector<TermExplanation> explain(const std::vector<QueryTerm>& query, std::uint32_t doc) const;

  /// rank_bm25-compatible dense scoring: for each query token i (repeats kept, in order),
  /// score += weight[i] * g(tf, dl), g per `kind`: 0 Okapi, 1 BM25L (with rank_bm25's extra tf
  /// factor), 2 BM25Plus (applied to every document). Double precision, rank_bm25's op order.
  void score_all_rank_bm25(const std::vector<std::int64_t>& terms, const std::vector<double>& weights, int kind,
                           double k1, double b, double delta, double* out) const;

 private:
  /// After any change: a new epoch, length codes and weight table brought up to date.
  /// `rescalable`: bounds cached at earlier epochs may be rescaled (only avgdl changed), else
  /// all are stale. `appended_only`: no slot's length changed, slots were at most appended.
  void after_change(bool rescalable, bool appended_only);
  /// The avgdl of epoch e when a bound cached at e may be rescaled to the current statistics,
  /// else 0.
  double rescalable_avgdl(std::uint32_t e) const;
  void merge_tail_segments();
  std::size_t segment_index(std::uint32_t slot) const;
  std::unique_ptr<Segment> merge_segments(const std::vector<const Segment*>& segs, bool drop_dead) const;
  /// The largest document-side weight of a list at q's epoch (MaxScore's bound).
  float term_bound(const Segment& seg, std::size_t slot, const Prepared& q) const;
  /// Computes and caches a list's bound and its first `levels` kKthLevels weights for q's
  /// epoch in one pass over its postings: returns the bound, fills kth[0, levels).
  float scan_term(const Segment& seg, std::size_t slot, const Prepared& q, std::size_t levels, float* kth) const;
  /// A bound or rank floor cached at another epoch, rescaled to q's statistics (index.hpp's
  /// header comment); false when it cannot be.
  bool rescaled(std::uint32_t cached_epoch, float cached, const Prepared& q, bool upper, float* v) const;
  /// The kKthLevels[level]-th largest live document-side weight of a list at q's epoch.
  float term_kth(const Segment& seg, std::size_t slot, const Prepared& q, std::size_t level) const;
  /// A score below the final k-th best for a search of every live document (see
  /// TopKQueue::set_floor), from the lists of one segment; -inf when none is known.
  float score_floor(const Prepared& q, std::size_t k, const Segment& seg) const;
  /// The weight table for another avgdl, computed once per (avgdl, index epoch).
  std::shared_ptr<const WeightTable> table_for(double avgdl, std::uint32_t& epoch) const;
  /// Document-side weights for q's statistics, indexed by the local doc ids of seg.
  template <Method M>
  Weigher<M> weigher(const Prepared& q, const Segment& seg) const {
    return Weigher<M>(params_, q.avgdl, codes_.code.data() + seg.base, doc_len_.data() + seg.base, q.table);
  }
  /// The blocks of a directory slot at the current epoch (count in *n), built on first use;
  /// nullptr when the list is short or another thread is building them (callers then bound by
  /// the whole list).
  template <Method M>
  const BlockInfo* blocks_of(const Segment& seg, std::size_t slot, std::size_t* n) const;
  template <Method M, bool Filtered>
  void maxscore_segment(const Prepared& q, const Segment& seg, const std::uint8_t* allow, TopKQueue& heap) const;
  template <Method M, bool Filtered>
  void exhaustive_segment(const Prepared& q, const Segment& seg, const std::uint8_t* allow, TopKQueue& heap) const;
  template <Method M, bool Filtered>
  void blockmax_segment(const Prepared& q, const Segment& seg, const std::uint8_t* allow, TopKQueue& heap) const;
  template <Method M>
  void direct_segment(const Prepared& q, const Segment& seg, const std::uint32_t* docs, std::size_t count,
                      TopKQueue& heap) const;
  template <Method M>
  void search_impl(const Prepared& q, std::size_t k, Algorithm algorithm, const AllowedSet* allowed,
                   std::vector<ScoredDoc>& out) const;

  Params params_;
  StringTable vocab_;
  std::vector<std::uint64_t> df_;
  Buffer<std::uint32_t> doc_len_;   // per slot
  std::vector<std::uint8_t> live_;  // per slot
  std::uint32_t num_live_ = 0;
  std::shared_ptr<const void> doc_len_keepalive_;  // the mapping doc_len_ may borrow from
  std::uint64_t total_len_ = 0;
  std::vector<std::unique_ptr<Segment>> segments_;
  LengthCodes codes_;              // per slot
  WeightTable table_;              // for the index's own statistics
  std::vector<float> float_norm_;  // per slot, only up to kFloatNormSlots slots
  std::uint32_t epoch_ = 1;
  // avgdl of each epoch from rescalable_from_ on (bounds cached then may be rescaled).
  std::vector<double> epoch_avgdl_;
  std::uint32_t rescalable_from_ = 1;
  struct NormOverride {
    double avgdl = 0;
    std::uint32_t index_epoch = 0;
    std::uint32_t epoch = 0;  // from the upper half of the epoch space, never an epoch_ value
    std::shared_ptr<const WeightTable> table;
  };
  mutable std::mutex override_mu_;
  mutable NormOverride override_;
  mutable std::uint32_t override_epochs_ = 0;
  std::vector<std::unique_ptr<Segment>> pending_;
  std::vector<std::uint32_t> pending_len_;
  std::uint64_t pending_total_ = 0;
};

}  // namespace ragfind::bm25
