// NEON nearest-centroid kernel: 8 rows x 2 vectors of 4 centroids (16 q-register accumulators,
// fmla by a broadcast row value), see kernels.hpp for the blocking.
#include <arm_neon.h>

#include "kernels.hpp"

namespace ragfind::dense::kernels {
namespace {

struct Ops {
  using V = float32x4_t;
  using I = int32x4_t;
  static constexpr size_t L = 4, MR = 8;
  static constexpr int NV = 2;
  static V zero() { return vdupq_n_f32(0.f); }
  static V load(const float* p) { return vld1q_f32(p); }
  static void store(float* p, V v) { vst1q_f32(p, v); }
  static V bcast(const float* p) { return vld1q_dup_f32(p); }
  static V fma(V x, V c, V acc) { return vfmaq_f32(acc, x, c); }  // fused: acc + x * c
  static V add(V a, V b) { return vaddq_f32(a, b); }
  static I iload(const int32_t* p) { return vld1q_s32(p); }
  static void istore(int32_t* p, I v) { vst1q_s32(p, v); }
  static I index(int32_t base) {
    const int32_t iota[4] = {0, 1, 2, 3};
    return vaddq_s32(vdupq_n_s32(base), vld1q_s32(iota));
  }
  static void update(V s, I j, V& best, I& at) {
    const uint32x4_t m = vcgtq_f32(s, best);  // false for NaN
    best = vbslq_f32(m, s, best);
    at = vbslq_s32(m, j, at);
  }
};

void nearest_f32(const float* X, size_t n, const CentroidPanels& P, int64_t* out) {
  nearest_detail::nearest_blocked<Ops>(X, n, P, out);
}

}  // namespace

extern const NearestKernels nearest_neon = {"neon", Ops::L, Ops::L* Ops::NV, nearest_f32};

}  // namespace ragfind::dense::kernels
