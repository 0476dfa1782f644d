// AVX-512F nearest-centroid kernel: 8 rows x 3 vectors of 16 centroids (24 zmm accumulators,
// the row value broadcast from memory into each vfmadd231ps), see kernels.hpp for the blocking.
#include <immintrin.h>

#include "kernels.hpp"

namespace ragfind::dense::kernels {
namespace {

struct Ops {
  using V = __m512;
  using I = __m512i;
  static constexpr size_t L = 16, MR = 8;
  static constexpr int NV = 3;
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V bcast(const float* p) { return _mm512_set1_ps(*p); }
  static V fma(V x, V c, V acc) { return _mm512_fmadd_ps(x, c, acc); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static I iload(const int32_t* p) { return _mm512_loadu_si512(p); }
  static void istore(int32_t* p, I v) { _mm512_storeu_si512(p, v); }
  static I index(int32_t base) {
    return _mm512_add_epi32(_mm512_set1_epi32(base),
                            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  }
  static void update(V s, I j, V& best, I& at) {
    const __mmask16 m = _mm512_cmp_ps_mask(s, best, _CMP_GT_OQ);
    best = _mm512_mask_mov_ps(best, m, s);
    at = _mm512_mask_mov_epi32(at, m, j);
  }
};

void nearest_f32(const float* X, size_t n, const CentroidPanels& P, int64_t* out) {
  nearest_detail::nearest_blocked<Ops>(X, n, P, out);
}

}  // namespace

extern const NearestKernels nearest_avx512 = {"avx512", Ops::L, Ops::L* Ops::NV, nearest_f32};

}  // namespace ragfind::dense::kernels
