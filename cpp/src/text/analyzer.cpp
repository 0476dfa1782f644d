// Analyzer: surface-form interning and once-per-surface stemming (see analyzer.hpp).
#include "ragfind/text/analyzer.hpp"

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

namespace ragfind::text {

Analyzer::Analyzer(TokenizerOptions options, const std::vector<std::string>& stopwords, StemBatchFn stem)
    : tokenizer_(options), stem_(std::move(stem)) {
  std::string norm;
  for (const auto& w : stopwords) {
    normalize_token(w, options.lowercase, norm);
    stopwords_.insert(norm);
  }
}

// The word the stemmer sees: with fold_accents, the surface without its Latin accents. Folding
// comes first so that an accented and a plain spelling stem alike (résumé and resume -> resum;
// folding the stems instead would give resume and resum).
std::string_view Analyzer::folded(std::string_view surface, std::string& buf) const {
  if (options().fold_accents && fold_accents(surface, buf)) return buf;
  return surface;
}

std::uint32_t Analyzer::intern_surface(std::string_view s, std::vector<std::uint32_t>& pending) {
  bool inserted = false;
  const std::uint32_t id = surfaces_.insert(s, &inserted);
  if (inserted) {
    if (stopwords_.find(s) != StringTable::kNotFound) {
      surface_stem_.push_back(kStop);
    } else if (!stem_) {
      std::string buf;
      surface_stem_.push_back(stems_.insert(folded(s, buf)));
    } else {
      surface_stem_.push_back(kPending);
      pending.push_back(id);
    }
  }
  return id;
}

void Analyzer::resolve_pending(std::vector<std::uint32_t>& pending) {
  // Surfaces whose stemming failed earlier (the stemmer threw) are retried with the new ones.
  unresolved_.insert(unresolved_.end(), pending.begin(), pending.end());
  pending.clear();
  if (unresolved_.empty()) return;
  std::vector<std::string_view> words;
  words.reserve(unresolved_.size());
  std::vector<std::string> bufs(options().fold_accents ? unresolved_.size() : 0);
  for (std::size_t i = 0; i < unresolved_.size(); ++i) {
    const std::string_view w = surfaces_.get(unresolved_[i]);
    words.push_back(bufs.empty() ? w : folded(w, bufs[i]));
  }
  std::vector<std::string> stems;
  stem_(words, stems);
  if (stems.size() != words.size()) throw std::runtime_error("stemmer returned a different number of words");
  for (std::size_t i = 0; i < unresolved_.size(); ++i) surface_stem_[unresolved_[i]] = stems_.insert(stems[i]);
  unresolved_.clear();
}

// Replaces the surface ids appended since first_token by stem ids, dropping stopwords.
void Analyzer::finish_stream(std::size_t first_token, TokenStream& out) const {
  std::size_t w = first_token;
  std::size_t doc = 0;
  // doc_offsets entries after first_token must be remapped as tokens are dropped.
  while (doc < out.doc_offsets.size() && out.doc_offsets[doc] <= first_token) ++doc;
  for (std::size_t r = first_token; r < out.stem_ids.size(); ++r) {
    while (doc < out.doc_offsets.size() && out.doc_offsets[doc] == r) out.doc_offsets[doc++] = w;
    const std::uint32_t stem = surface_stem_[out.stem_ids[r]];
    if (stem == kStop) continue;
    out.stem_ids[w] = stem;
    out.counted[w] = out.counted[r];
    ++w;
  }
  while (doc < out.doc_offsets.size()) out.doc_offsets[doc++] = w;
  out.stem_ids.resize(w);
  out.counted.resize(w);
}

void Analyzer::analyze_texts(const std::vector<std::string_view>& texts, TokenStream& out) {
  std::unique_lock<std::shared_mutex> lock(mutex_);
  const std::size_t first = out.stem_ids.size();
  std::vector<std::uint32_t> pending;
  for (std::string_view text : texts) {
    tokenizer_.tokenize(text, [&](std::string_view tok, bool counted) {
      out.stem_ids.push_back(intern_surface(tok, pending));
      out.counted.push_back(counted ? 1 : 0);
    });
    out.doc_offsets.push_back(out.stem_ids.size());
  }
  resolve_pending(pending);
  finish_stream(first, out);
}

void Analyzer::analyze_token_lists(const std::vector<std::vector<std::string_view>>& docs, TokenStream& out) {
  std::unique_lock<std::shared_mutex> lock(mutex_);
  const std::size_t first = out.stem_ids.size();
  std::vector<std::uint32_t> pending;
  std::string norm;
  for (const auto& doc : docs) {
    for (std::string_view tok : doc) {
      normalize_token(tok, options().lowercase, norm);
      if (norm.empty()) continue;
      out.stem_ids.push_back(intern_surface(norm, pending));
      out.counted.push_back(1);
    }
    out.doc_offsets.push_back(out.stem_ids.size());
  }
  resolve_pending(pending);
  finish_stream(first, out);
}

void Analyzer::stem_unknown(std::vector<std::string>& stems, const std::vector<std::size_t>& unknown_at) const {
  if (unknown_at.empty()) return;
  if (!stem_) {  // without a stemmer the (folded) surface is the stem
    std::string buf;
    for (std::size_t j : unknown_at)
      if (options().fold_accents && fold_accents(stems[j], buf)) stems[j] = buf;
    return;
  }
  // Distinct unknown surfaces, each stemmed once.
  std::vector<std::string> surfaces;
  std::vector<std::size_t> which(unknown_at.size());
  std::unordered_map<std::string_view, std::size_t> seen;
  for (std::size_t j = 0; j < unknown_at.size(); ++j) {
    const std::string& w = stems[unknown_at[j]];  // stable: stems is not resized here
    auto it = seen.emplace(w, surfaces.size()).first;
    if (it->second == surfaces.size()) surfaces.push_back(w);
    which[j] = it->second;
  }
  std::vector<std::string> bufs(options().fold_accents ? surfaces.size() : 0);
  std::vector<std::string_view> words;
  words.reserve(surfaces.size());
  for (std::size_t i = 0; i < surfaces.size(); ++i)
    words.push_back(bufs.empty() ? std::string_view(surfaces[i]) : folded(surfaces[i], bufs[i]));
  std::vector<std::string> out;
  stem_(words, out);
  if (out.size() != words.size()) throw std::runtime_error("stemmer returned a different number of words");
  for (std::size_t j = 0; j < unknown_at.size(); ++j) stems[unknown_at[j]] = out[which[j]];
  // Remember query-only word forms too, so a repeated query word is stemmed once. Bounded,
  // so that a stream of distinct junk queries cannot grow the table without limit.
  std::unique_lock<std::shared_mutex> lock(mutex_);
  if (surfaces_.size() >= kMaxSurfaces) return;
  for (std::size_t j = 0; j < surfaces.size(); ++j) {
    bool inserted = false;
    auto& self = const_cast<Analyzer&>(*this);
    const std::uint32_t sid = self.surfaces_.insert(surfaces[j], &inserted);
    if (inserted) {
      self.surface_stem_.push_back(self.stems_.insert(out[j]));
    } else if (surface_stem_[sid] == kPending) {
      self.surface_stem_[sid] = self.stems_.insert(out[j]);
      auto& u = self.unresolved_;
      u.erase(std::remove(u.begin(), u.end(), sid), u.end());
    }
  }
}

void Analyzer::analyze_query(std::string_view text, std::vector<std::string>& stems,
                             std::vector<std::uint8_t>* counted) const {
  stems.clear();
  if (counted) counted->clear();
  std::vector<std::size_t> unknown_at;
  {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    tokenizer_.tokenize(text, [&](std::string_view tok, bool c) {
      const std::uint32_t sid = surfaces_.find(tok);
      if (sid != StringTable::kNotFound) {
        const std::uint32_t stem = surface_stem_[sid];
        if (stem == kStop) return;
        if (stem != kPending) {
          stems.emplace_back(stems_.get(stem));
          if (counted) counted->push_back(c ? 1 : 0);
          return;
        }
      } else if (stopwords_.find(tok) != StringTable::kNotFound) {
        return;
      }
      unknown_at.push_back(stems.size());
      stems.emplace_back(tok);
      if (counted) counted->push_back(c ? 1 : 0);
    });
  }
  stem_unknown(stems, unknown_at);
}

void Analyzer::analyze_query_tokens(const std::vector<std::string_view>& tokens,
                                    std::vector<std::string>& stems) const {
  stems.clear();
  std::vector<std::size_t> unknown_at;
  std::string norm;
  {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    for (std::string_view tok : tokens) {
      normalize_token(tok, options().lowercase, norm);
      if (norm.empty()) continue;
      const std::uint32_t sid = surfaces_.find(norm);
      if (sid != StringTable::kNotFound) {
        const std::uint32_t stem = surface_stem_[sid];
        if (stem == kStop) continue;
        if (stem != kPending) {
          stems.emplace_back(stems_.get(stem));
          continue;
        }
      } else if (stopwords_.find(norm) != StringTable::kNotFound) {
        continue;
      }
      unknown_at.push_back(stems.size());
      stems.push_back(norm);
    }
  }
  stem_unknown(stems, unknown_at);
}

void Analyzer::analyze_with_offsets(std::string_view text, std::vector<Located>& out) const {
  out.clear();
  std::vector<std::string> stems;
  std::vector<std::size_t> unknown_at;
  {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    tokenizer_.tokenize_with_offsets(text, [&](std::string_view tok, bool c, std::size_t b, std::size_t e) {
      const std::uint32_t sid = surfaces_.find(tok);
      if (sid != StringTable::kNotFound) {
        const std::uint32_t stem = surface_stem_[sid];
        if (stem == kStop) return;
        if (stem != kPending) {
          stems.emplace_back(stems_.get(stem));
          out.push_back({std::string(), static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(e), c});
          return;
        }
      } else if (stopwords_.find(tok) != StringTable::kNotFound) {
        return;
      }
      unknown_at.push_back(stems.size());
      stems.emplace_back(tok);
      out.push_back({std::string(), static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(e), c});
    });
  }
  stem_unknown(stems, unknown_at);
  for (std::size_t i = 0; i < out.size(); ++i) out[i].stem = std::move(stems[i]);
}

}  // namespace ragfind::text
