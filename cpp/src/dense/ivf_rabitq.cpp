// IVF search over RaBitQ codes: per probed list, the rotated query residual R(q - c) = Rq - Rc is
// quantised to 4 bits and every row's <xbar, R(q - c)> comes from the bit-plane scan kernel; the
// k * rerank best estimates are kept, their upper bounds computed, and they are re-scored in
// decreasing upper-bound order until no remaining bound can beat the k-th exact score.
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

struct Candidate {
  float est, upper;
  int64_t pos;
  uint32_t probe;  // index into the per-list error terms
};

// Heap order of the top k: the worst (lowest score, then higher position) on top.
bool better(const std::pair<float, int64_t>& a, const std::pair<float, int64_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// One list's squared error terms: a row's bound is (norm / ipq) * sqrt((1 - ipq^2) * a2 + b2).
struct ListError {
  float a2, b2;
};

// Per-query scratch reused across the lists of one search.
struct ListScanner {
  const IvfRabitqView& v;
  const RabitqScanKernels& K;
  const float* q_rot;
  std::vector<float> vres;
  RabitqQuery rq;
  std::vector<uint32_t> sums, pops;
  std::vector<float> est;
  double inv_sqrt_d;

  ListScanner(const IvfRabitqView& view, const float* qr)
      : v(view), K(rabitq_scan_kernels()), q_rot(qr), vres(view.d), inv_sqrt_d(1.0 / std::sqrt(double(view.d))) {}

  // Scans list l: calls row(position, estimate of (q - c) . r + c . r) for each row, returns the
  // list's error terms.
  template <typename Row>
  ListError scan(size_t l, Row&& row) {
    const size_t d = v.d, words = rabitq_words(d);
    const int64_t s = v.start[l], n = v.len[l];
    if (s < 0 || n < 0 || static_cast<size_t>(s + n) > v.n_rows)
      throw std::invalid_argument("ivf_rabitq_search: a list lies outside the rows");
    const float* rc = v.rot_centroids + l * d;
    for (size_t j = 0; j < d; ++j) vres[j] = q_rot[j] - rc[j];
    quantise_rabitq_query(vres.data(), d, rq);
    const float eps2 = kRabitqSearchEps * kRabitqSearchEps;
    const ListError e{eps2 * rq.norm * rq.norm / float(d - 1), eps2 * rq.qerr * rq.qerr};
    if (n == 0) return e;
    if (sums.size() < static_cast<size_t>(n)) {
      sums.resize(static_cast<size_t>(n));
      pops.resize(static_cast<size_t>(n));
      est.resize(static_cast<size_t>(n));
    }
    K.scan(v.bits + static_cast<size_t>(s) * words, static_cast<size_t>(n), words, rq.planes.data(), sums.data(),
           pops.data());
    // est = c . r + |r| / ipq * <xbar, v> with <xbar, v> = a * pop + b * sum + c0 (rabitq_xq),
    // in one straight float loop over the list, then the rows offered in order.
    const auto isd = static_cast<float>(inv_sqrt_d);
    const float a = 2 * rq.lo * isd, b = 2 * rq.delta * isd;
    const float c0 = -(rq.lo * static_cast<float>(d) + rq.delta * static_cast<float>(rq.sum_u)) * isd;
    const float *cd = v.cdot + s, *nr = v.norm + s, *ip = v.ipq + s;
    float* ev = est.data();
    for (int64_t i = 0; i < n; ++i) {
      const float xq = a * static_cast<float>(static_cast<int32_t>(pops[size_t(i)])) +
                       b * static_cast<float>(static_cast<int32_t>(sums[size_t(i)])) + c0;
      ev[i] = cd[i] + nr[i] / ip[i] * xq;
    }
    for (int64_t i = 0; i < n; ++i)
      if (v.allowed == nullptr || v.allowed[s + i] != 0) row(s + i, ev[i]);
    return e;
  }
};

float upper_of(const IvfRabitqView& v, int64_t at, float est, ListError e) {
  const float a = v.ipq[at];
  return est + v.norm[at] / a * std::sqrt(std::max(0.f, 1 - a * a) * e.a2 + e.b2);
}

}  // namespace

void ivf_rabitq_list_bounds(const IvfRabitqView& v, const float* q, size_t list, float* est, float* upper) {
  const SimilarityKernels& S = similarity_kernels();
  std::vector<float> q_rot(v.d);
  S.dot_rows_f32(q, v.rotation, v.d, v.d, q_rot.data());
  const float base = S.dot_f32(q, v.centroids + list * v.d, v.d);
  IvfRabitqView all = v;
  all.allowed = nullptr;
  ListScanner sc(all, q_rot.data());
  std::vector<float> e;
  const ListError err = sc.scan(list, [&](int64_t, float x) { e.push_back(base + x); });
  for (size_t i = 0; i < e.size(); ++i) {
    est[i] = e[i];
    upper[i] = upper_of(v, v.start[list] + static_cast<int64_t>(i), e[i], err);
  }
}

size_t ivf_rabitq_search_one(const IvfRabitqView& v, const float* q, size_t k, size_t nprobe, size_t rerank,
                             int64_t* out_pos, float* out_scores, RabitqSearchStats* stats) {
  const size_t d = v.d, nlist = v.nlist;
  if (k == 0 || nlist == 0) return 0;
  const SimilarityKernels& S = similarity_kernels();
  const size_t np = std::min(std::max<size_t>(nprobe, 1), nlist);
  // (-score, list) of the np best lists, best first (ties to the lower list).
  std::vector<std::pair<float, int64_t>> cs;
  if (v.coarse != nullptr) {
    thread_local CoarseScratch w;
    best_lists(*v.coarse, v.centroids, q, np, false, w, cs);
  } else {
    best_lists_full(v.centroids, nlist, d, q, np, false, cs);
  }
  // One rotated query serves every list: R(q - c) = Rq - Rc.
  std::vector<float> q_rot(d);
  S.dot_rows_f32(q, v.rotation, d, d, q_rot.data());
  ListScanner sc(v, q_rot.data());
  // The pool: the R best estimates (ties to the lower position), a heap with the worst on top,
  // so most rows cost one compare against it.
  const size_t R = std::max(k, k * rerank);
  auto by_est = [](const Candidate& a, const Candidate& b) {
    return a.est > b.est || (a.est == b.est && a.pos < b.pos);
  };
  std::vector<Candidate> cand;
  cand.reserve(std::min<size_t>(R, 4096));
  std::vector<ListError> errs;
  size_t scanned = 0;
  auto scan_list = [&](size_t p) {
    const float base = -cs[p].first;
    const auto probe = static_cast<uint32_t>(errs.size());
    errs.push_back(sc.scan(static_cast<size_t>(cs[p].second), [&](int64_t at, float x) {
      ++scanned;
      const Candidate c{base + x, 0.f, at, probe};
      if (cand.size() < R) {
        cand.push_back(c);
        std::push_heap(cand.begin(), cand.end(), by_est);
      } else if (by_est(c, cand.front())) {
        std::pop_heap(cand.begin(), cand.end(), by_est);
        cand.back() = c;
        std::push_heap(cand.begin(), cand.end(), by_est);
      }
    }));
  };
  for (size_t p = 0; p < np; ++p) scan_list(p);
  if (scanned < k && np < nlist) {
    best_lists_full(v.centroids, nlist, d, q, nlist, false, cs);  // the first np as before
    for (size_t p = np; scanned < k && p < nlist; ++p) scan_list(p);
  }
  for (Candidate& c : cand) c.upper = upper_of(v, c.pos, c.est, errs[c.probe]);
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
  if (stats != nullptr) *stats = {scanned, cand.size(), rescored};
  return top.size();
}

}  // namespace ragfind::dense
