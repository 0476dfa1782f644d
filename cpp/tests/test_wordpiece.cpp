// WordPieceCounter (ragfind/text/wordpiece.hpp) on hand-checked cases with a tiny vocabulary:
// greedy longest-match-first pieces, "##" continuation, [UNK] for a word with no split or over
// max_input_chars_per_word, BERT normalisation and pre-tokenization, and the texts it declines.
// Parity with HuggingFace tokenizers: tests/pipeline/test_wordpiece_parity.py.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "check.hpp"
#include "ragfind/text/wordpiece.hpp"

using ragfind::text::WordPieceConfig;
using ragfind::text::WordPieceCounter;

namespace {

WordPieceConfig tiny() {
  WordPieceConfig c;
  c.vocab = {"[UNK]", "un", "##aff", "##able", "una", "a", "##b", "cafe", ".", "\xe6\x97\xa5", "i", "##\xcc\x87"};
  c.added_tokens = {"[CLS]"};
  c.max_input_chars_per_word = 8;
  return c;
}

// Token starts of `text` equal `want` (and the text is accepted).
bool starts_are(const WordPieceCounter& w, const std::string& text, const std::vector<std::int64_t>& want) {
  std::vector<std::int64_t> s;
  return w.token_starts(text, s) && s == want && w.count(text) == static_cast<std::int64_t>(want.size());
}

}  // namespace

TEST(greedy_longest_match_first) {
  WordPieceCounter w(tiny());
  // "una" is the longest first piece of "unaffable" but "##ffable" does not split: the whole
  // word is one [UNK] (greedy, no backtracking), as in BERT.
  CHECK(starts_are(w, "unaffable", {0}));
  CHECK(starts_are(w, "ab abb", {0, 1, 3, 4, 5}));
  CHECK(starts_are(w, "abbbbbbbb", {0}));  // 9 characters > 8: one [UNK]
  CHECK(starts_are(w, "b", {0}));          // only "##b" exists: [UNK]
}

TEST(normalisation_and_pre_tokenization) {
  WordPieceCounter w(tiny());
  CHECK(starts_are(w, "  Caf\xc3\xa9. x", {2, 6, 8}));  // accent stripped, lower-cased; "." isolated
  CHECK(starts_are(w,
                   "a\xe6\x97\xa5"
                   "a",
                   {0, 1, 2}));  // CJK isolated
  // A control character and U+200B are removed: "ab" is a + ##b, ##b at b's own offset.
  CHECK(starts_are(w,
                   "a\x01\xe2\x80\x8b"
                   "b",
                   {0, 3}));
  CHECK(starts_are(w, "\xc4\xb0", {0}));  // U+0130: NFD drops U+0307, then "i"
  WordPieceConfig keep = tiny();
  keep.strip_accents = false;
  // Without accent stripping U+0130 lower-cases to i + U+0307: two tokens at one offset.
  CHECK(starts_are(WordPieceCounter(keep), "\xc4\xb0", {0, 0}));
}

TEST(declined_texts) {
  WordPieceCounter w(tiny());
  CHECK_EQ(w.count("a [CLS] b"), -1);        // an added token: tokenizers matches it first
  CHECK_EQ(w.count("a \xff b"), -1);         // invalid UTF-8
  CHECK_EQ(w.count("a \xcd\xb8 b"), -1);     // U+0378, unassigned: its data may change
  CHECK_EQ(w.count("a \xef\xbf\xbd b"), 2);  // a real U+FFFD is removed by clean_text
}

TEST(bad_config) {
  WordPieceConfig c = tiny();
  c.vocab = {"a"};
  CHECK_THROWS(std::invalid_argument, WordPieceCounter{c});
  c.vocab.clear();
  CHECK_THROWS(std::invalid_argument, WordPieceCounter{c});
}

RAGFIND_TEST_MAIN
