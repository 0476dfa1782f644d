// Lookups in the generated Unicode tables (unicode_tables.cpp).
#include <algorithm>

#include <vector>

#include "ragfind/text/unicode.hpp"
#include "ragfind/text/wordpiece.hpp"  // wordpiece_tables::kStripMap: NFD with marks dropped

namespace ragfind::text {

bool is_word_char_nonascii(std::uint32_t cp) {
  using unicode_tables::kNumWordRanges;
  using unicode_tables::kWordRanges;
  const CodepointRange* end = kWordRanges + kNumWordRanges;
  const CodepointRange* it =
      std::upper_bound(kWordRanges, end, cp, [](std::uint32_t v, const CodepointRange& r) { return v < r.lo; });
  if (it == kWordRanges) return false;
  --it;
  return cp <= it->hi;
}

std::uint32_t to_lower_nonascii(std::uint32_t cp) {
  using unicode_tables::kLowerMap;
  using unicode_tables::kNumLowerMap;
  const CodepointPair* end = kLowerMap + kNumLowerMap;
  const CodepointPair* it =
      std::lower_bound(kLowerMap, end, cp, [](const CodepointPair& p, std::uint32_t v) { return p.from < v; });
  return (it != end && it->from == cp) ? it->to : cp;
}

bool is_lower_nonascii(std::uint32_t cp) {
  // The targets of the lower-case map, sorted once: the lower-case letters that have a capital.
  static const std::vector<std::uint32_t> lower = [] {
    std::vector<std::uint32_t> v;
    v.reserve(unicode_tables::kNumLowerMap);
    for (std::size_t i = 0; i < unicode_tables::kNumLowerMap; ++i) v.push_back(unicode_tables::kLowerMap[i].to);
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    return v;
  }();
  return std::binary_search(lower.begin(), lower.end(), cp);
}

bool has_lower_letter(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  while (p < end) {
    if (*p < 0x80) {
      if (*p >= 'a' && *p <= 'z') return true;
      ++p;
      continue;
    }
    if (is_lower_nonascii(decode_utf8(p, end))) return true;
  }
  return false;
}

namespace {

// Latin letters that NFD decomposes: Latin-1 Supplement, Latin Extended-A and -B, Latin
// Extended Additional (Vietnamese and the rest).
bool is_foldable_latin(std::uint32_t cp) { return (cp >= 0xC0 && cp <= 0x24F) || (cp >= 0x1E00 && cp <= 0x1EFF); }

// The base letter of a foldable Latin letter (cp itself when it has no accent to drop).
std::uint32_t fold_latin(std::uint32_t cp) {
  using wordpiece_tables::kNumStripMap;
  using wordpiece_tables::kStripMap;
  const auto* end = kStripMap + kNumStripMap;
  const auto* it = std::lower_bound(
      kStripMap, end, cp, [](const wordpiece_tables::CodepointMapping& m, std::uint32_t v) { return m.from < v; });
  return (it != end && it->from == cp && it->n == 1) ? it->to[0] : cp;
}

}  // namespace

bool fold_accents(std::string_view in, std::string& out) {
  const auto* p = reinterpret_cast<const unsigned char*>(in.data());
  const auto* end = p + in.size();
  const auto* q = p;
  while (q < end && *q < 0x80) ++q;
  if (q == end) return false;  // ASCII: nothing to fold
  bool changed = false;
  std::string s(in.substr(0, static_cast<std::size_t>(q - p)));
  while (q < end) {
    const std::uint32_t cp = decode_utf8(q, end);
    if (is_combining_accent(cp)) {
      changed = true;
      continue;
    }
    const std::uint32_t f = is_foldable_latin(cp) ? fold_latin(cp) : cp;
    changed = changed || f != cp;
    append_utf8(s, f);
  }
  if (changed) out = std::move(s);
  return changed;
}

void normalize_token(std::string_view in, bool lowercase, std::string& out) {
  out.clear();
  const auto* p = reinterpret_cast<const unsigned char*>(in.data());
  const auto* end = p + in.size();
  while (p < end) {
    std::uint32_t cp = decode_utf8(p, end);
    append_utf8(out, lowercase ? to_lower(cp) : cp);
  }
}

}  // namespace ragfind::text
