// The analyzer: tokenizer + lower-casing + stopwords + stemming, with stemming done once per
// distinct surface form (a surface -> stem table), never once per occurrence.
//
// The stemmer is an injected batch function (the Python bindings wrap PyStemmer), so this core
// stays free of Python. Thread safety: every public method takes the analyzer's own lock
// (shared for queries, exclusive when new surface forms are interned); the stemmer callback may
// be invoked while that lock is held, so callers must never wait for the lock while holding a
// resource the callback needs (the bindings release the GIL before calling in).
#pragma once

#include <cstdint>
#include <functional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "ragfind/text/string_table.hpp"
#include "ragfind/text/tokenizer.hpp"

namespace ragfind::text {

/// Stems words[i] into stems[i] (stems is resized by the callee to words.size()).
using StemBatchFn = std::function<void(const std::vector<std::string_view>& words, std::vector<std::string>& stems)>;

/// Analyzed documents: stem ids (into Analyzer's stem table) in token order, a flag per token
/// saying whether it counts towards the document length, and doc boundaries (size n_docs + 1).
struct TokenStream {
  std::vector<std::uint32_t> stem_ids;
  std::vector<std::uint8_t> counted;
  std::vector<std::size_t> doc_offsets{0};
  void clear() {
    stem_ids.clear();
    counted.clear();
    doc_offsets.assign(1, 0);
  }
};

class Analyzer {
 public:
  /// stopwords are compared after lower-casing (when enabled); stem may be empty (no stemming).
  Analyzer(TokenizerOptions options, const std::vector<std::string>& stopwords, StemBatchFn stem);

  const TokenizerOptions& options() const { return tokenizer_.options(); }
  bool has_stemmer() const { return static_cast<bool>(stem_); }

  /// Tokenizes and stems documents, interning new surface forms (stemmed in one batch).
  void analyze_texts(const std::vector<std::string_view>& texts, TokenStream& out);

  /// The same for documents already split by a user tokenizer: each token is normalized
  /// (lower-cased when enabled), filtered by the stopwords, stemmed; all tokens count.
  void analyze_token_lists(const std::vector<std::vector<std::string_view>>& docs, TokenStream& out);

  /// Analyzes a query (or any text) without growing the tables: the stems in token order.
  /// counted (optional) receives the counts-for-length flag of each stem.
  void analyze_query(std::string_view text, std::vector<std::string>& stems,
                     std::vector<std::uint8_t>* counted = nullptr) const;
  void analyze_query_tokens(const std::vector<std::string_view>& tokens, std::vector<std::string>& stems) const;

  /// analyze_query() that also gives each stem's [begin, end) in code points of the text (the
  /// surface the stem came from) and its counts-for-length flag.
  struct Located {
    std::string stem;
    std::uint32_t begin, end;
    bool counted;
  };
  void analyze_with_offsets(std::string_view text, std::vector<Located>& out) const;

  /// Runs fn(const StringTable& stems) under the shared lock (to read stem strings by id).
  template <class Fn>
  void with_stems(Fn&& fn) const {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    fn(stems_);
  }

  std::size_t num_surfaces() const {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    return surfaces_.size();
  }

 private:
  static constexpr std::uint32_t kStop = 0xFFFFFFFFu;     // surface is a stopword
  static constexpr std::uint32_t kPending = 0xFFFFFFFEu;  // surface not stemmed yet
  static constexpr std::size_t kMaxSurfaces = std::size_t(1) << 26;

  std::uint32_t intern_surface(std::string_view s, std::vector<std::uint32_t>& pending);
  std::string_view folded(std::string_view stem, std::string& buf) const;
  void resolve_pending(std::vector<std::uint32_t>& pending);
  void finish_stream(std::size_t first_token, TokenStream& out) const;
  void stem_unknown(std::vector<std::string>& stems, const std::vector<std::size_t>& unknown_at) const;

  Tokenizer tokenizer_;
  StringTable stopwords_;
  StemBatchFn stem_;
  mutable std::shared_mutex mutex_;
  StringTable surfaces_;
  std::vector<std::uint32_t> surface_stem_;  // per surface: stem id, kStop or kPending
  std::vector<std::uint32_t> unresolved_;    // kPending surfaces (left over if the stemmer threw)
  StringTable stems_;
};

}  // namespace ragfind::text
