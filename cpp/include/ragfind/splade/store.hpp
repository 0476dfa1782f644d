// The SPLADE impact index as a caller sees it: an ImpactIndex and one reader-writer lock. Every
// method takes the lock itself (shared for reads, exclusive for writes) and copies what it
// returns into plain buffers, so the Python binding checks arguments, releases the GIL, calls in,
// and builds its arrays after the lock is released. The binding must never call in holding the
// GIL: a thread that holds the lock may wait for the GIL (install() drops the old arrays' Python
// owners), so the lock order is: GIL released -> store lock -> GIL.
//
// The Python class keeps the external ids; here documents are internal numbers 0 .. num_docs - 1.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ragfind/common/rw_mutex.hpp"
#include "ragfind/splade/impact_index.hpp"

namespace ragfind::splade {

/// Sizes read together under one lock.
struct StoreStats {
  std::uint32_t num_docs = 0, num_live = 0;
  std::uint64_t generation = 0, num_postings = 0, dense_column_bytes = 0, forward_bytes = 0;
  std::size_t num_dense_columns = 0, num_segments = 0;
  bool exact = false;
};

/// Results of search_batch: nq rows of k entries (internal doc, score); missing entries are -1
/// and -inf.
struct BatchHits {
  std::size_t k = 0;
  std::vector<std::int64_t> docs;
  std::vector<float> scores;
};

class Store {
 public:
  /// See ImpactIndex's constructor.
  Store(std::uint32_t dim, float scale, bool exact) : index_(dim, scale, exact) {}
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  /// Fixed at construction: read without the lock.
  std::uint32_t dim() const { return index_.dim(); }
  float scale() const { return index_.scale(); }

  StoreStats stats() const;

  /// ImpactIndex::add for n CSR rows (validated by the caller).
  void add(const std::int64_t* indptr, const std::uint32_t* indices, const float* values, std::size_t n);
  /// Deletes internal documents, all or nothing: std::invalid_argument naming the first (in
  /// sorted order) that is not live or is repeated, and nothing deleted.
  void remove(std::vector<std::int64_t> docs);

  /// Top-min(k, live docs) of each of the nq CSR query rows (validated by the caller; zero
  /// weights dropped) on `threads` threads (0: all cores). `allowed` (nullptr: none) is a byte per
  /// internal document compiled at `generation`, allowed_len of them; false when it is stale
  /// (the index changed since), and nothing is searched.
  bool search_batch(const std::int64_t* indptr, const std::uint32_t* indices, const float* values, std::size_t nq,
                    std::size_t k, int threads, Algorithm algorithm, const std::uint8_t* allowed,
                    std::size_t allowed_len, std::int64_t generation, std::uint32_t query_cut, BatchHits& out) const;
  /// ImpactIndex::score_all of one query: num_docs() scores.
  std::vector<float> score_all(const std::vector<inverted::WeightedTerm>& query) const;
  /// Weights of `terms` in `doc`; std::out_of_range when doc is not below num_docs().
  std::vector<float> weights(const std::uint32_t* terms, std::size_t n, std::int64_t doc) const;

  /// ImpactIndex::export_arrays / install / export_forward / install_forward under the lock.
  void export_arrays(std::vector<std::uint64_t>& offsets, std::vector<std::uint32_t>& docs,
                     std::vector<std::uint32_t>& stored) const;
  void install(std::uint32_t num_docs, const std::uint64_t* offsets, const std::uint32_t* docs,
               const std::uint32_t* stored, std::uint64_t n_postings, std::shared_ptr<const void> keepalive);
  void export_forward(std::vector<std::uint64_t>& indptr, std::vector<std::uint32_t>& terms,
                      std::vector<float>& values) const;
  /// std::invalid_argument unless indptr has num_docs() + 1 entries (the caller validated the rest).
  void install_forward(const std::uint64_t* indptr, std::size_t indptr_len, const std::uint32_t* terms,
                       const float* values, std::uint64_t n, std::shared_ptr<const void> keepalive);

  /// The index itself, for tests and tools that hold no other reference; not locked.
  const ImpactIndex& index() const { return index_; }

 private:
  ImpactIndex index_;
  mutable common::WriterPreferringSharedMutex mu_;
};

}  // namespace ragfind::splade
