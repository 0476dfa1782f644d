// Store: the id rule, filters, locking and the read-side helpers of the BM25 index (store.hpp).
#include "ragfind/bm25/store.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>
#include <shared_mutex>
#include <unordered_set>

#include "ragfind/bm25/index_io.hpp"
#include "ragfind/common/bits.hpp"
#include "ragfind/common/parallel.hpp"

namespace ragfind::bm25 {

namespace {

[[noreturn]] void unknown_id(const std::string& msg) { throw IdError(IdError::Kind::Unknown, msg); }
[[noreturn]] void duplicate_id(const std::string& msg) { throw IdError(IdError::Kind::Duplicate, msg); }
[[noreturn]] void id_kind(const std::string& msg) { throw IdError(IdError::Kind::WrongKind, msg); }

}  // namespace

std::string quote_id(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == '\\' || c == q) out += '\\';
    out += c;
  }
  return out + q;
}

void Hits::resolve_ids(const inverted::DocIds& ids) {
  str_ids = ids.kind() == inverted::DocIds::Kind::Str;
  if (str_ids) {
    strs.resize(docs.size());
    for (std::size_t i = 0; i < docs.size(); ++i) strs[i] = ids.strs()[docs[i].doc];
  } else {
    ints.resize(docs.size());
    for (std::size_t i = 0; i < docs.size(); ++i) ints[i] = ids.int_at(docs[i].doc);
  }
}

Params Store::make_params(const std::string& method, double k1, double b, double delta) {
  Params p;
  p.method = parse_method(method);
  if (!(k1 >= 0) || !std::isfinite(k1))
    throw std::invalid_argument("k1: expected a finite number >= 0, got " + std::to_string(k1));
  if (!(b >= 0 && b <= 1)) throw std::invalid_argument("b: expected a number in [0, 1], got " + std::to_string(b));
  if (!(delta >= 0) || !std::isfinite(delta))
    throw std::invalid_argument("delta: expected a finite number >= 0, got " + std::to_string(delta));
  p.k1 = k1;
  p.b = b;
  p.delta = delta;
  return p;
}

std::size_t Store::size() const {
  std::shared_lock<Lock> lock(mu_);
  return index_.num_docs();
}

inverted::DocIds::Kind Store::ids_kind() const {
  std::shared_lock<Lock> lock(mu_);
  return index_.num_docs() == 0 ? inverted::DocIds::Kind::Unset : ids_.kind();
}

// ----- adding and deleting

void Store::check_ids(const IdBatch& p, std::size_t n) const {
  using Kind = inverted::DocIds::Kind;
  if (p.given) {
    if (p.is_str && ids_.kind() == Kind::Int && ids_.slots() > 0) id_kind("ids: this index has int ids, got str ids");
    if (!p.is_str && ids_.kind() == Kind::Str && ids_.slots() > 0) id_kind("ids: this index has str ids, got int ids");
  } else if (ids_.kind() == Kind::Str && ids_.slots() > 0) {
    id_kind("ids: this index has str ids; pass ids= for the new items");
  }
  if (p.is_str) {
    std::unordered_set<std::string_view> seen;
    for (std::size_t i = 0; i < n; ++i)
      if (!seen.insert(p.strs[i]).second) duplicate_id("ids: id " + quote_id(p.strs[i]) + " is repeated");
    for (std::size_t i = 0; i < n; ++i)
      if (ids_.find(p.strs[i]) >= 0)
        duplicate_id("ids: [" + quote_id(p.strs[i]) + "] already in the index (delete them first to replace them)");
  } else if (p.given) {
    std::unordered_set<std::int64_t> seen;
    for (std::size_t i = 0; i < n; ++i)
      if (!seen.insert(p.ints[i]).second) duplicate_id("ids: id " + std::to_string(p.ints[i]) + " is repeated");
    for (std::size_t i = 0; i < n; ++i)
      if (ids_.find(p.ints[i]) >= 0)
        duplicate_id("ids: [" + std::to_string(p.ints[i]) +
                     "] already in the index (delete them first to replace them)");
  }
}

void Store::commit_ids(IdBatch& p, std::size_t n) {
  if (p.is_str) {
    ids_.append(std::move(p.strs));
  } else if (p.given) {
    ids_.append(p.ints);
  } else {
    std::vector<std::int64_t> auto_ids(n);
    const std::int64_t start = ids_.next_auto_id();
    for (std::size_t i = 0; i < n; ++i) auto_ids[i] = start + static_cast<std::int64_t>(i);
    ids_.append(auto_ids);
  }
}

// Compacts segments past the dead-fraction threshold (the ids and positions follow the
// renumbering) and starts a new write generation.
void Store::after_write() {
  const std::vector<std::uint32_t> dropped = index_.compact();
  if (!dropped.empty()) ++layout_;
  ids_.compact(dropped);
  if (positions_) positions_->compact(dropped);
  generation_.fetch_add(1, std::memory_order_release);
}

void Store::add_tokens(IdBatch ids, const std::vector<std::vector<std::string_view>>& docs) {
  const std::size_t n = docs.size();
  std::unique_lock<Lock> lock(mu_);
  check_ids(ids, n);
  if (n == 0) return;
  std::size_t total = 0;
  for (const auto& d : docs) total += d.size();
  std::vector<std::uint32_t> terms;
  terms.reserve(total);
  std::vector<std::size_t> offsets{0};
  for (const auto& d : docs) {
    for (std::string_view t : d) terms.push_back(index_.vocab().insert(t));
    offsets.push_back(terms.size());
  }
  index_.add_documents(terms.data(), nullptr, offsets.data(), n);
  if (positions_) positions_->append(terms.data(), nullptr, offsets.data(), n);
  commit_ids(ids, n);
  after_write();
}

// Maps analysed stem ids to vocabulary ids, interning new stems.
void Store::map_stems(const text::Analyzer& analyzer, text::TokenStream& stream) {
  analyzer.with_stems([&](const text::StringTable& stems) {
    if (stem_to_term_.size() < stems.size()) stem_to_term_.resize(stems.size(), -1);
    for (auto& sid : stream.stem_ids) {
      std::int64_t& t = stem_to_term_[sid];
      if (t < 0) t = index_.vocab().insert(stems.get(sid));
      sid = static_cast<std::uint32_t>(t);
    }
  });
}

void Store::add_analyzed(IdBatch ids, std::size_t n, const text::Analyzer& analyzer,
                         const std::function<std::size_t(std::size_t, text::TokenStream&)>& analyze) {
  std::unique_lock<Lock> lock(mu_);
  check_ids(ids, n);
  if (n == 0) return;
  text::TokenStream stream;
  const std::uint32_t slots_before = index_.num_slots();
  try {
    for (std::size_t begin = 0; begin < n;) {
      stream.clear();
      const std::size_t end = analyze(begin, stream);
      map_stems(analyzer, stream);
      index_.add_chunk(stream.stem_ids.data(), stream.counted.data(), stream.doc_offsets.data(), end - begin);
      if (positions_)
        positions_->append(stream.stem_ids.data(), stream.counted.data(), stream.doc_offsets.data(), end - begin);
      begin = end;
    }
  } catch (...) {
    index_.abort_chunks();
    if (positions_) positions_->truncate(slots_before);
    throw;
  }
  index_.commit_chunks();
  commit_ids(ids, n);
  after_write();
}

void Store::remove(const IdBatch& p, const std::vector<std::string>& shown) {
  if (p.is_str) {
    std::unordered_set<std::string_view> seen;
    for (std::size_t i = 0; i < p.strs.size(); ++i)
      if (!seen.insert(p.strs[i]).second) duplicate_id("ids: id " + shown[i] + " is repeated");
  } else {
    std::unordered_set<std::int64_t> seen;
    for (std::size_t i = 0; i < p.ints.size(); ++i)
      if (!seen.insert(p.ints[i]).second) duplicate_id("ids: id " + shown[i] + " is repeated");
  }
  std::unique_lock<Lock> lock(mu_);
  std::vector<std::uint32_t> docs;
  const std::size_t n = p.size();
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t d = p.is_str ? ids_.find(p.strs[i]) : ids_.find(p.ints[i]);
    if (d < 0) unknown_id("ids: [" + shown[i] + "] not in the index; nothing was deleted");
    docs.push_back(static_cast<std::uint32_t>(d));
  }
  std::sort(docs.begin(), docs.end());
  docs.erase(std::unique(docs.begin(), docs.end()), docs.end());
  index_.delete_documents(docs);
  for (std::uint32_t d : docs) ids_.kill(d);
  ++layout_;
  after_write();
}

// ----- filters

std::shared_ptr<FilterMask::Buffer> FilterMask::allocate(std::size_t n) {
  auto b = std::make_shared<Buffer>();
  b->capacity = n + n / 8 + 64;  // room for adds: extended in place until it fills
  b->bytes.reset(new std::uint8_t[b->capacity]);
  b->claimed = n;
  return b;
}

void FilterMask::assign(std::size_t n, std::uint8_t v) {
  buf_ = allocate(n);
  std::memset(buf_->bytes.get(), v, n);
  size_ = n;
}

void Store::fill_filter(CompiledFilter& f) const {
  if (f.by_bits) return fill_filter_bits(f);
  f.mask.assign(index_.num_slots(), 0);
  f.docs.clear();
  f.docs_listed = true;
  f.generation = generation();
  struct Count {  // every path below ends with docs complete
    CompiledFilter& f;
    ~Count() { f.count = f.docs.size(); }
  } count_at_end{f};
  const std::size_t n = std::min(ids_.slots(), f.mask.size());
  const auto increasing = [](const std::vector<std::int64_t>& v) {
    return std::adjacent_find(v.begin(), v.end(), std::greater_equal<std::int64_t>()) == v.end();
  };
  if (f.strs.empty() && ids_.ints_increasing() && increasing(f.ints)) {
    // Both sides strictly increasing (a metadata filter over default ids): one galloping merge,
    // each slot met at most once and in order, so no lookup per id, no dedup and no sort.
    f.docs.resize(std::min(f.ints.size(), n));
    std::uint32_t* out = f.docs.data();
    std::uint8_t* mask = f.mask.data();
    std::size_t count = 0, slot = 0;
    const std::int64_t base = n ? ids_.int_at(0) : 0;
    if (n && ids_.int_at(n - 1) - base == static_cast<std::int64_t>(n) - 1) {
      // Consecutive ids (the default ones, never compacted): slot = id - base, branch-free.
      const auto first = std::lower_bound(f.ints.begin(), f.ints.end(), base);
      const auto last = std::lower_bound(first, f.ints.end(), base + static_cast<std::int64_t>(n));
      for (auto it = first; it != last; ++it) {
        const auto d = static_cast<std::size_t>(*it - base);
        const std::uint8_t live = ids_.is_live(d) ? 1 : 0;
        mask[d] = live;
        out[count] = static_cast<std::uint32_t>(d);
        count += live;
      }
      f.docs.resize(count);
      return;
    }
    for (std::int64_t id : f.ints) {
      std::size_t lo = slot, hi = slot, step = 1;
      while (hi < n && ids_.int_at(hi) < id) {
        lo = hi + 1;
        hi = slot + step;
        step <<= 1;
      }
      hi = std::min(hi, n);
      while (lo < hi) {
        const std::size_t mid = lo + (hi - lo) / 2;
        if (ids_.int_at(mid) < id) lo = mid + 1;
        else hi = mid;
      }
      slot = lo;
      if (slot == n) break;
      if (ids_.int_at(slot) == id && ids_.is_live(slot)) {
        mask[slot] = 1;
        out[count++] = static_cast<std::uint32_t>(slot);
        ++slot;
      }
    }
    f.docs.resize(count);
    return;
  }
  f.docs.reserve(std::min(f.ints.size() + f.strs.size(), n));
  bool ordered = true;  // sorted ids over increasing slots come out in order: no sort then
  auto take = [&](std::int64_t d) {
    if (d >= 0 && !f.mask[static_cast<std::size_t>(d)]) {
      f.mask[static_cast<std::size_t>(d)] = 1;
      ordered = ordered && (f.docs.empty() || f.docs.back() < static_cast<std::uint32_t>(d));
      f.docs.push_back(static_cast<std::uint32_t>(d));
    }
  };
  for (std::int64_t id : f.ints) take(ids_.find(id));
  for (const std::string& id : f.strs) take(ids_.find(id));
  if (!ordered) std::sort(f.docs.begin(), f.docs.end());
}

namespace {

// Byte k of kSpread[b] is bit k of b: a bitmap byte spread to 8 mask bytes by one copy.
struct SpreadTable {
  std::uint8_t bytes[256][8];
  constexpr SpreadTable() : bytes() {
    for (int b = 0; b < 256; ++b)
      for (int k = 0; k < 8; ++k) bytes[b][k] = static_cast<std::uint8_t>((b >> k) & 1);
  }
};
constexpr SpreadTable kSpread{};

// 64 bits of `bits` from bit `from` on (bit 0 of the result is bit `from`); bits outside are 0.
std::uint64_t bits_from(const common::PagedBits& bits, std::int64_t from) {
  if (from >= 0) return bits.bits_at(static_cast<std::size_t>(from));
  if (from <= -64 || bits.n_words() == 0) return 0;
  return bits[0] << static_cast<unsigned>(-from);
}

}  // namespace

// The mask from a bitmap over ids. Consecutive ids (slot s holds id base + s, the default ids
// and a metadata filter's chunk ids): 64 slots per bitmap word, a table copy per 8; other int
// ids: one bit test per slot; str ids match no int id. The slot list is written only for a
// set small enough that Direct search may score it (a large one would cost a store per slot).
void Store::fill_filter_bits(CompiledFilter& f) const {
  constexpr std::size_t kListRatio = 16;  // list the slots of sets up to 1 / kListRatio of them
  f.mask.assign(index_.num_slots(), 0);
  f.docs.clear();
  f.docs_listed = true;  // (empty)
  f.count = 0;
  f.generation = generation();
  f.layout = layout_;
  const std::size_t n = std::min(ids_.slots(), f.mask.size());
  if (n == 0 || ids_.kind() != inverted::DocIds::Kind::Int) return;
  f.docs_listed = false;  // until listed below
  std::uint8_t* mask = f.mask.data();
  const bool any_dead = ids_.size() != ids_.slots();
  const std::int64_t base = ids_.int_at(0);
  std::size_t count = 0;
  if (ids_.ints_increasing() && ids_.int_at(n - 1) - base == static_cast<std::int64_t>(n) - 1) {
    auto word = [&](std::size_t s) {
      std::uint64_t w = bits_from(f.id_bits, base + static_cast<std::int64_t>(s));
      return n - s < 64 ? w & ((std::uint64_t{1} << (n - s)) - 1) : w;
    };
    const std::size_t full = n / 64;  // whole words, then the last partial one
    if (base % 64 == 0 && base >= 0 && f.id_bits.n_words() >= static_cast<std::size_t>(base / 64) + full) {
      count = f.id_bits.count(static_cast<std::size_t>(base / 64), full);  // word-aligned ids: counted at once
      if (n % 64) count += common::count_bits(std::array<std::uint64_t, 1>{word(full * 64)}.data(), 1);
    } else {
      for (std::size_t s = 0; s < n; s += 64)
        count += common::count_bits(std::array<std::uint64_t, 1>{word(s)}.data(), 1);
    }
    f.docs_listed = !any_dead && count * kListRatio <= n;
    if (f.docs_listed) f.docs.reserve(count);
    for (std::size_t s = 0; s < n; s += 64) {
      const std::uint64_t w = word(s);
      if (!w) continue;
      if (n - s >= 64) {
        for (unsigned j = 0; j < 8; ++j) std::memcpy(mask + s + 8 * j, kSpread.bytes[(w >> (8 * j)) & 255], 8);
      } else {
        for (std::size_t i = 0; s + i < n; ++i) mask[s + i] = static_cast<std::uint8_t>((w >> i) & 1);
      }
      if (f.docs_listed)
        for (std::uint64_t b = w; b; b &= b - 1)
          f.docs.push_back(static_cast<std::uint32_t>(s + static_cast<std::size_t>(__builtin_ctzll(b))));
    }
    if (any_dead) {
      count = 0;
      for (std::size_t s = 0; s < n; ++s) {
        mask[s] = static_cast<std::uint8_t>(mask[s] & (ids_.is_live(s) ? 1 : 0));
        count += mask[s];
      }
    }
  } else {
    const auto n_bits = static_cast<std::int64_t>(f.id_bits.n_words()) * 64;
    for (std::size_t s = 0; s < n; ++s) {
      const std::int64_t id = ids_.int_at(s);
      const bool on = ids_.is_live(s) && id >= 0 && id < n_bits &&
                      ((f.id_bits[static_cast<std::size_t>(id >> 6)] >> (id & 63)) & 1);
      mask[s] = on ? 1 : 0;
      count += on ? 1 : 0;
    }
  }
  f.count = count;
  if (!f.docs_listed && count * kListRatio <= n) {
    f.docs_listed = true;
    f.docs.reserve(count);
    for (std::size_t s = 0; s < n; ++s)
      if (mask[s]) f.docs.push_back(static_cast<std::uint32_t>(s));
  }
}

// f (its id_bits set) as `previous` plus the slots added since, when previous covers a prefix
// of today's slots at the same layout, with consecutive int ids, and both bitmaps agree on
// those slots' ids; false (f untouched but for id_bits) otherwise.
bool Store::extend_filter_bits(CompiledFilter& f, const CompiledFilter& previous) const {
  constexpr std::size_t kListRatio = 16;  // as fill_filter_bits
  const std::size_t n = std::min<std::size_t>(ids_.slots(), index_.num_slots());
  const std::size_t m = previous.mask.size();
  if (!previous.by_bits || previous.layout != layout_ || m == 0 || m > n || n != index_.num_slots() ||
      ids_.kind() != inverted::DocIds::Kind::Int || !ids_.ints_increasing())
    return false;
  const std::int64_t base = ids_.int_at(0);
  if (ids_.int_at(n - 1) - base != static_cast<std::int64_t>(n) - 1) return false;
  std::size_t from = 0;  // slots compared so far
  if (base % 64 == 0 && base >= 0) {
    // Word-aligned (the usual chunk ids from 0): whole words compared at once, and pages the
    // two bitmaps share (a metadata selection and its refresh) not read at all.
    const auto w0 = static_cast<std::size_t>(base / 64);
    const std::size_t words = m / 64;
    const auto covered = [&](const common::PagedBits& b) { return b.n_words() >= w0 + words; };
    if (covered(f.id_bits) && covered(previous.id_bits)) {
      if (!f.id_bits.same_words(previous.id_bits, w0, words)) return false;
      from = words * 64;
    }
  }
  for (std::size_t s = from; s < m; s += 64) {
    const std::uint64_t keep = m - s < 64 ? (std::uint64_t{1} << (m - s)) - 1 : ~std::uint64_t{0};
    const std::int64_t at = base + static_cast<std::int64_t>(s);
    if ((bits_from(f.id_bits, at) ^ bits_from(previous.id_bits, at)) & keep) return false;
  }
  std::size_t count = previous.count;
  f.mask.extend(previous.mask, n, [&](std::size_t first, std::size_t last, std::uint8_t* out) {
    for (std::size_t s = first; s < last; ++s) {
      const bool on = (bits_from(f.id_bits, base + static_cast<std::int64_t>(s)) & 1) && ids_.is_live(s);
      out[s - first] = on ? 1 : 0;
      count += on ? 1 : 0;
    }
  });
  f.count = count;
  f.generation = generation();
  f.layout = layout_;
  f.docs.clear();
  f.docs_listed = count * kListRatio <= n;
  if (f.docs_listed) {
    f.docs.reserve(count);
    if (previous.docs_listed) {
      f.docs.assign(previous.docs.begin(), previous.docs.end());
    } else {
      for (std::size_t s = 0; s < m; ++s)
        if (f.mask[s]) f.docs.push_back(static_cast<std::uint32_t>(s));
    }
    for (std::size_t s = m; s < n; ++s)
      if (f.mask[s]) f.docs.push_back(static_cast<std::uint32_t>(s));
  }
  return true;
}

std::shared_ptr<CompiledFilter> Store::compile_filter_bits(common::PagedBits id_bits,
                                                           const CompiledFilter* previous) const {
  auto f = std::make_shared<CompiledFilter>();
  f->by_bits = true;
  f->id_bits = std::move(id_bits);
  std::shared_lock<Lock> lock(mu_);
  if (!previous || !extend_filter_bits(*f, *previous)) fill_filter_bits(*f);
  return f;
}

std::shared_ptr<CompiledFilter> Store::compile_filter(std::vector<std::int64_t> ints,
                                                      std::vector<std::string> strs) const {
  auto f = std::make_shared<CompiledFilter>();
  f->ints = std::move(ints);
  f->strs = std::move(strs);
  std::shared_lock<Lock> lock(mu_);
  fill_filter(*f);
  return f;
}

// f's own allowed set when compiled at this generation, else one rebuilt into scratch.
const AllowedSet* Store::allowed_view(const CompiledFilter* f, CompiledFilter& scratch, AllowedSet& view) const {
  if (!f) return nullptr;
  const CompiledFilter* use = f;
  if (f->generation != generation() || f->mask.size() != index_.num_slots()) {
    scratch.ints = f->ints;
    scratch.strs = f->strs;
    scratch.by_bits = f->by_bits;
    scratch.id_bits = f->id_bits;
    fill_filter(scratch);
    use = &scratch;
  }
  view.mask = use->mask.data();
  view.docs = use->docs_listed ? use->docs.data() : nullptr;
  view.count = use->count;
  return &view;
}

// ----- searching

std::vector<QueryTerm> Store::query_terms(const std::vector<std::string>& stems) const {
  std::vector<QueryTerm> q;
  for (const auto& s : stems) {
    const std::uint32_t t = index_.vocab().find(s);
    if (t != text::StringTable::kNotFound) q.push_back({t, 1});
  }
  return q;
}

Hits Store::search(const std::vector<std::string>& stems, std::size_t k, Algorithm algorithm,
                   const CompiledFilter* filter) const {
  std::shared_lock<Lock> lock(mu_);
  Hits h;
  CompiledFilter scratch;
  AllowedSet view;
  index_.search(query_terms(stems), k, h.docs, algorithm, allowed_view(filter, scratch, view));
  h.resolve_ids(ids_);
  return h;
}

std::vector<Hits> Store::search_batch(const std::vector<std::vector<std::string>>& stems, std::size_t k, int threads,
                                      Algorithm algorithm, const CompiledFilter* filter) const {
  std::vector<Hits> hits(stems.size());
  std::shared_lock<Lock> lock(mu_);
  CompiledFilter scratch;
  AllowedSet view;
  const AllowedSet* allowed = allowed_view(filter, scratch, view);
  common::parallel_for(stems.size(), threads, [&](std::size_t i, int) {
    index_.search(query_terms(stems[i]), k, hits[i].docs, algorithm, allowed);
    hits[i].resolve_ids(ids_);
  });
  return hits;
}

std::vector<Hits> Store::search_batch_with_stats(const std::vector<std::vector<std::string>>& stems, std::size_t k,
                                                 int threads, Algorithm algorithm, const CompiledFilter* filter,
                                                 const CollectionStats& base, const std::vector<DfMap>& dfs) const {
  const std::size_t nq = stems.size();
  if (dfs.size() != nq) throw std::invalid_argument("stats: one df dict per query expected");
  std::vector<Hits> hits(nq);
  std::shared_lock<Lock> lock(mu_);
  // Distinct stems in first-occurrence order with their counts, their term ids here
  // (kForeignTerm when unknown) and their global df.
  std::vector<std::vector<QueryTerm>> q(nq);
  std::vector<CollectionStats> cs(nq, base);
  for (std::size_t i = 0; i < nq; ++i) {
    std::vector<std::string_view> seen;
    cs[i].df.clear();
    for (const auto& s : stems[i]) {
      auto it = std::find(seen.begin(), seen.end(), std::string_view(s));
      if (it != seen.end()) {
        q[i][static_cast<std::size_t>(it - seen.begin())].count += 1;
        continue;
      }
      auto d = dfs[i].find(s);
      if (d == dfs[i].end()) throw std::invalid_argument("stats: no df for the query term " + quote_id(s));
      seen.push_back(s);
      const std::uint32_t t = index_.vocab().find(s);
      q[i].push_back({t == text::StringTable::kNotFound ? kForeignTerm : t, 1});
      cs[i].df.push_back(d->second);
    }
  }
  CompiledFilter scratch;
  AllowedSet view;
  const AllowedSet* allowed = allowed_view(filter, scratch, view);
  common::parallel_for(nq, threads, [&](std::size_t i, int) {
    index_.search(q[i], k, hits[i].docs, algorithm, allowed, &cs[i]);
    hits[i].resolve_ids(ids_);
  });
  return hits;
}

CollectionStats Store::term_stats(const std::vector<std::string>& terms) const {
  CollectionStats out;
  out.df.assign(terms.size(), 0);
  std::shared_lock<Lock> lock(mu_);
  out.num_docs = index_.num_docs();
  out.total_len = index_.total_len();
  for (std::size_t i = 0; i < terms.size(); ++i) {
    const std::uint32_t t = index_.vocab().find(terms[i]);
    if (t != text::StringTable::kNotFound) out.df[i] = index_.df(t);
  }
  return out;
}

// ----- per-document reads

std::vector<double> Store::live_only(std::vector<double> v) const {
  if (index_.num_docs() == index_.num_slots()) return v;
  std::size_t w = 0;
  for (std::uint32_t d = 0; d < index_.num_slots(); ++d)
    if (index_.is_live(d)) v[w++] = v[d];
  v.resize(w);
  return v;
}

std::vector<double> Store::get_scores(const std::vector<std::string>& stems) const {
  std::shared_lock<Lock> lock(mu_);
  std::vector<double> v(index_.num_slots());
  index_.score_all(query_terms(stems), v.data());
  return live_only(std::move(v));
}

std::int64_t Store::find(const IdBatch& id) const { return id.is_str ? ids_.find(id.strs[0]) : ids_.find(id.ints[0]); }

ExplainData Store::explain(const std::vector<std::string>& stems, const IdBatch& id, const std::string& shown) const {
  ExplainData out;
  std::shared_lock<Lock> lock(mu_);
  const std::int64_t doc = find(id);
  if (doc < 0) unknown_id("doc_id: [" + shown + "] not in the index");
  // Every analysed query term, known or not, in query order (repeats merged).
  std::vector<QueryTerm> q;
  for (const auto& s : stems) {
    auto it = std::find(out.names.begin(), out.names.end(), s);
    if (it != out.names.end()) {
      q[static_cast<std::size_t>(it - out.names.begin())].count += 1;
      continue;
    }
    out.names.push_back(s);
    const std::uint32_t t = index_.vocab().find(s);
    q.push_back({t == text::StringTable::kNotFound ? 0xFFFFFFFFu : t, 1});
  }
  out.terms = index_.explain(q, static_cast<std::uint32_t>(doc));
  out.doc_len = index_.doc_len(static_cast<std::uint32_t>(doc));
  out.avgdl = index_.avgdl();
  out.num_docs = index_.num_docs();
  out.params = index_.params();
  return out;
}

Hits Store::live_ids() const {
  std::shared_lock<Lock> lock(mu_);
  Hits h;
  h.docs.reserve(ids_.size());
  for (std::uint32_t i = 0; i < ids_.slots(); ++i)
    if (ids_.is_live(i)) h.docs.push_back({0.0f, i});
  h.resolve_ids(ids_);
  return h;
}

std::vector<std::int64_t> Store::term_ids(const std::vector<std::string>& tokens) const {
  std::shared_lock<Lock> lock(mu_);
  std::vector<std::int64_t> v(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::uint32_t t = index_.vocab().find(tokens[i]);
    v[i] = t == text::StringTable::kNotFound ? -1 : static_cast<std::int64_t>(t);
  }
  return v;
}

std::vector<std::int64_t> Store::document_frequencies() const {
  std::shared_lock<Lock> lock(mu_);
  std::vector<std::int64_t> v(index_.num_terms());
  for (std::size_t t = 0; t < v.size(); ++t) v[t] = static_cast<std::int64_t>(index_.df(static_cast<std::uint32_t>(t)));
  return v;
}

std::vector<std::int64_t> Store::document_lengths() const {
  std::shared_lock<Lock> lock(mu_);
  std::vector<std::int64_t> v;
  v.reserve(index_.num_docs());
  for (std::uint32_t d = 0; d < index_.num_slots(); ++d)
    if (index_.is_live(d)) v.push_back(index_.doc_len(d));
  return v;
}

std::vector<std::string> Store::vocabulary() const {
  std::shared_lock<Lock> lock(mu_);
  std::vector<std::string> v(index_.num_terms());
  for (std::size_t t = 0; t < v.size(); ++t) v[t] = std::string(index_.vocab().get(static_cast<std::uint32_t>(t)));
  return v;
}

std::vector<double> Store::rank_bm25_scores(const std::vector<std::int64_t>& terms, const std::vector<double>& weights,
                                            int kind, double k1, double b, double delta) const {
  std::shared_lock<Lock> lock(mu_);
  std::vector<double> v(index_.num_slots());
  index_.score_all_rank_bm25(terms, weights, kind, k1, b, delta, v.data());
  return live_only(std::move(v));
}

// ----- parameters, statistics, files

void Store::set_params(const Params& p) {
  std::unique_lock<Lock> lock(mu_);
  index_.set_params(p);
  generation_.fetch_add(1, std::memory_order_release);
}

StoreStats Store::stats() const {
  std::shared_lock<Lock> lock(mu_);
  return StoreStats{index_.num_docs(),
                    index_.num_terms(),
                    index_.num_postings(),
                    index_.segments().size(),
                    index_.total_len(),
                    index_.memory_bytes(),
                    index_.num_slots() - index_.num_docs(),
                    index_.avgdl(),
                    index_.params()};
}

void Store::save(const std::string& path, const std::string& analyzer_json) const {
  std::shared_lock<Lock> lock(mu_);
  save_index(path, index_, ids_, analyzer_json, positions_.get());
}

void Store::load(const std::string& path, bool mmap) {
  std::unique_lock<Lock> lock(mu_);
  load_index(path, mmap, index_, ids_, &positions_);
  ++layout_;
  generation_.fetch_add(1, std::memory_order_release);
}

// ----- positions and phrases

void Store::enable_positions() {
  std::unique_lock<Lock> lock(mu_);
  if (positions_) return;
  if (index_.num_slots() > 0) throw std::invalid_argument("positions: can only be enabled on an empty index");
  positions_ = std::make_unique<PositionStore>();
}

bool Store::has_positions() const {
  std::shared_lock<Lock> lock(mu_);
  return positions_ != nullptr;
}

std::size_t Store::positions_bytes() const {
  std::shared_lock<Lock> lock(mu_);
  return positions_ ? positions_->memory_bytes() : std::size_t(0);
}

// Ordinals count live documents in insertion order, as live_ids() and document_lengths() do.
void Store::postings(const std::string& term, std::vector<std::int64_t>& ord, std::vector<std::int64_t>& tf) const {
  ord.clear();
  tf.clear();
  std::shared_lock<Lock> lock(mu_);
  const std::uint32_t t = index_.vocab().find(term);
  if (t == text::StringTable::kNotFound) return;
  std::vector<std::uint32_t> slots, tfs;
  term_postings(index_, t, slots, tfs);
  std::vector<std::int64_t> rank;
  const bool dense = index_.num_docs() == index_.num_slots();
  if (!dense) {
    rank.resize(index_.num_slots());
    std::int64_t r = 0;
    for (std::uint32_t d = 0; d < index_.num_slots(); ++d) rank[d] = index_.is_live(d) ? r++ : -1;
  }
  ord.reserve(slots.size());
  for (std::uint32_t d : slots) ord.push_back(dense ? d : rank[d]);
  tf.assign(tfs.begin(), tfs.end());
}

// Terms unknown to the index make a phrase match nothing (kNotFound has df 0).
std::vector<PhraseQuery> Store::phrase_queries(const std::vector<PhraseText>& texts) const {
  if (!positions_) throw std::invalid_argument("phrase queries need an index built with positions=True");
  std::vector<PhraseQuery> out;
  for (const auto& p : texts) {
    PhraseQuery q;
    for (const auto& w : p.terms) q.terms.push_back(index_.vocab().find(w));
    q.slop = p.slop;
    out.push_back(std::move(q));
  }
  return out;
}

Hits Store::search_phrases(const std::vector<std::string>& stems, const std::vector<PhraseText>& phrases, std::size_t k,
                           const CompiledFilter* filter) const {
  std::shared_lock<Lock> lock(mu_);
  const std::vector<PhraseQuery> pq = phrase_queries(phrases);
  Hits h;
  CompiledFilter scratch;
  AllowedSet view;
  bm25::search_phrases(index_, *positions_, query_terms(stems), pq, k, allowed_view(filter, scratch, view), h.docs);
  h.resolve_ids(ids_);
  return h;
}

double Store::phrase_score(const std::vector<std::string>& stems, const std::vector<PhraseText>& phrases,
                           const IdBatch& id, const std::string& shown, std::vector<double>& freqs) const {
  std::shared_lock<Lock> lock(mu_);
  const std::int64_t doc = find(id);
  if (!positions_) throw std::invalid_argument("phrase queries need an index built with positions=True");
  if (doc < 0) unknown_id("doc_id: [" + shown + "] not in the index");
  return score_phrases(index_, *positions_, query_terms(stems), phrase_queries(phrases),
                       static_cast<std::uint32_t>(doc), &freqs);
}

}  // namespace ragfind::bm25
