// bm25::Store (ragfind/bm25/store.hpp): the id rule (int or str ids, automatic ids,
// duplicates and unknown ids refused with the index unchanged), compiled filters (rebuilt after
// a write), and adds racing searches under the store's reader-writer lock.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "check.hpp"
#include "ragfind/bm25/store.hpp"

using namespace ragfind::bm25;

namespace {

using Docs = std::vector<std::vector<std::string_view>>;

IdBatch int_ids(std::vector<std::int64_t> v) {
  IdBatch b;
  b.given = true;
  b.ints = std::move(v);
  return b;
}

IdBatch str_ids(std::vector<std::string> v) {
  IdBatch b;
  b.given = true;
  b.is_str = true;
  b.strs = std::move(v);
  return b;
}

std::vector<std::string> shown_of(const IdBatch& b) {
  std::vector<std::string> out;
  for (auto i : b.ints) out.push_back(std::to_string(i));
  for (const auto& s : b.strs) out.push_back(quote_id(s));
  return out;
}

// Throws IdError of kind k (and nothing else).
template <class F>
bool throws_id_error(IdError::Kind k, F&& f) {
  try {
    f();
  } catch (const IdError& e) { return e.kind == k; } catch (...) {
    return false;
  }
  return false;
}

}  // namespace

TEST(automatic_ids_count_on) {
  Store s(Params{});
  s.add_tokens(IdBatch{}, Docs{{"a", "b"}, {"b"}, {"c"}});
  s.add_tokens(IdBatch{}, Docs{{"a"}});
  const Hits all = s.live_ids();
  CHECK(!all.str_ids);
  CHECK((all.ints == std::vector<std::int64_t>{0, 1, 2, 3}));
  CHECK_EQ(s.size(), 4u);
}

TEST(int_ids_duplicates_refused_unchanged) {
  Store s(Params{});
  s.add_tokens(int_ids({10, 20}), Docs{{"a"}, {"b"}});
  const std::uint64_t gen = s.generation();
  // Repeated within the call, already present, or of the other kind: nothing is added.
  CHECK(throws_id_error(IdError::Kind::Duplicate, [&] { s.add_tokens(int_ids({30, 30}), Docs{{"c"}, {"d"}}); }));
  CHECK(throws_id_error(IdError::Kind::Duplicate, [&] { s.add_tokens(int_ids({30, 20}), Docs{{"c"}, {"d"}}); }));
  CHECK(throws_id_error(IdError::Kind::WrongKind, [&] { s.add_tokens(str_ids({"x"}), Docs{{"c"}}); }));
  CHECK_EQ(s.size(), 2u);
  CHECK_EQ(s.generation(), gen);
  CHECK(s.term_ids({"c", "d"}) == (std::vector<std::int64_t>{-1, -1}));  // no term was interned
  // An id is free again once deleted.
  s.remove(int_ids({20}), {"20"});
  s.add_tokens(int_ids({20}), Docs{{"c"}});
  CHECK((s.live_ids().ints == std::vector<std::int64_t>{10, 20}));
}

TEST(str_ids_rule) {
  Store s(Params{});
  s.add_tokens(str_ids({"x", "y"}), Docs{{"a"}, {"b"}});
  CHECK(throws_id_error(IdError::Kind::WrongKind, [&] { s.add_tokens(IdBatch{}, Docs{{"c"}}); }));
  CHECK(throws_id_error(IdError::Kind::WrongKind, [&] { s.add_tokens(int_ids({1}), Docs{{"c"}}); }));
  CHECK(throws_id_error(IdError::Kind::Duplicate, [&] { s.add_tokens(str_ids({"y"}), Docs{{"c"}}); }));
  const Hits h = s.search({"b"}, 10, Algorithm::Auto, nullptr);
  CHECK(h.str_ids);
  CHECK((h.strs == std::vector<std::string>{"y"}));
  try {
    s.add_tokens(str_ids({"z", "z"}), Docs{{"c"}, {"c"}});
    CHECK(false);
  } catch (const IdError& e) { CHECK_EQ(std::string(e.what()), std::string("ids: id 'z' is repeated")); }
}

TEST(unknown_id_deletes_nothing) {
  Store s(Params{});
  s.add_tokens(int_ids({1, 2, 3}), Docs{{"a"}, {"a", "b"}, {"b"}});
  const std::vector<double> before = s.get_scores({"a", "b"});
  const IdBatch bad = int_ids({1, 7});
  try {
    s.remove(bad, shown_of(bad));
    CHECK(false);
  } catch (const IdError& e) {
    CHECK(e.kind == IdError::Kind::Unknown);
    CHECK_EQ(std::string(e.what()), std::string("ids: [7] not in the index; nothing was deleted"));
  }
  CHECK_EQ(s.size(), 3u);
  CHECK(s.get_scores({"a", "b"}) == before);
  const IdBatch twice = int_ids({2, 2});
  CHECK(throws_id_error(IdError::Kind::Duplicate, [&] { s.remove(twice, shown_of(twice)); }));
  CHECK_EQ(s.size(), 3u);
  s.remove(int_ids({1, 3}), {"1", "3"});
  CHECK((s.live_ids().ints == std::vector<std::int64_t>{2}));
  CHECK(throws_id_error(IdError::Kind::Unknown, [&] { s.explain({"a"}, int_ids({1}), "1"); }));
}

TEST(filters_follow_writes) {
  Store s(Params{});
  s.add_tokens(int_ids({5, 6, 7, 8}), Docs{{"a"}, {"a", "a"}, {"a", "b"}, {"b"}});
  const auto f = s.compile_filter({5, 7, 99}, {});
  CHECK_EQ(f->docs.size(), 2u);  // 99 is not in the index
  Hits h = s.search({"a"}, 10, Algorithm::Auto, f.get());
  std::vector<std::int64_t> got = h.ints;
  std::sort(got.begin(), got.end());
  CHECK((got == std::vector<std::int64_t>{5, 7}));
  // After a delete (a new generation), the same filter is rebuilt against the new slots.
  s.remove(int_ids({5}), {"5"});
  CHECK(f->generation != s.generation());
  h = s.search({"a", "b"}, 10, Algorithm::Auto, f.get());
  CHECK((h.ints == std::vector<std::int64_t>{7}));
  // Every algorithm honours it.
  for (Algorithm a : {Algorithm::MaxScore, Algorithm::Exhaustive, Algorithm::Direct, Algorithm::BlockMax}) {
    h = s.search({"a", "b"}, 10, a, f.get());
    CHECK((h.ints == std::vector<std::int64_t>{7}));
  }
  // A filter of str ids on an int index allows nothing.
  const auto none = s.compile_filter({}, {"7"});
  CHECK(s.search({"a"}, 10, Algorithm::Auto, none.get()).docs.empty());
}

// A bitmap over ids as the store takes it.
ragfind::common::PagedBits paged(const std::vector<std::uint64_t>& words) {
  return {words.data(), words.size(), words.size() * 64};
}

// A filter given as a bitmap over int ids equals the same ids given as a list: consecutive ids
// (a word of slots at a time, offset from the bitmap's words), ids with gaps (a test per slot),
// dead slots, str ids (nothing allowed), small sets (slots listed) and large ones (not listed:
// Direct search lists them from the mask), and after a write (rebuilt from the bitmap).
// Two filter masks with the same bytes (the masks themselves may share one buffer).
static bool same_bytes(const FilterMask& a, const FilterMask& b) {
  return a.size() == b.size() && (a.size() == 0 || std::equal(a.data(), a.data() + a.size(), b.data()));
}

TEST(filters_from_an_id_bitmap_equal_filters_from_ids) {
  std::mt19937_64 rng(7);
  for (int scenario = 0; scenario < 4; ++scenario) {
    Store s(Params{});
    std::vector<std::int64_t> ids;
    const std::int64_t first = scenario == 1 ? 37 : 0;  // 37: slot words straddle bitmap words
    for (std::int64_t i = 0; i < 700; ++i) ids.push_back(scenario == 2 ? first + 3 * i : first + i);
    Docs docs;
    const std::vector<std::string_view> words = {"a", "b", "c"};
    for (std::size_t i = 0; i < ids.size(); ++i) docs.push_back({words[i % 3], words[(i / 3) % 3]});
    s.add_tokens(int_ids(ids), docs);
    if (scenario == 3) s.remove(int_ids({ids[3], ids[64], ids[65]}), {"a", "b", "c"});
    for (double share : {0.0, 0.02, 0.3, 0.9, 1.0}) {
      std::vector<std::int64_t> allowed;
      std::vector<std::uint64_t> bits(40, 0);
      for (std::int64_t id = 0; id < 40 * 64; ++id) {
        if (static_cast<double>(rng() % 1000) >= share * 1000) continue;
        allowed.push_back(id);
        bits[static_cast<std::size_t>(id >> 6)] |= std::uint64_t{1} << (id & 63);
      }
      const auto from_ids = s.compile_filter(allowed, {});
      const auto from_bits = s.compile_filter_bits(paged(bits));
      CHECK(same_bytes(from_bits->mask, from_ids->mask));
      CHECK_EQ(from_bits->count, from_ids->docs.size());
      if (from_bits->docs_listed) CHECK(from_bits->docs == from_ids->docs);
      CHECK(from_bits->docs_listed || from_bits->count * 16 > from_ids->mask.size());
      for (Algorithm a : {Algorithm::Auto, Algorithm::MaxScore, Algorithm::Exhaustive, Algorithm::Direct}) {
        const Hits want = s.search({"a", "b"}, 50, a, from_ids.get());
        const Hits got = s.search({"a", "b"}, 50, a, from_bits.get());
        CHECK(got.ints == want.ints);
      }
    }
  }
  // Rebuilt from its bitmap after a write; str ids match no bit.
  Store s(Params{});
  s.add_tokens(int_ids({0, 1, 2, 3}), Docs{{"a"}, {"a"}, {"a"}, {"a"}});
  const auto f = s.compile_filter_bits(paged({0b10110}));
  s.add_tokens(int_ids({4, 5}), Docs{{"a"}, {"a"}});
  s.remove(int_ids({2}), {"2"});
  Hits h = s.search({"a"}, 10, Algorithm::Auto, f.get());
  std::sort(h.ints.begin(), h.ints.end());
  CHECK((h.ints == std::vector<std::int64_t>{1, 4}));
  Store strs(Params{});
  strs.add_tokens(str_ids({"x", "y"}), Docs{{"a"}, {"a"}});
  CHECK_EQ(strs.compile_filter_bits(paged({~std::uint64_t{0}}))->count, std::size_t{0});
}

TEST(explain_sums_to_score) {
  Store s(Params{});
  s.add_tokens(str_ids({"p", "q", "r"}), Docs{{"a", "b", "a"}, {"b"}, {"c", "a"}});
  const ExplainData ex = s.explain({"a", "zz", "a"}, str_ids({"p"}), "'p'");
  CHECK((ex.names == std::vector<std::string>{"a", "zz"}));
  CHECK_EQ(ex.terms.size(), 2u);
  CHECK_EQ(ex.terms[0].query_count, 2u);
  CHECK_EQ(ex.terms[1].df, 0u);
  double total = 0;
  for (const auto& t : ex.terms) total += t.contribution;
  const std::vector<double> all = s.get_scores({"a", "zz", "a"});
  CHECK(std::abs(all[0] - total) < 1e-9);
  CHECK_EQ(ex.doc_len, 3u);
}

TEST(concurrent_adds_and_searches) {
  Store s(Params{});
  constexpr int kBatches = 200;
  std::atomic<bool> done{false};
  std::atomic<int> started{0};
  std::atomic<long> bad{0}, searches{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&] {
      ++started;
      do {
        const Hits h = s.search({"common"}, 5, Algorithm::Auto, nullptr);
        // Every document holds "common": results resolve to ids that were added.
        for (std::int64_t id : h.ints) bad += id < 0 || id >= 4 * kBatches;
        bad += h.docs.size() > 5;
        ++searches;
      } while (!done.load());
    });
  }
  while (started.load() < 3) std::this_thread::yield();  // every reader searches at least once
  for (int b = 0; b < kBatches; ++b) {
    std::vector<std::int64_t> ids;
    for (int i = 0; i < 4; ++i) ids.push_back(4 * b + i);
    s.add_tokens(int_ids(ids), Docs{{"common", "x"}, {"common"}, {"common", "y"}, {"common", "z"}});
    if (b % 10 == 9) s.remove(int_ids({4 * b}), {std::to_string(4 * b)});
    if (b % 10 == 9) s.add_tokens(int_ids({4 * b}), Docs{{"common", "w"}});
  }
  done = true;
  for (auto& t : readers) t.join();
  CHECK_EQ(bad.load(), 0);
  CHECK(searches.load() > 0);
  CHECK_EQ(s.size(), static_cast<std::size_t>(4 * kBatches));
  CHECK_EQ(s.search({"common"}, 1000, Algorithm::Auto, nullptr).docs.size(), static_cast<std::size_t>(4 * kBatches));
}

RAGFIND_TEST_MAIN
