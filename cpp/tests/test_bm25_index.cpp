// The BM25 InvertedIndex (ragfind/bm25/index.hpp) against an exhaustive scoring loop written
// here from the formulas in bm25/scoring.hpp's header comment: score_all must match it in
// double precision, and search() (every algorithm) must return the top-k of the documents
// matching a query term, best first, with the scores of the reference.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "check.hpp"
#include "ragfind/bm25/index.hpp"

using namespace ragfind::bm25;

namespace {

struct Corpus {
  std::vector<std::vector<std::uint32_t>> docs;  // term ids per document
};

// The reference: one document's score for a query, straight from the formulas.
double reference_score(const Params& p, const Corpus& c, const std::vector<QueryTerm>& q, std::size_t doc,
                       bool* matches) {
  const double n = static_cast<double>(c.docs.size());
  double total_len = 0;
  for (const auto& d : c.docs) total_len += static_cast<double>(d.size());
  const double avgdl = total_len / n;
  const double dl = static_cast<double>(c.docs[doc].size());
  const double L = 1.0 - p.b + p.b * dl / avgdl;
  std::map<std::uint32_t, std::uint32_t> counts;  // repeated query terms add up
  for (const QueryTerm& t : q) counts[t.term] += t.count;
  double s = 0;
  *matches = false;
  for (const auto& [term, count] : counts) {
    double df = 0;
    for (const auto& d : c.docs) df += std::find(d.begin(), d.end(), term) != d.end();
    if (df == 0) continue;  // a term no document holds contributes nothing
    const double tf = static_cast<double>(std::count(c.docs[doc].begin(), c.docs[doc].end(), term));
    double idf = 0, tfc = 0;
    switch (p.method) {
      case Method::Robertson: idf = std::log(std::max(1.0, (n - df + 0.5) / (df + 0.5))); break;
      case Method::Lucene: idf = std::log(1.0 + (n - df + 0.5) / (df + 0.5)); break;
      case Method::Atire: idf = std::log(n / df); break;
      case Method::BM25L: idf = std::log((n + 1.0) / (df + 0.5)); break;
      case Method::BM25Plus: idf = std::log((n + 1.0) / df); break;
    }
    switch (p.method) {
      case Method::Robertson:
      case Method::Lucene: tfc = tf / (p.k1 * L + tf); break;
      case Method::Atire: tfc = (p.k1 + 1) * tf / (tf + p.k1 * L); break;
      case Method::BM25L: {
        const double cc = tf / L;
        tfc = (p.k1 + 1) * (cc + p.delta) / (p.k1 + cc + p.delta);
        break;
      }
      case Method::BM25Plus: tfc = (p.k1 + 1) * tf / (p.k1 * L + tf) + p.delta; break;
    }
    // A term whose idf is not positive (robertson's clamp at 0, atire when df = N) adds nothing
    // and selects no document (InvertedIndex::prepare drops it).
    *matches |= tf > 0 && idf > 0;
    s += count * idf * tfc;
  }
  return s;
}

// Documents with a Zipf-like term distribution over `vocab` terms.
Corpus random_corpus(std::mt19937& rng, std::size_t n_docs, std::uint32_t vocab) {
  std::vector<double> w(vocab);
  for (std::uint32_t t = 0; t < vocab; ++t) w[t] = 1.0 / (t + 1.0);
  std::discrete_distribution<std::uint32_t> term(w.begin(), w.end());
  std::uniform_int_distribution<int> len(1, 40);
  Corpus c;
  for (std::size_t i = 0; i < n_docs; ++i) {
    c.docs.emplace_back();
    const int n = len(rng);
    for (int j = 0; j < n; ++j) c.docs.back().push_back(term(rng));
  }
  return c;
}

// Adds documents [from, to) of the corpus in one add_documents call.
void add_range(InvertedIndex& index, const Corpus& c, std::size_t from, std::size_t to) {
  std::vector<std::uint32_t> terms;
  std::vector<std::size_t> offsets = {0};
  for (std::size_t i = from; i < to; ++i) {
    terms.insert(terms.end(), c.docs[i].begin(), c.docs[i].end());
    offsets.push_back(terms.size());
  }
  index.add_documents(terms.data(), nullptr, offsets.data(), to - from);
}

void check_index(const Params& p, const Corpus& c, const InvertedIndex& index, std::mt19937& rng, std::uint32_t vocab,
                 const std::string& where) {
  CHECK_EQ(index.num_docs(), c.docs.size());
  std::uniform_int_distribution<std::uint32_t> term(0, vocab - 1);
  std::uniform_int_distribution<int> qlen(1, 6);
  for (int qi = 0; qi < 25; ++qi) {
    std::vector<QueryTerm> q;
    const int n = qlen(rng);
    for (int j = 0; j < n; ++j) q.push_back({qi % 3 == 0 ? term(rng) % 8 : term(rng), 1u + (j == 0 && qi % 4 == 1)});
    if (qi % 5 == 2) q.push_back(q.front());  // a repeated term
    std::vector<double> ref(c.docs.size());
    std::vector<std::uint32_t> matching;
    for (std::size_t d = 0; d < c.docs.size(); ++d) {
      bool m = false;
      ref[d] = reference_score(p, c, q, d, &m);
      if (m) matching.push_back(static_cast<std::uint32_t>(d));
    }
    std::vector<double> all(c.docs.size());
    index.score_all(q, all.data());
    // score_all: the reference in double precision (bm25l/bm25+ give non-matching documents
    // their constant too).
    long bad = 0;
    for (std::size_t d = 0; d < c.docs.size(); ++d)
      bad += !(std::fabs(all[d] - ref[d]) <= 1e-9 * (1 + std::fabs(ref[d])));
    CHECK_MSG(bad == 0,
              where + " query " + std::to_string(qi) + ": score_all differs on " + std::to_string(bad) + " documents");
    for (Algorithm algo : {Algorithm::Auto, Algorithm::MaxScore, Algorithm::BlockMax, Algorithm::Exhaustive}) {
      for (std::size_t k : {1, 3, 10, 1000}) {
        std::vector<ScoredDoc> got;
        index.search(q, k, got, algo);
        const std::string w = where + " query " + std::to_string(qi) + " algo " +
                              std::to_string(static_cast<int>(algo)) + " k " + std::to_string(k);
        const std::size_t want_n = std::min(k, matching.size());
        CHECK_MSG(got.size() == want_n,
                  w + ": " + std::to_string(got.size()) + " results, want " + std::to_string(want_n));
        // Scores are float32 sums: within 1e-5 relative of the reference.
        const auto tol = [](double s) { return 1e-5 * (1 + std::fabs(s)); };
        std::vector<bool> in(c.docs.size(), false);
        for (std::size_t i = 0; i < got.size(); ++i) {
          const std::uint32_t d = got[i].doc;
          CHECK_MSG(d < c.docs.size(), w + ": doc out of range");
          if (d >= c.docs.size()) break;
          CHECK_MSG(std::binary_search(matching.begin(), matching.end(), d), w + ": a non-matching document");
          CHECK_MSG(!in[d], w + ": a document twice");
          in[d] = true;
          CHECK_MSG(std::fabs(got[i].score - ref[d]) <= tol(ref[d]), w + ": doc " + std::to_string(d) + " score " +
                                                                         std::to_string(got[i].score) + " want " +
                                                                         std::to_string(ref[d]));
          if (i > 0) CHECK_MSG(ranks_before(got[i - 1], got[i]), w + ": not best first (ties by doc id)");
        }
        // Nothing left out scores (clearly) better than the last result.
        if (!got.empty() && got.size() == want_n) {
          const double last = got.back().score;
          for (std::uint32_t d : matching)
            if (!in[d]) CHECK_MSG(ref[d] <= last + tol(last), w + ": doc " + std::to_string(d) + " left out");
        }
      }
    }
  }
}

// Term ids must exist in the vocabulary before documents use them.
void add_vocab(InvertedIndex& index, std::uint32_t vocab) {
  for (std::uint32_t t = 0; t < vocab; ++t) index.vocab().insert("t" + std::to_string(t));
}

}  // namespace

TEST(every_variant_matches_the_reference) {
  std::mt19937 rng(42);
  const std::uint32_t vocab = 300;
  const Corpus c = random_corpus(rng, 400, vocab);
  const Params variants[] = {{Method::Lucene, 1.2, 0.75, 0.0},   {Method::Robertson, 1.5, 0.75, 0.0},
                             {Method::Atire, 0.9, 0.4, 0.0},     {Method::BM25L, 1.2, 0.75, 0.5},
                             {Method::BM25Plus, 1.2, 0.75, 1.0}, {Method::Lucene, 1.2, 0.0, 0.0},
                             {Method::Lucene, 2.0, 1.0, 0.0}};
  for (const Params& p : variants) {
    InvertedIndex index(p);
    add_vocab(index, vocab);
    add_range(index, c, 0, c.docs.size());
    check_index(p, c, index, rng, vocab, std::string(method_name(p.method)) + " one batch");
  }
}

// Past kFloatNormSlots, term-at-a-time scoring reads the length-code table instead of a float
// norm per slot: more distinct lengths than codes (escapes) and tfs past the table, against
// score_all (double precision, no codes).
TEST(exhaustive_scoring_of_a_large_index_matches_score_all) {
  std::mt19937 rng(9);
  const std::uint32_t vocab = 50;
  InvertedIndex index(Params{Method::Lucene, 1.2, 0.75, 0.0});
  add_vocab(index, vocab);
  std::vector<std::uint32_t> terms;
  std::vector<std::size_t> offsets = {0};
  const std::size_t n = kFloatNormSlots + 1000;
  for (std::size_t d = 0; d < n; ++d) {
    const std::size_t len = d % 97 == 0 ? 300 + rng() % 500 : 1 + rng() % 12;
    for (std::size_t j = 0; j < len; ++j) terms.push_back(j % 25 == 24 ? 7u : rng() % vocab);  // tf of 7 grows
    offsets.push_back(terms.size());
  }
  index.add_documents(terms.data(), nullptr, offsets.data(), n);
  CHECK_EQ(index.num_slots(), static_cast<std::uint32_t>(n));
  for (const std::vector<QueryTerm>& q :
       std::vector<std::vector<QueryTerm>>{{{7, 1}}, {{3, 1}, {7, 1}}, {{1, 2}, {40, 1}}}) {
    std::vector<double> all(n);
    index.score_all(q, all.data());
    for (Algorithm algo : {Algorithm::Exhaustive, Algorithm::MaxScore}) {
      std::vector<ScoredDoc> got;
      index.search(q, 50, got, algo);
      CHECK_EQ(got.size(), 50u);
      std::vector<double> best(all);
      std::nth_element(best.begin(), best.begin() + 49, best.end(), std::greater<double>());
      for (const ScoredDoc& e : got) CHECK(std::fabs(e.score - all[e.doc]) <= 1e-5 * all[e.doc]);
      CHECK(std::fabs(got.back().score - best[49]) <= 1e-5 * best[49]);
    }
    // Every matching document (the long, escaped ones rank low): k = all of them.
    std::vector<ScoredDoc> every;
    index.search(q, n, every, Algorithm::Exhaustive);
    std::size_t long_docs = 0, bad = 0;
    for (const ScoredDoc& e : every) {
      long_docs += index.doc_len(e.doc) >= 300;
      bad += !(std::fabs(e.score - all[e.doc]) <= 1e-5 * all[e.doc]);
    }
    CHECK(long_docs > 0);
    CHECK_EQ(bad, 0u);
  }
}

TEST(several_batches_equal_one_build) {  // segments and their merges keep scores global
  std::mt19937 rng(5);
  const std::uint32_t vocab = 120;
  const Corpus c = random_corpus(rng, 700, vocab);
  const Params p{Method::Lucene, 1.2, 0.75, 0.0};
  InvertedIndex index(p);
  add_vocab(index, vocab);
  const std::size_t cuts[] = {0, 1, 2, 50, 51, 300, 450, 700};
  for (std::size_t i = 0; i + 1 < sizeof cuts / sizeof cuts[0]; ++i) {
    add_range(index, c, cuts[i], cuts[i + 1]);
    Corpus prefix;
    prefix.docs.assign(c.docs.begin(), c.docs.begin() + static_cast<std::ptrdiff_t>(cuts[i + 1]));
    check_index(p, prefix, index, rng, vocab, "after batch " + std::to_string(i));
  }
}

TEST(unknown_and_empty_queries) {
  std::mt19937 rng(9);
  const std::uint32_t vocab = 50;
  const Corpus c = random_corpus(rng, 30, vocab);
  InvertedIndex index(Params{});
  add_vocab(index, vocab + 10);  // terms 50..59 occur in no document
  add_range(index, c, 0, c.docs.size());
  std::vector<ScoredDoc> out;
  index.search({}, 10, out);
  CHECK(out.empty());
  index.search({{vocab + 3, 1}}, 10, out);
  CHECK(out.empty());
  std::vector<double> all(c.docs.size(), -1);
  index.score_all({{vocab + 3, 2}}, all.data());
  for (double s : all) CHECK_EQ(s, 0.0);
}

TEST(shard_with_collection_stats_scores_as_the_whole) {
  // A shard holding documents [0, 150) of a 400-document collection, searched with the whole
  // collection's statistics, gives each of its documents the whole index's score.
  std::mt19937 rng(11);
  const std::uint32_t vocab = 200;
  const Corpus c = random_corpus(rng, 400, vocab);
  for (const Params& p : {Params{Method::Lucene, 1.2, 0.75, 0.0}, Params{Method::BM25Plus, 1.2, 0.75, 1.0}}) {
    InvertedIndex whole(p), shard(p);
    add_vocab(whole, vocab);
    add_vocab(shard, vocab);
    add_range(whole, c, 0, c.docs.size());
    add_range(shard, c, 0, 150);
    std::uniform_int_distribution<std::uint32_t> term(0, vocab - 1);
    for (int qi = 0; qi < 20; ++qi) {
      std::vector<QueryTerm> q;
      CollectionStats cs;
      cs.num_docs = whole.num_docs();
      cs.total_len = whole.total_len();
      for (int j = 0; j < 4; ++j) {
        const std::uint32_t t = term(rng) % (qi % 2 ? 20 : vocab);
        bool dup = false;
        for (const auto& e : q) dup |= e.term == t;
        if (dup) continue;
        q.push_back({t, 1u + (j == 0)});
        cs.df.push_back(whole.df(t));
      }
      std::vector<double> ref(whole.num_slots());
      whole.score_all(q, ref.data());
      for (Algorithm algo : {Algorithm::Auto, Algorithm::MaxScore, Algorithm::Exhaustive, Algorithm::Direct}) {
        std::vector<ScoredDoc> got;
        shard.search(q, 1000, got, algo, nullptr, &cs);
        CHECK(!got.empty() || q.empty());
        for (const auto& e : got) CHECK(std::fabs(e.score - ref[e.doc]) <= 1e-5 * (1 + std::fabs(ref[e.doc])));
      }
    }
    // A term this shard does not hold still counts in the bm25+ constant.
    std::vector<QueryTerm> q = {{3, 1}, {kForeignTerm, 1}};
    CollectionStats cs{whole.num_docs(), whole.total_len(), {whole.df(3), 7}};
    std::vector<ScoredDoc> got;
    shard.search(q, 5, got, Algorithm::Auto, nullptr, &cs);
    CHECK(!got.empty());
    const double extra = p.method == Method::BM25Plus ? idf(p, 7.0, whole.num_docs()) * p.delta : 0.0;
    std::vector<double> ref(whole.num_slots());
    whole.score_all({{3, 1}}, ref.data());
    for (const auto& e : got) CHECK(std::fabs(e.score - (ref[e.doc] + extra)) <= 1e-5 * (1 + ref[e.doc]));
  }
}

RAGFIND_TEST_MAIN
