// The passage columns (ragfind/passages/columns.hpp): lookups of live and absent ids against a
// direct scan of the tables, and every corrupt offset raising instead of reading outside them.
#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "check.hpp"
#include "ragfind/passages/columns.hpp"

using namespace ragfind::passages;

namespace {

struct Tables {
  std::string arena;
  std::vector<int64_t> chunks, docs, keys, slots;
  std::map<int64_t, std::vector<std::string>> expect;  // id -> doc_id, text, title, metadata, context

  std::pair<int64_t, int64_t> put(const std::string& s) {
    const int64_t lo = static_cast<int64_t>(arena.size());
    arena += s;
    return {lo, static_cast<int64_t>(arena.size())};
  }

  ColumnsView view() const {
    ColumnsView v;
    v.arena = arena.data();
    v.arena_size = static_cast<int64_t>(arena.size());
    v.chunks = chunks.data();
    v.n_chunks = static_cast<int64_t>(chunks.size() / kChunkColumns);
    v.docs = docs.data();
    v.n_docs = static_cast<int64_t>(docs.size() / kDocColumns);
    v.keys = keys.data();
    v.slots = slots.data();
    v.n_keys = static_cast<int64_t>(keys.size());
    return v;
  }
};

// n documents of 1-3 chunks, ids ascending with gaps of 1 to max_gap (1: dense, as before any
// delete), chunk rows appended in a shuffled order.
Tables make(int n, std::mt19937& rng, int max_gap = 4) {
  Tables t;
  std::vector<std::vector<int64_t>> rows;  // chunk rows before shuffling
  int64_t id = 0;
  for (int d = 0; d < n; ++d) {
    const auto did = t.put("doc-" + std::to_string(d));
    const auto title = t.put(d % 3 ? "title " + std::to_string(d) : "");
    const auto meta = t.put(d % 2 ? "{\"source\": \"s\"}" : "{}");
    t.docs.insert(t.docs.end(), {did.first, did.second, title.first, title.second, meta.first, meta.second});
    for (int c = 0, m = 1 + static_cast<int>(rng() % 3); c < m; ++c) {
      id += 1 + static_cast<int64_t>(rng() % static_cast<unsigned>(max_gap));
      const std::string text = "chunk " + std::to_string(id) + std::string(rng() % 50, 'x');
      const auto tx = t.put(text);
      const auto cx = t.put(c ? "ctx" : "");
      rows.push_back({id, d, c * 10, c * 10 + 5, tx.first, tx.second, cx.first, cx.second});
      t.expect[id] = {"doc-" + std::to_string(d), text, d % 3 ? "title " + std::to_string(d) : "",
                      d % 2 ? "{\"source\": \"s\"}" : "{}", c ? "ctx" : ""};
    }
  }
  std::vector<size_t> order(rows.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  std::map<int64_t, int64_t> slot_of;
  for (size_t r = 0; r < order.size(); ++r) {
    t.chunks.insert(t.chunks.end(), rows[order[r]].begin(), rows[order[r]].end());
    slot_of[rows[order[r]][kId]] = static_cast<int64_t>(r);
  }
  for (const auto& [k, s] : slot_of) {
    t.keys.push_back(k);
    t.slots.push_back(s);
  }
  return t;
}

}  // namespace

TEST(lookups_match_a_scan_of_the_tables) {
  std::mt19937 rng(7);
  const Tables t = make(200, rng);
  const ColumnsView v = t.view();
  for (int64_t id = -3; id <= t.keys.back() + 3; ++id) {
    const int64_t row = find_row(v, id);
    const auto want = t.expect.find(id);
    if (want == t.expect.end()) {
      CHECK_EQ(row, int64_t{-1});
      continue;
    }
    CHECK(row >= 0);
    const PassageRow r = read_row(v, row);
    CHECK_EQ(r.id, id);
    CHECK_EQ(std::string(r.doc_id), want->second[0]);
    CHECK_EQ(std::string(r.text), want->second[1]);
    CHECK_EQ(std::string(r.title), want->second[2]);
    CHECK_EQ(std::string(r.metadata), want->second[3]);
    CHECK_EQ(std::string(r.context), want->second[4]);
    CHECK_EQ(r.end - r.start, int64_t{5});
  }
}

TEST(dense_and_sparse_ids_are_found_alike) {
  for (int max_gap : {1, 4}) {
    std::mt19937 rng(11);
    Tables t = make(100, rng, max_gap);
    if (max_gap == 1) {
      // A deleted chunk in the middle: ids past it are no longer at their dense place.
      const size_t gone = t.keys.size() / 2;
      t.expect.erase(t.keys[gone]);
      t.keys.erase(t.keys.begin() + static_cast<std::ptrdiff_t>(gone));
      t.slots.erase(t.slots.begin() + static_cast<std::ptrdiff_t>(gone));
    }
    const ColumnsView v = t.view();
    for (int64_t id = -2; id <= t.keys.back() + 2; ++id) {
      const int64_t row = find_row(v, id);
      CHECK_EQ(row >= 0, t.expect.count(id) == 1);
      if (row >= 0) CHECK_EQ(read_row(v, row).id, id);
    }
  }
}

TEST(read_rows_equals_one_lookup_per_id) {
  std::mt19937 rng(5);
  const Tables t = make(80, rng);
  const ColumnsView v = t.view();
  std::vector<int64_t> ids;
  for (int i = 0; i < 300; ++i)
    ids.push_back(static_cast<int64_t>(rng() % static_cast<unsigned>(t.keys.back() + 5)) - 2);
  const std::vector<FoundRow> got = read_rows(v, ids.data(), static_cast<int64_t>(ids.size()));
  size_t at = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t row = find_row(v, ids[i]);
    if (row < 0) continue;
    CHECK(at < got.size());
    CHECK_EQ(got[at].at, static_cast<int64_t>(i));
    const PassageRow want = read_row(v, row);
    CHECK_EQ(got[at].row.id, want.id);
    CHECK_EQ(std::string(got[at].row.text), std::string(want.text));
    CHECK_EQ(std::string(got[at].row.title), std::string(want.title));
    ++at;
  }
  CHECK_EQ(at, got.size());
  CHECK(read_rows(v, ids.data(), 0).empty());
}

TEST(empty_columns_find_nothing) {
  Tables t;
  CHECK_EQ(find_row(t.view(), 0), int64_t{-1});
  CHECK_THROWS(std::out_of_range, read_row(t.view(), 0));
}

TEST(corrupt_offsets_throw) {
  std::mt19937 rng(3);
  const Tables good = make(5, rng);
  const int64_t id = good.keys[0];
  for (int col : {kDoc, kTextLo, kTextHi, kContextLo, kContextHi}) {
    for (int64_t bad : {int64_t{-1}, int64_t{1} << 40}) {
      Tables t = good;
      t.chunks[static_cast<size_t>(find_row(good.view(), id)) * kChunkColumns + col] = bad;
      CHECK_THROWS(std::out_of_range, read_row(t.view(), find_row(t.view(), id)));
    }
  }
  for (int col = 0; col < kDocColumns; ++col) {
    Tables t = good;
    t.docs[col] = static_cast<int64_t>(t.arena.size()) + 1;
    t.docs[col ^ 1] = (col & 1) ? 0 : t.docs[col];  // keep lo <= hi where the column is hi
    const int64_t row = find_row(t.view(), good.keys[0]);
    CHECK_THROWS(std::out_of_range, read_row(t.view(), row));
  }
  Tables t = good;
  t.slots[0] = 1 << 20;
  CHECK_THROWS(std::out_of_range, find_row(t.view(), id));
  CHECK_THROWS(std::out_of_range, read_rows(t.view(), &id, 1));
}

RAGFIND_TEST_MAIN
