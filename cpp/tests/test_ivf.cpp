// IVF and its k-means (ragfind/dense/{ivf,kmeans}.hpp) against slow obvious references:
// assignment against a loop over every centroid, training determinism and empty-cluster repair,
// and a search probing every list against the exact scan (search_one) on the same rows.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "check.hpp"
#include "ragfind/common/cpu.hpp"
#include "ragfind/dense/exact_search.hpp"
#include "ragfind/dense/ivf.hpp"
#include "ragfind/dense/kmeans.hpp"
#include "ragfind/dense/similarity.hpp"

using namespace ragfind::dense;

namespace {

constexpr size_t kD = 24;

// Clustered rows: 12 random centres plus noise.
std::vector<float> clustered(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> centres(12 * kD);
  for (float& c : centres) c = g(rng);
  std::vector<float> X(n * kD);
  for (size_t i = 0; i < n; ++i) {
    const size_t c = rng() % 12;
    for (size_t j = 0; j < kD; ++j) X[i * kD + j] = centres[c * kD + j] + 0.3f * g(rng);
  }
  return X;
}

double dot(const float* a, const float* b) {
  double s = 0;
  for (size_t j = 0; j < kD; ++j) s += double(a[j]) * b[j];
  return s;
}

double l2(const float* a, const float* b) {
  double s = 0;
  for (size_t j = 0; j < kD; ++j) s += (double(a[j]) - b[j]) * (double(a[j]) - b[j]);
  return s;
}

// The rows regrouped by list, as the Python layer stores them, with the list table.
struct Lists {
  std::vector<float> rows;
  std::vector<int64_t> start, len, orig;  // orig[position] = the row's index in X
};

Lists group(const std::vector<float>& X, size_t n, const std::vector<int64_t>& assign, size_t nlist) {
  Lists L;
  L.start.assign(nlist, 0);
  L.len.assign(nlist, 0);
  for (size_t i = 0; i < n; ++i) ++L.len[static_cast<size_t>(assign[i])];
  for (size_t l = 1; l < nlist; ++l) L.start[l] = L.start[l - 1] + L.len[l - 1];
  std::vector<int64_t> fill(L.start);
  L.rows.resize(n * kD);
  L.orig.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t p = static_cast<size_t>(fill[static_cast<size_t>(assign[i])]++);
    std::copy(X.begin() + static_cast<std::ptrdiff_t>(i * kD), X.begin() + static_cast<std::ptrdiff_t>((i + 1) * kD),
              L.rows.begin() + static_cast<std::ptrdiff_t>(p * kD));
    L.orig[p] = static_cast<int64_t>(i);
  }
  return L;
}

}  // namespace

TEST(assign_nearest_matches_a_loop_over_every_centroid) {
  const size_t n = 700, nc = 37;
  const auto X = clustered(n, 1);
  const auto C = clustered(nc, 2);
  for (Metric m : {Metric::IP, Metric::L2}) {
    std::vector<int64_t> got(n);
    assign_nearest(X.data(), n, kD, C.data(), nc, m, 3, got.data());
    size_t agree = 0;
    for (size_t i = 0; i < n; ++i) {
      size_t best = 0;
      for (size_t c = 1; c < nc; ++c) {
        const double a = m == Metric::IP ? dot(&X[i * kD], &C[c * kD]) : -l2(&X[i * kD], &C[c * kD]);
        const double b = m == Metric::IP ? dot(&X[i * kD], &C[best * kD]) : -l2(&X[i * kD], &C[best * kD]);
        if (a > b) best = c;
      }
      agree += static_cast<size_t>(got[i]) == best;
    }
    CHECK(agree >= n - 2);  // float rounding may flip a near tie
  }
}

TEST(assignment_and_training_are_the_same_at_every_simd_level_and_thread_count) {
  // The nearest-centroid kernel forms every score as the same fma chain at every level, so
  // assignments and trained centroids must match bit for bit (d = 24 leaves lane tails).
  const size_t n = 1500, nc = 53;
  const auto X = clustered(n, 5);
  const auto C = clustered(nc, 6);
  const ragfind::common::SimdLevel before = ragfind::common::active_simd_level();
  for (Metric m : {Metric::IP, Metric::L2}) {
    std::vector<int64_t> want(n);
    std::vector<float> cw(nc * kD);
    ragfind::common::set_simd_level(ragfind::common::SimdLevel::Scalar);
    assign_nearest(X.data(), n, kD, C.data(), nc, m, 1, want.data());
    train_kmeans(X.data(), n, kD, nc, m, 4, 9, 1, cw.data());
    for (ragfind::common::SimdLevel level : ragfind::common::supported_simd_levels()) {
      ragfind::common::set_simd_level(level);
      for (int threads : {1, 2, 5}) {
        std::vector<int64_t> got(n);
        std::vector<float> cg(nc * kD);
        assign_nearest(X.data(), n, kD, C.data(), nc, m, threads, got.data());
        train_kmeans(X.data(), n, kD, nc, m, 4, 9, threads, cg.data());
        CHECK(got == want);
        CHECK(cg == cw);
      }
    }
  }
  ragfind::common::set_simd_level(before);
}

TEST(kmeans_is_deterministic_repairs_empty_clusters_and_balances) {
  const size_t n = 2000, nc = 24;
  const auto X = clustered(n, 3);
  for (Metric m : {Metric::IP, Metric::L2}) {
    std::vector<float> a(nc * kD), b(nc * kD);
    const KmeansResult ra = train_kmeans(X.data(), n, kD, nc, m, 8, 42, 1, a.data());
    train_kmeans(X.data(), n, kD, nc, m, 8, 42, 4, b.data());
    CHECK(a == b);
    CHECK(ra.imbalance >= 1.0 && ra.imbalance < 3.0);
    std::vector<int64_t> assign(n);
    assign_nearest(X.data(), n, kD, a.data(), nc, m, 2, assign.data());
    std::vector<size_t> sizes(nc, 0);
    for (int64_t l : assign) ++sizes[static_cast<size_t>(l)];
    CHECK(*std::min_element(sizes.begin(), sizes.end()) > 0);
  }
  // Duplicated rows leave clusters empty unless repaired.
  std::vector<float> dup(200 * kD);
  for (size_t i = 0; i < 200; ++i)
    for (size_t j = 0; j < kD; ++j) dup[i * kD + j] = X[(i % 3) * kD + j];
  std::vector<float> c(8 * kD);
  const KmeansResult r = train_kmeans(dup.data(), 200, kD, 8, Metric::L2, 3, 7, 1, c.data());
  CHECK(r.splits > 0);
  CHECK_THROWS(std::invalid_argument, train_kmeans(dup.data(), 4, kD, 8, Metric::L2, 3, 7, 1, c.data()));
}

TEST(probing_every_list_equals_the_exact_scan) {
  const size_t n = 3000, nlist = 20;
  const auto X = clustered(n, 5);
  const auto Q = clustered(30, 6);
  for (Metric m : {Metric::IP, Metric::L2}) {
    std::vector<float> C(nlist * kD);
    train_kmeans(X.data(), n, kD, nlist, m, 5, 1, 2, C.data());
    std::vector<int64_t> assign(n);
    assign_nearest(X.data(), n, kD, C.data(), nlist, m, 2, assign.data());
    const Lists L = group(X, n, assign, nlist);
    // f16 copies of the grouped rows, re-scored from the float32 rows.
    std::vector<uint16_t> half(n * kD);
    for (size_t i = 0; i < n * kD; ++i) {
      // round-to-nearest binary16 of values well inside its range (|x| < 8): via the bits
      const float v = L.rows[i];
      uint32_t u;
      std::memcpy(&u, &v, 4);
      const uint32_t sign = (u >> 16) & 0x8000u;
      const int e = static_cast<int>((u >> 23) & 0xff) - 127 + 15;
      uint32_t mant = u & 0x7fffffu;
      uint16_t h;
      if (e <= 0) {
        h = static_cast<uint16_t>(sign);
      } else {
        uint32_t r = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
        if ((mant >> 12) & 1u) ++r;
        h = static_cast<uint16_t>(sign | r);
      }
      half[i] = h;
    }
    RowsView exact_rows;
    exact_rows.data = X.data();
    exact_rows.n = n;
    exact_rows.d = kD;
    std::vector<uint8_t> allowed(n);
    for (size_t p = 0; p < n; ++p) allowed[p] = (L.orig[p] % 3) != 0;
    std::vector<uint8_t> allowed_orig(n);
    for (size_t p = 0; p < n; ++p) allowed_orig[static_cast<size_t>(L.orig[p])] = allowed[p];
    for (int storage = 0; storage < 2; ++storage) {
      IvfView v;
      v.rows.storage = storage == 0 ? Storage::F32 : Storage::F16;
      v.rows.data = storage == 0 ? static_cast<const void*>(L.rows.data()) : half.data();
      v.rows.n = n;
      v.rows.d = kD;
      v.centroids = C.data();
      v.nlist = nlist;
      v.list_start = L.start.data();
      v.list_len = L.len.data();
      v.exact = storage == 0 ? nullptr : L.rows.data();
      for (int filtered = 0; filtered < 2; ++filtered) {
        IvfOptions o;
        o.search.k = 10;
        o.search.metric = m;
        o.search.allowed = filtered ? allowed.data() : nullptr;
        o.nprobe = nlist;
        o.rerank = 8;
        SearchOptions e = o.search;
        e.allowed = filtered ? allowed_orig.data() : nullptr;
        std::vector<int64_t> batch_rows(Q.size() / kD * 10);
        std::vector<float> batch_scores(batch_rows.size());
        std::vector<int64_t> counts(Q.size() / kD);
        ivf_search_batch(v, Q.data(), counts.size(), o, batch_rows.data(), batch_scores.data(), counts.data());
        for (size_t qi = 0; qi < counts.size(); ++qi) {
          int64_t er[10], ir[10];
          float es[10], is[10];
          const size_t ne = search_one(exact_rows, &Q[qi * kD], e, er, es);
          const size_t ni = ivf_search_one(v, &Q[qi * kD], o, ir, is);
          CHECK_EQ(ne, ni);
          CHECK_EQ(static_cast<size_t>(counts[qi]), ni);
          for (size_t j = 0; j < std::min(ne, ni); ++j) {
            CHECK_EQ(er[j], L.orig[static_cast<size_t>(ir[j])]);
            CHECK_EQ(es[j], is[j]);
            CHECK_EQ(ir[j], batch_rows[qi * 10 + j]);
          }
        }
        // One probe finds fewer true neighbours, but never fewer than k rows.
        o.nprobe = 1;
        int64_t ir[10];
        float is[10];
        CHECK_EQ(ivf_search_one(v, Q.data(), o, ir, is), size_t(10));
      }
    }
  }
}

RAGFIND_TEST_MAIN
