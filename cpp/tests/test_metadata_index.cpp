// MetadataIndex (ragfind/metadata/index.hpp) against a direct evaluation of each filter over
// every stored row: random rows of strings, numbers, bools, nulls and missing keys, random
// nested filters, removals, adds that merge the number tail, postings past the bitmap switch,
// and a dump/load round trip.
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "check.hpp"
#include "ragfind/metadata/index.hpp"

using namespace ragfind::metadata;
namespace common = ragfind::common;

namespace {

struct Cell {
  Kind kind;
  double num = 0;
  bool flag = false;
  std::string str;
};
using Row = std::map<std::string, Cell>;

const std::vector<std::string> kFields = {"a", "b", "c"};

Cell random_cell(std::mt19937_64& rng) {
  Cell c;
  switch (rng() % 6) {
    case 0: c.kind = Kind::Null; break;
    case 1:
      c.kind = Kind::Bool;
      c.flag = rng() % 2;
      break;
    case 2:
    case 3:
      c.kind = Kind::Num;
      c.num = static_cast<double>(static_cast<int>(rng() % 9) - 3) / 2;
      break;
    case 4:
      c.kind = Kind::Str;
      c.str = std::string(1, static_cast<char>('p' + rng() % 4));
      break;
    default: c.kind = Kind::Other; break;
  }
  return c;
}

bool direct(const Node& n, const Row& row) {
  auto it = n.field.empty() ? row.end() : row.find(n.field);
  const Cell* c = it == row.end() ? nullptr : &it->second;
  switch (n.op) {
    case Node::Op::All: return true;
    case Node::Op::Nothing: return false;
    case Node::Op::Present: return c != nullptr;
    case Node::Op::Valued: return c && c->kind != Kind::Null;
    case Node::Op::Eq:
      if (!c || c->kind != n.value.kind) return false;
      if (c->kind == Kind::Bool) return c->flag == n.value.flag;
      if (c->kind == Kind::Num) return c->num == n.value.num;
      return c->str == n.text;
    case Node::Op::Range:
      if (!c || c->kind != n.value.kind) return false;
      if (c->kind == Kind::Num) {
        if (n.has_lo && (n.lo_inclusive ? c->num < n.lo : c->num <= n.lo)) return false;
        if (n.has_hi && (n.hi_inclusive ? c->num > n.hi : c->num >= n.hi)) return false;
        return true;
      }
      if (n.has_lo && (n.lo_inclusive ? c->str < n.text : c->str <= n.text)) return false;
      if (n.has_hi && (n.hi_inclusive ? c->str > n.text_hi : c->str >= n.text_hi)) return false;
      return true;
    case Node::Op::And:
      for (const Node& ch : n.children)
        if (!direct(ch, row)) return false;
      return true;
    case Node::Op::Or:
      for (const Node& ch : n.children)
        if (direct(ch, row)) return true;
      return false;
    case Node::Op::Not: return !direct(n.children[0], row);
  }
  return false;
}

Node random_node(std::mt19937_64& rng, int depth) {
  Node n;
  const unsigned pick = static_cast<unsigned>(rng() % (depth > 2 ? 5 : 8));
  if (pick >= 5) {
    n.op = pick == 5 ? Node::Op::And : pick == 6 ? Node::Op::Or : Node::Op::Not;
    const std::size_t k = n.op == Node::Op::Not ? 1 : 1 + rng() % 3;
    for (std::size_t i = 0; i < k; ++i) n.children.push_back(random_node(rng, depth + 1));
    return n;
  }
  n.field = kFields[rng() % kFields.size()];
  if (pick == 0) {
    n.op = rng() % 2 ? Node::Op::Present : Node::Op::Valued;
  } else if (pick <= 2) {
    n.op = Node::Op::Eq;
    Cell c = random_cell(rng);
    if (c.kind == Kind::Null || c.kind == Kind::Other) c.kind = Kind::Str, c.str = "q";
    n.value.kind = c.kind;
    n.value.num = c.num;
    n.value.flag = c.flag;
    n.text = c.str;
  } else {
    n.op = Node::Op::Range;
    const bool strs = rng() % 3 == 0;
    n.value.kind = strs ? Kind::Str : Kind::Num;
    n.has_lo = rng() % 3 != 0;
    n.has_hi = rng() % 3 != 0;
    n.lo_inclusive = rng() % 2;
    n.hi_inclusive = rng() % 2;
    n.lo = static_cast<double>(static_cast<int>(rng() % 9) - 4) / 2;
    n.hi = n.lo + static_cast<double>(rng() % 4) / 2;
    n.text = std::string(1, static_cast<char>('o' + rng() % 4));
    n.text_hi = std::string(1, static_cast<char>(n.text[0] + rng() % 3));
  }
  return n;
}

void bind(Node& n) {
  if (n.op == Node::Op::Eq && n.value.kind == Kind::Str) n.value.str = n.text;
  for (Node& c : n.children) bind(c);
}

void add(MetadataIndex& ix, std::map<std::int64_t, Row>& rows, std::int64_t id, std::mt19937_64& rng) {
  Row row;
  for (const auto& f : kFields)
    if (rng() % 4) row[f] = random_cell(rng);
  const std::uint32_t r = ix.append_row(id);
  for (const auto& [f, c] : row) ix.put(r, f, Value{c.kind, c.num, c.flag, c.str});
  rows[id] = row;
}

void check_all(const MetadataIndex& ix, const std::map<std::int64_t, Row>& rows, std::mt19937_64& rng, int n) {
  for (int q = 0; q < n; ++q) {
    Node node = random_node(rng, 0);
    bind(node);
    std::vector<std::int64_t> want;
    for (const auto& [id, row] : rows)
      if (direct(node, row)) want.push_back(id);
    CHECK(ix.ids_of(ix.evaluate(node)) == want);
  }
}

}  // namespace

TEST(filters_equal_a_direct_evaluation_through_adds_removes_and_reload) {
  for (int seed = 0; seed < 6; ++seed) {
    std::mt19937_64 rng(static_cast<std::uint64_t>(seed));
    MetadataIndex ix;
    std::map<std::int64_t, Row> rows;
    std::int64_t next = seed % 2 ? 5 : 0;       // odd seeds: ids not equal to rows (the mapped case)
    const int first = seed >= 4 ? 20000 : 300;  // seeds 4, 5: bitmap postings and number slices
    for (int i = 0; i < first; ++i) add(ix, rows, next++, rng);
    check_all(ix, rows, rng, 200);
    std::vector<std::int64_t> gone;
    for (const auto& [id, row] : rows)
      if (rng() % 3 == 0) gone.push_back(id);
    CHECK_EQ(ix.remove(gone), gone.size());
    CHECK_EQ(ix.remove(gone), std::size_t{0});
    for (std::int64_t id : gone) rows.erase(id);
    add(ix, rows, gone.front(), rng);                          // an id removed comes back as a new row
    for (int i = 0; i < 500; ++i) add(ix, rows, next++, rng);  // merges the number tails
    CHECK_EQ(ix.size(), rows.size());
    check_all(ix, rows, rng, 200);
    MetadataIndex back = MetadataIndex::load(ix.dump());
    CHECK_EQ(back.size(), rows.size());
    CHECK(back.dump() == ix.dump() || back.live_ids() == ix.live_ids());
    check_all(back, rows, rng, 200);
    add(back, rows, next++, rng);
    check_all(back, rows, rng, 50);
  }
}

// A filter evaluated once and then patched after each write (one row added or removed, or a
// batch) equals the filter evaluated again and a direct evaluation, including across the
// number-tail merges, the switch to bitmap postings and a log too short to patch from.
TEST(patched_filters_equal_a_full_evaluation_after_each_write) {
  for (int seed = 0; seed < 4; ++seed) {
    std::mt19937_64 rng(static_cast<std::uint64_t>(100 + seed));
    MetadataIndex ix;
    std::map<std::int64_t, Row> rows;
    std::int64_t next = seed % 2 ? 3 : 0;
    for (int i = 0; i < (seed >= 2 ? 5000 : 200); ++i) add(ix, rows, next++, rng);
    struct Kept {
      Node node;
      common::PagedBits rows;
      std::uint64_t since;
    };
    std::vector<Kept> kept(24);
    for (auto& k : kept) {
      k.node = random_node(rng, 0);
      bind(k.node);
      k.rows = ix.evaluate(k.node).paged();
      k.since = ix.generation();
    }
    for (int step = 0; step < 200; ++step) {
      const unsigned what = static_cast<unsigned>(rng() % 10);
      if (what < 6) {
        add(ix, rows, next++, rng);
      } else if (what < 9 && !rows.empty()) {
        auto it = rows.begin();
        std::advance(it, static_cast<long>(rng() % rows.size()));
        const std::int64_t id = it->first;
        CHECK_EQ(ix.remove({id}), std::size_t{1});
        rows.erase(id);
        if (rng() % 2) add(ix, rows, next++, rng);  // an update: remove, then add as a new row
      } else {
        const int n = static_cast<int>(rng() % 1500);  // sometimes beyond what a patch takes
        for (int i = 0; i < n; ++i) add(ix, rows, next++, rng);
      }
      for (auto& k : kept) {
        if (rng() % 3 == 0) continue;  // some filters skip writes: patched across several
        std::size_t count = k.rows.count();
        const common::PagedBits before = k.rows;
        const std::vector<std::uint64_t> before_words = before.words();
        common::PagedBits now = ix.patched(k.node, k.rows, k.since, &count);
        const Bitmap full = ix.evaluate(k.node);
        CHECK(now.words() == full.words());
        CHECK(before.words() == before_words);  // the patched copy left the one it shares with alone
        CHECK_EQ(count, full.count());
        CHECK_EQ(now.size(), full.size());
        std::vector<std::int64_t> want;
        for (const auto& [id, row] : rows)
          if (direct(k.node, row)) want.push_back(id);
        CHECK(ix.ids_of(now) == want);
        k.rows = std::move(now);
        k.since = ix.generation();
      }
    }
    // A reloaded index patches from its own generation on; row tests read the loaded columns.
    MetadataIndex back = MetadataIndex::load(ix.dump());
    for (auto& k : kept) {
      Bitmap base = back.evaluate(k.node);
      const std::uint64_t since = back.generation();
      const Bitmap live = back.evaluate(Node{});
      for (std::uint32_t r = 0; r < back.rows() && r < 300; ++r)
        if (live.test(r)) CHECK_EQ(back.matches(k.node, r), base.test(r));
      add(back, rows, next, rng);
      CHECK(back.patched(k.node, base.paged(), since).words() == back.evaluate(k.node).words());
      CHECK_EQ(back.remove({next}), std::size_t{1});
      rows.erase(next);
    }
  }
}

TEST(kinds_and_fields) {
  MetadataIndex ix;
  const std::uint32_t r = ix.append_row(0);
  CHECK_EQ(ix.kinds_version(), std::uint64_t{0});
  ix.put(r, "year", Value{Kind::Num, 2020, false, {}});
  ix.put(r, "lang", Value{Kind::Str, 0, false, "en"});
  CHECK_EQ(static_cast<int>(ix.kinds("year")), 1 << static_cast<int>(Kind::Num));
  CHECK_EQ(static_cast<int>(ix.kinds("nope")), 0);
  CHECK(ix.fields() == (std::vector<std::string>{"lang", "year"}));
  // The version moves with every kind a field takes for the first time, and only then.
  const std::uint64_t v = ix.kinds_version();
  CHECK_EQ(v, std::uint64_t{2});
  ix.put(ix.append_row(1), "year", Value{Kind::Num, 2021, false, {}});
  CHECK_EQ(ix.kinds_version(), v);
  ix.put(ix.append_row(2), "year", Value{Kind::Null, 0, false, {}});
  CHECK_EQ(ix.kinds_version(), v + 1);
}

TEST(load_refuses_malformed_bytes) {
  MetadataIndex ix;
  for (std::int64_t i = 0; i < 5; ++i) {
    const std::uint32_t r = ix.append_row(i);
    ix.put(r, "x", Value{Kind::Str, 0, false, "v"});
  }
  const std::string good = ix.dump();
  CHECK_THROWS(std::invalid_argument, MetadataIndex::load(good.substr(0, good.size() - 1)));
  CHECK_THROWS(std::invalid_argument, MetadataIndex::load(good + "x"));
  std::string bad = good;
  bad[0] = 9;  // version
  CHECK_THROWS(std::invalid_argument, MetadataIndex::load(bad));
  // Every truncation is refused, never read past the end.
  for (std::size_t n = 0; n < good.size(); ++n)
    CHECK_THROWS(std::invalid_argument, MetadataIndex::load(good.substr(0, n)));
}

RAGFIND_TEST_MAIN
