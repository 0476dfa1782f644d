// RaBitQ codes: rotation, encoding and the estimator with its error bound.
#include "ragfind/dense/rabitq.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

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

void encode_rabitq(const RabitqRotation& rot, const float* residuals, size_t n, uint64_t* bits, float* norm,
                   float* ipq) {
  const size_t d = rot.d, words = rabitq_words(d);
  const double inv_sqrt_d = 1.0 / std::sqrt(double(d));
  std::vector<float> o(d);
  for (size_t i = 0; i < n; ++i) {
    rabitq_rotate(rot, residuals + i * d, o.data());
    double s = 0;
    for (size_t j = 0; j < d; ++j) s += double(o[j]) * o[j];
    const double nr = std::sqrt(s);
    uint64_t* b = bits + i * words;
    for (size_t w = 0; w < words; ++w) b[w] = 0;
    double l1 = 0;
    for (size_t j = 0; j < d; ++j) {
      if (o[j] >= 0) b[j / 64] |= uint64_t(1) << (j % 64);
      l1 += std::fabs(o[j]);
    }
    norm[i] = static_cast<float>(nr);
    // <xbar, o'> = sum |o'_j| / sqrt(d) for the unit residual o' (rotation keeps the norm).
    ipq[i] = nr > 0 ? static_cast<float>(l1 / nr * inv_sqrt_d) : 1.f;
  }
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

}  // namespace ragfind::dense
