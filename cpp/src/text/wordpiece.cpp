// BERT normalisation, pre-tokenization and WordPiece, counting tokens (see wordpiece.hpp).
#include "ragfind/text/wordpiece.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "ragfind/text/unicode.hpp"

namespace ragfind::text {

namespace {

// Flag bits of cpp/tools/gen_wordpiece_tables.py.
constexpr std::uint8_t kCleanRemove = 1;
constexpr std::uint8_t kWhitespace = 2;
constexpr std::uint8_t kPunct = 4;
constexpr std::uint8_t kStripMapped = 8;
constexpr std::uint8_t kLowerMapped = 16;
constexpr std::uint8_t kReorder = 32;
constexpr std::uint8_t kDrift = 64;
constexpr std::uint8_t kChinese = 128;

constexpr std::uint32_t kNumCodepoints = 0x110000;
// Trie nodes with more children than this get a dense row (see dense_ in wordpiece.hpp).
constexpr std::size_t kDenseChildren = 8;

// One byte per code point (1.1 MB), expanded once from the generated runs.
const std::vector<std::uint8_t>& codepoint_flags() {
  static const std::vector<std::uint8_t> flags = [] {
    using namespace wordpiece_tables;
    std::vector<std::uint8_t> f(kNumCodepoints, 0);
    for (std::size_t r = 0; r < kNumFlagRuns; ++r) {
      const std::uint32_t end = r + 1 < kNumFlagRuns ? kFlagRuns[r + 1].first : kNumCodepoints;
      std::fill(f.begin() + kFlagRuns[r].first, f.begin() + end, kFlagRuns[r].flags);
    }
    return f;
  }();
  return flags;
}

const wordpiece_tables::CodepointMapping* find_mapping(const wordpiece_tables::CodepointMapping* table, std::size_t n,
                                                       std::uint32_t cp) {
  const auto* end = table + n;
  const auto* it = std::lower_bound(
      table, end, cp, [](const wordpiece_tables::CodepointMapping& m, std::uint32_t v) { return m.from < v; });
  return (it != end && it->from == cp) ? it : nullptr;
}

struct CountSink {
  std::int64_t n = 0;
  void add(std::int64_t) { ++n; }
};

struct StartsSink {
  std::vector<std::int64_t>& starts;
  void add(std::int64_t s) { starts.push_back(s); }
};

}  // namespace

// The normalised characters of one pre-token, with the original offset of each.
struct WordPieceCounter::Word {
  std::string bytes;
  std::vector<std::uint32_t> char_byte;  // byte offset of each character in `bytes`
  std::vector<std::int64_t> origin;      // original character offset of each character
  std::vector<std::int64_t> pieces;      // scratch: piece starts before the word is accepted

  void add(std::uint32_t cp, std::int64_t at) {
    char_byte.push_back(static_cast<std::uint32_t>(bytes.size()));
    origin.push_back(at);
    append_utf8(bytes, cp);
  }
  bool empty() const { return origin.empty(); }
  void clear() {
    bytes.clear();
    char_byte.clear();
    origin.clear();
  }
};

WordPieceCounter::WordPieceCounter(const WordPieceConfig& config) : config_(config) {
  if (config_.vocab.empty()) throw std::invalid_argument("WordPiece vocabulary is empty");
  // Build with ordered maps, then flatten into sorted child ranges.
  std::vector<std::map<unsigned char, std::uint32_t>> children(1);
  std::vector<std::uint8_t> terminal(1, 0);
  auto walk = [&](std::string_view s, bool insert, std::uint32_t& node) {
    node = 0;
    for (unsigned char c : s) {
      auto it = children[node].find(c);
      if (it == children[node].end()) {
        if (!insert) return false;
        const auto next = static_cast<std::uint32_t>(children.size());
        children[node][c] = next;
        children.emplace_back();
        terminal.push_back(0);
        node = next;
      } else {
        node = it->second;
      }
    }
    return true;
  };
  bool unk_found = false;
  for (const std::string& token : config_.vocab) {
    if (token.empty()) continue;  // matches nothing: WordPiece never looks up an empty piece
    std::uint32_t node = 0;
    walk(token, true, node);
    terminal[node] = 1;
    unk_found = unk_found || token == config_.unk_token;
  }
  if (!unk_found) {
    throw std::invalid_argument("unk_token '" + config_.unk_token + "' is not in the WordPiece vocabulary");
  }
  std::uint32_t node = 0;
  has_continuation_node_ = walk(config_.continuing_subword_prefix, false, node);
  continuation_node_ = node;
  child_begin_.assign(children.size() + 1, 0);
  for (std::size_t n = 0; n < children.size(); ++n) {
    child_begin_[n + 1] = child_begin_[n] + static_cast<std::uint32_t>(children[n].size());
  }
  labels_.reserve(child_begin_.back());
  targets_.reserve(child_begin_.back());
  for (const auto& c : children) {
    for (const auto& [label, target] : c) {
      labels_.push_back(label);
      targets_.push_back(target);
    }
  }
  terminal_ = std::move(terminal);
  dense_row_.assign(children.size(), -1);
  for (std::size_t n = 0; n < children.size(); ++n) {
    if (children[n].size() <= kDenseChildren) continue;
    dense_row_[n] = static_cast<std::int32_t>(dense_.size() / 256);
    dense_.resize(dense_.size() + 256, 0);
    for (const auto& [label, target] : children[n]) dense_[dense_.size() - 256 + label] = target;
  }
  const std::uint8_t* flags = codepoint_flags().data();
  for (std::uint32_t c = 0; c < 128; ++c) {
    const std::uint8_t f = flags[c];
    ascii_byte_[c] = static_cast<unsigned char>(c);
    if (config_.clean_text && (f & kCleanRemove)) {
      ascii_kind_[c] = kAsciiDrop;
      continue;
    }
    if (config_.clean_text && (f & kWhitespace)) {
      ascii_kind_[c] = kAsciiSpace;
      continue;
    }
    std::uint32_t y = c;
    bool general =
        (config_.handle_chinese_chars && (f & kChinese)) || (config_.strip_accents && (f & (kStripMapped | kReorder)));
    if (config_.lowercase && (f & kLowerMapped)) {
      const auto* m = find_mapping(wordpiece_tables::kLowerMap, wordpiece_tables::kNumLowerMap, c);
      general = general || m->n != 1 || m->to[0] >= 0x80;
      y = m->to[0];
    }
    if (general || (f & kDrift)) {
      ascii_kind_[c] = kAsciiGeneral;
      continue;
    }
    ascii_byte_[c] = static_cast<unsigned char>(y);
    const std::uint8_t g = flags[y];
    ascii_kind_[c] = (g & kWhitespace) ? kAsciiSpace : (g & kPunct) ? kAsciiPunct : kAsciiWord;
  }
}

std::size_t WordPieceCounter::longest_match(std::uint32_t node, const unsigned char* s, std::size_t pos,
                                            std::size_t end) const {
  std::size_t best = 0;
  for (std::size_t i = pos; i < end; ++i) {
    const std::int32_t row = dense_row_[node];
    if (row >= 0) {
      node = dense_[static_cast<std::size_t>(row) * 256 + s[i]];
      if (node == 0) break;
    } else {
      const std::uint32_t b = child_begin_[node], e = child_begin_[node + 1];
      std::uint32_t k = b;
      while (k < e && labels_[k] != s[i]) ++k;
      if (k == e) break;
      node = targets_[k];
    }
    if (terminal_[node]) best = i + 1 - pos;
  }
  return best;
}

template <class Sink>
void WordPieceCounter::emit_word(Word& word, Sink& sink) const {
  const std::size_t n_chars = word.origin.size();
  if (n_chars > config_.max_input_chars_per_word) {  // the whole word is one [UNK]
    sink.add(word.origin[0]);
    return;
  }
  auto& pieces = word.pieces;
  pieces.clear();
  const auto* bytes = reinterpret_cast<const unsigned char*>(word.bytes.data());
  const std::size_t len = word.bytes.size();
  std::size_t pos = 0, ch = 0;
  while (pos < len) {
    std::size_t m = 0;
    if (pos == 0) {
      m = longest_match(0, bytes, 0, len);
    } else if (has_continuation_node_) {
      m = longest_match(continuation_node_, bytes, pos, len);
    }
    if (m == 0) {  // a piece not in the vocabulary: the whole word is one [UNK]
      sink.add(word.origin[0]);
      return;
    }
    pieces.push_back(word.origin[ch]);
    pos += m;
    while (ch < n_chars && word.char_byte[ch] < pos) ++ch;
  }
  for (std::int64_t s : pieces) sink.add(s);
}

template <class Sink>
bool WordPieceCounter::run(std::string_view utf8, Sink& sink) const {
  for (const std::string& added : config_.added_tokens) {
    if (!added.empty() && utf8.find(added) != std::string_view::npos) return false;
  }
  const std::uint8_t* flags = codepoint_flags().data();
  Word word;
  auto flush = [&] {
    if (!word.empty()) {
      emit_word(word, sink);
      word.clear();
    }
  };
  const auto* p = reinterpret_cast<const unsigned char*>(utf8.data());
  const auto* end = p + utf8.size();
  std::uint32_t seq[12];
  for (std::int64_t at = 0; p < end; ++at) {
    if (*p < 0x80) {
      const unsigned char b = *p;
      switch (ascii_kind_[b]) {
        case kAsciiDrop: ++p; continue;
        case kAsciiSpace:
          ++p;
          flush();
          continue;
        case kAsciiPunct:
          ++p;
          flush();
          word.add(ascii_byte_[b], at);
          flush();
          continue;
        case kAsciiWord:
          ++p;
          word.add(ascii_byte_[b], at);
          continue;
        case kAsciiGeneral: break;
      }
    }
    const unsigned char* before = p;
    const std::uint32_t cp = decode_utf8(p, end);
    if (cp == kReplacementChar && !(p - before == 3 && before[0] == 0xEF)) return false;  // invalid UTF-8
    const std::uint8_t f = flags[cp];
    if (f & kDrift) return false;
    if (config_.clean_text) {
      if (f & kCleanRemove) continue;
      if (f & kWhitespace) {
        flush();
        continue;
      }
    }
    const bool chinese = config_.handle_chinese_chars && (f & kChinese);
    if (chinese) flush();  // the space inserted before it
    std::size_t n = 0;
    if (config_.strip_accents && (f & kStripMapped)) {
      if (f & kReorder) return false;
      const auto* m = find_mapping(wordpiece_tables::kStripMap, wordpiece_tables::kNumStripMap, cp);
      for (std::size_t k = 0; k < m->n; ++k) seq[n++] = m->to[k];
    } else {
      if (config_.strip_accents && (f & kReorder)) return false;
      seq[n++] = cp;
    }
    if (config_.lowercase) {
      std::uint32_t lowered[12];
      std::size_t n_lowered = 0;
      for (std::size_t k = 0; k < n; ++k) {
        if (flags[seq[k]] & kLowerMapped) {
          const auto* m = find_mapping(wordpiece_tables::kLowerMap, wordpiece_tables::kNumLowerMap, seq[k]);
          for (std::size_t j = 0; j < m->n; ++j) lowered[n_lowered++] = m->to[j];
        } else {
          lowered[n_lowered++] = seq[k];
        }
      }
      std::copy(lowered, lowered + n_lowered, seq);
      n = n_lowered;
    }
    for (std::size_t k = 0; k < n; ++k) {
      const std::uint8_t g = flags[seq[k]];
      if (g & kWhitespace) {
        flush();
      } else if (g & kPunct) {
        flush();
        word.add(seq[k], at);
        flush();
      } else {
        word.add(seq[k], at);
      }
    }
    if (chinese) flush();  // the space inserted after it
  }
  flush();
  return true;
}

bool WordPieceCounter::token_starts(std::string_view utf8, std::vector<std::int64_t>& starts) const {
  StartsSink sink{starts};
  return run(utf8, sink);
}

std::int64_t WordPieceCounter::count(std::string_view utf8) const {
  CountSink sink;
  return run(utf8, sink) ? sink.n : -1;
}

}  // namespace ragfind::text
