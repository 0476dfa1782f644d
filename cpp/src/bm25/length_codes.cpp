#include "ragfind/bm25/length_codes.hpp"

#include <algorithm>
#include <utility>

namespace ragfind::bm25 {

namespace {
// Lengths at or past this are always escapes (they are rare, and the histogram stays small).
constexpr std::uint32_t kMaxCodedLength = 1u << 16;

template <Method M>
void fill_weights(const Params& p, WeightTable& t, std::size_t n) {
  const DocWeight<M> dw(p);
  for (std::size_t c = 0; c < n; ++c)
    for (std::uint32_t tf = 1; tf <= kTableTf; ++tf) t.weight[c * kTableTf + tf - 1] = dw(tf, t.norm[c]);
}
}  // namespace

void LengthCodes::build(const std::uint32_t* len, std::size_t n) {
  std::uint32_t max_len = 0;
  for (std::size_t d = 0; d < n; ++d) max_len = std::max(max_len, std::min(len[d], kMaxCodedLength - 1));
  std::vector<std::uint32_t> count(n ? static_cast<std::size_t>(max_len) + 1 : 0, 0);
  for (std::size_t d = 0; d < n; ++d)
    if (len[d] < kMaxCodedLength) ++count[len[d]];
  std::vector<std::pair<std::uint32_t, std::uint32_t>> by_count;  // (count, length)
  for (std::uint32_t l = 0; l < count.size(); ++l)
    if (count[l]) by_count.push_back({count[l], l});
  const std::size_t m = std::min<std::size_t>(by_count.size(), kCodes);
  std::partial_sort(
      by_count.begin(), by_count.begin() + static_cast<std::ptrdiff_t>(m), by_count.end(),
      [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  // Codes in increasing length (neighbouring lengths share cache lines of the table).
  length.resize(m);
  for (std::size_t i = 0; i < m; ++i) length[i] = by_count[i].second;
  std::sort(length.begin(), length.end());
  of_length.assign(count.size(), static_cast<std::uint8_t>(kEscape));
  for (std::size_t c = 0; c < m; ++c) of_length[length[c]] = static_cast<std::uint8_t>(c);
  built = n;
  appended_escapes = 0;
  code.resize(n);
  if (code.capacity() > 2 * n + 1024) code.shrink_to_fit();
  for (std::size_t d = 0; d < n; ++d)
    code[d] = len[d] < kMaxCodedLength ? of_length[len[d]] : static_cast<std::uint8_t>(kEscape);
}

bool LengthCodes::extend(const std::uint32_t* len, std::size_t n) {
  const std::size_t from = code.size();
  if (n < from || built == 0 || n > 2 * built) return false;
  std::size_t escapes = appended_escapes;
  for (std::size_t d = from; d < n; ++d) escapes += len[d] >= of_length.size() || of_length[len[d]] == kEscape ? 1 : 0;
  if (escapes * 64 > n) return false;
  code.resize(n);
  for (std::size_t d = from; d < n; ++d)
    code[d] = len[d] < of_length.size() ? of_length[len[d]] : static_cast<std::uint8_t>(kEscape);
  appended_escapes = escapes;
  return true;
}

void build_weight_table(const Params& p, double avgdl, const LengthCodes& codes, WeightTable& t) {
  const std::size_t n = codes.length.size();
  for (std::size_t c = 0; c < kCodes; ++c) t.norm[c] = c < n ? doc_norm(p, codes.length[c], avgdl) : 0.0f;
  std::fill(t.weight, t.weight + kCodes * kTableTf, 0.0f);
  switch (p.method) {
    case Method::Lucene: fill_weights<Method::Lucene>(p, t, n); break;
    case Method::Robertson: fill_weights<Method::Robertson>(p, t, n); break;
    case Method::Atire: fill_weights<Method::Atire>(p, t, n); break;
    case Method::BM25L: fill_weights<Method::BM25L>(p, t, n); break;
    case Method::BM25Plus: fill_weights<Method::BM25Plus>(p, t, n); break;
  }
}

}  // namespace ragfind::bm25
