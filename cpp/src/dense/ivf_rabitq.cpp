// IVF search over RaBitQ codes: estimate every admitted row of the probed lists, keep the
// k * rerank best estimates, re-score them in decreasing upper-bound order until no remaining
// bound can beat the k-th exact score. A code's bit sum is read a byte at a time from per-query
// tables (d / 8 look-ups a row instead of d bit tests); little-endian layout of the 64-bit words.
#include "ragfind/dense/ivf_rabitq.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

#include "ragfind/dense/rabitq.hpp"
#include "ragfind/dense/similarity.hpp"

namespace ragfind::dense {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the byte tables read 64-bit code words as bytes");

struct Candidate {
  float est, upper;
  int64_t pos;
};

// Heap order of the top k: the worst (lowest score, then higher position) on top.
bool better(const std::pair<float, int64_t>& a, const std::pair<float, int64_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

}  // namespace

size_t ivf_rabitq_search_one(const IvfRabitqView& v, const float* q, size_t k, size_t nprobe, size_t rerank,
                             int64_t* out_pos, float* out_scores, RabitqSearchStats* stats) {
  const size_t d = v.d, nlist = v.nlist, words = rabitq_words(d);
  if (k == 0 || nlist == 0) return 0;
  const SimilarityKernels& S = similarity_kernels();
  std::vector<float> cscore(nlist);
  S.dot_rows_f32(q, v.centroids, nlist, d, cscore.data());
  std::vector<std::pair<float, int64_t>> cs(nlist);
  for (size_t l = 0; l < nlist; ++l) cs[l] = {-cscore[l], static_cast<int64_t>(l)};
  const size_t np = std::min(std::max<size_t>(nprobe, 1), nlist);
  std::partial_sort(cs.begin(), cs.begin() + static_cast<std::ptrdiff_t>(np), cs.end());
  // One rotated query serves every list: q . x = q . c + q . r, and q . r = (Rq) . (Rr).
  std::vector<float> q_rot(d);
  S.dot_rows_f32(q, v.rotation, d, d, q_rot.data());
  const float q_norm = std::sqrt(S.dot_f32(q, q, d));
  // A code's sum of q_rot over its set bits, a byte at a time: lut[b * 256 + v] is the sum of
  // q_rot over the set bits of value v in byte b (bit j of a code is bit j % 8 of byte j / 8).
  const size_t nbytes = (d + 7) / 8;
  std::vector<float> q_pad(nbytes * 8, 0.f);
  std::copy(q_rot.begin(), q_rot.end(), q_pad.begin());
  std::vector<float> lut(nbytes * 256);
  for (size_t b = 0; b < nbytes; ++b) {
    float* t = lut.data() + b * 256;
    t[0] = 0.f;
    for (unsigned v = 1; v < 256; ++v) t[v] = t[v & (v - 1)] + q_pad[b * 8 + static_cast<unsigned>(__builtin_ctz(v))];
  }
  double q_sum = 0;
  for (size_t j = 0; j < d; ++j) q_sum += q_rot[j];
  const double inv_sqrt_d = 1.0 / std::sqrt(double(d));
  std::vector<Candidate> cand;
  const float widen = kRabitqSearchEps / kRabitqEps0;
  auto scan_list = [&](size_t p) {
    const size_t l = static_cast<size_t>(cs[p].second);
    const int64_t s = v.start[l], n = v.len[l];
    if (s < 0 || n < 0 || static_cast<size_t>(s + n) > v.n_rows)
      throw std::invalid_argument("ivf_rabitq_search: a list lies outside the rows");
    const float base = -cs[p].first;
    for (int64_t at = s; at < s + n; ++at) {
      if (v.allowed != nullptr && v.allowed[at] == 0) continue;
      float est, bound;
      const size_t a = static_cast<size_t>(at);
      const auto* code = reinterpret_cast<const uint8_t*>(v.bits + a * words);
      float pos = 0.f;
      for (size_t b = 0; b < nbytes; ++b) pos += lut[b * 256 + code[b]];
      rabitq_estimate_from_dot(d, (2.0 * pos - q_sum) * inv_sqrt_d, v.norm[a], v.ipq[a], q_norm, &est, &bound);
      cand.push_back({base + est, base + est + widen * bound, at});
    }
  };
  for (size_t p = 0; p < np; ++p) scan_list(p);
  if (cand.size() < k && np < nlist) {
    std::sort(cs.begin() + static_cast<std::ptrdiff_t>(np), cs.end());
    for (size_t p = np; cand.size() < k && p < nlist; ++p) scan_list(p);
  }
  const size_t scanned = cand.size();
  const size_t R = std::min(cand.size(), std::max(k, k * rerank));
  auto by_est = [](const Candidate& a, const Candidate& b) {
    return a.est > b.est || (a.est == b.est && a.pos < b.pos);
  };
  std::nth_element(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(R), cand.end(), by_est);
  cand.resize(R);
  std::sort(cand.begin(), cand.end(), [](const Candidate& a, const Candidate& b) {
    return a.upper > b.upper || (a.upper == b.upper && a.pos < b.pos);
  });
  std::vector<std::pair<float, int64_t>> top;  // a heap of the best k exact scores
  top.reserve(k + 1);
  size_t rescored = 0;
  for (const Candidate& c : cand) {
    if (top.size() == k && c.upper < top.front().first) break;  // so is every later bound
    float s;
    S.dot_rows_f32(q, v.exact + static_cast<size_t>(c.pos) * d, 1, d, &s);
    ++rescored;
    const std::pair<float, int64_t> e{s, c.pos};
    if (top.size() < k) {
      top.push_back(e);
      std::push_heap(top.begin(), top.end(), better);
    } else if (better(e, top.front())) {
      std::pop_heap(top.begin(), top.end(), better);
      top.back() = e;
      std::push_heap(top.begin(), top.end(), better);
    }
  }
  std::sort(top.begin(), top.end(), better);
  for (size_t i = 0; i < top.size(); ++i) {
    out_pos[i] = top[i].second;
    out_scores[i] = top[i].first;
  }
  if (stats != nullptr) *stats = {scanned, R, rescored};
  return top.size();
}

}  // namespace ragfind::dense
