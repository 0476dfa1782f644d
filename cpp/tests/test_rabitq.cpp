// RaBitQ codes (ragfind/dense/rabitq.hpp): the rotation is orthogonal, the estimator is unbiased
// and within its bound for most pairs, and a search that re-scores candidates in order of
// their upper bound, stopping when no bound reaches the k-th exact score, finds the exact top k
// while re-scoring a fraction of the rows.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <queue>
#include <random>
#include <vector>

#include "check.hpp"
#include "ragfind/dense/ivf_rabitq.hpp"
#include "ragfind/dense/rabitq.hpp"

using namespace ragfind::dense;

namespace {

constexpr size_t kD = 64;

std::vector<float> unit_rows(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::mt19937 wrng(11);
  std::vector<float> W(6 * kD);
  for (float& w : W) w = g(wrng);
  std::vector<float> X(n * kD);
  for (size_t i = 0; i < n; ++i) {
    float z[6];
    for (float& v : z) v = g(rng);
    double s2 = 0;
    for (size_t j = 0; j < kD; ++j) {
      float s = 0.3f * g(rng);
      for (size_t l = 0; l < 6; ++l) s += z[l] * W[l * kD + j];
      X[i * kD + j] = s;
      s2 += double(s) * s;
    }
    for (size_t j = 0; j < kD; ++j) X[i * kD + j] = static_cast<float>(X[i * kD + j] / std::sqrt(s2));
  }
  return X;
}

double dot(const float* a, const float* b) {
  double s = 0;
  for (size_t j = 0; j < kD; ++j) s += double(a[j]) * b[j];
  return s;
}

struct Coded {
  RabitqRotation rot;
  std::vector<float> centre, res, norm, ipq;
  std::vector<uint64_t> bits;
};

Coded code(const std::vector<float>& X, size_t n) {
  Coded c;
  c.rot = make_rabitq_rotation(kD, 42);
  c.centre.assign(kD, 0.f);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < kD; ++j) c.centre[j] += X[i * kD + j] / n;
  c.res.resize(n * kD);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < kD; ++j) c.res[i * kD + j] = X[i * kD + j] - c.centre[j];
  c.bits.resize(n * rabitq_words(kD));
  c.norm.resize(n);
  c.ipq.resize(n);
  encode_rabitq(c.rot, c.res.data(), n, c.bits.data(), c.norm.data(), c.ipq.data());
  return c;
}

}  // namespace

TEST(rabitq_rotation_is_orthogonal) {
  const RabitqRotation rot = make_rabitq_rotation(kD, 7);
  for (size_t i = 0; i < kD; ++i)
    for (size_t j = 0; j < kD; ++j) {
      double s = 0;
      for (size_t t = 0; t < kD; ++t) s += double(rot.R[i * kD + t]) * rot.R[j * kD + t];
      CHECK(std::fabs(s - (i == j ? 1.0 : 0.0)) < 1e-5);
    }
}

TEST(rabitq_estimates_are_unbiased_and_bounded) {
  const size_t n = 2000, nq = 20;
  const std::vector<float> X = unit_rows(n, 1), Q = unit_rows(nq, 2);
  const Coded c = code(X, n);
  double err_sum = 0, abs_sum = 0;
  size_t inside = 0;
  std::vector<float> qr(kD);
  for (size_t q = 0; q < nq; ++q) {
    rabitq_rotate(c.rot, Q.data() + q * kD, qr.data());
    for (size_t i = 0; i < n; ++i) {
      float est, bound;
      rabitq_estimate(kD, c.bits.data() + i * rabitq_words(kD), c.norm[i], c.ipq[i], qr.data(), 1.f, &est, &bound);
      const double truth = dot(c.res.data() + i * kD, Q.data() + q * kD);
      err_sum += est - truth;
      abs_sum += std::fabs(truth);
      inside += std::fabs(est - truth) <= bound;
    }
  }
  CHECK_MSG(std::fabs(err_sum) < 0.02 * abs_sum, "bias " + std::to_string(err_sum / abs_sum));
  // The bound holds with high probability, not always (95% of pairs on these rows).
  CHECK_MSG(inside >= 0.93 * n * nq, "inside the bound: " + std::to_string(inside));
}

TEST(rabitq_search_with_bound_pruning_finds_the_exact_top_k) {
  const size_t n = 3000, nq = 20, k = 10;
  const std::vector<float> X = unit_rows(n, 3), Q = unit_rows(nq, 4);
  const Coded c = code(X, n);
  std::vector<float> qr(kD);
  size_t hits = 0, rescored = 0;
  for (size_t q = 0; q < nq; ++q) {
    const float* qv = Q.data() + q * kD;
    rabitq_rotate(c.rot, qv, qr.data());
    const double qc = dot(qv, c.centre.data());
    std::vector<std::pair<double, size_t>> upper(n);
    for (size_t i = 0; i < n; ++i) {
      float est, bound;
      rabitq_estimate(kD, c.bits.data() + i * rabitq_words(kD), c.norm[i], c.ipq[i], qr.data(), 1.f, &est, &bound);
      upper[i] = {qc + est + bound, i};
    }
    std::sort(upper.begin(), upper.end(), std::greater<>());
    std::priority_queue<double, std::vector<double>, std::greater<>> top;  // k best exact scores
    std::vector<size_t> found;
    for (const auto& [ub, i] : upper) {
      if (top.size() == k && ub < top.top()) break;  // no later bound reaches the k-th score
      ++rescored;
      const double s = dot(qv, X.data() + i * kD);
      if (top.size() < k) top.push(s);
      else if (s > top.top()) {
        top.pop();
        top.push(s);
      }
    }
    std::vector<double> exact(n);
    for (size_t i = 0; i < n; ++i) exact[i] = dot(qv, X.data() + i * kD);
    std::vector<double> best = exact;
    std::nth_element(best.begin(), best.begin() + (k - 1), best.end(), std::greater<>());
    const double kth = best[k - 1];
    while (!top.empty()) {
      hits += top.top() >= kth;
      top.pop();
    }
  }
  CHECK_MSG(hits >= 0.97 * nq * k, "recall " + std::to_string(double(hits) / (nq * k)));
  CHECK_MSG(rescored < n * nq / 2, "re-scored " + std::to_string(rescored) + " of " + std::to_string(n * nq));
}

TEST(ivf_rabitq_search_finds_the_exact_top_k_and_skips_rows) {
  // Two lists (the rows split in halves, one centroid each): every list probed, the pool as
  // deep as the rows, so only the bound's pruning can lose a neighbour.
  const size_t n = 3000, nq = 20, k = 10;
  const std::vector<float> X = unit_rows(n, 5), Q = unit_rows(nq, 6);
  const RabitqRotation rot = make_rabitq_rotation(kD, 9);
  std::vector<float> C(2 * kD, 0.f), res(n * kD);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < kD; ++j) C[(i < n / 2 ? 0 : 1) * kD + j] += X[i * kD + j] / (n / 2);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < kD; ++j) res[i * kD + j] = X[i * kD + j] - C[(i < n / 2 ? 0 : 1) * kD + j];
  std::vector<uint64_t> bits(n * rabitq_words(kD));
  std::vector<float> norm(n), ipq(n);
  encode_rabitq(rot, res.data(), n, bits.data(), norm.data(), ipq.data());
  std::vector<uint8_t> allowed(n, 1);
  for (size_t i = 0; i < n; i += 3) allowed[i] = 0;
  const int64_t start[2] = {0, int64_t(n / 2)}, len[2] = {int64_t(n / 2), int64_t(n - n / 2)};
  IvfRabitqView v;
  v.d = kD;
  v.centroids = C.data();
  v.nlist = 2;
  v.rotation = rot.R.data();
  v.bits = bits.data();
  v.norm = norm.data();
  v.ipq = ipq.data();
  v.start = start;
  v.len = len;
  v.exact = X.data();
  v.allowed = allowed.data();
  v.n_rows = n;
  size_t hits = 0, rescored = 0;
  for (size_t q = 0; q < nq; ++q) {
    const float* qv = Q.data() + q * kD;
    int64_t pos[k];
    float score[k];
    RabitqSearchStats st;
    CHECK_EQ(ivf_rabitq_search_one(v, qv, k, 2, n, pos, score, &st), k);
    CHECK_EQ(st.scanned, n - (n + 2) / 3);
    rescored += st.rescored;
    std::vector<double> exact;
    for (size_t i = 0; i < n; ++i)
      if (allowed[i]) exact.push_back(dot(qv, X.data() + i * kD));
    std::nth_element(exact.begin(), exact.begin() + (k - 1), exact.end(), std::greater<>());
    for (size_t i = 0; i < k; ++i) {
      CHECK(allowed[size_t(pos[i])] == 1);
      CHECK(std::fabs(score[i] - dot(qv, X.data() + size_t(pos[i]) * kD)) < 1e-5);
      if (i) CHECK(score[i] <= score[i - 1]);
      hits += score[i] >= exact[k - 1] - 1e-6;
    }
  }
  CHECK_MSG(hits >= 0.99 * nq * k, "recall " + std::to_string(double(hits) / (nq * k)));
  CHECK_MSG(rescored < n * nq / 4, "re-scored " + std::to_string(rescored) + " of " + std::to_string(n * nq));
}

RAGFIND_TEST_MAIN
