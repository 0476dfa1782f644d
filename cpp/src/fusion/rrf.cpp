// Rank and score fusion: intern ids to dense codes, accumulate per code, radix-rank the scores.
// See ragfind/fusion/rrf.hpp for the contract; everything here is linear in the total input size.
#include "ragfind/fusion/rrf.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace ragfind::fusion {

// Scratch reused across calls by one Fuser, plus the last result (ranked by write()).
struct Workspace {
  // Interning. Both tables hold (stamp << 32 | code); a call stamps list i with base + i, so a
  // stamp below base is a previous call's (empty slot) and base + i itself is a repeat in list i.
  std::vector<uint64_t> direct;     // id -> stamped code, for ids in [0, direct.size())
  std::vector<uint64_t> table;      // hash slot -> stamped code
  uint32_t base = 1;                // stamp of list 0 in this call
  std::vector<int64_t> unique_ids;  // code -> id, first-appearance order
  std::vector<uint32_t> codes;      // per input position (all lists concatenated)
  std::vector<uint8_t> multi;       // code -> held by more than one list
  std::vector<int32_t> last_list;   // dense_codes path: code -> last list that held it
  // Accumulation.
  std::vector<double> scores;     // code -> fused score
  std::vector<double> aux;        // code -> count for mnz
  std::vector<double> rrf_table;  // 1 / (k + r + 1) for the last k seen
  double rrf_table_k = -1.0;
  bool rrf_table_strict = false;  // rrf_table strictly decreasing
  // Ranking.
  std::vector<uint64_t> keys, keys_tmp;
  std::vector<uint32_t> order;        // ranked codes (all, or the multi-list ones when merging)
  std::vector<uint32_t> singles;      // single-list codes, ranked (merge path)
  std::vector<uint32_t> multi_codes;  // merge path: codes held by several lists
  std::vector<uint32_t> rank_start;   // merge path: rank -> index of its first single
  std::vector<uint32_t> before;       // merge path: per ranked multi-list code, singles ranked above it
  std::vector<uint32_t> n_before;     // merge path: singles index -> multi-list codes placed just before it
  std::vector<uint32_t> hist;
  // The result: n_codes fused ids, of which n_out are written.
  size_t n_codes = 0, n_out = 0;
  bool ids_are_codes = false;
  bool merge = false;  // order = ranked multi-list codes, placed among singles on write
  size_t n_multi = 0;
};

namespace {

inline uint64_t hash_id(int64_t id) {
  // Fibonacci hashing: good spread for the sequential ids indexes typically hand out.
  return static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ull;
}

[[noreturn]] void throw_duplicate(size_t list, size_t pos, size_t first_pos, int64_t id) {
  throw DuplicateIdError(list, pos, first_pos,
                         "lists[" + std::to_string(list) + "] holds id " + std::to_string(id) + " twice (positions " +
                             std::to_string(first_pos) + " and " + std::to_string(pos) +
                             "); each list must rank an id at most once");
}

// Position of the first occurrence of ids[r] in ids[0, r) (only called to word an error).
size_t first_position(const RankedList& l, size_t r) {
  for (size_t p = 0; p < r; ++p)
    if (l.ids[p] == l.ids[r]) return p;
  return r;
}

// Stamps for this call's lists: base .. base + n_lists - 1. Restarts (clearing both tables)
// before the 32-bit stamp would wrap.
void next_stamps(Workspace& ws, size_t n_lists) {
  if (static_cast<uint64_t>(ws.base) + n_lists >= (1ull << 32)) {
    std::fill(ws.direct.begin(), ws.direct.end(), 0);
    std::fill(ws.table.begin(), ws.table.end(), 0);
    ws.base = 1;
  }
}

size_t intern_dense_codes(const std::vector<RankedList>& lists, const Options& opt, Workspace& ws) {
  const size_t n_codes = opt.dense_codes;
  ws.last_list.assign(n_codes, -1);
  ws.multi.resize(n_codes);
  int32_t* last = ws.last_list.data();
  uint8_t* multi = ws.multi.data();
  uint32_t* codes = ws.codes.data();
  for (size_t li = 0; li < lists.size(); ++li) {
    const auto& l = lists[li];
    for (size_t r = 0; r < l.size; ++r) {
      const int64_t c = l.ids[r];
      if (c < 0 || static_cast<size_t>(c) >= n_codes)
        throw std::invalid_argument("dense code " + std::to_string(c) + " out of range");
      if (last[c] == static_cast<int32_t>(li)) throw_duplicate(li, r, first_position(l, r), c);
      multi[c] = last[c] >= 0;
      last[c] = static_cast<int32_t>(li);
      *codes++ = static_cast<uint32_t>(c);
    }
  }
  return n_codes;
}

// Per input position hooks for the interning loops: RRF accumulates while interning (one pass
// over the input instead of two); score fusion accumulates afterwards (it normalises first).
struct NoAccumulate {
  void list(size_t) {}
  void operator()(size_t, uint32_t, bool) const {}
};

struct RrfAccumulate {
  double* scores;         // code -> fused score, sized for every input position
  const double* inv;      // 1 / (k + r + 1)
  const double* weights;  // null: all 1
  double w = 1.0;
  void list(size_t li) { w = weights ? weights[li] : 1.0; }
  // A new code's slot holds a stale value. w * inv[r] is exact for w = 1.
  void operator()(size_t r, uint32_t code, bool seen) const {
    scores[code] = seen ? scores[code] + w * inv[r] : w * inv[r];
  }
};

constexpr size_t kNotDirect = ~size_t{0}, kGrow = kNotDirect - 1;

// Ids in [0, 4 * total): a direct-mapped array, one load and one store per id, no hashing or
// probing (doc ids are usually row numbers). An id past the array ends the pass early: kGrow when
// it is within the bound (the caller grows the array to the bound once and starts again; ids
// spread wider never allocate it), kNotDirect otherwise (the caller hashes instead).
template <class Acc>
size_t intern_direct(const std::vector<RankedList>& lists, size_t limit, Workspace& ws, Acc acc) {
  uint64_t* const dm = ws.direct.data();
  const uint64_t range = ws.direct.size();
  int64_t* const uniq = ws.unique_ids.data();
  uint8_t* const multi = ws.multi.data();
  uint32_t* codes = ws.codes.data();
  const uint32_t n_lists = static_cast<uint32_t>(lists.size());
  // Slots stamped by this call hold at least base << 32; older ones less.
  const uint64_t base = static_cast<uint64_t>(ws.base) << 32;
  uint32_t n = 0;
  for (uint32_t li = 0; li < n_lists; ++li) {
    const int64_t* const ids = lists[li].ids;
    const size_t size = lists[li].size;  // a local: the flag stores below may alias anything
    const uint64_t stamp = base + (static_cast<uint64_t>(li) << 32);
    acc.list(li);
    for (size_t r = 0; r < size; ++r) {
      const uint64_t id = static_cast<uint64_t>(ids[r]);  // negative ids wrap to huge
      if (id >= range) {
        ws.base += n_lists;  // this call's stamps are spent
        return id < limit ? kGrow : kNotDirect;
      }
      const uint64_t e = dm[id];
      if (e >= stamp) {  // stamped by this very list (later lists have not stamped yet)
        ws.base += n_lists;
        throw_duplicate(li, r, first_position(lists[li], r), ids[r]);
      }
      // A branch on "new or seen" mispredicts for about a third of lists 1+'s ids; a branch-free
      // body measured slower still here (its extra instructions outweighed the misses).
      uint32_t code;
      if (e >= base) {
        code = static_cast<uint32_t>(e);
        multi[code] = 1;
        acc(r, code, true);
      } else {
        code = n++;
        uniq[code] = static_cast<int64_t>(id);
        multi[code] = 0;
        acc(r, code, false);
      }
      dm[id] = stamp | code;
      codes[r] = code;
    }
    codes += size;
  }
  ws.base += n_lists;
  return n;
}

template <class Acc>
size_t intern_hashed(const std::vector<RankedList>& lists, size_t total, Workspace& ws, Acc acc) {
  size_t cap = 16;
  while (cap < 2 * total) cap <<= 1;
  if (ws.table.size() != cap) ws.table.assign(cap, 0);
  const int shift = 64 - __builtin_ctzll(cap);
  const uint64_t mask = cap - 1;
  uint64_t* table = ws.table.data();
  int64_t* uniq = ws.unique_ids.data();
  uint8_t* multi = ws.multi.data();
  uint32_t* codes = ws.codes.data();
  const uint32_t base = ws.base;
  const uint32_t n_lists = static_cast<uint32_t>(lists.size());
  uint32_t n = 0;
  for (uint32_t li = 0; li < n_lists; ++li) {
    const int64_t* ids = lists[li].ids;
    const size_t size = lists[li].size;
    const uint64_t stamp = static_cast<uint64_t>(base + li) << 32;
    acc.list(li);
    for (size_t r = 0; r < size; ++r) {
      const int64_t id = ids[r];
      uint64_t slot = hash_id(id) >> shift;
      uint64_t e = table[slot];
      uint32_t seen_in = static_cast<uint32_t>(e >> 32) - base;
      while (seen_in < n_lists && uniq[static_cast<uint32_t>(e)] != id) {
        slot = (slot + 1) & mask;
        e = table[slot];
        seen_in = static_cast<uint32_t>(e >> 32) - base;
      }
      if (seen_in == li) {
        ws.base += n_lists;
        throw_duplicate(li, r, first_position(lists[li], r), id);
      }
      uint32_t code;
      if (seen_in < n_lists) {
        code = static_cast<uint32_t>(e);
        multi[code] = 1;
        acc(r, code, true);
      } else {  // an empty slot
        code = n++;
        uniq[code] = id;
        multi[code] = 0;
        acc(r, code, false);
      }
      table[slot] = stamp | code;
      *codes++ = code;
    }
  }
  ws.base += n_lists;
  return n;
}

// Step 1: codes in first-appearance order, duplicate check per list. Returns the number of codes.
template <class Acc>
size_t intern(const std::vector<RankedList>& lists, const Options& opt, Workspace& ws, Acc acc) {
  size_t total = 0;
  for (const auto& l : lists) total += l.size;
  ws.codes.resize(total);
  ws.ids_are_codes = opt.dense_codes > 0;
  if (opt.dense_codes > 0) return intern_dense_codes(lists, opt, ws);
  ws.unique_ids.resize(total);
  ws.multi.resize(total);
  next_stamps(ws, lists.size());
  const size_t limit = 4 * total;
  size_t n = intern_direct(lists, limit, ws, acc);
  if (n == kGrow) {              // ids within the bound but past the array: grow it once, start again
    ws.direct.resize(limit, 0);  // new slots: stamp 0, i.e. empty
    next_stamps(ws, lists.size());
    n = intern_direct(lists, limit, ws, acc);
  }
  if (n == kNotDirect) {
    next_stamps(ws, lists.size());
    n = intern_hashed(lists, total, ws, acc);
  }
  ws.unique_ids.resize(n);
  return n;
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

// Ranks codes[0, n) (any order, or null for 0..n-1) by descending score, ties by code (first
// appearance), into ws.order. Each code becomes one uint64: a 16-bit score prefix above the code,
// sorted by a stable LSD radix sort (two 8-bit passes, both histograms counted in one read). The
// prefix is the score's position in [min, max] scaled to 16 bits (monotone in the score, and it
// spreads the scores over the buckets whatever their magnitudes: min-max normalised scores spread
// over many binades, which a prefix of the float's bit pattern would crowd into a few buckets),
// or, when max - min is not finite, the top 16 varying bits of the order-preserving bit pattern.
// Codes whose prefix ties form runs; each run is then ordered exactly by (score, code): insertion
// sort for the usual short runs, std::sort for long ones, so the worst case stays O(n log n).
// Exact and deterministic.
void rank_codes(const uint32_t* codes, size_t n, Workspace& ws) {
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
  double lo = sc[codes ? codes[0] : 0], hi = lo;
  for (size_t i = 0; i < n; ++i) {
    const double v = sc[codes ? codes[i] : i];
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  int bits, prefix_shift;
  constexpr double kTop = 65535.0;
  const double range = hi - lo;
  const double scale = range > 0.0 ? kTop / range : 0.0;
  if (std::isfinite(range) && std::isfinite(scale)) {
    for (size_t i = 0; i < n; ++i) {
      const uint32_t c = codes ? codes[i] : static_cast<uint32_t>(i);
      // Descending: the best score gets prefix 0. hi - s, the product and the clamp are all
      // monotone in s, so equal prefixes can only hold a contiguous range of scores.
      const double q = std::min((hi - sc[c]) * scale, kTop);
      a[i] = (static_cast<uint64_t>(static_cast<int64_t>(q)) << 32) | static_cast<uint64_t>(c);
    }
    bits = range > 0.0 ? 16 : 0;
    prefix_shift = 32;
  } else {
    const uint64_t first_hi = descending_key(sc[codes ? codes[0] : 0]) >> 32;
    uint64_t varying = 0;
    for (size_t i = 0; i < n; ++i) {
      const uint32_t c = codes ? codes[i] : static_cast<uint32_t>(i);
      const uint64_t key_hi = descending_key(sc[c]) >> 32;
      varying |= key_hi ^ first_hi;
      a[i] = (key_hi << 32) | static_cast<uint64_t>(c);
    }
    const int varying_bits = varying ? 64 - __builtin_clzll(varying) : 0;
    bits = std::min(varying_bits, kMaxPasses * kDigitBits);
    prefix_shift = 32 + (varying_bits - bits);
  }
  const int sorted_bits = bits;
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
      for (uint32_t d = 0; d < kDigits; ++d) {
        const uint32_t c = h[d];
        h[d] = sum;
        sum += c;
      }
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
    if ((a[i + 1] >> prefix_shift) != prefix) {
      ++i;
      continue;
    }  // a run of one: already placed
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

// Single-list codes rank by rank (L lists of equal length), see rank_rrf_merge.
template <size_t L>
void interleave(const uint32_t* codes, const size_t* offs, size_t longest, const uint8_t* multi, uint32_t* singles,
                uint32_t* rank_start, uint32_t& n_single_out) {
  const uint32_t* list[L];
  for (size_t li = 0; li < L; ++li) list[li] = codes + offs[li];
  uint32_t n_single = 0;
  for (size_t r = 0; r < longest; ++r) {
    rank_start[r] = n_single;
    for (size_t li = 0; li < L; ++li) {
      const uint32_t c = list[li][r];
      singles[n_single] = c;  // kept only when single: the next single overwrites it
      n_single += !multi[c];
    }
  }
  n_single_out = n_single;
}

// RRF ranking when every list has the same weight w > 0 and f(r) = w / (k + r + 1) strictly
// decreases with r. An id held by one list only scores exactly f(rank), so reading the lists rank
// by rank (list 0 first: at equal rank its new ids got smaller codes) yields those "singles"
// ranked, ties by code. An id held by several lists ("multi", about a quarter here) with score v
// falls after the singles of ranks below R(v) = the first rank with f(R) <= v, so:
//   - the multis are ranked among themselves by rank_codes;
//   - R(v) comes from the inverse of f (then checked against the table), and the number of
//     singles ranked above each multi from per-rank counts (a tie with f(R) is settled by code);
// and write() puts every id straight at its final position. (A comparison merge of the two runs
// measured slower: its next load depends on the last comparison, a chain of cache latencies, and
// made branchy, it mispredicts about every other id.)
void rank_rrf_merge(const std::vector<RankedList>& lists, double k, double w, Workspace& ws) {
  const size_t n_lists = lists.size();
  size_t longest = 0;
  for (const auto& l : lists) longest = std::max(longest, l.size);
  ws.singles.resize(ws.codes.size() + 1);
  ws.rank_start.resize(longest + 1);
  uint32_t* singles = ws.singles.data();
  uint32_t* rank_start = ws.rank_start.data();
  const uint8_t* multi = ws.multi.data();
  const uint32_t* codes = ws.codes.data();
  uint32_t n_single = 0;
  std::vector<size_t> offs_heap;
  size_t offs_local[8];
  size_t* offs = offs_local;
  if (n_lists > 8) {
    offs_heap.resize(n_lists);
    offs = offs_heap.data();
  }
  bool equal_sizes = true;
  for (size_t li = 0, at = 0; li < n_lists; ++li) {
    offs[li] = at;
    at += lists[li].size;
    equal_sizes &= lists[li].size == longest;
  }
  if (equal_sizes && n_lists == 2) {  // the common shapes, unrolled
    interleave<2>(codes, offs, longest, multi, singles, rank_start, n_single);
  } else if (equal_sizes && n_lists == 3) {
    interleave<3>(codes, offs, longest, multi, singles, rank_start, n_single);
  } else {
    for (size_t r = 0; r < longest; ++r) {
      rank_start[r] = n_single;
      for (size_t li = 0; li < n_lists; ++li) {
        if (!equal_sizes && r >= lists[li].size) continue;
        const uint32_t c = codes[offs[li] + r];
        singles[n_single] = c;  // kept only when single: the next single overwrites it
        n_single += !multi[c];
      }
    }
  }
  rank_start[longest] = n_single;
  // Multi-list codes, ascending, then ranked exactly by the radix sort (few, and mostly in
  // distinct top-16-bit buckets: cheaper and far more predictable than comparison sorting).
  const size_t n_codes = ws.n_codes;
  const size_t n_multi = n_codes - n_single;
  ws.multi_codes.resize(n_multi + 1);  // + 1: the branch-free append below writes one past
  uint32_t* mc = ws.multi_codes.data();
  size_t m = 0;
  for (uint32_t c = 0; c < n_codes; ++c) {
    mc[m] = c;
    m += multi[c];
  }
  rank_codes(mc, n_multi, ws);
  // Per ranked multi, the singles ranked above it: those of ranks below R(v), the first rank
  // whose single score f(R) <= v, plus those of rank R with the same score and a smaller code.
  const double* sc = ws.scores.data();
  const double* inv = ws.rrf_table.data();
  auto f = [w, inv](size_t r) { return w * inv[r]; };  // exactly a single's accumulated score
  const uint32_t* order = ws.order.data();
  ws.before.resize(n_multi);
  uint32_t* before = ws.before.data();
  ws.n_before.assign(n_single + 1, 0);
  uint32_t* n_before = ws.n_before.data();
  for (size_t j = 0; j < n_multi; ++j) {
    const uint32_t c = order[j];
    const double v = sc[c];
    // f(x) = v at x = w / v - k - 1, so R = ceil(x) up to rounding: floor(x) (clamped), then +1
    // unless f(floor(x)) <= v, without branches; loops that practically never run then keep R
    // exact whatever the rounding. (Independent per id: no chain of dependent loads.)
    const double x = std::min(std::max(w / v - k - 1.0, 0.0), static_cast<double>(longest - 1));
    size_t R = static_cast<size_t>(x);
    R += f(R) > v;
    while (R > 0 && f(R - 1) <= v) --R;
    while (R < longest && f(R) > v) ++R;
    uint32_t b = rank_start[R];
    if (R < longest && f(R) == v) {  // a tie with rank R's singles: the smaller code first
      for (uint32_t i = rank_start[R]; i < rank_start[R + 1] && singles[i] < c; ++i) ++b;
    }
    before[j] = b;
    ++n_before[b];
  }
  ws.n_multi = n_multi;
  ws.merge = true;
}

void finish(size_t n_codes, const Options& opt, Workspace& ws) {
  ws.n_codes = n_codes;
  ws.n_out = (opt.top_k > 0 && opt.top_k < n_codes) ? opt.top_k : n_codes;
}

void check_weights(const std::vector<RankedList>& lists, const Options& opt) {
  if (!opt.weights) return;
  for (size_t i = 0; i < lists.size(); ++i)
    if (!std::isfinite(opt.weights[i]))
      throw std::invalid_argument("weights[" + std::to_string(i) + "] = " + std::to_string(opt.weights[i]) +
                                  " is not finite; expected a finite number");
}

}  // namespace

Fuser::Fuser() : ws_(std::make_unique<Workspace>()) {}
Fuser::~Fuser() = default;

size_t Fuser::rrf(const std::vector<RankedList>& lists, double k, const Options& opt) {
  if (!(k >= 0.0) || !std::isfinite(k))
    throw std::invalid_argument("k = " + std::to_string(k) + "; expected a finite number >= 0");
  check_weights(lists, opt);
  Workspace& ws = *ws_;
  ws.merge = false;
  size_t longest = 0, total = 0;
  for (const auto& l : lists) {
    longest = std::max(longest, l.size);
    total += l.size;
  }
  if (ws.rrf_table_k != k || ws.rrf_table.size() < longest) {
    ws.rrf_table.resize(std::max(longest, ws.rrf_table.size()));
    for (size_t r = 0; r < ws.rrf_table.size(); ++r) ws.rrf_table[r] = 1.0 / (k + static_cast<double>(r) + 1.0);
    ws.rrf_table_k = k;
    ws.rrf_table_strict = true;
    for (size_t r = 1; r < ws.rrf_table.size(); ++r) ws.rrf_table_strict &= ws.rrf_table[r] < ws.rrf_table[r - 1];
  }
  const double* inv = ws.rrf_table.data();
  size_t n_codes;
  if (opt.dense_codes > 0) {
    n_codes = intern(lists, opt, ws, NoAccumulate{});
    ws.scores.assign(n_codes, 0.0);
    double* scores = ws.scores.data();
    size_t at = 0;
    for (size_t li = 0; li < lists.size(); ++li) {
      const size_t n = lists[li].size;
      const uint32_t* codes = ws.codes.data() + at;
      const double w = opt.weights ? opt.weights[li] : 1.0;
      for (size_t r = 0; r < n; ++r) scores[codes[r]] += w * inv[r];
      at += n;
    }
  } else {
    if (ws.scores.size() < total) ws.scores.resize(total);
    n_codes = intern(lists, opt, ws, RrfAccumulate{ws.scores.data(), inv, opt.weights});
  }
  // Same weight w > 0 for every list (and w / (k + r) still strictly decreasing): merge path.
  bool same_weight = true;
  const double w0 = opt.weights ? opt.weights[0] : 1.0;
  for (size_t li = 1; opt.weights && li < lists.size(); ++li) same_weight &= opt.weights[li] == w0;
  bool mergeable = same_weight && w0 > 0.0 && ws.rrf_table_strict;
  if (mergeable && w0 != 1.0)
    for (size_t r = 1; r < longest; ++r) mergeable &= w0 * inv[r] < w0 * inv[r - 1];
  finish(n_codes, opt, ws);
  if (mergeable) rank_rrf_merge(lists, k, w0, ws);
  else rank_codes(nullptr, n_codes, ws);
  return ws.n_out;
}

size_t Fuser::fuse_scores(const std::vector<RankedList>& lists, Norm norm, Combine combine, const Options& opt) {
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
  Workspace& ws = *ws_;
  ws.merge = false;
  const size_t n_codes = intern(lists, opt, ws, NoAccumulate{});
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
      case Norm::None: break;
      case Norm::MinMax: {
        double lo = l.scores[0], hi = l.scores[0];
        for (size_t r = 1; r < n; ++r) {
          lo = std::min(lo, l.scores[r]);
          hi = std::max(hi, l.scores[r]);
        }
        if (hi > lo) {
          shift = lo;
          scale = 1.0 / (hi - lo);
        } else {
          shift = lo - 1.0;
          scale = 1.0;
        }  // constant list: every id maps to 1
        break;
      }
      case Norm::ZScore: {
        double mean = 0.0;
        for (size_t r = 0; r < n; ++r) mean += l.scores[r];
        mean /= static_cast<double>(n);
        double var = 0.0;
        for (size_t r = 0; r < n; ++r) {
          const double d = l.scores[r] - mean;
          var += d * d;
        }
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
        if (total > 0.0) {
          shift = lo;
          scale = 1.0 / total;
        } else {
          shift = lo - 1.0;
          scale = 1.0 / static_cast<double>(n);
        }  // constant list: uniform
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
  finish(n_codes, opt, ws);
  rank_codes(nullptr, n_codes, ws);
  return ws.n_out;
}

void Fuser::write(int64_t* ids_out, double* scores_out) {
  Workspace& ws = *ws_;
  const size_t n_out = ws.n_out;
  const double* sc = ws.scores.data();
  const int64_t* uniq = ws.unique_ids.data();
  if (!ws.merge) {
    const uint32_t* order = ws.order.data();
    if (ws.ids_are_codes) {
      for (size_t i = 0; i < n_out; ++i) {
        const uint32_t c = order[i];
        ids_out[i] = c;
        scores_out[i] = sc[c];
      }
    } else {
      for (size_t i = 0; i < n_out; ++i) {
        const uint32_t c = order[i];
        ids_out[i] = uniq[c];
        scores_out[i] = sc[c];
      }
    }
    return;
  }
  // Every id straight to its final position (see rank_rrf_merge); positions grow along each
  // run, so each loop stops at the first one past n_out.
  const uint32_t* singles = ws.singles.data();
  const uint32_t* order = ws.order.data();
  const uint32_t* before = ws.before.data();
  const uint32_t* n_before = ws.n_before.data();
  const size_t n_multi = ws.n_multi;
  const size_t n_single = ws.n_codes - n_multi;
  auto place = [&](auto id_of) {
    for (size_t j = 0; j < n_multi; ++j) {
      const size_t pos = j + before[j];
      if (pos >= n_out) break;
      const uint32_t c = order[j];
      ids_out[pos] = id_of(c);
      scores_out[pos] = sc[c];
    }
    size_t multis_ahead = 0;
    for (size_t i = 0; i < n_single; ++i) {
      multis_ahead += n_before[i];
      const size_t pos = i + multis_ahead;
      if (pos >= n_out) break;
      const uint32_t c = singles[i];
      ids_out[pos] = id_of(c);
      scores_out[pos] = sc[c];
    }
  };
  if (ws.ids_are_codes) place([](uint32_t c) { return static_cast<int64_t>(c); });
  else place([uniq](uint32_t c) { return uniq[c]; });
}

namespace {
Fuser& thread_fuser() {
  thread_local Fuser f;
  return f;
}
void write_fused(Fuser& f, size_t n, Fused& out) {
  out.ids.resize(n);
  out.scores.resize(n);
  f.write(out.ids.data(), out.scores.data());
}
}  // namespace

void rrf(const std::vector<RankedList>& lists, double k, const Options& options, Fused& out) {
  Fuser& f = thread_fuser();
  write_fused(f, f.rrf(lists, k, options), out);
}

void fuse_scores(const std::vector<RankedList>& lists, Norm norm, Combine combine, const Options& options, Fused& out) {
  Fuser& f = thread_fuser();
  write_fused(f, f.fuse_scores(lists, norm, combine, options), out);
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
