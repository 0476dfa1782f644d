// The grouped IVF batch search (ivf_search_batch) against its definition: ivf_search_one run
// on each query. Rows and scores must be equal bit for bit for every storage, metric, mask,
// threshold, k (also above the admitted rows), nprobe, re-scoring depth, thread count and
// SIMD level, on lists with holes between them, empty lists, odd lengths and a list longer
// than the single search's 1024-row block.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "check.hpp"
#include "ragfind/common/cpu.hpp"
#include "ragfind/dense/exact_search.hpp"
#include "ragfind/dense/ivf.hpp"
#include "ragfind/dense/similarity.hpp"

using namespace ragfind::dense;

namespace {

// float -> binary16 bits by truncation (normal range only; test data stays well inside it).
uint16_t to_half(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  const uint32_t sign = (b >> 16) & 0x8000u;
  const int exp = static_cast<int>((b >> 23) & 0xff) - 127 + 15;
  if (exp <= 0) return static_cast<uint16_t>(sign);
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7bffu);
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(exp) << 10) | ((b >> 13) & 0x3ffu));
}

// Rows of d values around 9 centres, stored list after list with holes of garbage between them
// (never read), one empty list, one list past 1024 rows, and the centroids of the lists.
struct Fixture {
  size_t d = 0, nlist = 0, used = 0;
  std::vector<float> f32, exact16, exact8, centroids, scales, sqnorms;  // exactN: float copies
  std::vector<uint16_t> f16;
  std::vector<int8_t> i8;
  std::vector<int64_t> start, len;
};

Fixture make_fixture(size_t d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  Fixture F;
  F.d = d;
  F.nlist = 23;
  std::vector<float> centres(9 * d);
  for (float& c : centres) c = g(rng);
  for (size_t l = 0; l < F.nlist; ++l) {
    size_t n = 1 + rng() % 97;
    if (l == 5) n = 0;
    if (l == 11) n = 1031;
    F.used += rng() % 7;  // a hole
    F.start.push_back(static_cast<int64_t>(F.used));
    F.len.push_back(static_cast<int64_t>(n));
    F.used += n;
  }
  F.used += 3;
  F.f32.resize(F.used * d);
  for (size_t r = 0; r < F.used; ++r) {
    const float* c = &centres[(rng() % 9) * d];
    for (size_t j = 0; j < d; ++j) F.f32[r * d + j] = c[j] + 0.5f * g(rng);
  }
  for (size_t l = 0; l < F.nlist; ++l) {
    const float* x = &F.f32[static_cast<size_t>(F.start[l]) * d];
    const float* y = &F.f32[(rng() % F.used) * d];
    for (size_t j = 0; j < d; ++j) F.centroids.push_back(F.len[l] ? x[j] + 0.1f * g(rng) : y[j]);
  }
  F.f16.resize(F.used * d);
  F.i8.resize(F.used * d);
  F.scales.resize(F.used);
  F.sqnorms.resize(F.used);
  F.exact16.resize(F.used * d);
  F.exact8.resize(F.used * d);
  for (size_t r = 0; r < F.used; ++r) {
    float mx = 0.f;
    for (size_t j = 0; j < d; ++j) mx = std::max(mx, std::fabs(F.f32[r * d + j]));
    F.scales[r] = mx > 0 ? mx / 127.f : 1.f;
    float sq = 0.f;
    for (size_t j = 0; j < d; ++j) {
      F.f16[r * d + j] = to_half(F.f32[r * d + j]);
      F.i8[r * d + j] = static_cast<int8_t>(std::lrint(F.f32[r * d + j] / F.scales[r]));
      const float v = F.scales[r] * F.i8[r * d + j];
      sq += v * v;
      F.exact16[r * d + j] = half_to_float(F.f16[r * d + j]);
      F.exact8[r * d + j] = v;
    }
    F.sqnorms[r] = sq;
  }
  return F;
}

IvfView view_of(const Fixture& F, Storage s, size_t rerank) {
  IvfView v;
  v.rows.storage = s;
  v.rows.n = F.used;
  v.rows.d = F.d;
  v.rows.data = s == Storage::F32   ? static_cast<const void*>(F.f32.data())
                : s == Storage::F16 ? static_cast<const void*>(F.f16.data())
                                    : static_cast<const void*>(F.i8.data());
  if (s == Storage::I8) {
    v.rows.scales = F.scales.data();
    v.rows.sqnorms = F.sqnorms.data();
  }
  v.centroids = F.centroids.data();
  v.nlist = F.nlist;
  v.list_start = F.start.data();
  v.list_len = F.len.data();
  if (s != Storage::F32 && rerank > 0) v.exact = s == Storage::F16 ? F.exact16.data() : F.exact8.data();
  return v;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// Batch against single for one setting; returns the number of compared results.
size_t compare(const IvfView& v, const std::vector<float>& Q, size_t nq, const IvfOptions& opt, int batch_threads) {
  const size_t k = opt.search.k, d = v.rows.d;
  std::vector<int64_t> br(nq * k), bc(nq);
  std::vector<float> bs(nq * k);
  IvfOptions bo = opt;
  bo.search.threads = batch_threads;
  ivf_search_batch(v, Q.data(), nq, bo, br.data(), bs.data(), bc.data());
  size_t compared = 0;
  std::vector<int64_t> sr(k);
  std::vector<float> ss(k);
  for (size_t i = 0; i < nq; ++i) {
    const size_t cnt = ivf_search_one(v, &Q[i * d], opt, sr.data(), ss.data());
    CHECK_EQ(static_cast<size_t>(bc[i]), cnt);
    for (size_t j = 0; j < std::min<size_t>(cnt, static_cast<size_t>(bc[i])); ++j) {
      CHECK_EQ(br[i * k + j], sr[j]);
      CHECK_MSG(same_bits(bs[i * k + j], ss[j]), std::to_string(bs[i * k + j]) + " vs " + std::to_string(ss[j]));
      ++compared;
    }
    for (size_t j = static_cast<size_t>(bc[i]); j < k; ++j) {
      CHECK_EQ(br[i * k + j], int64_t(-1));
      CHECK(std::isnan(bs[i * k + j]));
    }
  }
  return compared;
}

}  // namespace

TEST(batch_equals_single_search_for_every_setting_and_simd_level) {
  const ragfind::common::SimdLevel before = ragfind::common::active_simd_level();
  size_t compared = 0;
  for (size_t d : {size_t(37), size_t(128)}) {
    const Fixture F = make_fixture(d, static_cast<uint32_t>(d));
    std::mt19937 rng(7 + static_cast<uint32_t>(d));
    std::normal_distribution<float> g(0.f, 1.f);
    const size_t nq = 29;
    std::vector<float> Q(nq * d);
    for (size_t i = 0; i < nq; ++i) {
      const float* x = &F.f32[(rng() % F.used) * d];
      for (size_t j = 0; j < d; ++j) Q[i * d + j] = x[j] + 0.7f * g(rng);
    }
    // Masks: none, half the rows, a few rows (fewer than k: more lists must be probed).
    std::vector<uint8_t> half(F.used), few(F.used, 0);
    for (auto& a : half) a = static_cast<uint8_t>(rng() % 2);
    for (int i = 0; i < 6; ++i) few[rng() % F.used] = 1;
    const std::vector<const uint8_t*> masks = {nullptr, half.data(), few.data()};
    for (ragfind::common::SimdLevel level : ragfind::common::supported_simd_levels()) {
      ragfind::common::set_simd_level(level);
      for (Storage s : {Storage::F32, Storage::F16, Storage::I8}) {
        for (size_t rerank : {size_t(0), size_t(3)}) {
          if (s == Storage::F32 && rerank == 3) continue;
          const IvfView v = view_of(F, s, rerank);
          for (Metric m : {Metric::IP, Metric::L2}) {
            for (const uint8_t* allowed : masks) {
              for (size_t k : {size_t(1), size_t(10), size_t(60)}) {
                for (size_t nprobe : {size_t(1), size_t(4), size_t(100)}) {
                  IvfOptions opt;
                  opt.search.k = k;
                  opt.search.metric = m;
                  opt.search.allowed = allowed;
                  opt.search.threads = 1;
                  opt.nprobe = nprobe;
                  opt.rerank = rerank;
                  compared += compare(v, Q, nq, opt, 1);
                  compared += compare(v, Q, nq, opt, 3);
                  // A threshold near the 5th best score of the first query.
                  std::vector<int64_t> r(10);
                  std::vector<float> sc(10);
                  IvfOptions t = opt;
                  t.search.k = 10;
                  const size_t c = ivf_search_one(v, Q.data(), t, r.data(), sc.data());
                  if (c >= 5) {
                    opt.search.has_threshold = true;
                    opt.search.threshold = sc[4];
                    compared += compare(v, Q, nq, opt, 2);
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  ragfind::common::set_simd_level(before);
  CHECK(compared > 100000);
}

TEST(near_tied_centroids_keep_the_single_search_probe_order) {
  // Centroids a few ulps apart: the batch's tile kernel and the single search's kernel round
  // their scores differently, so ranking by the tile's scores would probe other lists.
  const ragfind::common::SimdLevel before = ragfind::common::active_simd_level();
  size_t compared = 0;
  for (size_t d : {size_t(37), size_t(384)}) {
    Fixture F = make_fixture(d, 11);
    std::mt19937 rng(5);
    std::normal_distribution<float> g(0.f, 1.f);
    for (size_t l = 1; l < F.nlist; ++l)
      for (size_t j = 0; j < d; ++j) F.centroids[l * d + j] = F.centroids[j] * (1.f + 4e-7f * g(rng));
    const size_t nq = 40;
    std::vector<float> Q(nq * d);
    for (float& x : Q) x = g(rng);
    for (ragfind::common::SimdLevel level : ragfind::common::supported_simd_levels()) {
      ragfind::common::set_simd_level(level);
      const IvfView v = view_of(F, Storage::F32, 0);
      for (size_t nprobe : {size_t(1), size_t(3), size_t(7), size_t(12)}) {
        IvfOptions opt;
        opt.search.k = 10;
        opt.search.metric = Metric::IP;
        opt.search.threads = 1;
        opt.nprobe = nprobe;
        compared += compare(v, Q, nq, opt, 1);
      }
    }
  }
  ragfind::common::set_simd_level(before);
  CHECK(compared > 1000);
}

TEST(a_batch_of_several_query_groups_equals_single_searches) {
  const Fixture F = make_fixture(37, 21);
  std::mt19937 rng(9);
  std::normal_distribution<float> g(0.f, 1.f);
  const size_t nq = 4200;  // past two groups of the batch
  std::vector<float> Q(nq * 37);
  for (float& x : Q) x = g(rng);
  size_t compared = 0;
  for (Metric m : {Metric::IP, Metric::L2}) {
    IvfOptions opt;
    opt.search.k = 7;
    opt.search.metric = m;
    opt.search.threads = 1;
    opt.nprobe = 3;
    opt.rerank = 2;
    const IvfView v = view_of(F, Storage::F16, 2);
    compared += compare(v, Q, nq, opt, 1);
    compared += compare(v, Q, nq, opt, 3);
  }
  CHECK_EQ(compared, 4 * nq * 7);
}

TEST(batch_handles_empty_input_and_k_zero) {
  const Fixture F = make_fixture(16, 3);
  const IvfView v = view_of(F, Storage::F32, 0);
  std::vector<float> Q(2 * 16, 0.5f);
  IvfOptions opt;
  opt.search.k = 0;
  std::vector<int64_t> r(1, 7), c(2, 7);
  std::vector<float> s(1);
  ivf_search_batch(v, Q.data(), 2, opt, r.data(), s.data(), c.data());
  CHECK_EQ(c[0], int64_t(0));
  CHECK_EQ(c[1], int64_t(0));
  opt.search.k = 3;
  ivf_search_batch(v, Q.data(), 0, opt, r.data(), s.data(), c.data());
  // One query, every row masked out: no results, padded.
  std::vector<uint8_t> none(F.used, 0);
  opt.search.allowed = none.data();
  std::vector<int64_t> r3(3), c1(1);
  std::vector<float> s3(3);
  ivf_search_batch(v, Q.data(), 1, opt, r3.data(), s3.data(), c1.data());
  CHECK_EQ(c1[0], int64_t(0));
  CHECK_EQ(r3[2], int64_t(-1));
}

RAGFIND_TEST_MAIN
