// RaBitQ 1-bit codes (Gao and Long, SIGMOD 2024): a residual r = x - centroid is normalised,
// rotated by a random orthogonal matrix and stored as the signs of its coordinates (d bits),
// its norm |r| and <xbar, o'>, the inner product of the code's unit vector with the rotated unit
// residual. For any vector v, <xbar, Rv> / <xbar, o'> estimates <r / |r|, v> without bias, and
// with high probability its error is below |v| * sqrt((1 - a^2) / a^2) * eps0 / sqrt(d - 1),
// a = <xbar, o'>. A search estimates <q - c, r> (v the query's residual to the list centroid,
// whose norm is much smaller than |q|) and adds <q, c> + <c, r> exactly. The query residual is
// quantised to 4 bits a coordinate, so <xbar, Rv> is a weighted count of set bits over four bit
// planes (AND + popcount), the paper's B_q = 4 scan, dispatched per SIMD level.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ragfind/common/cpu.hpp"

namespace ragfind::dense {

using common::SimdLevel;

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
/// norm[i] = |r_i|, ipq[i] = <xbar_i, o'_i> (1 for a zero residual). Rows are encoded on up to
/// `threads` workers (0: one per CPU); each row's code does not depend on the thread count.
void encode_rabitq(const RabitqRotation& rot, const float* residuals, size_t n, uint64_t* bits, float* norm, float* ipq,
                   int threads = 1);

/// Estimate and error bound of r_i . q from the code, given Rq (the rotated query) and |q|:
/// est = norm * <xbar, Rq> / ipq, bound = norm * |q| * sqrt((1 - ipq^2) / ipq^2) * eps0 / sqrt(d - 1).
/// The float reference of the estimator (the search uses the quantised query below).
void rabitq_estimate(size_t d, const uint64_t* bits, float norm, float ipq, const float* q_rot, float q_norm,
                     float* est, float* bound);

/// rabitq_estimate given xq = <xbar, Rq> = (2 * sum of q_rot over the set bits - sum of q_rot) /
/// sqrt(d), for callers that sum the bits their own way.
void rabitq_estimate_from_dot(size_t d, double xq, float norm, float ipq, float q_norm, float* est, float* bound);

/// A rotated query vector v (d floats) quantised to 4 bits a coordinate for the bit-plane scan:
/// v_j ~ lo + delta * u_j with u_j in [0, 15] rounded to nearest; bit j of plane b (planes
/// [b * words, (b + 1) * words)) is bit b of u_j, zero past d.
struct RabitqQuery {
  size_t d = 0, words = 0;
  std::vector<uint64_t> planes;  // 4 x words
  float lo = 0, delta = 0;
  uint32_t sum_u = 0;  // sum of u_j
  float norm = 0;      // |v| (of the float vector)
  float qerr = 0;      // sqrt(sum of (v_j - lo - delta * u_j)^2 / d): the rounding's spread
};

/// Quantises v (d floats) into q (its buffers are reused).
void quantise_rabitq_query(const float* v, size_t d, RabitqQuery& q);

/// <xbar, v> of a code from the scan's sums: the quantised coordinates summed with the code's
/// signs, (lo * (2 pop - d) + delta * (2 s - sum_u)) / sqrt(d), s = sum of u_j over set bits,
/// pop = set bits.
inline double rabitq_xq(const RabitqQuery& q, uint32_t s, uint32_t pop, double inv_sqrt_d) {
  return (double(q.lo) * (2.0 * pop - double(q.d)) + double(q.delta) * (2.0 * s - double(q.sum_u))) * inv_sqrt_d;
}

/// One SIMD level's bit-plane scan.
struct RabitqScanKernels {
  const char* name;
  /// For the n codes at codes[i * words ..]: sums[i] = sum over b < 4 of 2^b * popcount(code_i &
  /// plane_b) (the sum of u_j over the code's set bits) and pops[i] = popcount(code_i). Exact
  /// integers, the same at every level.
  void (*scan)(const uint64_t* codes, size_t n, size_t words, const uint64_t* planes, uint32_t* sums, uint32_t* pops);
};

/// The kernel for the active SIMD level.
const RabitqScanKernels& rabitq_scan_kernels();

/// The kernel compiled for `level` (falls back to the next lower compiled+supported level).
const RabitqScanKernels& rabitq_scan_kernels_at(SimdLevel level);

/// Every scan kernel this build and CPU can run, the levels' and any variant within a level
/// (AVX-512 with and without VPOPCNTDQ), for tests against the scalar reference.
std::vector<const RabitqScanKernels*> rabitq_scan_kernel_variants();

}  // namespace ragfind::dense
