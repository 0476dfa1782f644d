// JSON string text (ragfind/text/json_string.hpp): the wide scan against the scalar one on
// random units of each width, the written bytes against a direct per-code-point encoder, and a
// few hand-checked escapes.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "check.hpp"
#include "ragfind/text/json_string.hpp"

using namespace ragfind::text::json;

namespace {

// The reference: one code point at a time, as JSON and UTF-8 define them; false at a surrogate.
bool reference(const std::vector<uint32_t>& cps, std::string& out) {
  static const char hex[] = "0123456789abcdef";
  for (uint32_t c : cps) {
    if (c == '"') {
      out += "\\\"";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\b') {
      out += "\\b";
    } else if (c == '\f') {
      out += "\\f";
    } else if (c < 0x20) {
      out += "\\u00";
      out += hex[c >> 4];
      out += hex[c & 0xF];
    } else if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      if (c >= 0xD800 && c <= 0xDFFF) return false;
      out += static_cast<char>(0xE0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return true;
}

template <class Unit>
void check_width(std::mt19937& rng, uint32_t max_unit) {
  // Mostly plain ASCII (the runs the wide scan copies), with every kind of exception sprinkled.
  const std::vector<uint32_t> odd = {'"',   '\\',  0,      0x1F,   '\n',   0x7F,   0x80,   0xFF,    0x100,
                                     0x7FF, 0x800, 0xD7FF, 0xD800, 0xDFFF, 0xE000, 0xFFFF, 0x10000, 0x10FFFF};
  for (int trial = 0; trial < 4000; ++trial) {
    const size_t n = rng() % 90;
    const unsigned odd_every = 1 + rng() % 40;
    std::vector<uint32_t> cps(n);
    std::vector<Unit> units(n);
    for (size_t i = 0; i < n; ++i) {
      uint32_t c = 0x20 + rng() % 0x5F;
      if (rng() % odd_every == 0) c = odd[rng() % odd.size()];
      if (c > max_unit) c = 'a';
      if (c == '"' && rng() % 2) c = 0x20;  // the bounds of the plain range
      cps[i] = c;
      units[i] = static_cast<Unit>(c);
    }
    // The scan: the wide one stops where the scalar one does, from every start.
    for (size_t start = 0; start <= n; ++start)
      CHECK(plain_prefix(units.data() + start, n - start) == plain_prefix_scalar(units.data() + start, n - start));
    std::string want;
    const bool want_ok = reference(cps, want);
    for (bool simd : {true, false}) {
      ByteWriter out;
      out.append("<");
      const bool ok = write_units(out, units.data(), n, simd);
      CHECK(ok == want_ok);
      if (ok) CHECK(std::string(out.view()) == "<" + want);
    }
  }
}

// The reference decoder: code points from UTF-8 by their value ranges; false when not
// well-formed (a shortest form only, no surrogates, nothing past U+10FFFF).
bool decode(const std::string& bytes, std::vector<uint32_t>& cps) {
  for (size_t i = 0; i < bytes.size();) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > bytes.size()) return false;
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t j = 1; j < len; ++j) {
      const auto b = static_cast<unsigned char>(bytes[i + j]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    cps.push_back(cp);
    i += len;
  }
  return true;
}

void check_utf8(const std::string& bytes) {
  std::vector<uint32_t> cps;
  std::string want;
  const bool valid = decode(bytes, cps) && reference(cps, want);
  for (bool simd : {true, false}) {
    ByteWriter out;
    const bool ok = write_utf8(out, bytes, simd);
    CHECK(ok == valid);
    if (ok && valid) CHECK(std::string(out.view()) == want);
  }
}

}  // namespace

TEST(utf8_bytes_against_the_reference_decoder) {
  for (const char* s : {"", "plain", "\xC2\x80", "\xED\x9F\xBF", "\xEE\x80\x80", "\xF0\x90\x80\x80", "\xF4\x8F\xBF\xBF",
                        "\x80", "\xC0\xAF", "\xC1\xBF", "\xE0\x80\xAF", "\xED\xA0\x80", "\xF0\x80\x80\x80",
                        "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\xC3", "a\xE2\x82", "\xFF"})
    check_utf8(s);
  std::mt19937 rng(99);
  // Well-formed text of every length, then the same with a byte changed.
  const std::vector<uint32_t> pool = {'a',    'b',    ' ',    '"',    '\\',    '\n',    0x1,
                                      0x7F,   0x80,   0xE9,   0x7FF,  0x800,   0x3B2,   0x2014,
                                      0xD7FF, 0xE000, 0xFFFD, 0xFFFF, 0x10000, 0x1F600, 0x10FFFF};
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<uint32_t> cps(rng() % 60);
    for (uint32_t& c : cps) c = rng() % 3 ? 0x20 + rng() % 0x5F : pool[rng() % pool.size()];
    std::string bytes;
    for (uint32_t c : cps) {
      char buf[8];
      char* end = write_code_point(buf, c < 0x80 ? '#' : c);
      bytes.append(c < 0x80 ? std::string(1, static_cast<char>(c)) : std::string(buf, end));
    }
    check_utf8(bytes);
    if (!bytes.empty()) {
      bytes[rng() % bytes.size()] = static_cast<char>(rng() % 256);
      check_utf8(bytes);
    }
  }
}

TEST(wide_scan_and_text_equal_the_scalar_and_the_reference) {
  std::mt19937 rng(12345);
  check_width<uint8_t>(rng, 0xFF);
  check_width<uint16_t>(rng, 0xFFFF);
  check_width<uint32_t>(rng, 0x10FFFF);
}

TEST(hand_checked_escapes_and_growth) {
  ByteWriter out;
  const std::string in = "a\"b\\c\n\x01\x1f\x7f";
  CHECK(write_units(out, reinterpret_cast<const uint8_t*>(in.data()), in.size()));
  CHECK(std::string(out.view()) == "a\\\"b\\\\c\\n\\u0001\\u001f\x7f");
  out.clear();
  const uint16_t beta_dash[] = {0x3B2, 0x2014, 'x'};
  CHECK(write_units(out, beta_dash, 3));
  CHECK(std::string(out.view()) == "\xCE\xB2\xE2\x80\x94x");
  out.clear();
  const uint32_t emoji[] = {0x1F600};
  CHECK(write_units(out, emoji, 1));
  CHECK(std::string(out.view()) == "\xF0\x9F\x98\x80");
  const uint16_t lone[] = {'a', 0xD83D};
  CHECK(!write_units(out, lone, 2));
  // Growth past the first block keeps what was written.
  ByteWriter big;
  const std::string chunk(1000, 'q');
  for (int i = 0; i < 100; ++i) CHECK(write_units(big, reinterpret_cast<const uint8_t*>(chunk.data()), chunk.size()));
  CHECK(big.view().size() == 100000 && big.view().find_first_not_of('q') == std::string_view::npos);
  big.release();
  CHECK(big.view().empty());
}

RAGFIND_TEST_MAIN
