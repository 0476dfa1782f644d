// Rank and score fusion: intern ids to dense codes, accumulate per code, radix-rank the scores.
// See fusion.hpp for the contract; everything here is linear in the total input size.
#include "ragfind/fusion.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace ragfind::fusion {
namespace {

// Scratch reused across calls on one thread (the bindings release the GIL, so several threads
// may fuse at once; each gets its own).
struct Workspace {
  std::vector<int32_t> table;         // hash slots -> code, -1 = empty
  std::vector<int64_t> unique_ids;    // code -> id, first-appearance order
  std::vector<uint32_t> codes;        // per input position (all lists concatenated)
  std::vector<double> scores;         // code -> fused score
  std::vector<double> aux;            // code -> second accumulator (count for mnz, seen flag)
  std::vector<int32_t> last_list;     // code -> last list that held it (duplicate check)
  std::vector<int32_t> first_pos;     // code -> its position in that list
  std::vector<uint64_t> keys, keys_tmp;
  std::vector<uint32_t> order;
  std::vector<uint32_t> hist;
  std::vector<double> rrf_table;      // 1 / (k + r + 1) for the last k seen
  double rrf_table_k = -1.0;
};

Workspace& workspace() {
  thread_local Workspace ws;
  return ws;
}

inline uint64_t hash_id(int64_t id) {
  // Fibonacci hashing: good spread for the sequential ids indexes typically hand out.
  return static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ull;
}

[[noreturn]] void throw_duplicate(size_t list, size_t pos, size_t first_pos, int64_t id) {
  throw DuplicateIdError(list, pos, first_pos,
                         "lists[" + std::to_string(list) + "] holds id " + std::to_string(id) +
                             " twice (positions " + std::to_string(first_pos) + " and " +
                             std::to_string(pos) + "); each list must rank an id at most once");
}

// Step 1: codes in first-appearance order, duplicate check per list. Returns the number of codes.
size_t intern(const std::vector<RankedList>& lists, const Options& opt, Workspace& ws) {
  size_t total = 0;
  for (const auto& l : lists) total += l.size;
  ws.codes.resize(total);
  if (opt.dense_codes > 0) {
    const size_t n_codes = opt.dense_codes;
    ws.last_list.assign(n_codes, -1);
    ws.first_pos.resize(n_codes);
    size_t at = 0;
    for (size_t li = 0; li < lists.size(); ++li) {
      const auto& l = lists[li];
      for (size_t r = 0; r < l.size; ++r) {
        const int64_t c = l.ids[r];
        if (c < 0 || static_cast<size_t>(c) >= n_codes)
          throw std::invalid_argument("dense code " + std::to_string(c) + " out of range");
        if (ws.last_list[c] == static_cast<int32_t>(li))
          throw_duplicate(li, r, static_cast<size_t>(ws.first_pos[c]), c);
        ws.last_list[c] = static_cast<int32_t>(li);
        ws.first_pos[c] = static_cast<int32_t>(r);
        ws.codes[at++] = static_cast<uint32_t>(c);
      }
    }
    return n_codes;
  }
  size_t cap = 16;
  while (cap < 2 * total) cap <<= 1;
  const int shift = 64 - __builtin_ctzll(cap);
  const uint64_t mask = cap - 1;
  ws.table.assign(cap, -1);
  ws.unique_ids.clear();
  ws.unique_ids.reserve(total);
  ws.last_list.resize(total);
  ws.first_pos.resize(total);
  size_t at = 0;
  for (size_t li = 0; li < lists.size(); ++li) {
    const auto& l = lists[li];
    const int32_t li32 = static_cast<int32_t>(li);
    for (size_t r = 0; r < l.size; ++r) {
      const int64_t id = l.ids[r];
      uint64_t slot = hash_id(id) >> shift;
      int32_t code;
      for (;;) {
        code = ws.table[slot];
        if (code < 0) {
          code = static_cast<int32_t>(ws.unique_ids.size());
          ws.table[slot] = code;
          ws.unique_ids.push_back(id);
          ws.last_list[code] = -1;
          break;
        }
        if (ws.unique_ids[code] == id) break;
        slot = (slot + 1) & mask;
      }
      if (ws.last_list[code] == li32) throw_duplicate(li, r, static_cast<size_t>(ws.first_pos[code]), id);
      ws.last_list[code] = li32;
      ws.first_pos[code] = static_cast<int32_t>(r);
      ws.codes[at++] = static_cast<uint32_t>(code);
    }
  }
  return ws.unique_ids.size();
}

// Maps a double to a uint64 whose unsigned order is the double's descending order.
inline uint64_t descending_key(double s) {
  s += 0.0;  // -0.0 -> +0.0 so the two zeros tie
  uint64_t bits;
  std::memcpy(&bits, &s, sizeof bits);
  const uint64_t ascending = (bits >> 63) ? ~bits : (bits | (1ull << 63));
  return ~ascending;
}

// Step 3: ranks codes 0..n-1 by descending score, ties by code (first appearance).
// Each code becomes one uint64: the high 32 bits of its order-preserving score key above the code.
// A stable LSD radix sort (8-bit digits) runs only over the key bits that actually vary across
// the scores (RRF scores share their sign and most exponent bits, so that is 2-3 passes), and a
// final insertion pass orders the rare neighbours whose high key bits tie but whose full doubles
// differ. Exact, linear in practice, and stable.
void rank_codes(size_t n, Workspace& ws) {
  ws.keys.resize(n);
  ws.keys_tmp.resize(n);
  ws.order.resize(n);
  if (n == 0) return;
  uint64_t* a = ws.keys.data();
  uint64_t* b = ws.keys_tmp.data();
  uint64_t first_hi = descending_key(ws.scores[0]) >> 32, varying = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t hi = descending_key(ws.scores[i]) >> 32;
    varying |= hi ^ first_hi;
    a[i] = (hi << 32) | static_cast<uint64_t>(i);
  }
  const int bits = varying ? 64 - __builtin_clzll(varying) : 0;
  // Digit width: as few passes as possible without the prefix sums dominating a short input.
  const int passes = (bits + 11) / 12;
  const int width = passes ? (bits + passes - 1) / passes : 0;
  const uint64_t dmask = (1ull << width) - 1;
  std::vector<uint32_t>& hist = ws.hist;
  for (int p = 0; p < passes; ++p) {
    const int shift = 32 + p * width;
    hist.assign(size_t(1) << width, 0);
    for (size_t i = 0; i < n; ++i) ++hist[(a[i] >> shift) & dmask];
    uint32_t sum = 0;
    for (auto& h : hist) { const uint32_t c = h; h = sum; sum += c; }
    for (size_t i = 0; i < n; ++i) b[hist[(a[i] >> shift) & dmask]++] = a[i];
    std::swap(a, b);
  }
  uint32_t* order = ws.order.data();
  const double* sc = ws.scores.data();
  order[0] = static_cast<uint32_t>(a[0]);
  for (size_t i = 1; i < n; ++i) {
    const uint32_t c = static_cast<uint32_t>(a[i]);
    size_t j = i;
    // Only neighbours with the same high key can be out of order.
    while (j > 0 && (a[j - 1] >> 32) == (a[i] >> 32) &&
           (sc[order[j - 1]] < sc[c] || (sc[order[j - 1]] == sc[c] && order[j - 1] > c))) {
      order[j] = order[j - 1];
      --j;
    }
    order[j] = c;
  }
}

void emit(size_t n_codes, const Options& opt, Workspace& ws, Fused& out) {
  rank_codes(n_codes, ws);
  const size_t n_out = (opt.top_k > 0 && opt.top_k < n_codes) ? opt.top_k : n_codes;
  out.ids.resize(n_out);
  out.scores.resize(n_out);
  const bool dense = opt.dense_codes > 0;
  for (size_t i = 0; i < n_out; ++i) {
    const uint32_t c = ws.order[i];
    out.ids[i] = dense ? static_cast<int64_t>(c) : ws.unique_ids[c];
    out.scores[i] = ws.scores[c];
  }
}

void check_weights(const std::vector<RankedList>& lists, const Options& opt) {
  if (!opt.weights) return;
  for (size_t i = 0; i < lists.size(); ++i)
    if (!std::isfinite(opt.weights[i]))
      throw std::invalid_argument("weights[" + std::to_string(i) + "] = " + std::to_string(opt.weights[i]) +
                                  " is not finite; expected a finite number");
}

}  // namespace

void rrf(const std::vector<RankedList>& lists, double k, const Options& opt, Fused& out) {
  if (!(k >= 0.0) || !std::isfinite(k))
    throw std::invalid_argument("k = " + std::to_string(k) + "; expected a finite number >= 0");
  check_weights(lists, opt);
  Workspace& ws = workspace();
  const size_t n_codes = intern(lists, opt, ws);
  size_t longest = 0;
  for (const auto& l : lists) longest = std::max(longest, l.size);
  if (ws.rrf_table_k != k || ws.rrf_table.size() < longest) {
    ws.rrf_table.resize(std::max(longest, ws.rrf_table.size()));
    for (size_t r = 0; r < ws.rrf_table.size(); ++r) ws.rrf_table[r] = 1.0 / (k + static_cast<double>(r) + 1.0);
    ws.rrf_table_k = k;
  }
  ws.scores.assign(n_codes, 0.0);
  const double* inv = ws.rrf_table.data();
  size_t at = 0;
  for (size_t li = 0; li < lists.size(); ++li) {
    const size_t n = lists[li].size;
    const uint32_t* codes = ws.codes.data() + at;
    if (opt.weights && opt.weights[li] != 1.0) {
      const double w = opt.weights[li];
      for (size_t r = 0; r < n; ++r) ws.scores[codes[r]] += w * inv[r];
    } else {
      for (size_t r = 0; r < n; ++r) ws.scores[codes[r]] += inv[r];
    }
    at += n;
  }
  emit(n_codes, opt, ws, out);
}

void fuse_scores(const std::vector<RankedList>& lists, Norm norm, Combine combine, const Options& opt,
                 Fused& out) {
  check_weights(lists, opt);
  for (size_t li = 0; li < lists.size(); ++li) {
    const auto& l = lists[li];
    if (l.size > 0 && !l.scores)
      throw std::invalid_argument("lists[" + std::to_string(li) + "] has no scores; score fusion needs them");
    for (size_t r = 0; r < l.size; ++r)
      if (!std::isfinite(l.scores[r]))
        throw std::invalid_argument("lists[" + std::to_string(li) + "] score at position " + std::to_string(r) +
                                    " is " + std::to_string(l.scores[r]) + "; expected finite scores");
  }
  Workspace& ws = workspace();
  const size_t n_codes = intern(lists, opt, ws);
  const double init = combine == Combine::Max ? -std::numeric_limits<double>::infinity() : 0.0;
  ws.scores.assign(n_codes, init);
  if (combine == Combine::Mnz) ws.aux.assign(n_codes, 0.0);
  size_t at = 0;
  for (size_t li = 0; li < lists.size(); ++li) {
    const auto& l = lists[li];
    const size_t n = l.size;
    const uint32_t* codes = ws.codes.data() + at;
    at += n;
    if (n == 0) continue;
    // scaled = w * (s - shift) * scale
    double shift = 0.0, scale = 1.0;
    switch (norm) {
      case Norm::None:
        break;
      case Norm::MinMax: {
        double lo = l.scores[0], hi = l.scores[0];
        for (size_t r = 1; r < n; ++r) { lo = std::min(lo, l.scores[r]); hi = std::max(hi, l.scores[r]); }
        if (hi > lo) { shift = lo; scale = 1.0 / (hi - lo); }
        else { shift = lo - 1.0; scale = 1.0; }  // constant list: every id maps to 1
        break;
      }
      case Norm::ZScore: {
        double mean = 0.0;
        for (size_t r = 0; r < n; ++r) mean += l.scores[r];
        mean /= static_cast<double>(n);
        double var = 0.0;
        for (size_t r = 0; r < n; ++r) { const double d = l.scores[r] - mean; var += d * d; }
        const double sd = std::sqrt(var / static_cast<double>(n));
        shift = mean;
        scale = sd > 0.0 ? 1.0 / sd : 0.0;
        break;
      }
      case Norm::Max: {
        double hi = l.scores[0];
        for (size_t r = 1; r < n; ++r) hi = std::max(hi, l.scores[r]);
        if (hi > 0.0) scale = 1.0 / hi;
        break;
      }
      case Norm::Sum: {  // Montague & Aslam: shifted to a zero minimum, then to a unit sum
        double lo = l.scores[0], total = 0.0;
        for (size_t r = 1; r < n; ++r) lo = std::min(lo, l.scores[r]);
        for (size_t r = 0; r < n; ++r) total += l.scores[r] - lo;
        if (total > 0.0) { shift = lo; scale = 1.0 / total; }
        else { shift = lo - 1.0; scale = 1.0 / static_cast<double>(n); }  // constant list: uniform
        break;
      }
    }
    const double w = opt.weights ? opt.weights[li] : 1.0;
    for (size_t r = 0; r < n; ++r) {
      const double v = w * ((l.scores[r] - shift) * scale);
      const uint32_t c = codes[r];
      if (combine == Combine::Max) ws.scores[c] = std::max(ws.scores[c], v);
      else ws.scores[c] += v;
      if (combine == Combine::Mnz) ws.aux[c] += 1.0;
    }
  }
  if (combine == Combine::Mnz)
    for (size_t c = 0; c < n_codes; ++c) ws.scores[c] *= ws.aux[c];
  emit(n_codes, opt, ws, out);
}

Norm parse_norm(const std::string& name) {
  if (name == "none") return Norm::None;
  if (name == "min-max" || name == "minmax" || name == "min_max") return Norm::MinMax;
  if (name == "z-score" || name == "zscore" || name == "zmuv") return Norm::ZScore;
  if (name == "max") return Norm::Max;
  if (name == "sum") return Norm::Sum;
  throw std::invalid_argument("norm = '" + name + "'; expected one of 'min-max', 'z-score', 'max', 'sum', 'none'");
}

Combine parse_combine(const std::string& name) {
  if (name == "sum" || name == "wsum" || name == "combsum") return Combine::Sum;
  if (name == "mnz" || name == "combmnz") return Combine::Mnz;
  if (name == "max" || name == "combmax") return Combine::Max;
  throw std::invalid_argument("method = '" + name + "'; expected one of 'sum', 'mnz', 'max'");
}

}  // namespace ragfind::fusion
