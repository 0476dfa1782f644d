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

}  // namespace

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
