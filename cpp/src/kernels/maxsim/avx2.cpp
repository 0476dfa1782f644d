// MaxSim, AVX2 + FMA + F16C (compiled with -mavx2 -mfma -mf16c; dispatched at run time).
// 16 ymm registers: a 4-register panel row (32 query tokens) x 2 document tokens gives the
// 8 independent accumulators needed to hide the FMA latency, plus 4 query and 1 broadcast
// registers. Narrower panels (the query's last < 32 tokens) use taller tiles.
#include <immintrin.h>

#include "tile.hpp"

namespace ragfind::late {
namespace {

struct Avx2Vec {
  using reg = __m256;
  static constexpr int lanes = 8;
  static reg zero() { return _mm256_setzero_ps(); }
  static reg load(const float* p) { return _mm256_loadu_ps(p); }
  static reg bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static reg max(reg a, reg b) { return _mm256_max_ps(a, b); }
  static void store(float* p, reg v) { _mm256_storeu_ps(p, v); }
  static void widen(const uint16_t* src, float* dst, int64_t count) {
    int64_t i = 0;
    for (; i + 8 <= count; i += 8)
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    for (; i < count; ++i) dst[i] = _cvtsh_ss(src[i]);
  }
};

}  // namespace

void maxsim_f32_avx2(const float* panels, int64_t m, int64_t dim, const float* doc, int64_t n, float* maxima) {
  maxsim_doc_f32<Avx2Vec, 2, 8, 6, 1, 1>(panels, m, dim, doc, n, maxima);
}

void maxsim_f16_avx2(const float* panels, int64_t m, int64_t dim, const uint16_t* doc, int64_t n, float* maxima,
                     float* scratch) {
  maxsim_doc_f16<Avx2Vec, 2, 8, 6, 1, 1>(panels, m, dim, doc, n, maxima, scratch);
}

}  // namespace ragfind::late
