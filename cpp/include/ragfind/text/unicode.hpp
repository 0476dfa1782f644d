// UTF-8 decoding and the few Unicode properties the analyzer needs.
//
// Word characters are Python's regex \w (str.isalnum() or '_') so that, with identifier
// splitting off, the tokenizer equals re.findall(r"(?u)\b\w\w+\b") (bm25s, scikit-learn).
// Tables are generated from unicodedata by cpp/tools/gen_unicode_tables.py.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ragfind::text {

struct CodepointRange {
  std::uint32_t lo, hi;
};
struct CodepointPair {
  std::uint32_t from, to;
};

namespace unicode_tables {
extern const CodepointRange kWordRanges[];
extern const std::size_t kNumWordRanges;
extern const CodepointPair kLowerMap[];
extern const std::size_t kNumLowerMap;
}  // namespace unicode_tables

/// Code point returned for an invalid or truncated UTF-8 sequence (U+FFFD).
inline constexpr std::uint32_t kReplacementChar = 0xFFFD;

/// True for a non-ASCII word character (binary search in the generated table).
bool is_word_char_nonascii(std::uint32_t cp);
/// Simple (1:1) lower-case mapping for a non-ASCII code point.
std::uint32_t to_lower_nonascii(std::uint32_t cp);
/// True for a non-ASCII lower-case letter: the lower-case form of some capital.
bool is_lower_nonascii(std::uint32_t cp);

/// True when text holds a lower-case letter (a-z, or the lower-case form of any capital).
bool has_lower_letter(std::string_view text);

/// A combining diacritical mark (U+0300..U+036F): part of a word when accents are folded.
inline bool is_combining_accent(std::uint32_t cp) { return cp >= 0x300 && cp <= 0x36F; }

/// Writes `in` with the accents of Latin letters removed into `out` (Unicode NFD, then the
/// combining marks U+0300..U+036F dropped, for the Latin-1 Supplement, Latin Extended-A/B and
/// Latin Extended Additional blocks: café -> cafe, naïve -> naive, Łódź -> Łodz). Returns false,
/// leaving `out` untouched, when nothing changes (every ASCII string).
bool fold_accents(std::string_view in, std::string& out);

/// Python's \w: alphanumeric or underscore.
inline bool is_word_char(std::uint32_t cp) {
  if (cp < 0x80) {
    return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') || cp == '_';
  }
  return is_word_char_nonascii(cp);
}

inline std::uint32_t to_lower(std::uint32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  return to_lower_nonascii(cp);
}

/// Upper or title case: the character has a different lower-case form.
inline bool is_upper(std::uint32_t cp) { return to_lower(cp) != cp; }

inline bool is_ascii_digit(std::uint32_t cp) { return cp >= '0' && cp <= '9'; }

/// Decodes one code point at p (p < end) and advances p. Invalid, overlong, surrogate or
/// truncated sequences yield kReplacementChar and advance by one byte, so any byte string
/// decodes without reading past `end`.
inline std::uint32_t decode_utf8(const unsigned char*& p, const unsigned char* end) {
  const unsigned char c = *p;
  if (c < 0x80) {
    ++p;
    return c;
  }
  std::size_t avail = static_cast<std::size_t>(end - p);
  if (c >= 0xC2 && c <= 0xDF) {
    if (avail >= 2 && (p[1] & 0xC0) == 0x80) {
      std::uint32_t cp = ((c & 0x1Fu) << 6) | (p[1] & 0x3Fu);
      p += 2;
      return cp;
    }
  } else if (c >= 0xE0 && c <= 0xEF) {
    if (avail >= 3 && (p[1] & 0xC0) == 0x80 && (p[2] & 0xC0) == 0x80) {
      std::uint32_t cp = ((c & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
      if (cp >= 0x800 && !(cp >= 0xD800 && cp <= 0xDFFF)) {
        p += 3;
        return cp;
      }
    }
  } else if (c >= 0xF0 && c <= 0xF4) {
    if (avail >= 4 && (p[1] & 0xC0) == 0x80 && (p[2] & 0xC0) == 0x80 && (p[3] & 0xC0) == 0x80) {
      std::uint32_t cp = ((c & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
      if (cp >= 0x10000 && cp <= 0x10FFFF) {
        p += 4;
        return cp;
      }
    }
  }
  ++p;
  return kReplacementChar;
}

inline void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

/// Lower-cases (optionally) and re-encodes `in`, replacing invalid sequences with U+FFFD.
void normalize_token(std::string_view in, bool lowercase, std::string& out);

}  // namespace ragfind::text
