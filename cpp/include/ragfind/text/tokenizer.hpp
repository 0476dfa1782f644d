// The analyzer's tokenizer: UTF-8 in, word tokens out, identifiers kept findable.
//
// Base tokens are maximal runs of word characters (Python's \w) of at least two code points,
// exactly the tokens of re.findall(r"(?u)\b\w\w+\b"); they count towards the document length.
// With split_identifiers, two kinds of extra ("overlap") tokens are emitted that do NOT count
// towards the length, in the spirit of Lucene's WordDelimiterGraphFilter with preserveOriginal
// and discountOverlaps, so that plain-word scoring is unchanged:
//   - the parts of a run split at '_' and at camelCase boundaries (getUserById -> get, user,
//     by, id; E_ACCESS_DENIED -> access, denied; HTTPServer -> http, server);
//   - the whole compound of runs joined by single '-', '.' or '/' characters when it contains a
//     digit (XJ-2000 -> xj-2000, v2.3.1 -> v2.3.1, IL-6 -> il-6), so a query for a code or a
//     version prefers documents that contain exactly it. Word compounds without digits
//     (boundary-layer, e.g.) are left to their parts: on the evaluation collections an extra
//     rare token for ordinary hyphenation only adds noise (Cranfield nDCG@10 0.3674 vs 0.3695).
// With symbol_letters, a one-letter run is a token too when it is written as a symbol: a
// capital (T cells, vitamin D, hepatitis B, G-CSF) or a Greek letter (TNF-α); it counts towards
// the length. Other one-character runs (a, the s of 's, the t of don't, lone digits) stay
// dropped, as are capitals right after an apostrophe (DON'T). On SciFact this gains nDCG@10
// on both query sets, where keeping every one-character run loses on the train queries.
// Without caps_text_symbols, a capital is not a symbol in a text with no lower-case letter at
// all (an all-caps text: I AM INTERESTED IN ...), where case tells nothing (LISA: +0.011
// nDCG@10, no change on the other four collections of bench/quality.md). The text is scanned
// for a lower-case letter only when a one-letter capital turns up.
// With fold_accents, a combining accent (U+0300..U+036F) after a word character stays in the
// word (decomposed café is one word, as the composed one); the Analyzer folds the terms.
// With cjk_bigrams, a run is cut where it changes between CJK (cjk.hpp) and other characters;
// each CJK piece gives its overlapping character bigrams (a lone character: itself), all counted,
// as Lucene's CJKAnalyzer does; the other pieces are analyzed as runs of their own.
// Invalid UTF-8 never stops the scan: a bad byte is a separator (decoded as U+FFFD).
// tokenize_with_offsets() also reports each token's [begin, end) in code points of the text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ragfind/text/cjk.hpp"
#include "ragfind/text/unicode.hpp"

namespace ragfind::text {

struct TokenizerOptions {
  bool lowercase = true;
  bool split_identifiers = true;
  bool cjk_bigrams = false;
  bool symbol_letters = false;
  bool caps_text_symbols = true;  // capitals are symbols even in a text without lower case
  bool fold_accents = false;      // combining accents stay in words (the Analyzer folds terms)
};

class Tokenizer {
 public:
  explicit Tokenizer(TokenizerOptions options = {}) : opt_(options) {}
  const TokenizerOptions& options() const { return opt_; }

  /// Calls emit(std::string_view token, bool counts_for_length) for each token, in text order.
  template <class Emit>
  void tokenize(std::string_view text, Emit&& emit) const {
    tokenize_with_offsets(text,
                          [&](std::string_view tok, bool counted, std::size_t, std::size_t) { emit(tok, counted); });
  }

  /// Calls emit(token, counts_for_length, begin, end) for each token, in text order; [begin,
  /// end) are code point offsets (each bad UTF-8 byte counts as one).
  template <class Emit>
  void tokenize_with_offsets(std::string_view text, Emit&& emit) const {
    Scratch& s = scratch();
    s.run.clear();
    s.compound.clear();
    int compound_runs = 0;
    bool compound_digit = false;
    std::size_t compound_begin = 0, compound_end = 0;
    std::size_t cp_index = 0, run_begin = 0;
    std::uint32_t before_run = 0;  // the separator before the current run (0 at the start)
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    const auto* end = p + text.size();
    const bool split = opt_.split_identifiers;

    auto flush_compound = [&]() {
      if (split && compound_runs >= 2 && compound_digit && s.compound.size() <= kMaxCompoundBytes)
        emit(std::string_view(s.compound), false, compound_begin, compound_end);
      s.compound.clear();
      compound_runs = 0;
      compound_digit = false;
    };
    int text_has_lower = -1;  // unknown until a one-letter capital needs it
    auto symbol_letter = [&](std::uint32_t cp, std::size_t from) {
      if (!opt_.symbol_letters || !is_symbol_letter(cp) || (from == 0 && (before_run == '\'' || before_run == 0x2019)))
        return false;
      if (opt_.caps_text_symbols || !is_upper(cp)) return true;
      if (text_has_lower < 0) text_has_lower = has_lower_letter(text) ? 1 : 0;
      return text_has_lower == 1;
    };
    // s.run[from, to) as one run starting at code point `at`.
    auto flush_piece = [&](std::size_t from, std::size_t to, std::size_t at) {
      s.token.clear();
      append_lower(s.token, s.run, from, to);
      std::size_t letters = to - from;  // combining accents do not count as characters
      if (opt_.fold_accents)
        for (std::size_t j = from; j < to; ++j) letters -= is_combining_accent(s.run[j]) ? 1 : 0;
      if (letters >= 2 || (letters == 1 && symbol_letter(s.run[from], from)))
        emit(std::string_view(s.token), true, at, at + (to - from));
      if (split) {
        emit_parts(s, from, to, at, emit);
        if (compound_runs == 0) compound_begin = at;
        compound_end = at + (to - from);
        if (s.compound.size() <= kMaxCompoundBytes) s.compound += s.token;
        ++compound_runs;
        for (std::size_t j = from; j < to; ++j) compound_digit = compound_digit || is_ascii_digit(s.run[j]);
      }
    };
    auto flush_run = [&]() {
      const std::size_t n = s.run.size();
      bool any_cjk = false;
      if (opt_.cjk_bigrams)
        for (std::uint32_t cp : s.run) any_cjk = any_cjk || is_cjk(cp);
      if (!any_cjk) {
        flush_piece(0, n, run_begin);
        s.run.clear();
        return;
      }
      std::size_t i = 0;
      while (i < n) {
        std::size_t j = i + 1;
        const bool cjk = is_cjk(s.run[i]);
        while (j < n && is_cjk(s.run[j]) == cjk) ++j;
        if (!cjk) {
          flush_piece(i, j, run_begin + i);
        } else {
          flush_compound();  // a compound never spans CJK text
          const std::size_t step = j - i == 1 ? 1 : 2;
          for (std::size_t a = i; a + step <= j; ++a) {
            s.token.clear();
            append_lower(s.token, s.run, a, a + step);
            emit(std::string_view(s.token), true, run_begin + a, run_begin + a + step);
          }
        }
        i = j;
      }
      s.run.clear();
    };

    while (p < end) {
      std::uint32_t cp = decode_utf8(p, end);
      const std::size_t at = cp_index++;
      if (is_word_char(cp) || (opt_.fold_accents && !s.run.empty() && is_combining_accent(cp))) {
        if (s.run.empty()) run_begin = at;
        s.run.push_back(cp);
        continue;
      }
      if (s.run.empty()) {
        before_run = cp;
        continue;
      }
      flush_run();  // reads the before_run of the run it ends
      before_run = cp;
      if (split && (cp == '-' || cp == '.' || cp == '/') && p < end) {
        const unsigned char* q = p;
        if (is_word_char(decode_utf8(q, end)) && compound_runs > 0) {
          s.compound.push_back(static_cast<char>(cp));
          continue;
        }
      }
      flush_compound();
    }
    if (!s.run.empty()) flush_run();
    flush_compound();
  }

 private:
  static constexpr std::size_t kMaxCompoundBytes = 256;

  struct Scratch {
    std::vector<std::uint32_t> run;
    std::string token, part, compound;
    std::vector<std::size_t> cuts;
  };
  static Scratch& scratch() {
    thread_local Scratch s;
    return s;
  }

  // Appends run[begin, end) lower-cased (when enabled); a Greek capital sigma ending a word of
  // two or more letters becomes the final form, as str.lower() does.
  void append_lower(std::string& out, const std::vector<std::uint32_t>& run, std::size_t begin, std::size_t end) const {
    if (!opt_.lowercase) {
      for (std::size_t j = begin; j < end; ++j) append_utf8(out, run[j]);
      return;
    }
    for (std::size_t j = begin; j < end; ++j) {
      const std::uint32_t cp = run[j];
      append_utf8(out, (cp == 0x3A3 && j + 1 == end && end - begin > 1) ? 0x3C2 : to_lower(cp));
    }
  }

  // A capital (it has a lower-case form) or a Greek letter, the letters science writes as symbols.
  static bool is_symbol_letter(std::uint32_t cp) {
    return is_upper(cp) || (cp >= 0x3B1 && cp <= 0x3C9) || cp == 0x3D1 || cp == 0x3D5 || cp == 0x3F5;
  }

  static bool is_lower_letter(std::uint32_t cp) { return cp != '_' && !is_ascii_digit(cp) && !is_upper(cp); }

  // Splits s.run at '_' and camelCase boundaries; emits the parts (>= 2 code points) when the
  // run actually splits.
  template <class Emit>
  void emit_parts(Scratch& s, std::size_t from, std::size_t to, std::size_t at, Emit& emit) const {
    const std::uint32_t* r = s.run.data() + from;
    const std::size_t n = to - from;
    bool has_underscore = false;
    s.cuts.clear();  // pairs [begin, end)
    std::size_t begin = 0;
    for (std::size_t j = 0; j < n; ++j) {
      const std::uint32_t c = r[j];
      if (c == '_') {
        has_underscore = true;
        if (j > begin) {
          s.cuts.push_back(begin);
          s.cuts.push_back(j);
        }
        begin = j + 1;
        continue;
      }
      if (j > begin && is_upper(c)) {
        const std::uint32_t prev = r[j - 1];
        const bool lower_to_upper = !is_upper(prev);
        const bool acronym_end = is_upper(prev) && j + 1 < n && is_lower_letter(r[j + 1]);
        if (lower_to_upper || acronym_end) {
          s.cuts.push_back(begin);
          s.cuts.push_back(j);
          begin = j;
        }
      }
    }
    if (n > begin) {
      s.cuts.push_back(begin);
      s.cuts.push_back(n);
    }
    if (s.cuts.size() < 4 && !has_underscore) return;  // the run is one part: nothing new
    for (std::size_t i = 0; i + 1 < s.cuts.size(); i += 2) {
      if (s.cuts[i + 1] - s.cuts[i] < 2) continue;
      s.part.clear();
      append_lower(s.part, s.run, from + s.cuts[i], from + s.cuts[i + 1]);
      emit(std::string_view(s.part), false, at + s.cuts[i], at + s.cuts[i + 1]);
    }
  }

  TokenizerOptions opt_;
};

}  // namespace ragfind::text
