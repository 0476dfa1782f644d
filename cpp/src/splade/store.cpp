// splade::Store: ImpactIndex calls under the store's reader-writer lock (see store.hpp).
#include "ragfind/splade/store.hpp"

#include <algorithm>
#include <limits>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>

#include "ragfind/common/parallel.hpp"

namespace ragfind::splade {
namespace {

std::vector<inverted::WeightedTerm> to_query(const std::uint32_t* ix, const float* v, std::int64_t a, std::int64_t b) {
  std::vector<inverted::WeightedTerm> q;
  q.reserve(static_cast<std::size_t>(b - a));
  for (std::int64_t j = a; j < b; ++j)
    if (v[j] > 0.0f) q.push_back({ix[j], v[j]});
  return q;
}

}  // namespace

StoreStats Store::stats() const {
  std::shared_lock lk(mu_);
  StoreStats s;
  s.num_docs = index_.num_docs();
  s.num_live = index_.num_live();
  s.generation = index_.generation();
  s.num_postings = index_.num_postings();
  s.dense_column_bytes = index_.dense_column_bytes();
  s.forward_bytes = index_.forward_bytes();
  s.num_dense_columns = index_.num_dense_columns();
  s.num_segments = index_.num_segments();
  s.exact = index_.exact();
  return s;
}

void Store::add(const std::int64_t* indptr, const std::uint32_t* indices, const float* values, std::size_t n) {
  std::unique_lock lk(mu_);
  index_.add(indptr, indices, values, n);
}

void Store::remove(std::vector<std::int64_t> docs) {
  std::sort(docs.begin(), docs.end());
  std::unique_lock lk(mu_);
  for (std::size_t i = 0; i < docs.size(); ++i) {
    const std::int64_t x = docs[i];
    if (x < 0 || x >= index_.num_docs() || !index_.is_live(static_cast<std::uint32_t>(x)) ||
        (i > 0 && docs[i - 1] == x))
      throw std::invalid_argument("remove: document " + std::to_string(x) + " is not a live document (or repeated)");
  }
  std::vector<std::uint32_t> u(docs.begin(), docs.end());
  index_.remove(u.data(), u.size());
}

bool Store::search_batch(const std::int64_t* indptr, const std::uint32_t* indices, const float* values, std::size_t nq,
                         std::size_t k, int threads, Algorithm algorithm, const std::uint8_t* allowed,
                         std::size_t allowed_len, std::int64_t generation, std::uint32_t query_cut,
                         BatchHits& out) const {
  std::shared_lock lk(mu_);
  if (allowed && (generation != static_cast<std::int64_t>(index_.generation()) || allowed_len != index_.num_docs()))
    return false;  // compiled for an earlier state: the caller compiles it again
  // k clamped to the live documents: a huge k never allocates k entries per query.
  const std::size_t kk = std::min<std::size_t>(k, index_.num_live());
  out.k = kk;
  out.docs.assign(nq * kk, -1);
  out.scores.assign(nq * kk, -std::numeric_limits<float>::infinity());
  if (kk == 0 || nq == 0) return true;
  const int n_threads = static_cast<int>(std::max<std::size_t>(
      1, std::min<std::size_t>(static_cast<std::size_t>(threads > 0 ? threads : common::hardware_threads()), nq / 4)));
  std::vector<std::vector<common::ScoredDoc>> hits(static_cast<std::size_t>(n_threads));
  common::parallel_for(nq, n_threads, [&](std::size_t qi, int worker) {
    std::vector<common::ScoredDoc>& h = hits[static_cast<std::size_t>(worker)];
    index_.search(to_query(indices, values, indptr[qi], indptr[qi + 1]), kk, h, algorithm, allowed, query_cut);
    for (std::size_t r = 0; r < kk && r < h.size(); ++r) {
      out.docs[qi * kk + r] = static_cast<std::int64_t>(h[r].doc);
      out.scores[qi * kk + r] = h[r].score;
    }
  });
  return true;
}

std::vector<float> Store::score_all(const std::vector<inverted::WeightedTerm>& query) const {
  std::shared_lock lk(mu_);
  std::vector<float> out(index_.num_docs());
  index_.score_all(query, out.data());
  return out;
}

std::vector<float> Store::weights(const std::uint32_t* terms, std::size_t n, std::int64_t doc) const {
  std::shared_lock lk(mu_);
  if (doc < 0 || doc >= index_.num_docs())
    throw std::out_of_range("doc " + std::to_string(doc) + " out of range for " + std::to_string(index_.num_docs()) +
                            " documents");
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = index_.weight(terms[i], static_cast<std::uint32_t>(doc));
  return out;
}

void Store::export_arrays(std::vector<std::uint64_t>& offsets, std::vector<std::uint32_t>& docs,
                          std::vector<std::uint32_t>& stored) const {
  std::shared_lock lk(mu_);
  index_.export_arrays(offsets, docs, stored);
}

void Store::install(std::uint32_t num_docs, const std::uint64_t* offsets, const std::uint32_t* docs,
                    const std::uint32_t* stored, std::uint64_t n_postings, std::shared_ptr<const void> keepalive) {
  std::unique_lock lk(mu_);
  index_.install(num_docs, offsets, docs, stored, n_postings, std::move(keepalive));
}

void Store::export_forward(std::vector<std::uint64_t>& indptr, std::vector<std::uint32_t>& terms,
                           std::vector<float>& values) const {
  std::shared_lock lk(mu_);
  index_.export_forward(indptr, terms, values);
}

void Store::install_forward(const std::uint64_t* indptr, std::size_t indptr_len, const std::uint32_t* terms,
                            const float* values, std::uint64_t n, std::shared_ptr<const void> keepalive) {
  std::unique_lock lk(mu_);
  if (indptr_len != static_cast<std::size_t>(index_.num_docs()) + 1)
    throw std::invalid_argument("forward offsets must have num_docs + 1 = " +
                                std::to_string(static_cast<std::uint64_t>(index_.num_docs()) + 1) + " entries");
  index_.install_forward(indptr, terms, values, n, std::move(keepalive));
}

}  // namespace ragfind::splade
