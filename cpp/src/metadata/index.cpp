#include "ragfind/metadata/index.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "ragfind/common/bits.hpp"

namespace ragfind::metadata {

namespace {

constexpr std::uint32_t kDumpVersion = 1;

// A run turns into a bitmap once it holds more than one row in kDenseRatio (and kDenseMin rows).
constexpr std::size_t kDenseRatio = 32;
constexpr std::size_t kDenseMin = 1024;
// Slices of the sorted numbers kept as bitmaps (when a field holds at least kBucketMin numbers).
constexpr std::size_t kBuckets = 32;
constexpr std::size_t kBucketMin = 1 << 14;
// The write log keeps at least kLogMin writes (more for a larger index) and is halved beyond.
constexpr std::size_t kLogMin = 4096;
// patched() tests rows one by one up to kPatchMin + rows / kPatchRatio rows written, beyond
// which evaluating the filter whole is cheaper (a row test costs ~ a search in each leaf's
// postings, a whole evaluation ~ a word per 64 rows per leaf).
constexpr std::size_t kPatchMin = 256;
constexpr std::size_t kPatchRatio = 4096;

template <class T>
void grow_to(std::vector<T>& v, std::uint32_t row, T fill) {
  if (row >= v.size()) v.resize(static_cast<std::size_t>(row) + 1, fill);
}

// Within [lo, hi] as the node's bounds say (bounds absent are open).
template <class T>
bool within(const T& v, const Node& n, const T& lo, const T& hi) {
  if (n.has_lo && (n.lo_inclusive ? v < lo : !(lo < v))) return false;
  if (n.has_hi && (n.hi_inclusive ? hi < v : !(v < hi))) return false;
  return true;
}

// ----- dump / load

void put_u32(std::string& out, std::uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }
void put_u64(std::string& out, std::uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }
void put_str(std::string& out, std::string_view s) {
  put_u64(out, s.size());
  out.append(s);
}
void put_rows(std::string& out, const Postings& p) {
  const std::vector<std::uint32_t> rows = p.rows();
  put_u64(out, rows.size());
  out.append(reinterpret_cast<const char*>(rows.data()), rows.size() * 4);
}

class Reader {
 public:
  explicit Reader(std::string_view b) : b_(b) {}
  const char* take(std::uint64_t n, const char* what) {
    if (n > b_.size() - pos_) throw std::invalid_argument(std::string("metadata index: truncated ") + what);
    const char* p = b_.data() + pos_;
    pos_ += n;
    return p;
  }
  std::uint32_t u32(const char* what) {
    std::uint32_t v;
    std::memcpy(&v, take(4, what), 4);
    return v;
  }
  std::uint64_t u64(const char* what) {
    std::uint64_t v;
    std::memcpy(&v, take(8, what), 8);
    return v;
  }
  std::uint64_t count(std::uint64_t item_bytes, const char* what) {
    const std::uint64_t n = u64(what);
    if (item_bytes && n > (b_.size() - pos_) / item_bytes)
      throw std::invalid_argument(std::string("metadata index: truncated ") + what);
    return n;
  }
  std::string_view str(const char* what) {
    const std::uint64_t n = count(1, what);
    return {take(n, what), static_cast<std::size_t>(n)};
  }
  Postings rows(std::size_t n_rows, const char* what) {
    const std::uint64_t n = count(4, what);
    const char* p = take(n * 4, what);
    Postings out;
    std::int64_t last = -1;
    for (std::uint64_t i = 0; i < n; ++i) {
      std::uint32_t r;
      std::memcpy(&r, p + i * 4, 4);
      if (r >= n_rows || static_cast<std::int64_t>(r) <= last)
        throw std::invalid_argument(std::string("metadata index: rows out of range or order in ") + what);
      last = r;
      out.add(r);
    }
    return out;
  }
  bool done() const { return pos_ == b_.size(); }

 private:
  std::string_view b_;
  std::size_t pos_ = 0;
};

}  // namespace

void Postings::add(std::uint32_t row) {
  if (dense_) {
    if ((row >> 6) >= bits_.size()) bits_.resize((row >> 6) + 1, 0);
    bits_[row >> 6] |= std::uint64_t{1} << (row & 63);
    return;
  }
  run_.push_back(row);
  if (run_.size() >= kDenseMin && run_.size() * kDenseRatio > static_cast<std::size_t>(row) + 1) {
    bits_.assign((static_cast<std::size_t>(row) >> 6) + 1, 0);
    for (std::uint32_t r : run_) bits_[r >> 6] |= std::uint64_t{1} << (r & 63);
    run_.clear();
    run_.shrink_to_fit();
    dense_ = true;
  }
}

void Postings::apply(Bitmap& out) const {
  auto& w = out.words();
  if (dense_) {
    const std::size_t n = std::min(w.size(), bits_.size());
    for (std::size_t i = 0; i < n; ++i) w[i] |= bits_[i];
  } else {
    for (std::uint32_t r : run_) out.set(r);
  }
}

void Postings::clear_in(Bitmap& out) const {
  auto& w = out.words();
  if (dense_) {
    const std::size_t n = std::min(w.size(), bits_.size());
    for (std::size_t i = 0; i < n; ++i) w[i] &= ~bits_[i];
  } else {
    for (std::uint32_t r : run_) w[r >> 6] &= ~(std::uint64_t{1} << (r & 63));
  }
}

bool Postings::test(std::uint32_t row) const {
  if (dense_) return (row >> 6) < bits_.size() && ((bits_[row >> 6] >> (row & 63)) & 1);
  return std::binary_search(run_.begin(), run_.end(), row);
}

std::vector<std::uint32_t> Postings::rows() const {
  if (!dense_) return run_;
  std::vector<std::uint32_t> out;
  for (std::size_t i = 0; i < bits_.size(); ++i)
    for (std::uint64_t b = bits_[i]; b; b &= b - 1)
      out.push_back(static_cast<std::uint32_t>(i * 64 + static_cast<std::size_t>(__builtin_ctzll(b))));
  return out;
}

std::size_t Bitmap::count() const { return common::count_bits(words_.data(), words_.size()); }

std::int64_t MetadataIndex::find(std::int64_t chunk_id) const {
  std::int64_t row = -1;
  if (identity_) {
    if (chunk_id >= 0 && static_cast<std::uint64_t>(chunk_id) < row_ids_.size()) row = chunk_id;
  } else {
    auto it = row_of_.find(chunk_id);
    if (it != row_of_.end()) row = it->second;
  }
  return (row >= 0 && live_.test(static_cast<std::uint32_t>(row))) ? row : -1;
}

void MetadataIndex::push_row(std::int64_t chunk_id, bool live) {
  const auto row = static_cast<std::uint32_t>(row_ids_.size());
  if (row_ids_.size() >= UINT32_MAX) throw std::length_error("metadata index: more than 2^32 - 1 rows");
  if (!row_ids_.empty() && chunk_id <= row_ids_.back()) ascending_ = false;
  if (identity_ && chunk_id != static_cast<std::int64_t>(row)) {
    identity_ = false;
    row_of_.reserve(n_live_ + 1);
    for (std::size_t r = 0; r < row_ids_.size(); ++r)
      if (live_.test(static_cast<std::uint32_t>(r))) row_of_.emplace(row_ids_[r], static_cast<std::uint32_t>(r));
  }
  row_ids_.push_back(chunk_id);
  if (row % 64 == 0) live_.words_.push_back(0);
  live_.n_bits_ = row_ids_.size();
  if (!live) return;
  if (!identity_) row_of_[chunk_id] = row;
  live_.set(row);
  ++n_live_;
}

std::uint32_t MetadataIndex::append_row(std::int64_t chunk_id) {
  push_row(chunk_id, true);
  const auto row = static_cast<std::uint32_t>(row_ids_.size() - 1);
  log_write(row);
  return row;
}

void MetadataIndex::log_write(std::uint32_t row) {
  ++generation_;
  if (log_.size() >= std::max(kLogMin, row_ids_.size() / 16)) {
    const std::size_t half = log_.size() / 2;
    log_floor_ = log_[half - 1].first;
    log_.erase(log_.begin(), log_.begin() + static_cast<std::ptrdiff_t>(half));
  }
  log_.emplace_back(generation_, row);
}

void MetadataIndex::put(std::uint32_t row, std::string_view field, const Value& value) {
  auto it = fields_.find(std::string(field));
  if (it == fields_.end()) it = fields_.emplace(std::string(field), Field{}).first;
  Field& f = it->second;
  const auto kinds = static_cast<std::uint8_t>(f.kinds | (1u << static_cast<unsigned>(value.kind)));
  if (kinds != f.kinds) ++kinds_version_;
  f.kinds = kinds;
  f.present.add(row);
  switch (value.kind) {
    case Kind::Null: f.nulls.add(row); break;
    case Kind::Bool: f.bools[value.flag ? 1 : 0].add(row); break;
    case Kind::Str: {
      auto s = f.str_ids.find(value.str);
      if (s == f.str_ids.end()) {
        f.strs.emplace_back(value.str);
        s = f.str_ids.emplace(std::string_view(f.strs.back()), static_cast<std::uint32_t>(f.str_rows.size())).first;
        f.str_rows.emplace_back();
      }
      f.str_rows[s->second].add(row);
      grow_to(f.str_of_row, row, kNoStr);
      f.str_of_row[row] = s->second;
      break;
    }
    case Kind::Num:
      if (!std::isnan(value.num)) {  // NaN equals nothing and lies in no range
        grow_to(f.num_of_row, row, std::numeric_limits<double>::quiet_NaN());
        f.num_of_row[row] = value.num;
        f.tail.emplace_back(value.num, row);
        if (f.tail.size() > 64 && f.tail.size() * 16 > f.nums.size()) merge_tail(f);
      }
      break;
    case Kind::Other: break;
  }
}

void MetadataIndex::merge_tail(Field& f) {
  std::sort(f.tail.begin(), f.tail.end());
  std::vector<std::pair<double, std::uint32_t>> merged;
  merged.reserve(f.nums.size() + f.tail.size());
  auto live = [&](const std::pair<double, std::uint32_t>& p) { return live_.test(p.second); };
  std::copy_if(f.nums.begin(), f.nums.end(), std::back_inserter(merged), live);
  const auto mid = static_cast<std::ptrdiff_t>(merged.size());
  std::copy_if(f.tail.begin(), f.tail.end(), std::back_inserter(merged), live);
  std::inplace_merge(merged.begin(), merged.begin() + mid, merged.end());
  f.nums.swap(merged);
  f.tail.clear();
  build_buckets(f);
}

void MetadataIndex::build_buckets(Field& f) {
  f.buckets.clear();
  if (f.nums.size() < kBucketMin) return;
  std::uint32_t max_row = 0;
  for (const auto& p : f.nums) max_row = std::max(max_row, p.second);
  f.buckets.assign(kBuckets, std::vector<std::uint64_t>((static_cast<std::size_t>(max_row) >> 6) + 1, 0));
  for (std::size_t b = 0; b < kBuckets; ++b) {
    const std::size_t lo = b * f.nums.size() / kBuckets, hi = (b + 1) * f.nums.size() / kBuckets;
    for (std::size_t i = lo; i < hi; ++i) {
      const std::uint32_t r = f.nums[i].second;
      f.buckets[b][r >> 6] |= std::uint64_t{1} << (r & 63);
    }
  }
}

std::size_t MetadataIndex::remove(const std::vector<std::int64_t>& chunk_ids) {
  std::size_t n = 0;
  for (std::int64_t id : chunk_ids) {
    const std::int64_t row = find(id);
    if (row < 0) continue;
    live_.words_[static_cast<std::size_t>(row) >> 6] &= ~(std::uint64_t{1} << (row & 63));
    if (!identity_) row_of_.erase(id);
    --n_live_;
    ++n;
    log_write(static_cast<std::uint32_t>(row));
  }
  return n;
}

void MetadataIndex::leaf(const Node& n, Bitmap& out) const {
  auto it = fields_.find(n.field);
  if (it == fields_.end()) return;
  const Field& f = it->second;
  switch (n.op) {
    case Node::Op::Present: f.present.apply(out); return;
    case Node::Op::Valued:
      f.present.apply(out);
      f.nulls.clear_in(out);
      return;
    case Node::Op::Eq:
      if (n.value.kind == Kind::Bool) {
        f.bools[n.value.flag ? 1 : 0].apply(out);
      } else if (n.value.kind == Kind::Str) {
        auto s = f.str_ids.find(n.value.str);
        if (s != f.str_ids.end()) f.str_rows[s->second].apply(out);
      } else if (n.value.kind == Kind::Num && !std::isnan(n.value.num)) {
        const double v = n.value.num;
        auto lo = std::lower_bound(f.nums.begin(), f.nums.end(), std::make_pair(v, std::uint32_t{0}));
        for (; lo != f.nums.end() && lo->first == v; ++lo) out.set(lo->second);
        for (const auto& p : f.tail)
          if (p.first == v) out.set(p.second);
      }
      return;
    case Node::Op::Range:
      if (n.value.kind == Kind::Num) {
        if ((n.has_lo && std::isnan(n.lo)) || (n.has_hi && std::isnan(n.hi))) return;
        auto first = f.nums.begin(), last = f.nums.end();
        if (n.has_lo)
          first = n.lo_inclusive ? std::partition_point(first, last, [&](const auto& p) { return p.first < n.lo; })
                                 : std::partition_point(first, last, [&](const auto& p) { return p.first <= n.lo; });
        if (n.has_hi)
          last = n.hi_inclusive ? std::partition_point(first, last, [&](const auto& p) { return p.first <= n.hi; })
                                : std::partition_point(first, last, [&](const auto& p) { return p.first < n.hi; });
        auto begin = static_cast<std::size_t>(first - f.nums.begin());
        const auto end = static_cast<std::size_t>(last - f.nums.begin());
        if (!f.buckets.empty()) {
          auto& w = out.words();
          const std::size_t n_nums = f.nums.size();
          for (std::size_t b = 0; b < kBuckets && begin < end; ++b) {
            const std::size_t lo = b * n_nums / kBuckets, hi = (b + 1) * n_nums / kBuckets;
            if (lo < begin || hi > end || lo == hi) continue;
            // A whole slice: rows [begin, lo) one by one, then the slice's bitmap.
            for (std::size_t i = begin; i < lo; ++i) out.set(f.nums[i].second);
            const auto& bits = f.buckets[b];
            const std::size_t m = std::min(w.size(), bits.size());
            for (std::size_t i = 0; i < m; ++i) w[i] |= bits[i];
            begin = hi;
          }
        }
        for (std::size_t i = begin; i < end; ++i) out.set(f.nums[i].second);
        for (const auto& p : f.tail)
          if (within(p.first, n, n.lo, n.hi)) out.set(p.second);
      } else if (n.value.kind == Kind::Str) {
        const std::string_view lo = n.text, hi = n.text_hi;
        for (std::size_t i = 0; i < f.strs.size(); ++i)
          if (within(std::string_view(f.strs[i]), n, lo, hi)) f.str_rows[i].apply(out);
      }
      return;
    default: return;
  }
}

void MetadataIndex::eval_into(const Node& n, Bitmap& out) const {
  auto& w = out.words();
  switch (n.op) {
    case Node::Op::All:
      for (std::size_t i = 0; i < w.size(); ++i) w[i] = ~std::uint64_t{0};
      return;
    case Node::Op::Nothing: return;
    case Node::Op::And: {
      if (n.children.empty()) return eval_into(Node{}, out);
      eval_into(n.children[0], out);
      for (std::size_t c = 1; c < n.children.size(); ++c) {
        Bitmap other(out.size());
        eval_into(n.children[c], other);
        const auto& o = other.words();
        for (std::size_t i = 0; i < w.size(); ++i) w[i] &= o[i];
      }
      return;
    }
    case Node::Op::Or: {
      for (std::size_t c = 0; c < n.children.size(); ++c) {
        if (c == 0) {
          eval_into(n.children[0], out);
          continue;
        }
        Bitmap other(out.size());
        eval_into(n.children[c], other);
        const auto& o = other.words();
        for (std::size_t i = 0; i < w.size(); ++i) w[i] |= o[i];
      }
      return;
    }
    case Node::Op::Not: {
      if (n.children.size() != 1) throw std::invalid_argument("metadata filter: Not takes one child");
      eval_into(n.children[0], out);
      for (std::size_t i = 0; i < w.size(); ++i) w[i] = ~w[i];
      return;
    }
    default: leaf(n, out); return;
  }
}

Bitmap MetadataIndex::evaluate(const Node& node) const {
  Bitmap out(row_ids_.size());
  eval_into(node, out);
  auto& w = out.words();
  // Dead rows (and the bits past the last row that All and Not set) are never a result.
  const auto& live = live_.words();
  for (std::size_t i = 0; i < w.size(); ++i) w[i] &= live[i];
  return out;
}

bool MetadataIndex::leaf_matches(const Node& n, std::uint32_t row) const {
  auto it = fields_.find(n.field);
  if (it == fields_.end()) return false;
  const Field& f = it->second;
  const double num = row < f.num_of_row.size() ? f.num_of_row[row] : std::numeric_limits<double>::quiet_NaN();
  const std::uint32_t str = row < f.str_of_row.size() ? f.str_of_row[row] : kNoStr;
  switch (n.op) {
    case Node::Op::Present: return f.present.test(row);
    case Node::Op::Valued: return f.present.test(row) && !f.nulls.test(row);
    case Node::Op::Eq:
      if (n.value.kind == Kind::Bool) return f.bools[n.value.flag ? 1 : 0].test(row);
      if (n.value.kind == Kind::Str) return str != kNoStr && std::string_view(f.strs[str]) == n.value.str;
      return n.value.kind == Kind::Num && num == n.value.num;  // NaN on either side: false
    case Node::Op::Range:
      if (n.value.kind == Kind::Num) {
        if (std::isnan(num) || (n.has_lo && std::isnan(n.lo)) || (n.has_hi && std::isnan(n.hi))) return false;
        return within(num, n, n.lo, n.hi);
      }
      if (n.value.kind == Kind::Str && str != kNoStr) {
        const std::string_view lo = n.text, hi = n.text_hi;
        return within(std::string_view(f.strs[str]), n, lo, hi);
      }
      return false;
    default: return false;
  }
}

bool MetadataIndex::matches(const Node& n, std::uint32_t row) const {
  switch (n.op) {
    case Node::Op::All: return true;
    case Node::Op::Nothing: return false;
    case Node::Op::And:
      for (const Node& c : n.children)
        if (!matches(c, row)) return false;
      return true;
    case Node::Op::Or:
      for (const Node& c : n.children)
        if (matches(c, row)) return true;
      return false;
    case Node::Op::Not:
      if (n.children.size() != 1) throw std::invalid_argument("metadata filter: Not takes one child");
      return !matches(n.children[0], row);
    default: return leaf_matches(n, row);
  }
}

common::PagedBits MetadataIndex::patched(const Node& node, const common::PagedBits& rows, std::uint64_t since,
                                         std::size_t* count) const {
  const auto whole = [&] {
    const Bitmap out = evaluate(node);
    if (count) *count = out.count();
    return out.paged();
  };
  if (since < log_floor_ || since > generation_ || rows.size() > row_ids_.size()) return whole();
  const auto first = std::upper_bound(log_.begin(), log_.end(), std::make_pair(since, UINT32_MAX));
  const auto n_written = static_cast<std::size_t>(log_.end() - first);
  if (n_written > kPatchMin + row_ids_.size() / kPatchRatio) return whole();
  common::PagedBits out = rows;  // shares every page; a changed bit copies its page
  out.resize(row_ids_.size());
  std::size_t set = count ? *count : 0;
  for (auto it = first; it != log_.end(); ++it) {
    const std::uint32_t r = it->second;
    const bool was = out.test(r);
    const bool now = live_.test(r) && matches(node, r);
    out.assign(r, now);
    set = set + (now ? 1 : 0) - (was ? 1 : 0);
  }
  if (count) *count = set;
  return out;
}

namespace {

// The chunk ids of the set bits of words(0), ..., words(n - 1), ascending.
template <class Words>
std::vector<std::int64_t> ids_of_words(const std::vector<std::int64_t>& row_ids, bool ascending, std::size_t count,
                                       std::size_t n, const Words& words) {
  std::vector<std::int64_t> out;
  out.reserve(count);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::uint64_t bits = words(i); bits; bits &= bits - 1)
      out.push_back(row_ids[i * 64 + static_cast<std::size_t>(__builtin_ctzll(bits))]);
  }
  if (!ascending) std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<std::int64_t> MetadataIndex::ids_of(const Bitmap& rows) const {
  const auto& w = rows.words();
  return ids_of_words(row_ids_, ascending_, rows.count(), w.size(), [&](std::size_t i) { return w[i]; });
}

std::vector<std::int64_t> MetadataIndex::ids_of(const common::PagedBits& rows) const {
  return ids_of_words(row_ids_, ascending_, rows.count(), rows.n_words(), [&](std::size_t i) { return rows[i]; });
}

std::vector<std::int64_t> MetadataIndex::live_ids() const { return ids_of(evaluate(Node{})); }

std::uint8_t MetadataIndex::kinds(std::string_view field) const {
  auto it = fields_.find(std::string(field));
  return it == fields_.end() ? 0 : it->second.kinds;
}

std::vector<std::string> MetadataIndex::fields() const {
  std::vector<std::string> out;
  for (const auto& [name, f] : fields_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

// Layout (little-endian): version, rows, row ids, live bytes, fields; each field: name, kinds,
// present, nulls, false rows, true rows, strings (each with its rows), (value, row) numbers.
std::string MetadataIndex::dump() const {
  std::string out;
  put_u32(out, kDumpVersion);
  put_u64(out, row_ids_.size());
  out.append(reinterpret_cast<const char*>(row_ids_.data()), row_ids_.size() * 8);
  for (std::size_t r = 0; r < row_ids_.size(); ++r) out.push_back(live_.test(static_cast<std::uint32_t>(r)) ? 1 : 0);
  put_u64(out, fields_.size());
  for (const auto& name : fields()) {
    const Field& f = fields_.at(name);
    put_str(out, name);
    put_u32(out, f.kinds);
    put_rows(out, f.present);
    put_rows(out, f.nulls);
    put_rows(out, f.bools[0]);
    put_rows(out, f.bools[1]);
    put_u64(out, f.strs.size());
    for (std::size_t i = 0; i < f.strs.size(); ++i) {
      put_str(out, f.strs[i]);
      put_rows(out, f.str_rows[i]);
    }
    put_u64(out, f.nums.size() + f.tail.size());
    for (const auto* part : {&f.nums, &f.tail}) {
      for (const auto& [v, r] : *part) {
        out.append(reinterpret_cast<const char*>(&v), 8);
        put_u32(out, r);
      }
    }
  }
  return out;
}

MetadataIndex MetadataIndex::load(std::string_view bytes) {
  Reader in(bytes);
  if (in.u32("version") != kDumpVersion) throw std::invalid_argument("metadata index: unknown version");
  MetadataIndex ix;
  const std::uint64_t n = in.count(9, "rows");
  if (n >= UINT32_MAX) throw std::invalid_argument("metadata index: too many rows");
  const char* ids = in.take(n * 8, "row ids");
  const char* live = in.take(n, "live rows");
  for (std::uint64_t r = 0; r < n; ++r) {
    std::int64_t id;
    std::memcpy(&id, ids + r * 8, 8);
    if (live[r] > 1) throw std::invalid_argument("metadata index: a live flag other than 0 or 1");
    // Tombstones keep their ids, which may repeat a live one (a chunk removed and added back).
    if (live[r] && ix.contains(id)) throw std::invalid_argument("metadata index: a chunk id held by two live rows");
    ix.push_row(id, live[r] != 0);
  }
  const std::uint64_t n_fields = in.count(1, "fields");
  for (std::uint64_t i = 0; i < n_fields; ++i) {
    const std::string name(in.str("field name"));
    if (ix.fields_.count(name)) throw std::invalid_argument("metadata index: field '" + name + "' twice");
    Field& f = ix.fields_[name];
    const std::uint32_t kinds = in.u32("kinds");
    if (kinds >= 32) throw std::invalid_argument("metadata index: bad kinds of field '" + name + "'");
    f.kinds = static_cast<std::uint8_t>(kinds);
    f.present = in.rows(n, "present rows");
    f.nulls = in.rows(n, "null rows");
    f.bools[0] = in.rows(n, "false rows");
    f.bools[1] = in.rows(n, "true rows");
    const std::uint64_t n_strs = in.count(16, "strings");
    for (std::uint64_t s = 0; s < n_strs; ++s) {
      f.strs.emplace_back(in.str("string"));
      if (!f.str_ids.emplace(std::string_view(f.strs.back()), static_cast<std::uint32_t>(s)).second)
        throw std::invalid_argument("metadata index: a string twice in field '" + name + "'");
      f.str_rows.push_back(in.rows(n, "string rows"));
      for (std::uint32_t r : f.str_rows.back().rows()) {
        grow_to(f.str_of_row, r, kNoStr);
        f.str_of_row[r] = static_cast<std::uint32_t>(s);
      }
    }
    const std::uint64_t n_nums = in.count(12, "numbers");
    f.nums.resize(static_cast<std::size_t>(n_nums));
    for (auto& [v, r] : f.nums) {
      std::memcpy(&v, in.take(8, "numbers"), 8);
      r = in.u32("numbers");
      if (r >= n || std::isnan(v)) throw std::invalid_argument("metadata index: a bad number entry");
    }
    std::sort(f.nums.begin(), f.nums.end());
    build_buckets(f);
    for (const auto& [v, r] : f.nums) {
      grow_to(f.num_of_row, r, std::numeric_limits<double>::quiet_NaN());
      f.num_of_row[r] = v;
    }
  }
  if (!in.done()) throw std::invalid_argument("metadata index: bytes after the end");
  return ix;
}

}  // namespace ragfind::metadata
