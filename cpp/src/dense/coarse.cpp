// The int8 first pass over the centroids (coarse.hpp).
//
// Bound: with c = s_c c8 + e_c and q = s_q q16 + e_q, q . c - s_q s_c (q16 . c8) = q . e_c +
// e_q . (s_c c8), so |q . c - approx| <= |q| |e_c| + |e_q| |s_c c8| (Cauchy-Schwarz). A float32
// sum of d products lies within about d * 2^-24 * |q| |c| of the real one whatever the order, so
// a relative slack of 8 times that (at least 1e-3: 40 times it at d = 384) covers the full
// scan's rounding and the first pass's own.
#include "ragfind/dense/coarse.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>

#include "ragfind/dense/similarity.hpp"

namespace ragfind::dense {
namespace {

constexpr int kQueryMax = 16383;  // dot_rows_i8's bound for an exact int32 sum

float up(double x) { return std::nextafter(static_cast<float>(x), std::numeric_limits<float>::infinity()); }

}  // namespace

void best_lists_full(const float* C, size_t nlist, size_t d, const float* q, size_t np, bool l2,
                     std::vector<std::pair<float, int64_t>>& out) {
  const SimilarityKernels& S = similarity_kernels();
  out.resize(nlist);
  for (size_t l = 0; l < nlist; ++l) {
    const float s = l2 ? -S.l2sq_f32(q, C + l * d, d) : S.dot_f32(q, C + l * d, d);
    out[l] = {-s, static_cast<int64_t>(l)};
  }
  auto mid = out.begin() + static_cast<std::ptrdiff_t>(np);
  std::nth_element(out.begin(), mid, out.end());
  std::sort(out.begin(), mid);
  out.resize(np);
}

CoarseCentroids make_coarse_centroids(const float* C, size_t nlist, size_t d) {
  CoarseCentroids cc;
  cc.nlist = nlist;
  cc.d = d;
  cc.codes.resize(nlist * d);
  cc.scale.resize(nlist);
  cc.err.resize(nlist);
  cc.coded.resize(nlist);
  cc.norm.resize(nlist);
  cc.sqnorm.resize(nlist);
  cc.ebound.resize(nlist);
  cc.slack = std::max(1e-3f, 8.f * static_cast<float>(d) * 0x1p-24f);
  for (size_t l = 0; l < nlist; ++l) {
    const float* c = C + l * d;
    float amax = 0.f;
    for (size_t j = 0; j < d; ++j) {
      if (!std::isfinite(c[j])) throw std::invalid_argument("coarse centroids: centroids must be finite");
      amax = std::max(amax, std::fabs(c[j]));
    }
    const float s = amax / 127.f;
    int8_t* code = cc.codes.data() + l * d;
    double e2 = 0.0, k2 = 0.0, n2 = 0.0;
    for (size_t j = 0; j < d; ++j) {
      const long r = s > 0.f ? std::lrint(c[j] / s) : 0;
      code[j] = static_cast<int8_t>(std::clamp<long>(r, -127, 127));
      const double v = static_cast<double>(s) * code[j];
      e2 += (c[j] - v) * (c[j] - v);
      k2 += v * v;
      n2 += static_cast<double>(c[j]) * c[j];
    }
    cc.scale[l] = s;
    cc.err[l] = up(std::sqrt(e2));
    cc.coded[l] = up(std::sqrt(k2));
    cc.norm[l] = up(std::sqrt(n2));
    cc.sqnorm[l] = static_cast<float>(n2);
    cc.ebound[l] = up(cc.err[l] + static_cast<double>(cc.slack) * cc.norm[l]);
    // Scales far from 1 could leave float's range in the products: such a list is always
    // scored exactly (an infinite bound).
    if (amax > 0.f && !(amax >= 1e-15f && amax <= 1e15f)) cc.ebound[l] = std::numeric_limits<float>::infinity();
  }
  return cc;
}

bool coarse_matches(const CoarseCentroids& cc, const float* C, size_t nlist, size_t d) {
  if (cc.nlist != nlist || cc.d != d) return false;
  for (size_t l : {size_t(0), nlist - 1}) {
    if (nlist == 0) break;
    double e2 = 0.0;
    for (size_t j = 0; j < d; ++j) {
      const double t = C[l * d + j] - static_cast<double>(cc.scale[l]) * cc.codes[l * d + j];
      e2 += t * t;
    }
    if (!(std::sqrt(e2) <= cc.err[l] * (1.0 + 1e-6))) return false;
  }
  return true;
}

void best_lists(const CoarseCentroids& cc, const float* C, const float* q, size_t np, bool l2, CoarseScratch& w,
                std::vector<std::pair<float, int64_t>>& out) {
  const size_t nlist = cc.nlist, d = cc.d;
  float qmax = 0.f;
  for (size_t j = 0; j < d; ++j) qmax = std::max(qmax, std::fabs(q[j]));
  // Far from 1, the products of the scales could leave float's range: the full scan.
  if (np >= nlist || !(qmax >= 1e-20f && qmax <= 1e20f)) return best_lists_full(C, nlist, d, q, np, l2, out);
  const SimilarityKernels& S = similarity_kernels();
  const float sq = qmax / static_cast<float>(kQueryMax);
  w.q16.resize(d);
  // Plain float loops that vectorise, on x = q / sq (|x| <= 16383: no underflow whatever q's
  // scale). Adding and taking away 1.5 * 2^23 rounds x to an integer; any rounding would do, as
  // the bound uses the residual it leaves. The float sums of squares are within d * 2^-24 of
  // the real ones, so scaled up by twice that they bound them; x's own rounding (2^-24 |x|) is
  // under the 2^-21 |q| added to the residual.
  const float inv = 1.f / sq;
  float e2 = 0.f, x2 = 0.f;
  for (size_t j = 0; j < d; ++j) {
    const float x = q[j] * inv;
    const float r = (x + 12582912.f) - 12582912.f;
    w.q16[j] = static_cast<int16_t>(r);
    e2 += (x - r) * (x - r);
    x2 += x * x;
  }
  const double grow = 1.0 + 2.0 * static_cast<double>(d + 2) * 0x1p-24;
  const float qn = up(std::sqrt(x2 * grow) * sq * (1.0 + 0x1p-22));
  const float eqn = up(std::sqrt(e2 * grow) * sq + 0x1p-21 * qn);
  const float qsq = x2 * sq * sq;  // l2: a shift common to every list (its rounding cancels)
  w.approx.resize(nlist);
  w.bound.resize(nlist);
  float* a = w.approx.data();
  float* b = w.bound.data();
  S.dot_rows_i8(w.q16.data(), cc.codes.data(), nlist, d, a);
  // a becomes the estimated score and b its bound (two branch-free loops: they vectorise).
  const float* scale = cc.scale.data();
  const float* ebound = cc.ebound.data();
  const float* coded = cc.coded.data();
  if (!l2) {
    for (size_t l = 0; l < nlist; ++l) {
      a[l] *= sq * scale[l];
      b[l] = qn * ebound[l] + eqn * coded[l];
    }
  } else {
    const float* norm = cc.norm.data();
    const float* sqnorm = cc.sqnorm.data();
    const float slack = cc.slack;
    for (size_t l = 0; l < nlist; ++l) {
      const float r = qn + norm[l];
      a[l] = 2.f * (a[l] * (sq * scale[l])) - sqnorm[l] - qsq;
      b[l] = 2.f * (qn * ebound[l] + eqn * coded[l]) + slack * r * r;
    }
  }
  // The np-th largest lower end: each of the np best lists' exact scores reaches it, so a list
  // whose upper end falls short of it is not among them. A bounded min-heap finds it (most
  // lists fail its first compare).
  std::vector<float>& h = w.heap;
  h.resize(np);
  for (size_t l = 0; l < np; ++l) h[l] = a[l] - b[l];
  std::make_heap(h.begin(), h.end(), std::greater<float>());
  for (size_t l = np; l < nlist; ++l) {
    const float lo = a[l] - b[l];
    if (lo > h.front()) {
      std::pop_heap(h.begin(), h.end(), std::greater<float>());
      h.back() = lo;
      std::push_heap(h.begin(), h.end(), std::greater<float>());
    }
  }
  const float floor = h.front();
  if (!std::isfinite(floor)) return best_lists_full(C, nlist, d, q, np, l2, out);
  std::vector<std::pair<float, int64_t>>& cand = w.cand;
  cand.clear();
  for (size_t l = 0; l < nlist; ++l) {
    if (a[l] + b[l] < floor) continue;  // NaN stays a candidate
    const float* c = C + l * d;
    const float s = l2 ? -S.l2sq_f32(q, c, d) : S.dot_f32(q, c, d);
    cand.emplace_back(-s, static_cast<int64_t>(l));
  }
  auto mid = cand.begin() + static_cast<std::ptrdiff_t>(std::min(np, cand.size()));
  std::partial_sort(cand.begin(), mid, cand.end());
  out.assign(cand.begin(), mid);
}

}  // namespace ragfind::dense
