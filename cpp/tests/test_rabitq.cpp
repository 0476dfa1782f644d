// RaBitQ codes (ragfind/dense/rabitq.hpp): the rotation is orthogonal, the estimator is unbiased
// and within its bound for most pairs, the bit-plane scan equals a bit-by-bit loop at every SIMD
// level, encoding gives the same codes on any thread count, and a search that re-scores
// candidates in order of their upper bound, stopping when no bound reaches the k-th exact
// score, never skips a true neighbour whose bound holds (against brute force, many seeds and
// dimensions) while re-scoring a fraction of the rows.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <queue>
#include <random>
#include <string>
#include <vector>

#include "check.hpp"
#include "ragfind/dense/coarse.hpp"
#include "ragfind/dense/ivf_rabitq.hpp"
#include "ragfind/dense/rabitq.hpp"

using namespace ragfind::dense;
using ragfind::common::supported_simd_levels;

#ifdef RAGFIND_HAVE_NEON
#define RAGFIND_NEON_LEVEL 1  // NEON has no scan kernel of its own: the scalar one serves it
#else
#define RAGFIND_NEON_LEVEL 0
#endif

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

double dot_d(const float* a, const float* b, size_t d) {
  double s = 0;
  for (size_t j = 0; j < d; ++j) s += double(a[j]) * b[j];
  return s;
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
  std::vector<float> norm(n), ipq(n), cdot(n), RC(2 * kD);
  encode_rabitq(rot, res.data(), n, bits.data(), norm.data(), ipq.data());
  for (size_t i = 0; i < n; ++i) cdot[i] = float(dot(C.data() + (i < n / 2 ? 0 : 1) * kD, res.data() + i * kD));
  for (size_t l = 0; l < 2; ++l) rabitq_rotate(rot, C.data() + l * kD, RC.data() + l * kD);
  std::vector<uint8_t> allowed(n, 1);
  for (size_t i = 0; i < n; i += 3) allowed[i] = 0;
  const int64_t start[2] = {0, int64_t(n / 2)}, len[2] = {int64_t(n / 2), int64_t(n - n / 2)};
  IvfRabitqView v;
  v.d = kD;
  v.centroids = C.data();
  v.nlist = 2;
  v.rotation = rot.R.data();
  v.rot_centroids = RC.data();
  v.bits = bits.data();
  v.norm = norm.data();
  v.ipq = ipq.data();
  v.cdot = cdot.data();
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

// ---- the bit-plane scan at every SIMD level ------------------------------------------------

TEST(rabitq_scan_equals_a_bit_loop_at_every_level) {
  std::mt19937_64 rng(5);
  std::string names;
  for (const RabitqScanKernels* k : rabitq_scan_kernel_variants()) names += std::string(" ") + k->name;
  std::printf("  scan kernels:%s\n", names.c_str());
  CHECK(rabitq_scan_kernel_variants().size() >= supported_simd_levels().size() - (RAGFIND_NEON_LEVEL ? 1 : 0));
  for (size_t words : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17}) {
    const size_t n = 37;
    std::vector<uint64_t> codes(n * words), planes(4 * words);
    for (auto& c : codes) c = rng();
    for (auto& p : planes) p = rng();
    codes[0] = ~uint64_t(0);  // row 0: every bit set (largest sums)
    std::vector<uint32_t> want_s(n), want_p(n);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < 64 * words; ++j) {
        const uint64_t bit = uint64_t(1) << (j % 64);
        if ((codes[i * words + j / 64] & bit) == 0) continue;
        ++want_p[i];
        for (size_t b = 0; b < 4; ++b) want_s[i] += ((planes[b * words + j / 64] & bit) != 0) << b;
      }
    for (const RabitqScanKernels* kp : rabitq_scan_kernel_variants()) {
      const RabitqScanKernels& K = *kp;
      std::vector<uint32_t> s(n + 1, 7u), p(n + 1, 7u);
      K.scan(codes.data(), n, words, planes.data(), s.data(), p.data());
      for (size_t i = 0; i < n; ++i) {
        CHECK_MSG(s[i] == want_s[i] && p[i] == want_p[i],
                  std::string(K.name) + " words=" + std::to_string(words) + " row=" + std::to_string(i));
      }
      CHECK(s[n] == 7u && p[n] == 7u);  // nothing written past n
    }
  }
}

TEST(rabitq_query_quantisation_gives_the_signed_sum) {
  std::mt19937 rng(8);
  std::normal_distribution<float> g(0.f, 1.f);
  for (size_t d : {2, 17, 64, 100, 384}) {
    std::vector<float> v(d);
    for (float& x : v) x = g(rng);
    RabitqQuery q;
    quantise_rabitq_query(v.data(), d, q);
    std::vector<uint64_t> code(rabitq_words(d));
    for (auto& w : code) w = (uint64_t(rng()) << 32) | rng();
    if (d % 64) code.back() &= (uint64_t(1) << (d % 64)) - 1;  // bits past d are zero in a code
    uint32_t s, pop;
    rabitq_scan_kernels().scan(code.data(), 1, q.words, q.planes.data(), &s, &pop);
    double quant = 0, exact = 0, e2 = 0;
    for (size_t j = 0; j < d; ++j) {
      const int u = int((q.planes[j / 64] >> (j % 64)) & 1) | int((q.planes[q.words + j / 64] >> (j % 64)) & 1) << 1 |
                    int((q.planes[2 * q.words + j / 64] >> (j % 64)) & 1) << 2 |
                    int((q.planes[3 * q.words + j / 64] >> (j % 64)) & 1) << 3;
      const double vq = double(q.lo) + double(q.delta) * u;
      CHECK(std::fabs(vq - v[j]) <= 0.5 * q.delta + 1e-5);
      const double sign = ((code[j / 64] >> (j % 64)) & 1) ? 1.0 : -1.0;
      quant += sign * vq;
      exact += sign * v[j];
      e2 += (vq - v[j]) * (vq - v[j]);
    }
    const double isd = 1.0 / std::sqrt(double(d));
    CHECK_MSG(std::fabs(rabitq_xq(q, s, pop, isd) - quant * isd) < 1e-4, "d=" + std::to_string(d));
    CHECK(std::fabs(q.qerr - std::sqrt(e2 / d)) < 1e-5);
    CHECK(std::fabs(quant - exact) * isd <= 0.5 * q.delta * std::sqrt(double(d)) + 1e-5);
  }
}

TEST(rabitq_encoding_is_the_same_on_any_thread_count) {
  const size_t d = 100, n = 1000;
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> R(n * d);
  for (float& x : R) x = g(rng);
  const RabitqRotation rot = make_rabitq_rotation(d, 4);
  const size_t w = rabitq_words(d);
  std::vector<uint64_t> b1(n * w), b4(n * w);
  std::vector<float> n1(n), n4(n), i1(n), i4(n);
  encode_rabitq(rot, R.data(), n, b1.data(), n1.data(), i1.data(), 1);
  encode_rabitq(rot, R.data(), n, b4.data(), n4.data(), i4.data(), 4);
  CHECK(b1 == b4);
  CHECK(n1 == n4);
  CHECK(i1 == i4);
  // And the codes are the signs of R r, up to float rounding of coordinates near zero.
  std::vector<float> o(d);
  size_t agree = 0;
  for (size_t i = 0; i < n; ++i) {
    rabitq_rotate(rot, R.data() + i * d, o.data());
    for (size_t j = 0; j < d; ++j) agree += ((b1[i * w + j / 64] >> (j % 64)) & 1) == (o[j] >= 0);
    CHECK(std::fabs(n1[i] - std::sqrt(dot_d(R.data() + i * d, R.data() + i * d, d))) < 1e-3 * n1[i]);
  }
  CHECK(agree >= n * d - 5);
}

// ---- bound-pruned search against brute force, many seeds and dimensions ---------------------

// An IVF of n clustered rows in nlist lists (centroids: the mean of the rows nearest a seed row).
struct Lists {
  size_t d, n, nlist;
  std::vector<float> X, C, RC, norm, ipq, cdot;
  std::vector<uint64_t> bits;
  std::vector<int64_t> start, len, order;
  RabitqRotation rot;
  IvfRabitqView view(const uint8_t* allowed) const {
    IvfRabitqView v;
    v.d = d;
    v.centroids = C.data();
    v.nlist = nlist;
    v.rotation = rot.R.data();
    v.rot_centroids = RC.data();
    v.bits = bits.data();
    v.norm = norm.data();
    v.ipq = ipq.data();
    v.cdot = cdot.data();
    v.start = start.data();
    v.len = len.data();
    v.exact = X.data();
    v.allowed = allowed;
    v.n_rows = n;
    return v;
  }
};

Lists make_lists(size_t d, size_t n, size_t nlist, uint32_t seed) {
  Lists L;
  L.d = d, L.n = n, L.nlist = nlist;
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  const size_t latent = 8;
  std::vector<float> W(latent * d), raw(n * d);
  for (float& w : W) w = g(rng);
  for (size_t i = 0; i < n; ++i) {
    float z[latent];
    for (float& v : z) v = g(rng);
    double s2 = 0;
    for (size_t j = 0; j < d; ++j) {
      float s = 0.4f * g(rng);
      for (size_t l = 0; l < latent; ++l) s += z[l] * W[l * d + j];
      raw[i * d + j] = s;
      s2 += double(s) * s;
    }
    for (size_t j = 0; j < d; ++j) raw[i * d + j] = float(raw[i * d + j] / std::sqrt(s2));
  }
  std::vector<size_t> owner(n);
  for (size_t i = 0; i < n; ++i) {
    double best = -1e30;
    for (size_t l = 0; l < nlist; ++l) {
      const double s = dot_d(raw.data() + i * d, raw.data() + l * (n / nlist) * d, d);
      if (s > best) best = s, owner[i] = l;
    }
  }
  L.C.assign(nlist * d, 0.f);
  std::vector<size_t> cnt(nlist);
  for (size_t i = 0; i < n; ++i) {
    ++cnt[owner[i]];
    for (size_t j = 0; j < d; ++j) L.C[owner[i] * d + j] += raw[i * d + j];
  }
  for (size_t l = 0; l < nlist; ++l)
    for (size_t j = 0; j < d; ++j) L.C[l * d + j] /= float(std::max<size_t>(cnt[l], 1));
  // Rows stored list by list.
  L.X.resize(n * d);
  L.start.resize(nlist);
  L.len.resize(nlist);
  size_t at = 0;
  std::vector<float> res(n * d);
  L.cdot.resize(n);
  for (size_t l = 0; l < nlist; ++l) {
    L.start[l] = int64_t(at);
    for (size_t i = 0; i < n; ++i) {
      if (owner[i] != l) continue;
      for (size_t j = 0; j < d; ++j) {
        L.X[at * d + j] = raw[i * d + j];
        res[at * d + j] = raw[i * d + j] - L.C[l * d + j];
      }
      L.cdot[at] = float(dot_d(L.C.data() + l * d, res.data() + at * d, d));
      ++at;
    }
    L.len[l] = int64_t(at) - L.start[l];
  }
  L.rot = make_rabitq_rotation(d, seed + 1);
  L.bits.resize(n * rabitq_words(d));
  L.norm.resize(n);
  L.ipq.resize(n);
  encode_rabitq(L.rot, res.data(), n, L.bits.data(), L.norm.data(), L.ipq.data(), 2);
  L.RC.resize(nlist * d);
  for (size_t l = 0; l < nlist; ++l) rabitq_rotate(L.rot, L.C.data() + l * d, L.RC.data() + l * d);
  return L;
}

TEST(ivf_rabitq_search_never_skips_a_neighbour_whose_bound_holds) {
  size_t bound_held = 0, rows_seen = 0, rescored = 0, pooled = 0, checked = 0;
  for (size_t d : {16, 33, 64, 128, 384})
    for (uint32_t seed = 1; seed <= 6; ++seed) {
      const size_t n = 1200, nlist = 8, k = 10, nq = 8;
      const Lists L = make_lists(d, n, nlist, seed * 101 + uint32_t(d));
      std::vector<uint8_t> allowed(n, 1);
      if (seed % 2 == 0)
        for (size_t i = 0; i < n; i += 4) allowed[i] = 0;
      const IvfRabitqView v = L.view(allowed.data());
      std::mt19937 rng(seed);
      for (size_t qi = 0; qi < nq; ++qi) {
        // A query near a random row: its neighbours sit in a few lists.
        std::normal_distribution<float> g(0.f, 0.3f / std::sqrt(float(d)));
        const size_t near = rng() % n;
        std::vector<float> q(L.X.begin() + near * d, L.X.begin() + near * d + d);
        for (float& x : q) x += g(rng);
        for (size_t nprobe : {size_t(3), nlist})
          for (size_t rerank : {size_t(2), size_t(4), n}) {
            // Brute force over the probed lists: est, upper and exact score of each admitted row.
            std::vector<std::pair<float, size_t>> cl(nlist);
            for (size_t l = 0; l < nlist; ++l) cl[l] = {-float(dot_d(q.data(), L.C.data() + l * d, d)), l};
            std::sort(cl.begin(), cl.end());
            struct Row {
              float est, upper;
              double exact;
              int64_t pos;
            };
            std::vector<Row> rows;
            for (size_t p = 0; p < nprobe; ++p) {
              const size_t l = cl[p].second;
              std::vector<float> est(size_t(L.len[l])), up(size_t(L.len[l]));
              ivf_rabitq_list_bounds(v, q.data(), l, est.data(), up.data());
              for (int64_t i = 0; i < L.len[l]; ++i) {
                const int64_t at = L.start[l] + i;
                if (!allowed[size_t(at)]) continue;
                rows.push_back({est[size_t(i)], up[size_t(i)], dot_d(q.data(), L.X.data() + size_t(at) * d, d), at});
              }
            }
            int64_t pos[k];
            float score[k];
            RabitqSearchStats st;
            const size_t got = ivf_rabitq_search_one(v, q.data(), k, nprobe, rerank, pos, score, &st);
            CHECK_EQ(got, std::min(k, rows.size()));
            CHECK_EQ(st.scanned, rows.size());
            rescored += st.rescored;
            pooled += st.pooled;
            // The pool: the k * rerank best estimates (ties to the lower position).
            std::vector<Row> by_est = rows;
            std::sort(by_est.begin(), by_est.end(),
                      [](const Row& a, const Row& b) { return a.est > b.est || (a.est == b.est && a.pos < b.pos); });
            by_est.resize(std::min(by_est.size(), k * rerank));
            std::vector<double> ex;
            for (const Row& r : rows) ex.push_back(r.exact);
            std::sort(ex.begin(), ex.end(), std::greater<>());
            const double kth = ex[std::min(k, ex.size()) - 1];
            for (const Row& r : rows) {
              ++rows_seen;
              bound_held += r.upper >= r.exact - 1e-5;
            }
            for (const Row& r : by_est) {
              if (r.exact < kth || r.upper < r.exact) continue;  // not a neighbour, or its bound failed
              ++checked;
              bool found = false;  // it, or a row of the same exact score, is in the results
              for (size_t i = 0; i < got; ++i) found |= pos[i] == r.pos || std::fabs(score[i] - r.exact) < 1e-5;
              CHECK_MSG(found, "d=" + std::to_string(d) + " seed=" + std::to_string(seed) +
                                   " nprobe=" + std::to_string(nprobe) + " rerank=" + std::to_string(rerank));
            }
            for (size_t i = 0; i < got; ++i) {
              CHECK(std::fabs(score[i] - dot_d(q.data(), L.X.data() + size_t(pos[i]) * d, d)) < 1e-4);
              if (i) CHECK(score[i] <= score[i - 1]);
            }
          }
      }
    }
  std::printf("  %zu neighbours checked, bound held for %zu of %zu rows, %zu of %zu pooled re-scored\n", checked,
              bound_held, rows_seen, rescored, pooled);
  CHECK_MSG(checked > 1000, "neighbours checked: " + std::to_string(checked));
  // The bound is probabilistic: it holds for nearly every row at three standard deviations.
  CHECK_MSG(bound_held >= 0.995 * rows_seen,
            "bound held for " + std::to_string(bound_held) + " of " + std::to_string(rows_seen));
  CHECK_MSG(rescored < pooled / 2, "re-scored " + std::to_string(rescored) + " of " + std::to_string(pooled));
}

TEST(ivf_rabitq_search_is_the_same_at_every_level) {
  const Lists L = make_lists(100, 900, 6, 77);
  const IvfRabitqView v = L.view(nullptr);
  const auto levels = supported_simd_levels();
  for (size_t qi = 0; qi < 10; ++qi) {
    const float* q = L.X.data() + qi * 53 * L.d;
    int64_t ref_pos[10];
    float ref_score[10];
    ragfind::common::set_simd_level(levels.front());
    const size_t n0 = ivf_rabitq_search_one(v, q, 10, 3, 4, ref_pos, ref_score);
    std::vector<float> e0(size_t(L.len[0])), u0(size_t(L.len[0]));
    ivf_rabitq_list_bounds(v, q, 0, e0.data(), u0.data());
    for (auto level : levels) {
      ragfind::common::set_simd_level(level);
      int64_t pos[10];
      float score[10];
      CHECK_EQ(ivf_rabitq_search_one(v, q, 10, 3, 4, pos, score), n0);
      for (size_t i = 0; i < n0; ++i) CHECK(pos[i] == ref_pos[i]);
      std::vector<float> e(size_t(L.len[0])), u(size_t(L.len[0]));
      ivf_rabitq_list_bounds(v, q, 0, e.data(), u.data());
      // Exact integer sums; only the float rotation and centroid scores round per level.
      for (size_t i = 0; i < e.size(); ++i) CHECK(std::fabs(e[i] - e0[i]) < 1e-4 && std::fabs(u[i] - u0[i]) < 1e-4);
    }
  }
  ragfind::common::set_simd_level(ragfind::common::best_simd_level());
}

TEST(ivf_rabitq_search_with_the_int8_centroid_pass_is_the_same) {
  const Lists L = make_lists(64, 1500, 24, 5);
  const CoarseCentroids cc = make_coarse_centroids(L.C.data(), L.nlist, L.d);
  std::vector<uint8_t> few(L.n, 0);  // 3 admitted rows: the search goes past nprobe lists
  for (size_t i : {size_t(7), size_t(700), size_t(1400)}) few[i] = 1;
  for (const uint8_t* allowed : {static_cast<const uint8_t*>(nullptr), static_cast<const uint8_t*>(few.data())}) {
    const IvfRabitqView plain = L.view(allowed);
    IvfRabitqView with = plain;
    with.coarse = &cc;
    for (size_t qi = 0; qi < 20; ++qi) {
      const float* q = L.X.data() + qi * 71 * L.d;
      for (size_t nprobe : {size_t(1), size_t(4), L.nlist}) {
        int64_t p0[10], p1[10];
        float s0[10], s1[10];
        RabitqSearchStats a, b;
        const size_t n0 = ivf_rabitq_search_one(plain, q, 10, nprobe, 4, p0, s0, &a);
        CHECK_EQ(ivf_rabitq_search_one(with, q, 10, nprobe, 4, p1, s1, &b), n0);
        for (size_t i = 0; i < n0; ++i) CHECK(p0[i] == p1[i] && s0[i] == s1[i]);
        CHECK(a.scanned == b.scanned && a.pooled == b.pooled && a.rescored == b.rescored);
      }
    }
  }
}

RAGFIND_TEST_MAIN
