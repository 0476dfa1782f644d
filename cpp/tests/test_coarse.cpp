// The int8 first pass over IVF centroids (ragfind/dense/coarse.hpp) against a full float32 scan
// at every SIMD level: the same lists in the same order with the same scores, for near-tied,
// duplicated, zero and large centroids and queries, inner product and l2, every np.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "check.hpp"
#include "ragfind/common/cpu.hpp"
#include "ragfind/dense/coarse.hpp"
#include "ragfind/dense/similarity.hpp"

using namespace ragfind::dense;

namespace {

std::vector<std::pair<float, int64_t>> full_scan(const float* C, size_t nlist, size_t d, const float* q, size_t np,
                                                 bool l2) {
  const SimilarityKernels& S = similarity_kernels();
  std::vector<std::pair<float, int64_t>> all(nlist);
  for (size_t l = 0; l < nlist; ++l)
    all[l] = {l2 ? S.l2sq_f32(q, C + l * d, d) : -S.dot_f32(q, C + l * d, d), static_cast<int64_t>(l)};
  std::sort(all.begin(), all.end());
  all.resize(np);
  return all;
}

// Centroids with the hard cases: exact duplicates, rows a few ulps apart, a zero row, one
// scaled far up and one far down, the rest latent-structured.
std::vector<float> hard_centroids(size_t nlist, size_t d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> W(3 * d);
  for (float& w : W) w = g(rng);
  std::vector<float> C(nlist * d);
  for (size_t l = 0; l < nlist; ++l) {
    float z[3] = {g(rng), g(rng), g(rng)};
    for (size_t j = 0; j < d; ++j) C[l * d + j] = z[0] * W[j] + z[1] * W[d + j] + z[2] * W[2 * d + j] + 0.3f * g(rng);
  }
  std::copy_n(C.begin(), d, C.begin() + static_cast<std::ptrdiff_t>(d));  // 1 == 0
  for (size_t j = 0; j < d; ++j) {
    C[2 * d + j] = std::nextafter(C[j], 1e9f);  // a few ulps from 0
    C[3 * d + j] = 0.f;
    C[4 * d + j] *= 1e6f;
    C[5 * d + j] *= 1e-6f;
    C[6 * d + j] *= 1e-25f;  // always scored exactly
  }
  return C;
}

}  // namespace

TEST(best_lists_equals_a_full_float32_scan_at_every_level) {
  const ragfind::common::SimdLevel before = ragfind::common::active_simd_level();
  for (ragfind::common::SimdLevel level : ragfind::common::supported_simd_levels()) {
    ragfind::common::set_simd_level(level);
    for (auto [nlist, d] : {std::pair<size_t, size_t>{64, 32}, {300, 384}, {8, 5}, {129, 100}}) {
      const std::vector<float> C = hard_centroids(nlist, d, static_cast<uint32_t>(nlist + d));
      const CoarseCentroids cc = make_coarse_centroids(C.data(), nlist, d);
      CHECK(coarse_matches(cc, C.data(), nlist, d));
      std::mt19937 rng(3);
      std::normal_distribution<float> g(0.f, 1.f);
      CoarseScratch w;
      std::vector<std::pair<float, int64_t>> got;
      for (size_t qi = 0; qi < 30; ++qi) {
        std::vector<float> q(d);
        if (qi < 6) std::copy_n(C.begin() + static_cast<std::ptrdiff_t>(qi * d), d, q.begin());  // a centroid
        else
          for (float& x : q) x = g(rng);
        if (qi == 7) std::fill(q.begin(), q.end(), 0.f);
        if (qi == 8) q[d / 2] = 1e30f;  // one huge component
        if (qi == 9)
          for (float& x : q) x *= 1e-30f;
        if (qi == 10)
          for (float& x : q) x *= 1e-12f;
        if (qi == 11)
          for (float& x : q) x *= 1e12f;
        for (bool l2 : {false, true}) {
          for (size_t np : {size_t(1), size_t(2), size_t(5), nlist / 2, nlist - 1, nlist}) {
            if (np == 0) continue;
            best_lists(cc, C.data(), q.data(), np, l2, w, got);
            const auto want = full_scan(C.data(), nlist, d, q.data(), np, l2);  // -score: distance for l2
            const std::string at = std::string(ragfind::common::simd_level_name(level)) + " nlist " +
                                   std::to_string(nlist) + " d " + std::to_string(d) + " q " + std::to_string(qi) +
                                   (l2 ? " l2" : " ip") + " np " + std::to_string(np);
            CHECK_MSG(got.size() == np, at);
            for (size_t i = 0; i < std::min(got.size(), want.size()); ++i)
              CHECK_MSG(got[i].second == want[i].second &&
                            (got[i].first == want[i].first || (std::isnan(got[i].first) && std::isnan(want[i].first))),
                        at + " rank " + std::to_string(i));
          }
        }
      }
    }
  }
  ragfind::common::set_simd_level(before);
}

TEST(coarse_matches_refuses_other_centroids) {
  const std::vector<float> C = hard_centroids(64, 32, 1);
  const CoarseCentroids cc = make_coarse_centroids(C.data(), 64, 32);
  std::vector<float> other = C;
  other[63 * 32 + 5] += 1.f;  // the last row moved
  CHECK(!coarse_matches(cc, other.data(), 64, 32));
  CHECK(!coarse_matches(cc, C.data(), 63, 32));
  CHECK(!coarse_matches(cc, C.data(), 64, 16));
  std::vector<float> bad = C;
  bad[7] = std::nanf("");
  CHECK_THROWS(std::invalid_argument, make_coarse_centroids(bad.data(), 64, 32));
}

RAGFIND_TEST_MAIN
