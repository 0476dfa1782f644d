// Term positions beside the postings (see positions.hpp).
#include "ragfind/bm25/positions.hpp"

#include <algorithm>
#include <stdexcept>

namespace ragfind::bm25 {

namespace {

inline void put_varint(std::vector<std::uint8_t>& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<std::uint8_t>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<std::uint8_t>(v));
}

// Decodes one varint at p (< end); false when it is cut off or too long.
inline bool get_varint(const std::uint8_t*& p, const std::uint8_t* end, std::uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && p < end; shift += 7) {
    const std::uint8_t b = *p++;
    v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

}  // namespace

void TermPositions::decode(const std::uint8_t* p, std::uint32_t len, std::vector<std::int64_t>& out) {
  out.clear();
  const std::uint8_t* stop = p + len;
  std::int64_t pos = 0;
  std::uint64_t delta = 0;
  while (p < stop && get_varint(p, stop, delta)) {
    pos += static_cast<std::int64_t>(delta);
    out.push_back(pos);
  }
}

void TermPositions::positions(std::size_t i, std::vector<std::int64_t>& out) const {
  std::uint32_t len = 0;
  const std::uint8_t* p = entry(i, len);
  decode(p, len, out);
}

void TermPositions::push(std::uint32_t slot, const std::int64_t* pos, std::size_t n, std::uint32_t len) {
  static_assert(kBlock <= 256, "multi keeps offsets in a block as bytes");
  constexpr std::uint64_t kMax = ~std::uint32_t(0);
  if (slots.size() % kBlock == 0) {
    if (multi.size() > kMax) throw std::length_error("positions: over 2^32 repeated entries of one term");
    blocks.push_back(Block{bytes.size(), static_cast<std::uint32_t>(multi.size()), 0, 255, 255});
  }
  Block& b = blocks.back();
  std::int64_t prev = 0;
  for (std::size_t i = 0; i < n; ++i) {
    put_varint(bytes, static_cast<std::uint64_t>(pos[i] - prev));
    prev = pos[i];
  }
  const std::uint64_t end = bytes.size() - b.base;
  if (end > kMax) throw std::length_error("positions: over 4 GiB of one term's positions in one block");
  const std::uint8_t code = length_code(len);
  const std::uint32_t tf = static_cast<std::uint32_t>(std::min<std::size_t>(n, kMax));
  slots.push_back(slot);
  ends.push_back(static_cast<std::uint32_t>(end));
  impact.push_back(static_cast<std::uint16_t>(code << 8 | std::min<std::uint32_t>(tf, 255)));
  b.min_len = std::min(b.min_len, code);
  b.max_tf = std::max(b.max_tf, tf);
  if (tf > 1) {
    b.min_len_multi = std::min(b.min_len_multi, code);
    multi.push_back(static_cast<std::uint8_t>((slots.size() - 1) % kBlock));
  }
}

std::size_t PositionStore::memory_bytes() const {
  std::size_t n = offsets_.size() * sizeof(std::uint64_t) + bytes_.size() + by_term_.size() * sizeof(TermPositions);
  for (const auto& t : by_term_)
    n += t.slots.size() * 4 + t.impact.size() * 2 + t.ends.size() * 4 + t.bytes.size() + t.multi.size() +
         t.blocks.size() * sizeof(TermPositions::Block);
  return n;
}

void PositionStore::index_slots(std::uint32_t from) {
  std::vector<std::pair<std::uint32_t, std::int64_t>> occ;  // (term, position)
  std::vector<std::int64_t> pos;
  for (std::uint32_t s = from; s < num_slots(); ++s) {
    occ.clear();
    const std::uint8_t* p = bytes_.data() + offsets_[s];
    const std::uint8_t* end = bytes_.data() + offsets_[s + 1];
    std::int64_t at = -1;
    std::uint32_t len = 0;  // counted tokens, as the index counts the document's length
    std::uint64_t v = 0;
    while (p < end && get_varint(p, end, v)) {
      if (!(v & 1) || at < 0) ++at;
      len += !(v & 1);
      occ.emplace_back(static_cast<std::uint32_t>(v >> 1), at);
    }
    std::sort(occ.begin(), occ.end());
    occ.erase(std::unique(occ.begin(), occ.end()), occ.end());
    if (occ.empty()) continue;
    const std::uint32_t max_t = std::max_element(occ.begin(), occ.end())->first;
    if (max_t >= by_term_.size()) by_term_.resize(static_cast<std::size_t>(max_t) + 1);
    // The pushes land in one scattered TermPositions per term (cache misses, the bulk of a
    // rebuild): fetch their headers, then the ends of their arrays, before pushing.
    for (std::size_t i = 0; i < occ.size(); ++i)
      if (i == 0 || occ[i].first != occ[i - 1].first) {
        const char* h = reinterpret_cast<const char*>(&by_term_[occ[i].first]);
        for (std::size_t off = 0; off < sizeof(TermPositions); off += 64) __builtin_prefetch(h + off);
      }
    for (std::size_t i = 0; i < occ.size(); ++i)
      if (i == 0 || occ[i].first != occ[i - 1].first) {
        const TermPositions& tp = by_term_[occ[i].first];
        __builtin_prefetch(tp.slots.data() + tp.slots.size());
        __builtin_prefetch(tp.impact.data() + tp.impact.size());
        __builtin_prefetch(tp.ends.data() + tp.ends.size());
        __builtin_prefetch(tp.bytes.data() + tp.bytes.size());
        if (!tp.blocks.empty()) __builtin_prefetch(&tp.blocks.back());
      }
    for (std::size_t i = 0; i < occ.size();) {
      const std::uint32_t t = occ[i].first;
      pos.clear();
      for (; i < occ.size() && occ[i].first == t; ++i) pos.push_back(occ[i].second);
      by_term_[t].push(s, pos.data(), pos.size(), len);
    }
  }
}

void PositionStore::rebuild() {
  by_term_.clear();
  index_slots(0);
}

void PositionStore::append(const std::uint32_t* terms, const std::uint8_t* counted, const std::size_t* doc_offsets,
                           std::size_t n) {
  for (std::size_t d = 0; d < n; ++d) {
    for (std::size_t i = doc_offsets[d]; i < doc_offsets[d + 1]; ++i) {
      const std::uint64_t overlap = (counted && !counted[i]) ? 1 : 0;
      put_varint(bytes_, (static_cast<std::uint64_t>(terms[i]) << 1) | overlap);
    }
    offsets_.push_back(bytes_.size());
  }
  index_slots(static_cast<std::uint32_t>(num_slots() - n));
}

void PositionStore::truncate(std::uint32_t slots) {
  if (slots >= num_slots()) return;
  offsets_.resize(static_cast<std::size_t>(slots) + 1);
  bytes_.resize(offsets_.back());
  rebuild();
}

void PositionStore::compact(const std::vector<std::uint32_t>& dropped) {
  if (dropped.empty()) return;
  std::vector<std::uint8_t> keep(num_slots(), 1);
  for (std::uint32_t s : dropped)
    if (s < keep.size()) keep[s] = 0;
  PositionStore kept = filtered(keep.data());
  offsets_ = std::move(kept.offsets_);
  bytes_ = std::move(kept.bytes_);
  rebuild();
}

PositionStore PositionStore::filtered(const std::uint8_t* keep) const {
  PositionStore out;
  out.bytes_.reserve(bytes_.size());
  out.offsets_.reserve(offsets_.size());
  for (std::uint32_t s = 0; s < num_slots(); ++s) {
    if (!keep[s]) continue;
    out.bytes_.insert(out.bytes_.end(), bytes_.begin() + static_cast<std::ptrdiff_t>(offsets_[s]),
                      bytes_.begin() + static_cast<std::ptrdiff_t>(offsets_[s + 1]));
    out.offsets_.push_back(out.bytes_.size());
  }
  return out;
}

void PositionStore::positions(std::uint32_t slot, const std::uint32_t* terms, std::size_t n,
                              std::vector<std::vector<std::int64_t>>& out) const {
  out.resize(n);
  for (auto& v : out) v.clear();
  const std::uint8_t* p = bytes_.data() + offsets_[slot];
  const std::uint8_t* end = bytes_.data() + offsets_[slot + 1];
  std::int64_t pos = -1;
  std::uint64_t v = 0;
  while (p < end && get_varint(p, end, v)) {
    if (!(v & 1) || pos < 0) ++pos;
    const std::uint32_t t = static_cast<std::uint32_t>(v >> 1);
    for (std::size_t i = 0; i < n; ++i)
      if (terms[i] == t) {
        // An overlap token may repeat its word's term at the same position: keep one.
        if (out[i].empty() || out[i].back() != pos) out[i].push_back(pos);
      }
  }
}

bool PositionStore::assign(std::vector<std::uint64_t> offsets, std::vector<std::uint8_t> bytes,
                           std::uint64_t num_terms) {
  if (offsets.empty() || offsets.front() != 0 || offsets.back() != bytes.size()) return false;
  for (std::size_t i = 1; i < offsets.size(); ++i)
    if (offsets[i] < offsets[i - 1]) return false;
  for (std::size_t s = 0; s + 1 < offsets.size(); ++s) {
    const std::uint8_t* p = bytes.data() + offsets[s];
    const std::uint8_t* end = bytes.data() + offsets[s + 1];
    std::uint64_t v = 0;
    while (p < end) {
      if (!get_varint(p, end, v) || (v >> 1) >= num_terms) return false;
    }
  }
  offsets_ = std::move(offsets);
  bytes_ = std::move(bytes);
  rebuild();
  return true;
}

}  // namespace ragfind::bm25
