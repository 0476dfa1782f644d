// A BERT WordPiece token counter that gives the token offsets HuggingFace `tokenizers` gives.
//
// Chunking needs only where each token starts (to count tokens in a character range and cut
// after n tokens), not the ids, so this runs BertNormalizer (clean_text, handle_chinese_chars,
// strip_accents, lowercase), BertPreTokenizer (split on whitespace, isolate punctuation) and
// greedy longest-match-first WordPiece with a byte trie, and reports the character offset of
// each token's first character in the original text, without special tokens.
//
// The per-code-point data comes from `tokenizers` itself (cpp/tools/gen_wordpiece_tables.py).
// A text the counter cannot promise to tokenize identically is reported as such (the caller
// tokenizes it with `tokenizers`): one holding an added token's text ("[CLS]"), a code point
// whose Unicode data differs between `tokenizers` and Python's unicodedata, or, under
// strip_accents, a combining mark that NFD's canonical reordering could move.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ragfind::text {

namespace wordpiece_tables {
struct FlagRun {
  std::uint32_t first;
  std::uint8_t flags;
};
struct CodepointMapping {
  std::uint32_t from;
  std::uint8_t n;
  std::uint32_t to[3];
};
extern const FlagRun kFlagRuns[];
extern const std::size_t kNumFlagRuns;
extern const CodepointMapping kStripMap[];
extern const std::size_t kNumStripMap;
extern const CodepointMapping kLowerMap[];
extern const std::size_t kNumLowerMap;
}  // namespace wordpiece_tables

/// Settings of a BERT WordPiece tokenizer (the tokenizer.json fields of the same names).
struct WordPieceConfig {
  std::vector<std::string> vocab;
  std::string unk_token = "[UNK]";
  std::string continuing_subword_prefix = "##";
  std::size_t max_input_chars_per_word = 100;
  bool clean_text = true;
  bool handle_chinese_chars = true;
  bool strip_accents = true;
  bool lowercase = true;
  /// Added tokens: `tokenizers` matches them before normalising, so a text holding one is refused.
  std::vector<std::string> added_tokens;
};

class WordPieceCounter {
 public:
  /// Throws std::invalid_argument for an empty vocabulary or an unk_token not in it.
  explicit WordPieceCounter(const WordPieceConfig& config);

  /// Appends the character (code point) offset of each token's first character in `utf8` to
  /// `starts` (non-decreasing). Returns false, with `starts` unspecified, when parity with
  /// `tokenizers` is not guaranteed for this text. Invalid UTF-8 is refused too.
  bool token_starts(std::string_view utf8, std::vector<std::int64_t>& starts) const;

  /// Number of tokens in `utf8`, or -1 where token_starts would return false.
  std::int64_t count(std::string_view utf8) const;

 private:
  struct Word;
  template <class Sink>
  bool run(std::string_view utf8, Sink& sink) const;
  template <class Sink>
  void emit_word(Word& word, Sink& sink) const;
  // Longest vocabulary entry that prefixes bytes [pos, end) of `s` from trie node `node`;
  // returns its length in bytes (0: none).
  std::size_t longest_match(std::uint32_t node, const unsigned char* s, std::size_t pos, std::size_t end) const;

  WordPieceConfig config_;
  // Byte trie: node n's children are labels_/targets_[child_begin_[n], child_begin_[n + 1]),
  // labels sorted; terminal_[n] marks a vocabulary entry ending at n.
  std::vector<std::uint32_t> child_begin_;
  std::vector<unsigned char> labels_;
  std::vector<std::uint32_t> targets_;
  std::vector<std::uint8_t> terminal_;
  // Nodes with many children (the root, "##", short prefixes) also get a 256-entry row of
  // dense_ (0: no child; the root is nobody's child): one load per byte instead of a search.
  std::vector<std::int32_t> dense_row_;  // per node, -1 when it has no row
  std::vector<std::uint32_t> dense_;
  // ASCII after normalisation under this config: what each byte becomes (kind, byte).
  enum AsciiKind : std::uint8_t { kAsciiDrop, kAsciiSpace, kAsciiPunct, kAsciiWord, kAsciiGeneral };
  AsciiKind ascii_kind_[128];
  unsigned char ascii_byte_[128];
  std::uint32_t continuation_node_ = 0;
  bool has_continuation_node_ = false;
  std::vector<std::uint8_t> flags_;  // per code point, expanded from the runs
};

}  // namespace ragfind::text
