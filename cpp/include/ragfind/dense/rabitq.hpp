// RaBitQ 1-bit codes (Gao and Long, SIGMOD 2024): a residual r = x - centroid is normalised,
// rotated by a random orthogonal matrix and stored as the signs of its coordinates (d bits),
// its norm |r| and <xbar, o'>, the inner product of the code's unit vector with the rotated unit
// residual. For any query q, <xbar, Rq> / <xbar, o'> estimates <r / |r|, q> without bias, and
// with high probability its error is below |q| * sqrt((1 - a^2) / a^2) * eps0 / sqrt(d - 1),
// a = <xbar, o'>. A search can thus skip every candidate whose upper bound is below the k-th
// exact score. Scalar code: the bit loops are the reference a SIMD kernel would be tested against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ragfind::dense {

/// The paper's confidence constant (error bound holds with probability about 1 - 2e^{-c eps0^2}).
inline constexpr float kRabitqEps0 = 1.9f;

/// A random d x d orthogonal matrix R (row-major; rotated x is R x), from a seed.
struct RabitqRotation {
  size_t d = 0;
  std::vector<float> R;
};
RabitqRotation make_rabitq_rotation(size_t d, uint64_t seed);

/// out = R x (d floats).
void rabitq_rotate(const RabitqRotation& rot, const float* x, float* out);

/// 64-bit words per code.
inline size_t rabitq_words(size_t d) { return (d + 63) / 64; }

/// Codes of n residuals (n x d): bits[i * words ..] (bit j set when rotated coordinate j >= 0),
/// norm[i] = |r_i|, ipq[i] = <xbar_i, o'_i> (1 for a zero residual).
void encode_rabitq(const RabitqRotation& rot, const float* residuals, size_t n, uint64_t* bits, float* norm,
                   float* ipq);

/// Estimate and error bound of r_i . q from the code, given Rq (the rotated query) and |q|:
/// est = norm * <xbar, Rq> / ipq, bound = norm * |q| * sqrt((1 - ipq^2) / ipq^2) * eps0 / sqrt(d - 1).
void rabitq_estimate(size_t d, const uint64_t* bits, float norm, float ipq, const float* q_rot, float q_norm,
                     float* est, float* bound);

/// rabitq_estimate given xq = <xbar, Rq> = (2 * sum of q_rot over the set bits - sum of q_rot) /
/// sqrt(d), for callers that sum the bits their own way (a search's per-byte tables).
void rabitq_estimate_from_dot(size_t d, double xq, float norm, float ipq, float q_norm, float* est, float* bound);

}  // namespace ragfind::dense
