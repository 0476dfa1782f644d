// Product quantisation: codebook training, encoding and the 4-bit fast-scan layout.
//
// Training and encoding reuse the IVF k-means and its nearest-centroid kernel on one sub-space
// at a time (copied out contiguous: the kernel reads rows of d floats).
#include "ragfind/dense/pq.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "ragfind/dense/kmeans.hpp"
#include "ragfind/dense/similarity.hpp"

namespace ragfind::dense {
namespace {

void check_shape(size_t d, size_t m, size_t bits) {
  if (m == 0 || d % m != 0) throw std::invalid_argument("pq: d must be a positive multiple of m");
  if (bits != 4 && bits != 8) throw std::invalid_argument("pq: bits must be 4 or 8");
  if (m > 256) throw std::invalid_argument("pq: at most 256 sub-spaces");
}

// Sub-space j of the n rows of X, as n x dsub contiguous floats.
void sub_rows(const float* X, size_t n, size_t d, size_t j, size_t dsub, float* out) {
  for (size_t i = 0; i < n; ++i) std::memcpy(out + i * dsub, X + i * d + j * dsub, dsub * sizeof(float));
}

}  // namespace

PqCodebook train_pq(const float* X, size_t n, size_t d, size_t m, size_t bits, int iters, uint64_t seed, int threads) {
  check_shape(d, m, bits);
  PqCodebook pq;
  pq.d = d;
  pq.m = m;
  pq.bits = bits;
  pq.dsub = d / m;
  pq.ksub = size_t(1) << bits;
  if (n < pq.ksub) throw std::invalid_argument("pq: need at least 2^bits training rows");
  pq.codewords.resize(m * pq.ksub * pq.dsub);
  std::vector<float> sub(n * pq.dsub);
  for (size_t j = 0; j < m; ++j) {
    sub_rows(X, n, d, j, pq.dsub, sub.data());
    train_kmeans(sub.data(), n, pq.dsub, pq.ksub, Metric::L2, iters, seed + j, threads,
                 pq.codewords.data() + j * pq.ksub * pq.dsub);
  }
  return pq;
}

void encode_pq(const PqCodebook& pq, const float* X, size_t n, int threads, uint8_t* codes) {
  if (n == 0) return;
  std::vector<float> sub(n * pq.dsub);
  std::vector<int64_t> nearest(n);
  for (size_t j = 0; j < pq.m; ++j) {
    sub_rows(X, n, pq.d, j, pq.dsub, sub.data());
    assign_nearest(sub.data(), n, pq.dsub, pq.codewords.data() + j * pq.ksub * pq.dsub, pq.ksub, Metric::L2, threads,
                   nearest.data());
    for (size_t i = 0; i < n; ++i) codes[i * pq.m + j] = static_cast<uint8_t>(nearest[i]);
  }
}

void decode_pq(const PqCodebook& pq, const uint8_t* codes, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < pq.m; ++j) {
      const float* c = pq.codewords.data() + (j * pq.ksub + codes[i * pq.m + j]) * pq.dsub;
      std::memcpy(out + i * pq.d + j * pq.dsub, c, pq.dsub * sizeof(float));
    }
}

void pq_lut_ip(const PqCodebook& pq, const float* q, float* lut) {
  for (size_t j = 0; j < pq.m; ++j)
    for (size_t c = 0; c < pq.ksub; ++c) {
      const float* w = pq.codewords.data() + (j * pq.ksub + c) * pq.dsub;
      const float* qj = q + j * pq.dsub;
      float s = 0.f;
      for (size_t t = 0; t < pq.dsub; ++t) s += qj[t] * w[t];
      lut[j * pq.ksub + c] = s;
    }
}

void pack_pq4(const uint8_t* codes, size_t n, size_t m, uint8_t* out) {
  const size_t mpad = pq4_mpad(m), nblocks = (n + kPqBlock - 1) / kPqBlock;
  std::memset(out, 0, nblocks * mpad * 16);
  for (size_t i = 0; i < n; ++i) {
    const size_t b = i / kPqBlock, r = i % kPqBlock;
    const int shift = r < 16 ? 0 : 4;
    for (size_t j = 0; j < m; ++j)
      out[(b * mpad + j) * 16 + r % 16] |= static_cast<uint8_t>((codes[i * m + j] & 15) << shift);
  }
}

Pq4Lut quantise_pq4_lut(const float* lut, size_t m) {
  Pq4Lut q;
  const size_t mpad = pq4_mpad(m);
  q.lut8.assign(mpad * 16, 0);
  std::vector<float> lo(m);
  float span = 0.f;
  double bias = 0.0;
  for (size_t j = 0; j < m; ++j) {
    const float* t = lut + j * 16;
    const float mn = *std::min_element(t, t + 16), mx = *std::max_element(t, t + 16);
    lo[j] = mn;
    bias += mn;
    span = std::max(span, mx - mn);
  }
  // One scale for every sub-space (the bytes are summed), set by the widest table.
  q.scale = span > 0.f && std::isfinite(span) ? span / 255.f : 1.f;
  q.bias = static_cast<float>(bias);
  const float inv = 1.f / q.scale;
  for (size_t j = 0; j < m; ++j)
    for (size_t c = 0; c < 16; ++c) {
      const float v = std::nearbyint((lut[j * 16 + c] - lo[j]) * inv);
      q.lut8[j * 16 + c] = v >= 255.f ? 255 : v >= 0.f ? static_cast<uint8_t>(v) : 0;  // NaN -> 0
    }
  return q;
}

size_t ivf_pq_search_one(const IvfPqView& v, const float* q, size_t k, size_t nprobe, size_t rerank, int64_t* out_pos,
                         float* out_scores) {
  const PqCodebook& pq = *v.pq;
  const size_t d = pq.d, nlist = v.nlist;
  if (k == 0 || nlist == 0) return 0;
  // Centroid scores, the nprobe best.
  const SimilarityKernels& S = similarity_kernels();
  std::vector<float> cscore(nlist);
  S.dot_rows_f32(q, v.centroids, nlist, d, cscore.data());
  std::vector<std::pair<float, int64_t>> cs(nlist);
  for (size_t l = 0; l < nlist; ++l) cs[l] = {-cscore[l], static_cast<int64_t>(l)};
  const size_t np = std::min(std::max<size_t>(nprobe, 1), nlist);
  std::partial_sort(cs.begin(), cs.begin() + static_cast<std::ptrdiff_t>(np), cs.end());
  std::vector<float> lut(pq.m * 16);
  pq_lut_ip(pq, q, lut.data());
  const Pq4Lut l8 = quantise_pq4_lut(lut.data(), pq.m);
  const size_t mpad = pq4_mpad(pq.m);
  const Pq4ScanKernels& K = pq4_scan_kernels();
  // Estimates of every scanned row, as (-estimate, position) so the best sort first.
  std::vector<std::pair<float, int64_t>> cand;
  std::vector<uint16_t> sums;
  auto scan_list = [&](size_t p) {
    const size_t l = static_cast<size_t>(cs[p].second);
    const size_t n = static_cast<size_t>(v.len[l]), r0 = static_cast<size_t>(v.row0[l]);
    if (n == 0) return;
    const size_t nb = (n + kPqBlock - 1) / kPqBlock;
    sums.resize(nb * kPqBlock);
    K.scan(v.blocks + (r0 / kPqBlock) * mpad * 16, nb, mpad, l8.lut8.data(), sums.data());
    const float base = -cs[p].first + l8.bias;
    const int64_t first = v.pos == nullptr ? v.start[l] : 0;
    for (size_t i = 0; i < n; ++i) {
      const int64_t at = v.pos == nullptr ? first + static_cast<int64_t>(i) : v.pos[r0 + i];
      if (at < -1 || at >= static_cast<int64_t>(v.n_exact))
        throw std::invalid_argument("ivf_pq_search: pos holds a row outside exact");
      if (at >= 0 && (v.allowed == nullptr || v.allowed[at] != 0)) cand.emplace_back(-(base + l8.scale * sums[i]), at);
    }
  };
  for (size_t p = 0; p < np; ++p) scan_list(p);
  if (cand.size() < k && np < nlist) {
    std::sort(cs.begin() + static_cast<std::ptrdiff_t>(np), cs.end());
    for (size_t p = np; cand.size() < k && p < nlist; ++p) scan_list(p);
  }
  const size_t R = std::min(cand.size(), std::max(k, k * rerank));
  std::nth_element(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(R), cand.end());
  cand.resize(R);
  for (auto& [s, at] : cand) s = -S.dot_f32(q, v.exact + static_cast<size_t>(at) * d, d);
  const size_t kk = std::min(k, R);
  std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(kk), cand.end());
  for (size_t i = 0; i < kk; ++i) {
    out_pos[i] = cand[i].second;
    out_scores[i] = -cand[i].first;
  }
  return kk;
}

}  // namespace ragfind::dense
