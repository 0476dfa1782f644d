// Impact-column kernels, AArch64 Advanced SIMD (NEON): the column sum with 32 documents per
// block (8 float32x4 partial sums kept in registers while every column is added); the posting
// scatter stays scalar (no scatter instruction). Multiply and add are separate instructions
// and this file, like every impact-column file and the posting scorers, is built with
// -ffp-contract=off (CMakeLists.txt), so nothing is fused and the sums are bit-identical to
// the scalar level.
#include <arm_neon.h>

#include "kernels.hpp"

namespace ragfind::splade::kernels {
namespace {

// w * float(col[i..i+8)) as two float32x4.
inline void term(const std::uint16_t* p, float32x4_t w, float32x4_t& lo, float32x4_t& hi) {
  const uint16x8_t c = vld1q_u16(p);
  lo = vmulq_f32(w, vcvtq_f32_u32(vmovl_u16(vget_low_u16(c))));
  hi = vmulq_f32(w, vcvtq_f32_u32(vmovl_high_u16(c)));
}

void sum_columns(float* acc, const std::uint16_t* const* cols, const float* w, std::uint32_t m, std::uint32_t from,
                 std::uint32_t n) {
  std::uint32_t i = 0;
  for (; i + 32 <= n; i += 32) {
    float32x4_t a[8], t[8];
    const std::uint16_t* p = cols[0] + from + i;
    const float32x4_t w0 = vdupq_n_f32(w[0]);
    for (int b = 0; b < 4; ++b) term(p + 8 * b, w0, a[2 * b], a[2 * b + 1]);
    for (std::uint32_t c = 1; c < m; ++c) {
      p = cols[c] + from + i;
      const float32x4_t wc = vdupq_n_f32(w[c]);
      for (int b = 0; b < 4; ++b) term(p + 8 * b, wc, t[2 * b], t[2 * b + 1]);
      for (int r = 0; r < 8; ++r) a[r] = vaddq_f32(a[r], t[r]);
    }
    for (int r = 0; r < 8; ++r) vst1q_f32(acc + i + 4 * r, a[r]);
  }
  sum_columns_each(acc, cols, w, m, from, i, n);
}

// 4 scores per compare; a lane-wise max of the comparison finds a block with a hit.
std::uint32_t next_above(const float* acc, std::uint32_t from, std::uint32_t n, float threshold) {
  const float32x4_t th = vdupq_n_f32(threshold);
  std::uint32_t i = from;
  for (; i + 4 <= n; i += 4) {
    if (vmaxvq_u32(vcgtq_f32(vld1q_f32(acc + i), th)) != 0) break;
  }
  return next_above_each(acc, i, n, threshold);
}

}  // namespace

const ImpactColumnKernels impact_column_neon = {sum_columns, scatter_add_each, next_above};

}  // namespace ragfind::splade::kernels
