// Product quantisation (ragfind/dense/pq.hpp) end to end: training and encoding against the
// codeword nearest by a loop, decode error against a fixed-code baseline, and a 4-bit fast scan
// plus exact re-scoring of the best candidates against an exact search.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "check.hpp"
#include "ragfind/dense/pq.hpp"

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

RAGFIND_TEST_MAIN
