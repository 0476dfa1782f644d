// A fixed BM25 query workload for instruction counts: a synthetic Zipf corpus, then the same
// queries through InvertedIndex::search unfiltered (MaxScore on the large segment), filtered
// (half the documents allowed) and with BlockMax. Only run_queries is meant to be counted:
//   valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*run_queries*' <this binary>
// Prints a checksum of the results so a change of answers shows as well as a change of cost.
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "ragfind/bm25/index.hpp"

using namespace ragfind::bm25;

namespace {

constexpr std::uint32_t kVocab = 30000;
constexpr std::size_t kDocs = 120000;
constexpr int kQueries = 200;

std::vector<double> zipf_cdf() {
  std::vector<double> cdf(kVocab);
  double s = 0;
  for (std::uint32_t t = 0; t < kVocab; ++t) cdf[t] = s += 1.0 / (t + 1.0);
  for (double& c : cdf) c /= s;
  return cdf;
}

std::uint32_t draw(const std::vector<double>& cdf, std::mt19937_64& rng) {
  const double u = std::uniform_real_distribution<double>(0, 1)(rng);
  std::size_t lo = 0, hi = cdf.size() - 1;
  while (lo < hi) {
    const std::size_t mid = (lo + hi) / 2;
    if (cdf[mid] < u) lo = mid + 1;
    else hi = mid;
  }
  return static_cast<std::uint32_t>(lo);
}

__attribute__((noinline)) std::uint64_t run_queries(const InvertedIndex& index,
                                                    const std::vector<std::vector<QueryTerm>>& queries,
                                                    const AllowedSet& allowed) {
  std::uint64_t sum = 0;
  std::vector<ScoredDoc> out;
  for (const auto& q : queries) {
    index.search(q, 10, out);
    for (const ScoredDoc& d : out) sum = sum * 31 + d.doc;
    index.search(q, 10, out, Algorithm::Auto, &allowed);
    for (const ScoredDoc& d : out) sum = sum * 31 + d.doc;
    index.search(q, 100, out, Algorithm::BlockMax);
    for (const ScoredDoc& d : out) sum = sum * 31 + d.doc;
  }
  return sum;
}

}  // namespace

int main() {
  std::mt19937_64 rng(7);
  const std::vector<double> cdf = zipf_cdf();
  InvertedIndex index(Params{});
  for (std::uint32_t t = 0; t < kVocab; ++t) index.vocab().insert("t" + std::to_string(t));
  std::vector<std::uint32_t> terms;
  std::vector<std::size_t> offsets = {0};
  std::uniform_int_distribution<int> len(5, 80);
  for (std::size_t i = 0; i < kDocs; ++i) {
    for (int j = 0, n = len(rng); j < n; ++j) terms.push_back(draw(cdf, rng));
    offsets.push_back(terms.size());
  }
  index.add_documents(terms.data(), nullptr, offsets.data(), kDocs);
  std::vector<std::vector<QueryTerm>> queries(kQueries);
  std::uniform_int_distribution<int> qlen(2, 6);
  for (auto& q : queries)
    for (int j = 0, n = qlen(rng); j < n; ++j) q.push_back({draw(cdf, rng) % 5000, 1});
  std::vector<std::uint8_t> mask(index.num_slots());
  std::vector<std::uint32_t> docs;
  for (std::uint32_t d = 0; d < index.num_slots(); ++d)
    if ((mask[d] = (d * 2654435761u) >> 31)) docs.push_back(d);
  const AllowedSet allowed{mask.data(), docs.data(), docs.size()};
  std::printf("checksum %llu\n", static_cast<unsigned long long>(run_queries(index, queries, allowed)));
  return 0;
}
