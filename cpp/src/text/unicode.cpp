// Lookups in the generated Unicode tables (unicode_tables.cpp).
#include <algorithm>

#include "ragfind/text/unicode.hpp"

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
