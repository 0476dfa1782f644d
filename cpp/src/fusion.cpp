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

// Position of the first occurrence of ids[r] in ids[0, r) (only called to word an error).
size_t first_position(const RankedList& l, size_t r) {
  for (size_t p = 0; p < r; ++p)
    if (l.ids[p] == l.ids[r]) return p;
  return r;
}

// Step 1: codes in first-appearance order, duplicate check per list. Returns the number of codes.
// Raw pointers into the workspace keep the per-id loop to a hash, one probe and a few stores.
size_t intern(const std::vector<RankedList>& lists, const Options& opt, Workspace& ws) {
  size_t total = 0;
  for (const auto& l : lists) total += l.size;
  ws.codes.resize(total);
  uint32_t* codes = ws.codes.data();
  if (opt.dense_codes > 0) {
    const size_t n_codes = opt.dense_codes;
    ws.last_list.assign(n_codes, -1);
    int32_t* last = ws.last_list.data();
    for (size_t li = 0; li < lists.size(); ++li) {
      const auto& l = lists[li];
      for (size_t r = 0; r < l.size; ++r) {
        const int64_t c = l.ids[r];
        if (c < 0 || static_cast<size_t>(c) >= n_codes)
          throw std::invalid_argument("dense code " + std::to_string(c) + " out of range");
        if (last[c] == static_cast<int32_t>(li)) throw_duplicate(li, r, first_position(l, r), c);
        last[c] = static_cast<int32_t>(li);
        *codes++ = static_cast<uint32_t>(c);
      }
    }
    return n_codes;
  }
  size_t cap = 16;
  while (cap < 2 * total) cap <<= 1;
  const int shift = 64 - __builtin_ctzll(cap);
  const uint64_t mask = cap - 1;
  ws.table.assign(cap, -1);
  ws.unique_ids.resize(total);
  ws.last_list.resize(total);
  int32_t* table = ws.table.data();
  int64_t* uniq = ws.unique_ids.data();
  int32_t* last = ws.last_list.data();
  int32_t n_uniq = 0;
  for (size_t li = 0; li < lists.size(); ++li) {
    const RankedList& l = lists[li];
    const int32_t li32 = static_cast<int32_t>(li);
    const int64_t* ids = l.ids;
    for (size_t r = 0; r < l.size; ++r) {
      const int64_t id = ids[r];
      uint64_t slot = hash_id(id) >> shift;
      int32_t code = table[slot];
      while (code >= 0 && uniq[code] != id) {
        slot = (slot + 1) & mask;
        code = table[slot];
      }
      if (code < 0) {
        code = n_uniq++;
        table[slot] = code;
        uniq[code] = id;
      } else if (last[code] == li32) {
        throw_duplicate(li, r, first_position(l, r), id);
      }
      last[code] = li32;
      *codes++ = static_cast<uint32_t>(code);
    }
  }
  ws.unique_ids.resize(static_cast<size_t>(n_uniq));
  return static_cast<size_t>(n_uniq);
}

// Maps a double to a uint64 whose unsigned order is the double's descending order.
inline uint64_t descending_key(double s) {
  s += 0.0;  // -0.0 -> +0.0 so the two zeros tie
  uint64_t bits;
  std::memcpy(&bits, &s, sizeof bits);
  // Negative: flip every bit; non-negative: flip the sign bit. Branchless, so the key loop vectorises.
  const uint64_t flip = (0 - (bits >> 63)) | (1ull << 63);
  return ~(bits ^ flip);
}

// Step 3: ranks codes 0..n-1 by descending score, ties by code (first appearance).
// Each code becomes one uint64: the high 32 bits of its order-preserving score key above the code.
// A stable LSD radix sort (8-bit digits, at most two passes, both histograms counted in one
// read) orders the codes by the top 16 key bits that actually vary across the scores (RRF scores
// share their sign and most exponent bits). Codes whose sorted prefix ties form short runs, still
// in code order; each run is then ordered exactly by (score, code): insertion sort for the usual
// short runs, std::sort for long ones, so the worst case stays O(n log n). Exact and deterministic.
void rank_codes(size_t n, Workspace& ws) {
  ws.keys.resize(n);
  ws.keys_tmp.resize(n);
  ws.order.resize(n);
  if (n == 0) return;
  constexpr int kDigitBits = 8;
  constexpr int kMaxPasses = 2;
  constexpr uint32_t kDigits = 1u << kDigitBits;
  uint64_t* a = ws.keys.data();
  uint64_t* b = ws.keys_tmp.data();
  const double* sc = ws.scores.data();
  const uint64_t first_hi = descending_key(sc[0]) >> 32;
  uint64_t varying = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t hi = descending_key(sc[i]) >> 32;
    varying |= hi ^ first_hi;
    a[i] = (hi << 32) | static_cast<uint64_t>(i);
  }
  const int bits = varying ? 64 - __builtin_clzll(varying) : 0;
  const int sorted_bits = std::min(bits, kMaxPasses * kDigitBits);
  const int prefix_shift = 32 + (bits - sorted_bits);
  const int n_passes = (sorted_bits + kDigitBits - 1) / kDigitBits;
  if (n_passes > 0) {
    ws.hist.assign(2 * kDigits, 0);
    uint32_t* h0 = ws.hist.data();
    uint32_t* h1 = h0 + kDigits;
    const int shift0 = prefix_shift;
    const int shift1 = prefix_shift + kDigitBits;
    if (n_passes == 1) {
      for (size_t i = 0; i < n; ++i) ++h0[(a[i] >> shift0) & (kDigits - 1)];
    } else {
      for (size_t i = 0; i < n; ++i) {
        const uint64_t x = a[i];
        ++h0[(x >> shift0) & (kDigits - 1)];
        ++h1[(x >> shift1) & (kDigits - 1)];
      }
    }
    for (int p = 0; p < n_passes; ++p) {
      uint32_t* h = p == 0 ? h0 : h1;
      const int shift = p == 0 ? shift0 : shift1;
      uint32_t sum = 0;
      for (uint32_t d = 0; d < kDigits; ++d) { const uint32_t c = h[d]; h[d] = sum; sum += c; }
      for (size_t i = 0; i < n; ++i) {
        const uint64_t x = a[i];
        b[h[(x >> shift) & (kDigits - 1)]++] = x;
      }
      std::swap(a, b);
    }
  }
  uint32_t* order = ws.order.data();
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<uint32_t>(a[i]);
  auto before = [sc](uint32_t x, uint32_t y) { return sc[x] > sc[y] || (sc[x] == sc[y] && x < y); };
  for (size_t i = 0; i + 1 < n;) {
    const uint64_t prefix = a[i] >> prefix_shift;
    if ((a[i + 1] >> prefix_shift) != prefix) { ++i; continue; }  // a run of one: already placed
    size_t j = i + 2;
    while (j < n && (a[j] >> prefix_shift) == prefix) ++j;
    if (j - i > 24) {
      std::sort(order + i, order + j, before);
    } else {
      for (size_t p = i + 1; p < j; ++p) {
        const uint32_t c = order[p];
        size_t q = p;
        for (; q > i && before(c, order[q - 1]); --q) order[q] = order[q - 1];
        order[q] = c;
      }
    }
    i = j;
  }
}

void emit(size_t n_codes, const Options& opt, Workspace& ws, Fused& out) {
  rank_codes(n_codes, ws);
  const size_t n_out = (opt.top_k > 0 && opt.top_k < n_codes) ? opt.top_k : n_codes;
  out.ids.resize(n_out);
  out.scores.resize(n_out);
  const uint32_t* order = ws.order.data();
  const double* scores = ws.scores.data();
  int64_t* ids_out = out.ids.data();
  double* scores_out = out.scores.data();
  if (opt.dense_codes > 0) {
    for (size_t i = 0; i < n_out; ++i) {
      const uint32_t c = order[i];
      ids_out[i] = static_cast<int64_t>(c);
      scores_out[i] = scores[c];
    }
  } else {
    const int64_t* uniq = ws.unique_ids.data();
    for (size_t i = 0; i < n_out; ++i) {
      const uint32_t c = order[i];
      ids_out[i] = uniq[c];
      scores_out[i] = scores[c];
    }
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
