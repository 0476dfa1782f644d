// Learned-sparse (SPLADE) retrieval on the inverted-index engine: posting segments
// (inverted::Segment: dense term directory over the vocabulary, doc ids, and per posting a
// stored uint32 value which here is the quantised impact), queried with the shared
// MaxScore / exhaustive algorithms (ragfind/inverted/maxscore.hpp) and the shared top-k queue.
//
// Impacts: with scale > 0 a document weight w is stored as round(w * scale) (postings whose
// impact rounds to 0 are dropped), and a query weight q contributes q / scale * impact; with
// scale == 0 the float32 bits are stored and scores are exact float dot products.
// Segments are appended per add() and adjacent segments of similar size are merged, so there
// are O(log N) of them (as in the BM25 index).
//
// Dense columns. SPLADE vocabularies have a head of terms present in a large share of the
// documents (expansion terms); their posting lists dominate a query's cost. In quantised mode a
// list covering at least 1 / kDenseColumnFraction of its segment (and whose impacts fit 16 bits)
// is also stored as a dense uint16 column over the segment's documents (0 = absent): at that
// density the column is no larger than the list's 8 bytes per posting times kDenseColumnFraction
// / 4, and the term-at-a-time scorer adds it with a vectorised streaming loop instead of
// scattering every posting. The postings stay (MaxScore, explain and save read them); a column
// adds w * 0 = +0 to absent documents, so scores are bit-identical to the posting path.
//
// Exact rescoring. Quantising loses ranks (scale 100: recall@10 about 0.997 against the float
// dot product), so with `exact` on the index also keeps each document's float vector (a forward
// CSR store, 8 bytes per posting) and search() re-scores the quantised top candidates with it.
// Every document's quantised score is within E = sum(query weights) * 0.5 / scale of its float
// score (each stored weight, dropped ones included, is off by at most 0.5 / scale), so once the
// k-th best float score among the candidates exceeds the last candidate's quantised score plus
// E, no other document can enter: the result is the exact float top-k. Otherwise the candidate
// pool grows (x4) and, at worst, every live document is scored from the forward store.
// query_cut > 0 (approximate, opt-in) keeps only the query's query_cut largest weights for
// the candidate search and re-scores a fixed pool with the whole query (no guarantee).
//
// Deletes are tombstones: a byte per document (live_) that every scorer consults, so a deleted
// document never enters a queue or raises a pruning threshold. Scores are dot products (no
// collection statistics), so the live documents score as in a fresh build. export_arrays()
// leaves the deleted documents out (renumbering the others in order); generation() counts
// writes, so an allowed-set compiled for one state is refused in a later one.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ragfind/common/buffer.hpp"
#include "ragfind/common/topk_queue.hpp"
#include "ragfind/inverted/maxscore.hpp"
#include "ragfind/inverted/segment.hpp"

namespace ragfind::splade {

/// Auto: exhaustive on small segments or dense queries, document-at-a-time MaxScore otherwise;
/// TaatMaxScore: term-at-a-time MaxScore (quit/continue); Exhaustive: every posting (reference).
enum class Algorithm { Auto = 0, MaxScore = 1, Exhaustive = 2, TaatMaxScore = 3 };

/// A list covering >= num_docs / kDenseColumnFraction documents of a segment (with at least
/// kDenseColumnMinDocs documents) also gets a dense column.
inline constexpr std::uint64_t kDenseColumnFraction = 4;
inline constexpr std::uint32_t kDenseColumnMinDocs = 256;
/// Auto scores segments of up to this many documents term-at-a-time (the bound BM25 uses too).
inline constexpr std::uint32_t kSmallSegmentDocs = 1u << 16;

struct ImpactSegment {
  inverted::Segment seg;
  std::vector<float> bounds;  // per term: max decoded impact in this segment
  // Per directory slot: index of its dense column in `columns` (num_docs entries each), or -1.
  std::vector<std::int32_t> column_of;
  std::vector<std::uint16_t> columns;
};

class ImpactIndex {
 public:
  /// dim: vocabulary size (term ids < dim); scale: quantisation scale (0: exact float32);
  /// exact: with scale > 0, keep the float vectors and return exact float top-k (see above).
  ImpactIndex(std::uint32_t dim, float scale, bool exact = false);

  /// True when searches re-score with the stored float vectors.
  bool exact() const { return exact_; }

  std::uint32_t dim() const { return dim_; }
  float scale() const { return scale_; }
  /// Internal document numbers handed out so far (deleted ones included).
  std::uint32_t num_docs() const { return num_docs_; }
  /// Documents not deleted.
  std::uint32_t num_live() const { return num_docs_ - num_dead_; }
  bool is_live(std::uint32_t doc) const { return doc < num_docs_ && live_[doc] != 0; }
  /// Bumped by every add, remove and install.
  std::uint64_t generation() const { return generation_; }
  std::uint64_t num_postings() const;
  /// Number of dense columns over all segments, and their bytes (see the notes above).
  std::size_t num_dense_columns() const;
  std::uint64_t dense_column_bytes() const;
  std::size_t num_segments() const { return segments_.size(); }

  /// Appends n documents in CSR form (indices strictly increasing per row, < dim; values
  /// finite and >= 0; zero weights are skipped). The caller validates.
  void add(const std::int64_t* indptr, const std::uint32_t* indices, const float* values, std::size_t n);

  /// Marks documents deleted (tombstones). The caller validates: each < num_docs(), live, distinct.
  void remove(const std::uint32_t* docs, std::size_t n);

  /// Exact top-k over the live documents (TopKQueue contract; documents scoring 0 are not
  /// returned). `allowed` (nullptr: every live document) is a byte per internal document,
  /// num_docs() of them, nonzero for a document that may be returned; it must not allow a
  /// deleted document (the bindings compile it from the live ids).
  /// With exact() the scores are float dot products with the stored float vectors (the
  /// quantised ranking otherwise); query_cut > 0: the approximate mode described above.
  void search(const std::vector<inverted::WeightedTerm>& query, std::size_t k, std::vector<common::ScoredDoc>& out,
              Algorithm algorithm = Algorithm::Auto, const std::uint8_t* allowed = nullptr,
              std::uint32_t query_cut = 0) const;
  /// Top-k by the stored (quantised) impacts alone, never re-scored.
  void search_impacts(const std::vector<inverted::WeightedTerm>& query, std::size_t k,
                      std::vector<common::ScoredDoc>& out, Algorithm algorithm = Algorithm::Auto,
                      const std::uint8_t* allowed = nullptr) const;
  /// Float dot product of the query with document `doc`'s stored float vector (exact() only).
  float exact_score(const std::vector<inverted::WeightedTerm>& sorted_query, std::uint32_t doc) const;
  /// Dot product of the query with every stored document vector (deleted ones too): the float
  /// vectors with exact(), the decoded impacts otherwise.
  void score_all(const std::vector<inverted::WeightedTerm>& query, float* out) const;
  /// Weight of `term` in `doc` (0 when absent): float with exact(), decoded impact otherwise.
  float weight(std::uint32_t term, std::uint32_t doc) const;

  /// The live documents as one segment's arrays: term offsets (dim + 1), doc ids (renumbered
  /// 0 .. num_live() - 1 in order), stored values.
  void export_arrays(std::vector<std::uint64_t>& offsets, std::vector<std::uint32_t>& docs,
                     std::vector<std::uint32_t>& stored) const;
  /// Replaces the contents with one segment borrowing the given arrays (kept alive by
  /// `keepalive`); the caller has validated them (offsets monotone, docs < num_docs and
  /// increasing within each term).
  void install(std::uint32_t num_docs, const std::uint64_t* offsets, const std::uint32_t* docs,
               const std::uint32_t* stored, std::uint64_t n_postings, std::shared_ptr<const void> keepalive);
  /// The live documents' float vectors (exact() only): row offsets (num_live() + 1), terms, weights.
  void export_forward(std::vector<std::uint64_t>& indptr, std::vector<std::uint32_t>& terms,
                      std::vector<float>& values) const;
  /// After install(): borrows the float vectors of the num_docs() documents (validated by the
  /// caller: indptr monotone from 0, terms < dim and increasing per row, weights finite > 0),
  /// kept alive by `keepalive`; turns exact() on.
  void install_forward(const std::uint64_t* indptr, const std::uint32_t* terms, const float* values, std::uint64_t n,
                       std::shared_ptr<const void> keepalive);
  /// Bytes of the float vector store.
  std::uint64_t forward_bytes() const;

  float decode(std::uint32_t stored) const;

 private:
  std::unique_ptr<ImpactSegment> merge(const ImpactSegment& a, const ImpactSegment& b) const;
  void compute_bounds(ImpactSegment& s) const;
  void build_columns(ImpactSegment& s) const;

  std::uint32_t dim_;
  float scale_;
  std::uint32_t num_docs_ = 0;
  std::uint32_t num_dead_ = 0;
  std::uint64_t generation_ = 0;
  std::vector<std::uint8_t> live_;  // per internal document: 1 live, 0 deleted
  std::vector<std::unique_ptr<ImpactSegment>> segments_;
  std::shared_ptr<const void> keepalive_;
  // The float vectors by internal document (exact_ only), borrowed after install_forward.
  bool exact_ = false;
  common::Buffer<std::uint64_t> fwd_indptr_;
  common::Buffer<std::uint32_t> fwd_terms_;
  common::Buffer<float> fwd_values_;
  std::shared_ptr<const void> fwd_keepalive_;
};

}  // namespace ragfind::splade
