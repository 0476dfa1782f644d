// The BM25 index as a caller sees it: an InvertedIndex plus its external ids (DocIds), the
// optional positions, compiled filters and one reader-writer lock. Every public method takes
// the lock itself (shared for reads, exclusive for writes), so the Python binding only checks
// arguments, releases the GIL and converts; it must never call in while holding the GIL if the
// analyzer's stemmer may need it (the lock order is: GIL released -> store lock -> analyzer
// lock -> GIL for the stemmer).
//
// The id rule (the same for every index kind): ids are all int64 or all str; an add without ids
// gets the next integers; a repeated id in one call, or one already live, refuses the whole call
// (IdError::Duplicate); a delete naming an unknown id deletes nothing (IdError::Unknown); a
// mix of kinds is IdError::Kind. Every refusal leaves the index unchanged.
//
// A write bumps generation(): a CompiledFilter built at an older generation is rebuilt from its
// ids for the search that uses it (never trusted against renumbered slots).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ragfind/bm25/collection_stats.hpp"
#include "ragfind/bm25/index.hpp"
#include "ragfind/bm25/phrase.hpp"
#include "ragfind/bm25/positions.hpp"
#include "ragfind/common/paged_bits.hpp"
#include "ragfind/common/rw_mutex.hpp"
#include "ragfind/inverted/doc_ids.hpp"
#include "ragfind/text/analyzer.hpp"

namespace ragfind::bm25 {

/// A refused id: the binding raises it as ragfind.errors' UnknownIdError, DuplicateIdError or
/// IdKindError.
struct IdError : std::runtime_error {
  enum class Kind { Unknown, Duplicate, WrongKind };
  Kind kind;
  IdError(Kind k, const std::string& msg) : std::runtime_error(msg), kind(k) {}
};

/// A str id quoted as Python's repr quotes printable text, so messages read as the Python
/// indexes' do.
std::string quote_id(const std::string& s);

/// The external ids of one call: none (automatic ids), all int64 or all str.
struct IdBatch {
  bool given = false;
  bool is_str = false;
  std::vector<std::int64_t> ints;
  std::vector<std::string> strs;
  std::size_t size() const { return is_str ? strs.size() : ints.size(); }
};

/// A search result with its external ids resolved while the lock was held.
struct Hits {
  std::vector<ScoredDoc> docs;
  bool str_ids = false;
  std::vector<std::int64_t> ints;
  std::vector<std::string> strs;
  /// Fills ints or strs with the ids of docs.
  void resolve_ids(const inverted::DocIds& ids);
};

/// A byte per slot that a filter extended after an add may share with the filter it extends:
/// the new slots' bytes are written past the bytes the older filter reads (it never reads
/// them), into room reserved when the bytes were first written, so an add costs the new
/// slots, not a copy of every slot.
class FilterMask {
 public:
  /// n fresh bytes of value v (with room to grow).
  void assign(std::size_t n, std::uint8_t v);
  /// This mask = `previous`'s first bytes plus bytes [previous.size(), n) from fill(first,
  /// last, out) (out[i] for slot first + i): in previous's buffer when no other mask claimed
  /// the room past it and it is large enough, else in a copy.
  template <class Fill>
  void extend(const FilterMask& previous, std::size_t n, Fill&& fill);
  std::size_t size() const { return size_; }
  std::uint8_t* data() { return buf_ ? buf_->bytes.get() : nullptr; }
  const std::uint8_t* data() const { return buf_ ? buf_->bytes.get() : nullptr; }
  std::uint8_t& operator[](std::size_t i) { return buf_->bytes[i]; }
  std::uint8_t operator[](std::size_t i) const { return buf_->bytes[i]; }

 private:
  struct Buffer {
    std::unique_ptr<std::uint8_t[]> bytes;
    std::size_t capacity = 0;
    std::size_t claimed = 0;  // bytes some mask reads; the room past them is free
    std::mutex mu;
  };
  static std::shared_ptr<Buffer> allocate(std::size_t n);
  std::shared_ptr<Buffer> buf_;
  std::size_t size_ = 0;
};

template <class Fill>
void FilterMask::extend(const FilterMask& previous, std::size_t n, Fill&& fill) {
  const std::size_t m = previous.size_;
  if (previous.buf_) {
    std::lock_guard<std::mutex> lock(previous.buf_->mu);
    if (previous.buf_->claimed == m && n <= previous.buf_->capacity) {
      fill(m, n, previous.buf_->bytes.get() + m);
      previous.buf_->claimed = n;
      buf_ = previous.buf_;
      size_ = n;
      return;
    }
  }
  auto fresh = allocate(n);
  if (m) std::memcpy(fresh->bytes.get(), previous.buf_->bytes.get(), m);
  fill(m, n, fresh->bytes.get() + m);
  buf_ = std::move(fresh);
  size_ = n;
}

/// A filter compiled against one store at one write generation: a byte per slot and the
/// allowed slots in order; the source ids are kept to rebuild it if the store changed. The
/// source is ints/strs, or (by_bits) id_bits, a bitmap over int ids (bit i: id i allowed), as a
/// metadata filter gives it (sharing its pages: nothing copied, and a stale filter rebuilt from
/// it shares them too); then docs is listed only for a small set (Direct search reads it).
struct CompiledFilter {
  std::uint64_t generation = 0;
  std::vector<std::int64_t> ints;
  std::vector<std::string> strs;
  bool by_bits = false;
  common::PagedBits id_bits;
  FilterMask mask;
  std::vector<std::uint32_t> docs;
  bool docs_listed = true;   // false: docs is empty, the slots are those set in mask
  std::size_t count = 0;     // allowed slots
  std::uint64_t layout = 0;  // the store's slot layout it was compiled against (see Store)
};

/// What explain() found: per analysed query term (repeats merged, unknown ones kept) its part
/// in the score, and the statistics the score used.
struct ExplainData {
  std::vector<std::string> names;
  std::vector<TermExplanation> terms;
  std::uint32_t doc_len = 0;
  double avgdl = 0.0;
  std::uint64_t num_docs = 0;
  Params params;
};

/// Figures of stats().
struct StoreStats {
  std::uint64_t docs, terms, postings, segments, total_len, memory, dead;
  double avgdl;
  Params params;
};

/// A phrase as analysed terms and its slop.
struct PhraseText {
  std::vector<std::string> terms;
  std::int64_t slop = 0;
};

/// Document frequencies of a larger collection, by term.
using DfMap = std::unordered_map<std::string, std::uint64_t>;

class Store {
 public:
  /// An empty store with the given scoring parameters.
  explicit Store(Params params) : index_(params) {}
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  /// Checks method, k1, b and delta; std::invalid_argument naming the bad one.
  static Params make_params(const std::string& method, double k1, double b, double delta);

  /// Live documents.
  std::size_t size() const;
  /// The kind of the live documents' ids (Unset while there are none).
  inverted::DocIds::Kind ids_kind() const;
  /// Incremented by every write.
  std::uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

  /// Adds pre-split documents under the id rule (term strings are interned as they are).
  void add_tokens(IdBatch ids, const std::vector<std::vector<std::string_view>>& docs);
  /// Adds n documents analysed chunk by chunk with `analyzer`'s stems: analyze(begin, stream)
  /// fills stream with documents [begin, end) and returns end (> begin). All or nothing.
  void add_analyzed(IdBatch ids, std::size_t n, const text::Analyzer& analyzer,
                    const std::function<std::size_t(std::size_t, text::TokenStream&)>& analyze);
  /// Deletes the documents of ids (shown[i]: how to name ids[i] in an error message).
  void remove(const IdBatch& ids, const std::vector<std::string>& shown);

  /// The allowed set of the live documents whose id is in ints or strs.
  std::shared_ptr<CompiledFilter> compile_filter(std::vector<std::int64_t> ints, std::vector<std::string> strs) const;
  /// The allowed set of the live documents whose int id i has bit i set in `id_bits`. With
  /// `previous` (the same filter one or more writes ago), when only documents were added since
  /// and its bits agree on every earlier slot, its mask is copied and only the new slots are
  /// tested (no rebuild from the bitmap); otherwise compiled whole.
  std::shared_ptr<CompiledFilter> compile_filter_bits(common::PagedBits id_bits,
                                                      const CompiledFilter* previous = nullptr) const;

  /// Top-k of analysed query terms (unknown ones dropped), optionally within a filter.
  Hits search(const std::vector<std::string>& stems, std::size_t k, Algorithm algorithm,
              const CompiledFilter* filter) const;
  /// search() for each query, on `threads` threads (0 = all cores).
  std::vector<Hits> search_batch(const std::vector<std::vector<std::string>>& stems, std::size_t k, int threads,
                                 Algorithm algorithm, const CompiledFilter* filter) const;
  /// search_batch() scoring with a larger collection's N, total length and per-query df maps;
  /// std::invalid_argument when a query term has no df.
  std::vector<Hits> search_batch_with_stats(const std::vector<std::vector<std::string>>& stems, std::size_t k,
                                            int threads, Algorithm algorithm, const CompiledFilter* filter,
                                            const CollectionStats& base, const std::vector<DfMap>& dfs) const;
  /// N, total length and the df of each term, read together.
  CollectionStats term_stats(const std::vector<std::string>& terms) const;

  /// Every live document's score in double precision, in slot order.
  std::vector<double> get_scores(const std::vector<std::string>& stems) const;
  /// The score of one document term by term; IdError::Unknown (naming it `shown`) when absent.
  ExplainData explain(const std::vector<std::string>& stems, const IdBatch& id, const std::string& shown) const;
  /// The live ids in slot order.
  Hits live_ids() const;

  /// Vocabulary ids of tokens (-1 when unknown).
  std::vector<std::int64_t> term_ids(const std::vector<std::string>& tokens) const;
  /// df per vocabulary term.
  std::vector<std::int64_t> document_frequencies() const;
  /// Length per live document.
  std::vector<std::int64_t> document_lengths() const;
  /// The vocabulary in id order.
  std::vector<std::string> vocabulary() const;
  /// InvertedIndex::score_all_rank_bm25 over the live documents.
  std::vector<double> rank_bm25_scores(const std::vector<std::int64_t>& terms, const std::vector<double>& weights,
                                       int kind, double k1, double b, double delta) const;

  /// Changes the scoring parameters (a write: filters are rebuilt).
  void set_params(const Params& p);
  /// Sizes and parameters, read together.
  StoreStats stats() const;

  /// Writes the store atomically (index_io.hpp).
  void save(const std::string& path, const std::string& analyzer_json) const;
  /// Replaces this empty store's contents with a saved one.
  void load(const std::string& path, bool mmap);

  /// Keeps word positions from now on; std::invalid_argument unless the store is empty.
  void enable_positions();
  bool has_positions() const;
  std::size_t positions_bytes() const;
  /// (live ordinal, tf) of each posting of a term, in document order.
  void postings(const std::string& term, std::vector<std::int64_t>& ordinals, std::vector<std::int64_t>& tfs) const;
  /// Top-k of plain terms OR phrases; std::invalid_argument without positions.
  Hits search_phrases(const std::vector<std::string>& stems, const std::vector<PhraseText>& phrases, std::size_t k,
                      const CompiledFilter* filter) const;
  /// (score, phrase frequencies) of one document; IdError::Unknown (naming it `shown`) when
  /// absent, std::invalid_argument without positions.
  double phrase_score(const std::vector<std::string>& stems, const std::vector<PhraseText>& phrases, const IdBatch& id,
                      const std::string& shown, std::vector<double>& freqs) const;

  /// The index itself, for callers that hold no other reference (tests, tools); not locked.
  const InvertedIndex& index() const { return index_; }

 private:
  using Lock = common::WriterPreferringSharedMutex;
  // The helpers below expect the lock held.
  void check_ids(const IdBatch& ids, std::size_t n) const;
  void commit_ids(IdBatch& ids, std::size_t n);
  void after_write();
  void map_stems(const text::Analyzer& analyzer, text::TokenStream& stream);
  std::vector<QueryTerm> query_terms(const std::vector<std::string>& stems) const;
  std::int64_t find(const IdBatch& id) const;
  void fill_filter(CompiledFilter& f) const;
  void fill_filter_bits(CompiledFilter& f) const;
  bool extend_filter_bits(CompiledFilter& f, const CompiledFilter& previous) const;
  const AllowedSet* allowed_view(const CompiledFilter* f, CompiledFilter& scratch, AllowedSet& view) const;
  std::vector<PhraseQuery> phrase_queries(const std::vector<PhraseText>& texts) const;
  std::vector<double> live_only(std::vector<double> v) const;

  InvertedIndex index_;
  inverted::DocIds ids_;
  std::unique_ptr<PositionStore> positions_;  // only once enable_positions()
  std::atomic<std::uint64_t> generation_{1};
  // Changes when a slot dies or slots are renumbered (delete, compaction, load); not on an add,
  // which only appends slots: a filter compiled at the same layout covers a prefix of today's.
  std::uint64_t layout_ = 0;
  std::vector<std::int64_t> stem_to_term_;  // analyzer stem id -> vocabulary id (-1 unknown)
  mutable Lock mu_;
};

}  // namespace ragfind::bm25
