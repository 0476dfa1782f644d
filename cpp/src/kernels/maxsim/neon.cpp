// MaxSim, AArch64 Advanced SIMD (NEON; mandatory on AArch64, compiled on aarch64 targets only).
// 4 lanes, 32 vector registers: a 4-register panel row (16 query tokens, half a panel) x 5
// document tokens gives 20 accumulators, plus 4 query registers and 5 document values (GCC
// turns the broadcasts into by-element fmla, one register per token): 29 registers, no
// spills. 6 tokens (34 registers) spilled two accumulators per step in GCC 12's output.
// Narrower slices (the query's last < 16 tokens) use taller tiles.
#include <arm_neon.h>

#include "tile.hpp"

namespace ragfind::late {
namespace {

struct NeonVec {
  using reg = float32x4_t;
  static constexpr int lanes = 4;
  static reg zero() { return vdupq_n_f32(0.0f); }
  static reg load(const float* p) { return vld1q_f32(p); }
  static reg bcast(const float* p) { return vld1q_dup_f32(p); }
  static reg fma(reg a, reg b, reg c) { return vfmaq_f32(c, a, b); }
  static reg max(reg a, reg b) { return vmaxq_f32(a, b); }
  static void store(float* p, reg v) { vst1q_f32(p, v); }
  static void widen(const uint16_t* src, float* dst, int64_t count) {
    int64_t i = 0;
    for (; i + 8 <= count; i += 8) {
      const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(src + i));
      vst1q_f32(dst + i, vcvt_f32_f16(vget_low_f16(h)));
      vst1q_f32(dst + i + 4, vcvt_high_f32_f16(h));
    }
    for (; i < count; ++i) dst[i] = half_to_float(src[i]);
  }
};

}  // namespace

void maxsim_f32_neon(const float* panels, int64_t m, int64_t dim, const float* doc, int64_t n, float* maxima) {
  maxsim_doc_f32<NeonVec, 4, 8, 8, 6, 5>(panels, m, dim, doc, n, maxima);
}

void maxsim_f16_neon(const float* panels, int64_t m, int64_t dim, const uint16_t* doc, int64_t n, float* maxima,
                     float* scratch) {
  maxsim_doc_f16<NeonVec, 4, 8, 8, 6, 5>(panels, m, dim, doc, n, maxima, scratch);
}

}  // namespace ragfind::late
