// RaBitQ codes: rotation, encoding (rows rotated a block at a time with the dot-product tile
// kernel, blocks spread over threads), the float estimator with its error bound and the 4-bit
// query quantisation of the bit-plane scan.
#include "ragfind/dense/rabitq.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "ragfind/common/parallel.hpp"
#include "ragfind/dense/similarity.hpp"

namespace ragfind::dense {

RabitqRotation make_rabitq_rotation(size_t d, uint64_t seed) {
  if (d < 2) throw std::invalid_argument("rabitq: need d >= 2");
  // Gram-Schmidt (twice, for float accuracy) on Gaussian rows: a uniformly random rotation.
  RabitqRotation rot;
  rot.d = d;
  std::vector<double> M(d * d);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0.0, 1.0);
  for (double& v : M) v = g(rng);
  for (size_t i = 0; i < d; ++i) {
    double* a = M.data() + i * d;
    for (int pass = 0; pass < 2; ++pass)
      for (size_t j = 0; j < i; ++j) {
        const double* b = M.data() + j * d;
        double s = 0;
        for (size_t t = 0; t < d; ++t) s += a[t] * b[t];
        for (size_t t = 0; t < d; ++t) a[t] -= s * b[t];
      }
    double s = 0;
    for (size_t t = 0; t < d; ++t) s += a[t] * a[t];
    const double inv = 1.0 / std::sqrt(s);
    for (size_t t = 0; t < d; ++t) a[t] *= inv;
  }
  rot.R.assign(M.begin(), M.end());
  return rot;
}

void rabitq_rotate(const RabitqRotation& rot, const float* x, float* out) {
  const size_t d = rot.d;
  for (size_t i = 0; i < d; ++i) {
    const float* r = rot.R.data() + i * d;
    double s = 0;
    for (size_t j = 0; j < d; ++j) s += double(r[j]) * x[j];
    out[i] = static_cast<float>(s);
  }
}

namespace {

// Rows per work item: the rotated block (kEncodeBlock x d floats) stays in cache, and a row's
// place in its block (hence its tile arithmetic) is the same for any thread count.
constexpr size_t kEncodeBlock = 64;

}  // namespace

void encode_rabitq(const RabitqRotation& rot, const float* residuals, size_t n, uint64_t* bits, float* norm, float* ipq,
                   int threads) {
  const size_t d = rot.d, words = rabitq_words(d);
  const double inv_sqrt_d = 1.0 / std::sqrt(double(d));
  const SimilarityKernels& S = similarity_kernels();
  const size_t nblocks = (n + kEncodeBlock - 1) / kEncodeBlock;
  common::parallel_for(nblocks, common::resolve_threads(threads, nblocks), [&](size_t blk, int) {
    const size_t i0 = blk * kEncodeBlock, nb = std::min(kEncodeBlock, n - i0);
    std::vector<float> O(nb * d);
    S.dot_tile_f32(residuals + i0 * d, nb, rot.R.data(), d, d, O.data(), d);  // O[i] = R r_i
    for (size_t i = i0; i < i0 + nb; ++i) {
      const float* o = O.data() + (i - i0) * d;
      double s = 0, l1 = 0;
      uint64_t* b = bits + i * words;
      for (size_t w = 0; w < words; ++w) b[w] = 0;
      for (size_t j = 0; j < d; ++j) {
        s += double(o[j]) * o[j];
        l1 += std::fabs(o[j]);
        if (o[j] >= 0) b[j / 64] |= uint64_t(1) << (j % 64);
      }
      const double nr = std::sqrt(s);
      norm[i] = static_cast<float>(nr);
      // <xbar, o'> = sum |o'_j| / sqrt(d) for the unit residual o' (rotation keeps the norm).
      ipq[i] = nr > 0 ? static_cast<float>(std::min(1.0, l1 / nr * inv_sqrt_d)) : 1.f;
    }
  });
}

void rabitq_estimate(size_t d, const uint64_t* bits, float norm, float ipq, const float* q_rot, float q_norm,
                     float* est, float* bound) {
  // <xbar, q'> = (2 * sum over set bits of q'_j - sum of q'_j) / sqrt(d)
  double pos = 0, all = 0;
  for (size_t j = 0; j < d; ++j) {
    all += q_rot[j];
    if ((bits[j / 64] >> (j % 64)) & 1) pos += q_rot[j];
  }
  rabitq_estimate_from_dot(d, (2 * pos - all) / std::sqrt(double(d)), norm, ipq, q_norm, est, bound);
}

void rabitq_estimate_from_dot(size_t d, double xq, float norm, float ipq, float q_norm, float* est, float* bound) {
  const double a = ipq;
  *est = static_cast<float>(norm * xq / a);
  *bound = static_cast<float>(norm * q_norm * std::sqrt(std::max(0.0, 1 - a * a) / (a * a)) * kRabitqEps0 /
                              std::sqrt(double(d - 1)));
}

void quantise_rabitq_query(const float* v, size_t d, RabitqQuery& q) {
  // This runs once per probed list, about as often as the scan of a short list, so the loops
  // keep eight independent accumulators (vectorised without reassociating float sums) and the
  // planes take 16 bits at a time from a byte mask (SSE2, the x86-64 baseline; a bit loop
  // elsewhere).
  q.d = d;
  q.words = rabitq_words(d);
  q.planes.assign(4 * q.words, 0);
  constexpr size_t L = 8;
  float lo8[L], hi8[L], s8[L];
  for (size_t t = 0; t < L; ++t) lo8[t] = hi8[t] = v[0], s8[t] = 0;
  size_t j = 0;
  for (; j + L <= d; j += L)
    for (size_t t = 0; t < L; ++t) {
      const float x = v[j + t];
      lo8[t] = x < lo8[t] ? x : lo8[t];
      hi8[t] = x > hi8[t] ? x : hi8[t];
      s8[t] += x * x;
    }
  for (; j < d; ++j) {
    lo8[0] = std::min(lo8[0], v[j]);
    hi8[0] = std::max(hi8[0], v[j]);
    s8[0] += v[j] * v[j];
  }
  float lo = lo8[0], hi = hi8[0], s2 = 0;
  for (size_t t = 0; t < L; ++t) lo = std::min(lo, lo8[t]), hi = std::max(hi, hi8[t]), s2 += s8[t];
  q.lo = lo;
  q.delta = hi > lo ? (hi - lo) / 15.f : 0.f;
  const float inv = q.delta > 0 ? 1.f / q.delta : 0.f;
  alignas(16) uint8_t u[64];
  uint32_t sum_u = 0;
  float e8[L] = {};
  for (size_t w = 0; w < q.words; ++w) {
    const size_t j0 = w * 64, m = std::min<size_t>(64, d - j0);
    for (size_t t = 0; t < 64; ++t) {
      // (v - lo) * inv lies in [0, 15] up to rounding: +0.5 and truncation round to nearest.
      const int x = t < m ? static_cast<int>((v[j0 + t] - lo) * inv + 0.5f) : 0;
      u[t] = static_cast<uint8_t>(x > 15 ? 15 : x);
    }
    for (size_t t = 0; t < m; ++t) {
      sum_u += u[t];
      const float e = v[j0 + t] - (lo + q.delta * static_cast<float>(u[t]));
      e8[t % L] += e * e;
    }
    uint64_t p[4] = {0, 0, 0, 0};
#if defined(__SSE2__)
    for (size_t c = 0; c < 4; ++c) {
      // Shifting the 16-bit lanes left by 7 - b brings bit b of every byte to its top bit
      // (u < 16: the low byte's other bits stop below the high byte's top bit).
      const __m128i x = _mm_load_si128(reinterpret_cast<const __m128i*>(u + 16 * c));
      const auto mask = [](__m128i y) { return static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(y))); };
      p[0] |= mask(_mm_slli_epi16(x, 7)) << (16 * c);
      p[1] |= mask(_mm_slli_epi16(x, 6)) << (16 * c);
      p[2] |= mask(_mm_slli_epi16(x, 5)) << (16 * c);
      p[3] |= mask(_mm_slli_epi16(x, 4)) << (16 * c);
    }
#else
    for (size_t t = 0; t < 64; ++t)
      for (int b = 0; b < 4; ++b) p[b] |= static_cast<uint64_t>((u[t] >> b) & 1) << t;
#endif
    for (int b = 0; b < 4; ++b) q.planes[size_t(b) * q.words + w] = p[b];
  }
  float e2 = 0;
  for (float e : e8) e2 += e;
  q.sum_u = sum_u;
  q.norm = std::sqrt(s2);
  q.qerr = std::sqrt(e2 / static_cast<float>(d));
}

}  // namespace ragfind::dense
