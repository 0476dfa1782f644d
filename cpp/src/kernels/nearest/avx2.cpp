// AVX2+FMA nearest-centroid kernel: 6 rows x 2 vectors of 8 centroids (12 ymm accumulators, two
// panel loads and one broadcast: 15 of the 16 registers), see kernels.hpp for the blocking.
#include <immintrin.h>

#include "kernels.hpp"

namespace ragfind::dense::kernels {
namespace {

struct Ops {
  using V = __m256;
  using I = __m256i;
  static constexpr size_t L = 8, MR = 6;
  static constexpr int NV = 2;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static V fma(V x, V c, V acc) { return _mm256_fmadd_ps(x, c, acc); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static I iload(const int32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static void istore(int32_t* p, I v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
  static I index(int32_t base) {
    return _mm256_add_epi32(_mm256_set1_epi32(base), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static void update(V s, I j, V& best, I& at) {
    const V m = _mm256_cmp_ps(s, best, _CMP_GT_OQ);
    best = _mm256_blendv_ps(best, s, m);
    at = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(at), _mm256_castsi256_ps(j), m));
  }
};

void nearest_f32(const float* X, size_t n, const CentroidPanels& P, int64_t* out) {
  nearest_detail::nearest_blocked<Ops>(X, n, P, out);
}

}  // namespace

extern const NearestKernels nearest_avx2 = {"avx2", Ops::L, Ops::L* Ops::NV, nearest_f32};

}  // namespace ragfind::dense::kernels
