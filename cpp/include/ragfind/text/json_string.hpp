// Text as the inside of a JSON string: UTF-8, with '"', '\' and control characters escaped (as
// orjson writes them), from code units of one width (Python's 1, 2 and 4-byte strings). Runs of
// plain ASCII, most of any passage, are found 16 units at a time with SSE2 (every x86-64 has it)
// and copied whole; the scalar scan is the reference every SIMD scan is tested against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string_view>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ragfind::text::json {

// A growable byte buffer written through raw pointers (std::string zero-fills what it grows by).
class ByteWriter {
 public:
  ByteWriter() = default;
  ByteWriter(const ByteWriter&) = delete;
  ByteWriter& operator=(const ByteWriter&) = delete;
  ~ByteWriter() { std::free(data_); }

  // Room for `extra` more bytes at the end: write there, then commit(the new end).
  char* room(std::size_t extra) {
    if (size_ + extra > cap_) grow(size_ + extra);
    return data_ + size_;
  }
  void commit(char* end) { size_ = static_cast<std::size_t>(end - data_); }
  void push_back(char c) { *room(1) = c, ++size_; }
  void append(std::string_view s) {
    std::memcpy(room(s.size()), s.data(), s.size());
    size_ += s.size();
  }
  std::string_view view() const { return {data_, size_}; }
  std::size_t capacity() const { return cap_; }
  void clear() { size_ = 0; }
  // Gives the memory back (after one huge text).
  void release() {
    std::free(data_);
    data_ = nullptr;
    size_ = cap_ = 0;
  }

 private:
  void grow(std::size_t need) {
    std::size_t cap = cap_ < 4096 ? 4096 : cap_;
    while (cap < need) cap *= 2;
    char* p = static_cast<char*>(std::realloc(data_, cap));
    if (p == nullptr) throw std::bad_alloc();
    data_ = p;
    cap_ = cap;
  }

  char* data_ = nullptr;
  std::size_t size_ = 0, cap_ = 0;
};

inline bool needs_escape(uint32_t c) { return c < 0x20 || c == '"' || c == '\\'; }

// The escape of an ASCII character that needs one, written at w; returns the end.
inline char* write_escape(char* w, uint32_t c) {
  static const char hex[] = "0123456789abcdef";
  *w++ = '\\';
  switch (c) {
    case '"': *w++ = '"'; break;
    case '\\': *w++ = '\\'; break;
    case '\n': *w++ = 'n'; break;
    case '\r': *w++ = 'r'; break;
    case '\t': *w++ = 't'; break;
    case '\b': *w++ = 'b'; break;
    case '\f': *w++ = 'f'; break;
    default: *w++ = 'u', *w++ = '0', *w++ = '0'; *w++ = hex[(c >> 4) & 0xF], *w++ = hex[c & 0xF];
  }
  return w;
}

// How many units from p are ASCII that needs no escape (copied as they are), one at a time.
template <class Unit>
std::size_t plain_prefix_scalar(const Unit* p, std::size_t n) {
  std::size_t i = 0;
  while (i < n && static_cast<uint32_t>(p[i]) < 0x80 && !needs_escape(static_cast<uint32_t>(p[i]))) ++i;
  return i;
}

#if defined(__SSE2__)
// The 16 bytes at x that are not plain ASCII, as a bit mask. A signed compare: bytes from 0x80
// are negative, below 0x20 like the control characters.
inline int not_plain16(__m128i x) {
  const __m128i bad =
      _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')), _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'))),
                   _mm_cmplt_epi8(x, _mm_set1_epi8(0x20)));
  return _mm_movemask_epi8(bad);
}
#endif

// plain_prefix_scalar, 16 units at a time where SSE2 is compiled in (1 and 2-byte units; a
// 2-byte unit is packed to a byte with unsigned saturation, so any unit past 0x7F stays past it).
template <class Unit>
std::size_t plain_prefix(const Unit* p, std::size_t n) {
  std::size_t i = 0;
#if defined(__SSE2__)
  if constexpr (sizeof(Unit) == 1) {
    for (; i + 16 <= n; i += 16) {
      const int m = not_plain16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i)));
      if (m != 0) return i + static_cast<std::size_t>(__builtin_ctz(static_cast<unsigned>(m)));
    }
  } else if constexpr (sizeof(Unit) == 2) {
    for (; i + 16 <= n; i += 16) {
      const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
      const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + 8));
      const int m = not_plain16(_mm_packus_epi16(lo, hi));
      if (m != 0) return i + static_cast<std::size_t>(__builtin_ctz(static_cast<unsigned>(m)));
    }
  }
#endif
  return i + plain_prefix_scalar(p + i, n - i);
}

// One code point past plain ASCII (or one that needs an escape) at w; returns the end, or
// nullptr for a lone surrogate (not UTF-8).
inline char* write_code_point(char* w, uint32_t c) {
  if (c < 0x80) return write_escape(w, c);
  if (c < 0x800) {
    *w++ = static_cast<char>(0xC0 | (c >> 6));
    *w++ = static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    if (c >= 0xD800 && c <= 0xDFFF) return nullptr;
    *w++ = static_cast<char>(0xE0 | (c >> 12));
    *w++ = static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    *w++ = static_cast<char>(0x80 | (c & 0x3F));
  } else {
    *w++ = static_cast<char>(0xF0 | (c >> 18));
    *w++ = static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    *w++ = static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    *w++ = static_cast<char>(0x80 | (c & 0x3F));
  }
  return w;
}

// n code units (code points) as the inside of a JSON string; false at a lone surrogate (what
// was written is then unfinished). `simd`: false takes the scalar scan (the reference).
template <class Unit>
bool write_units(ByteWriter& out, const Unit* p, std::size_t n, bool simd = true) {
  char* w = out.room(n * 6);  // the longest form of a unit: \u00XX
  std::size_t i = 0;
  while (i < n) {
    const std::size_t k = simd ? plain_prefix(p + i, n - i) : plain_prefix_scalar(p + i, n - i);
    if constexpr (sizeof(Unit) == 1) {
      std::memcpy(w, p + i, k);
    } else {
      for (std::size_t j = 0; j < k; ++j) w[j] = static_cast<char>(p[i + j]);
    }
    w += k, i += k;
    if (i == n) break;
    w = write_code_point(w, static_cast<uint32_t>(p[i++]));
    if (w == nullptr) return false;
  }
  out.commit(w);
  return true;
}

// The length of the well-formed UTF-8 sequence at p (its lead byte past ASCII), or 0: a stray
// continuation byte, an overlong form, a surrogate, a code point past U+10FFFF or a truncated
// sequence (what Python's strict decoder refuses).
inline std::size_t utf8_sequence(const unsigned char* p, std::size_t n) {
  const unsigned c = p[0];
  const auto cont = [&](std::size_t i) { return i < n && (p[i] & 0xC0) == 0x80; };
  if (c < 0xC2) return 0;
  if (c < 0xE0) return cont(1) ? 2 : 0;
  if (c < 0xF0) {
    if (!cont(1) || !cont(2)) return 0;
    if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] >= 0xA0)) return 0;
    return 3;
  }
  if (c < 0xF5) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if ((c == 0xF0 && p[1] < 0x90) || (c == 0xF4 && p[1] >= 0x90)) return 0;
    return 4;
  }
  return 0;
}

// UTF-8 bytes as the inside of a JSON string (escaped, multi-byte sequences copied); false
// when they are not well-formed UTF-8 (what was written is then unfinished). `simd`: as in
// write_units.
inline bool write_utf8(ByteWriter& out, std::string_view s, bool simd = true) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  char* w = out.room(n * 6);
  std::size_t i = 0;
  while (i < n) {
    const std::size_t k = simd ? plain_prefix(p + i, n - i) : plain_prefix_scalar(p + i, n - i);
    std::memcpy(w, p + i, k);
    w += k, i += k;
    if (i == n) break;
    if (p[i] < 0x80) {
      w = write_escape(w, p[i++]);
      continue;
    }
    const std::size_t len = utf8_sequence(p + i, n - i);
    if (len == 0) return false;
    std::memcpy(w, p + i, len);
    w += len, i += len;
  }
  out.commit(w);
  return true;
}

}  // namespace ragfind::text::json
