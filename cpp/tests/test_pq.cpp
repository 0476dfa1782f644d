// Product quantisation (ragfind/dense/pq.hpp) end to end: training and encoding against the
// codeword nearest by a loop, decode error against a fixed-code baseline, a 4-bit fast scan
// plus exact re-scoring of the best candidates against an exact search, and the IVF-PQ search
// (single and batched, at every SIMD level) against a plain loop that scores every probed row.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "check.hpp"
#include "ragfind/common/cpu.hpp"
#include "ragfind/dense/pq.hpp"
#include "ragfind/dense/similarity.hpp"

using namespace ragfind::dense;

namespace {

constexpr size_t kD = 32;

// Rows from a few latent factors plus noise, as embeddings are.
std::vector<float> latent_rows(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::mt19937 wrng(7);
  std::vector<float> W(4 * kD);
  for (float& w : W) w = g(wrng);
  std::vector<float> X(n * kD);
  for (size_t i = 0; i < n; ++i) {
    float z[4];
    for (float& v : z) v = g(rng);
    for (size_t j = 0; j < kD; ++j) {
      float s = 0.2f * g(rng);
      for (size_t l = 0; l < 4; ++l) s += z[l] * W[l * kD + j];
      X[i * kD + j] = s;
    }
  }
  return X;
}

double sqdist(const float* a, const float* b, size_t d) {
  double s = 0;
  for (size_t j = 0; j < d; ++j) s += double(a[j] - b[j]) * (a[j] - b[j]);
  return s;
}

}  // namespace

TEST(pq_encode_picks_the_nearest_codeword) {
  const size_t n = 600, m = 8;
  const std::vector<float> X = latent_rows(n, 1);
  const PqCodebook pq = train_pq(X.data(), n, kD, m, 4, 10, 5, 2);
  CHECK_EQ(pq.ksub, size_t(16));
  CHECK_EQ(pq.dsub, size_t(4));
  std::vector<uint8_t> codes(n * m);
  encode_pq(pq, X.data(), n, 2, codes.data());
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < m; ++j) {
      const float* x = X.data() + i * kD + j * pq.dsub;
      double best = sqdist(x, pq.codewords.data() + (j * 16 + codes[i * m + j]) * pq.dsub, pq.dsub);
      for (size_t c = 0; c < 16; ++c)
        CHECK(best <= sqdist(x, pq.codewords.data() + (j * 16 + c) * pq.dsub, pq.dsub) + 1e-5);
    }
  // Deterministic for a seed, whatever the thread count.
  const PqCodebook again = train_pq(X.data(), n, kD, m, 4, 10, 5, 1);
  CHECK(again.codewords == pq.codewords);
}

TEST(pq_decode_error_is_small) {
  const size_t n = 2000;
  const std::vector<float> X = latent_rows(n, 2);
  for (size_t bits : {4, 8}) {
    const size_t m = 8;
    const PqCodebook pq = train_pq(X.data(), n, kD, m, bits, 10, 3, 0);
    std::vector<uint8_t> codes(n * m);
    encode_pq(pq, X.data(), n, 0, codes.data());
    std::vector<float> Y(n * kD);
    decode_pq(pq, codes.data(), n, Y.data());
    std::vector<float> mean(kD, 0.f);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < kD; ++j) mean[j] += X[i * kD + j] / n;
    double err = 0, var = 0;
    for (size_t i = 0; i < n; ++i) {
      err += sqdist(X.data() + i * kD, Y.data() + i * kD, kD);
      var += sqdist(X.data() + i * kD, mean.data(), kD);
    }
    // 16 codewords per 4 dimensions keep well under a quarter of the variance; 256 under a tenth.
    CHECK_MSG(err < (bits == 4 ? 0.25 : 0.1) * var, "bits=" + std::to_string(bits));
  }
}

TEST(pq_checks_its_shape) {
  const std::vector<float> X = latent_rows(64, 3);
  CHECK_THROWS(std::invalid_argument, train_pq(X.data(), 64, kD, 5, 4, 2, 1, 1));  // 32 % 5
  CHECK_THROWS(std::invalid_argument, train_pq(X.data(), 64, kD, 8, 6, 2, 1, 1));  // bits
  CHECK_THROWS(std::invalid_argument, train_pq(X.data(), 10, kD, 8, 4, 2, 1, 1));  // n < 16
}

TEST(pq4_fast_scan_with_rescoring_finds_the_exact_top_k) {
  const size_t n = 3000, m = 16, k = 10, nq = 20, rerank = 10;
  const std::vector<float> X = latent_rows(n, 4), Q = latent_rows(nq, 5);
  const PqCodebook pq = train_pq(X.data(), n, kD, m, 4, 10, 9, 0);
  std::vector<uint8_t> codes(n * m);
  encode_pq(pq, X.data(), n, 0, codes.data());
  const size_t mpad = pq4_mpad(m), nb = (n + kPqBlock - 1) / kPqBlock;
  std::vector<uint8_t> blocks(nb * mpad * 16);
  pack_pq4(codes.data(), n, m, blocks.data());
  const Pq4ScanKernels& K = pq4_scan_kernels();
  double hits = 0;
  for (size_t q = 0; q < nq; ++q) {
    const float* qv = Q.data() + q * kD;
    std::vector<float> lut(m * 16);
    pq_lut_ip(pq, qv, lut.data());
    const Pq4Lut l8 = quantise_pq4_lut(lut.data(), m);
    std::vector<uint16_t> s(nb * kPqBlock);
    K.scan(blocks.data(), nb, mpad, l8.lut8.data(), s.data());
    std::vector<size_t> idx(n);
    std::iota(idx.begin(), idx.end(), size_t(0));
    std::partial_sort(idx.begin(), idx.begin() + k * rerank, idx.end(),
                      [&](size_t a, size_t b) { return s[a] > s[b] || (s[a] == s[b] && a < b); });
    auto ip = [&](size_t i) {
      double t = 0;
      for (size_t j = 0; j < kD; ++j) t += double(qv[j]) * X[i * kD + j];
      return t;
    };
    std::vector<size_t> cand(idx.begin(), idx.begin() + k * rerank);
    std::sort(cand.begin(), cand.end(), [&](size_t a, size_t b) { return ip(a) > ip(b); });
    std::vector<size_t> exact(n);
    std::iota(exact.begin(), exact.end(), size_t(0));
    std::partial_sort(exact.begin(), exact.begin() + k, exact.end(), [&](size_t a, size_t b) { return ip(a) > ip(b); });
    for (size_t i = 0; i < k; ++i) hits += std::count(cand.begin(), cand.begin() + k, exact[i]);
  }
  const double recall = hits / double(nq * k);
  CHECK_MSG(recall >= 0.95, "recall@10 " + std::to_string(recall));
}

namespace {

// IVF lists of 4-bit (or 8-bit) codes as IvfPqLists lays them out: rows grouped by their best
// centroid, each list starting a block, some rows deleted (-1 in pos) and some lists empty;
// re-scored against float32 rows or (f16) their float16 copies.
struct IvfPqFixture {
  size_t d = 36, m = 9, nlist = 24, n = 2500;
  bool f16 = false, l2 = false;
  std::vector<float> X, centroids, Xr;  // Xr: the rows re-scored (X, or X through float16)
  std::vector<uint16_t> X16;
  PqCodebook pq;
  std::vector<uint8_t> blocks, pcodes;  // pcodes: unpacked codes in row space
  std::vector<int64_t> row0, len, pos;
  IvfPqView view() const {
    IvfPqView v;
    v.centroids = centroids.data();
    v.nlist = nlist;
    v.pq = &pq;
    v.blocks = blocks.data();
    v.row0 = row0.data();
    v.len = len.data();
    v.pos = pos.data();
    if (f16) v.exact_f16 = X16.data();
    else v.exact = X.data();
    v.n_exact = n;
    v.l2 = l2;
    return v;
  }
};

// float32 to binary16 bits, round to nearest even (normal values only: the test's rows).
uint16_t to_half(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  const uint32_t sign = (b >> 16) & 0x8000u;
  int32_t e = static_cast<int32_t>((b >> 23) & 0xff) - 127 + 15;
  uint32_t mant = b & 0x7fffffu;
  if (e <= 0) return static_cast<uint16_t>(sign);  // tiny values flush to zero
  uint32_t h = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

IvfPqFixture make_ivf_pq(size_t bits = 4, bool f16 = false, bool l2 = false) {
  IvfPqFixture f;
  f.f16 = f16;
  f.l2 = l2;
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.f, 1.f);
  f.X.resize(f.n * f.d);
  for (float& x : f.X) x = g(rng);
  for (size_t i = 0; i < f.n; ++i)  // some rows share a vector: equal scores, ties by position
    if (i % 97 == 5) std::copy_n(f.X.begin(), f.d, f.X.begin() + static_cast<std::ptrdiff_t>(i * f.d));
  f.centroids.assign(f.X.begin(), f.X.begin() + static_cast<std::ptrdiff_t>(f.nlist * f.d));
  for (size_t i = 0; i < f.d; ++i) f.centroids[3 * f.d + i] = 0.f;  // list 3 stays empty
  std::vector<size_t> list(f.n);
  std::vector<std::vector<size_t>> members(f.nlist);
  for (size_t i = 0; i < f.n; ++i) {
    size_t best = 0;
    float bs = -1e30f;
    for (size_t l = 0; l < f.nlist; ++l) {
      float s = 0;
      for (size_t j = 0; j < f.d; ++j) s += f.X[i * f.d + j] * f.centroids[l * f.d + j];
      if (s > bs) bs = s, best = l;
    }
    list[i] = best;
    members[best].push_back(i);
  }
  std::vector<float> res(f.n * f.d);
  for (size_t i = 0; i < f.n; ++i)
    for (size_t j = 0; j < f.d; ++j) res[i * f.d + j] = f.X[i * f.d + j] - f.centroids[list[i] * f.d + j];
  f.pq = train_pq(res.data(), f.n, f.d, f.m, bits, 6, 3, 1);
  std::vector<uint8_t> codes(f.n * f.m);
  encode_pq(f.pq, res.data(), f.n, 1, codes.data());
  int64_t rows = 0;
  for (size_t l = 0; l < f.nlist; ++l) {
    f.row0.push_back(rows);
    f.len.push_back(static_cast<int64_t>(members[l].size()));
    rows += static_cast<int64_t>((members[l].size() + kPqBlock - 1) / kPqBlock * kPqBlock);
  }
  f.pos.assign(static_cast<size_t>(rows), -1);
  f.pcodes.assign(static_cast<size_t>(rows) * f.m, 0);
  for (size_t l = 0; l < f.nlist; ++l)
    for (size_t t = 0; t < members[l].size(); ++t) {
      const size_t r = static_cast<size_t>(f.row0[l]) + t, i = members[l][t];
      f.pos[r] = i % 31 == 7 ? -1 : static_cast<int64_t>(i);  // deleted rows stay in their list
      std::copy_n(codes.begin() + static_cast<std::ptrdiff_t>(i * f.m), f.m,
                  f.pcodes.begin() + static_cast<std::ptrdiff_t>(r * f.m));
    }
  if (bits == 8) {
    f.blocks = f.pcodes;
  } else {
    f.blocks.resize(static_cast<size_t>(rows) / kPqBlock * pq4_mpad(f.m) * 16);
    pack_pq4(f.pcodes.data(), static_cast<size_t>(rows), f.m, f.blocks.data());
  }
  f.Xr = f.X;
  if (f16) {
    f.X16.resize(f.X.size());
    for (size_t i = 0; i < f.X.size(); ++i) {
      f.X16[i] = to_half(f.X[i]);
      f.Xr[i] = half_to_float(f.X16[i]);
    }
  }
  return f;
}

// The search written plainly: every probed row's estimate from its unpacked codes, the
// k * rerank best by (estimate, position), re-scored, the k best by (score, position).
std::vector<std::pair<float, int64_t>> reference_search(const IvfPqFixture& f, const float* q, size_t k, size_t nprobe,
                                                        size_t rerank) {
  const ragfind::dense::SimilarityKernels& S = ragfind::dense::similarity_kernels();
  std::vector<float> cscore(f.nlist);
  if (f.l2) {  // higher is better: -|q - c|^2
    S.l2_rows_f32(q, f.centroids.data(), f.nlist, f.d, cscore.data());
    for (float& c : cscore) c = -c;
  } else {
    S.dot_rows_f32(q, f.centroids.data(), f.nlist, f.d, cscore.data());
  }
  std::vector<std::pair<float, int64_t>> cs;
  for (size_t l = 0; l < f.nlist; ++l) cs.push_back({-cscore[l], static_cast<int64_t>(l)});
  std::sort(cs.begin(), cs.end());
  const size_t nt = f.m * f.pq.ksub;
  std::vector<float> lut(nt), rq(f.d), norm(nt);
  for (size_t i = 0; i < nt; ++i) {
    const float* w = f.pq.data() + i * f.pq.dsub;
    norm[i] = S.dot_f32(w, w, f.pq.dsub);
  }
  // The table of list l: q's for inner products, (q - c)'s with l2: 2 lut - |codeword|^2.
  auto table = [&](size_t l) {
    if (!f.l2) {
      pq_lut_ip(f.pq, q, lut.data());
      return;
    }
    for (size_t t = 0; t < f.d; ++t) rq[t] = q[t] - f.centroids[l * f.d + t];
    pq_lut_ip(f.pq, rq.data(), lut.data());
    for (size_t i = 0; i < nt; ++i) lut[i] = 2.f * lut[i] - norm[i];
  };
  std::vector<std::pair<float, int64_t>> cand;
  // Past nprobe while fewer than k rows were seen (the l2 query nearest the empty list 3).
  for (size_t p = 0; p < f.nlist && (p < nprobe || cand.size() < k); ++p) {
    const size_t l = static_cast<size_t>(cs[p].second);
    table(l);
    const Pq4Lut l8 = f.pq.bits == 4 ? quantise_pq4_lut(lut.data(), f.m) : Pq4Lut{};
    for (int64_t t = 0; t < f.len[l]; ++t) {
      const size_t r = static_cast<size_t>(f.row0[l] + t);
      if (f.pos[r] < 0) continue;
      if (f.pq.bits == 8) {  // float sums in order of the sub-spaces
        float sum = 0.f;
        for (size_t j = 0; j < f.m; ++j) sum += lut[j * 256 + f.pcodes[r * f.m + j]];
        cand.push_back({-(-cs[p].first + sum), f.pos[r]});
        continue;
      }
      uint32_t sum = 0;
      for (size_t j = 0; j < f.m; ++j) sum += l8.lut8[j * 16 + f.pcodes[r * f.m + j]];
      cand.push_back({-(-cs[p].first + l8.bias + l8.scale * static_cast<float>(sum)), f.pos[r]});
    }
  }
  std::sort(cand.begin(), cand.end());
  cand.resize(std::min(cand.size(), std::max(k, k * rerank)));
  for (auto& [s, at] : cand) {  // s: the negated score (ip) or the distance (l2), ascending
    const size_t i = static_cast<size_t>(at);
    if (f.l2) {
      if (f.f16) S.l2_rows_f16(q, f.X16.data() + i * f.d, 1, f.d, &s);
      else s = S.l2sq_f32(q, f.X.data() + i * f.d, f.d);
      continue;
    }
    if (f.f16) S.dot_rows_f16(q, f.X16.data() + i * f.d, 1, f.d, &s);
    else s = S.dot_f32(q, f.X.data() + i * f.d, f.d);
    s = -s;
  }
  std::sort(cand.begin(), cand.end());
  cand.resize(std::min(cand.size(), k));
  if (!f.l2)
    for (auto& c : cand) c.first = -c.first;
  return cand;
}

}  // namespace

namespace {

void check_ivf_pq_at_every_level(size_t bits, bool f16, bool l2 = false, bool coarse = false) {
  const IvfPqFixture f = make_ivf_pq(bits, f16, l2);
  IvfPqView v = f.view();
  // The int8 first pass over the centroids must pick the very lists of the full scan.
  const CoarseCentroids cc = make_coarse_centroids(f.centroids.data(), f.nlist, f.d);
  if (coarse) v.coarse = &cc;
  const std::string conf =
      "bits=" + std::to_string(bits) + (f16 ? " f16 " : " f32 ") + (l2 ? "l2 " : "ip ") + (coarse ? "coarse " : "");
  const size_t nq = 40;
  const std::vector<float> Q = [&] {
    std::mt19937 rng(5);
    std::normal_distribution<float> g(0.f, 1.f);
    std::vector<float> q(nq * f.d);
    for (float& x : q) x = g(rng);
    std::copy_n(f.X.begin(), f.d, q.begin());  // a query equal to the duplicated row
    return q;
  }();
  const ragfind::common::SimdLevel before = ragfind::common::active_simd_level();
  std::vector<int64_t> scalar_ids;
  for (ragfind::common::SimdLevel level : ragfind::common::supported_simd_levels()) {
    ragfind::common::set_simd_level(level);
    const std::string lv = conf + ragfind::common::simd_level_name(level);
    std::vector<int64_t> ids;
    // Chunks of 40 (one worker) and 14 (three) queries over 24 lists, 1.7 to 40 expected
    // queries a probed list, pools of 2 to 4000 rows: both sides of every rule choosing
    // between list order and best first (kListOrderPool, kPq8ListShare).
    for (auto [k, nprobe, rerank] : {std::tuple<size_t, size_t, size_t>{10, 3, 4},
                                     {10, 3, 16},
                                     {10, 8, 16},
                                     {10, 8, 1},
                                     {1, 24, 2},
                                     {5, 100, 30},
                                     {4000, 24, 1},
                                     {7, 1, 0}}) {
      std::vector<int64_t> bp(nq * k);
      std::vector<float> bs(nq * k);
      ivf_pq_search_batch(v, Q.data(), nq, k, nprobe, rerank, 3, bp.data(), bs.data());
      std::vector<int64_t> bp1(nq * k);
      std::vector<float> bs1(nq * k);
      ivf_pq_search_batch(v, Q.data(), nq, k, nprobe, rerank, 1, bp1.data(), bs1.data());
      CHECK_MSG(bp1 == bp, lv + ": one worker and three agree");
      for (size_t qi = 0; qi < nq; ++qi) {
        const float* q = Q.data() + qi * f.d;
        const auto want = reference_search(f, q, k, nprobe, rerank);
        std::vector<int64_t> op(k, -2);
        std::vector<float> os(k);
        const size_t got = ivf_pq_search_one(v, q, k, nprobe, rerank, op.data(), os.data());
        const std::string at = lv + " k=" + std::to_string(k) + " nprobe=" + std::to_string(nprobe) +
                               " rerank=" + std::to_string(rerank) + " q=" + std::to_string(qi);
        CHECK_MSG(got == want.size(), at);
        for (size_t i = 0; i < std::min(got, want.size()); ++i) {
          CHECK_MSG(op[i] == want[i].second && os[i] == want[i].first, at + " rank " + std::to_string(i));
          CHECK_MSG(bp[qi * k + i] == op[i] && bs[qi * k + i] == os[i], at + " batch rank " + std::to_string(i));
        }
        for (size_t i = got; i < k; ++i)
          CHECK_MSG(op[i] == -2 && bp[qi * k + i] == -1 && std::isnan(bs[qi * k + i]), at);
        ids.insert(ids.end(), op.begin(), op.begin() + static_cast<std::ptrdiff_t>(got));
      }
    }
    // The byte sums agree at every level, but the centroid scores and exact re-scores are float
    // sums in another order, so a near tie can fall the other way: nearly the same rows.
    if (level == ragfind::common::SimdLevel::Scalar) scalar_ids = ids;
    size_t same = 0;
    for (size_t i = 0; i < std::min(ids.size(), scalar_ids.size()); ++i) same += ids[i] == scalar_ids[i];
    CHECK_MSG(ids.size() == scalar_ids.size() && same >= ids.size() * 99 / 100,
              lv + ": " + std::to_string(same) + " of " + std::to_string(ids.size()) + " as scalar");
  }
  ragfind::common::set_simd_level(before);
}

}  // namespace

TEST(ivf_pq_search_equals_the_plain_loop_at_every_level) {
  for (bool coarse : {false, true}) {
    check_ivf_pq_at_every_level(4, false, false, coarse);
    check_ivf_pq_at_every_level(4, true, false, coarse);
    check_ivf_pq_at_every_level(8, false, false, coarse);
    check_ivf_pq_at_every_level(8, true, false, coarse);
    check_ivf_pq_at_every_level(4, false, true, coarse);
    check_ivf_pq_at_every_level(4, true, true, coarse);
    check_ivf_pq_at_every_level(8, false, true, coarse);
    check_ivf_pq_at_every_level(8, true, true, coarse);
  }
}

TEST(ivf_pq_search_rejects_positions_outside_exact) {
  IvfPqFixture f = make_ivf_pq();
  for (int64_t& p : f.pos)
    if (p >= 0) p += static_cast<int64_t>(f.n);
  const IvfPqView v = f.view();
  std::vector<int64_t> op(30);
  std::vector<float> os(30);
  CHECK_THROWS(std::invalid_argument, ivf_pq_search_one(v, f.X.data(), 10, 4, 2, op.data(), os.data()));
  CHECK_THROWS(std::invalid_argument, ivf_pq_search_batch(v, f.X.data(), 3, 10, 4, 2, 2, op.data(), os.data()));
}

RAGFIND_TEST_MAIN
