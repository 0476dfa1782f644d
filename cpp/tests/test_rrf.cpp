// Reciprocal rank fusion (ragfind/fusion/rrf.hpp) against a direct implementation:
// score(d) = sum over lists i holding d of w_i / (k + rank_i(d)), rank from 1, ranked by score
// with ties in first-appearance order (list 0 rank 0 first). The scores are summed in the same
// order and form as the implementation documents, so ids, order and scores must match exactly.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "check.hpp"
#include "ragfind/fusion/rrf.hpp"

using namespace ragfind::fusion;

namespace {

using Lists = std::vector<std::vector<int64_t>>;

Fused direct_rrf(const Lists& lists, double k, const std::vector<double>* weights, size_t top_k) {
  std::vector<int64_t> order;  // first appearance
  std::map<int64_t, double> score;
  for (size_t li = 0; li < lists.size(); ++li) {
    const double w = weights ? (*weights)[li] : 1.0;
    for (size_t r = 0; r < lists[li].size(); ++r) {
      const int64_t id = lists[li][r];
      const double add = w * (1.0 / (k + static_cast<double>(r) + 1.0));
      auto it = score.find(id);
      if (it == score.end()) {
        score[id] = add;
        order.push_back(id);
      } else {
        it->second += add;
      }
    }
  }
  std::vector<size_t> idx(order.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return score[order[a]] > score[order[b]]; });
  Fused out;
  const size_t n = top_k > 0 ? std::min(top_k, idx.size()) : idx.size();
  for (size_t i = 0; i < n; ++i) {
    out.ids.push_back(order[idx[i]]);
    out.scores.push_back(score[order[idx[i]]]);
  }
  return out;
}

std::vector<RankedList> views(const Lists& lists) {
  std::vector<RankedList> v;
  for (const auto& l : lists) v.push_back({l.data(), nullptr, l.size()});
  return v;
}

// A list of `n` distinct ids drawn from [lo, lo + span).
std::vector<int64_t> random_list(std::mt19937_64& rng, size_t n, int64_t lo, int64_t span) {
  std::vector<int64_t> out;
  std::uniform_int_distribution<int64_t> d(0, span - 1);
  std::map<int64_t, bool> used;
  while (out.size() < n && static_cast<int64_t>(used.size()) < span) {
    const int64_t id = lo + d(rng);
    if (used.emplace(id, true).second) out.push_back(id);
  }
  return out;
}

void check_same(const Fused& got, const Fused& want, const std::string& where) {
  CHECK_MSG(got.ids.size() == want.ids.size(),
            where + ": " + std::to_string(got.ids.size()) + " ids, want " + std::to_string(want.ids.size()));
  const size_t n = std::min(got.ids.size(), want.ids.size());
  long wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += got.ids[i] != want.ids[i] || got.scores[i] != want.scores[i];
  CHECK_MSG(wrong == 0, where + ": " + std::to_string(wrong) + " positions differ");
}

}  // namespace

TEST(matches_direct_implementation) {
  std::mt19937_64 rng(2026);
  Fuser fuser;
  int cases = 0;
  for (size_t n_lists : {1, 2, 3, 5, 9}) {
    for (size_t len : {0, 1, 3, 10, 100, 1000}) {
      // Small non-negative ids (the direct-mapped path), wide ids (the hash path), negatives.
      for (int64_t lo : {int64_t(0), int64_t(-50), int64_t(1) << 40}) {
        for (int64_t span_factor : {2, 50}) {
          for (int wmode = 0; wmode < 3; ++wmode) {  // no weights, equal weights, mixed weights
            Lists lists;
            for (size_t li = 0; li < n_lists; ++li) {
              const size_t this_len = li % 2 && len > 3 ? len - 2 : len;  // unequal lengths too
              lists.push_back(random_list(rng, this_len, lo, std::max<int64_t>(1, span_factor * len)));
            }
            std::vector<double> w(n_lists, 0.5);
            if (wmode == 2)
              for (size_t li = 0; li < n_lists; ++li) w[li] = 0.25 + static_cast<double>(li % 3);
            for (double k : {0.0, 1.0, 60.0}) {
              for (size_t top_k : {size_t(0), size_t(5)}) {
                Options opt;
                opt.weights = wmode ? w.data() : nullptr;
                opt.top_k = top_k;
                const std::string where = "lists " + std::to_string(n_lists) + " len " + std::to_string(len) + " lo " +
                                          std::to_string(lo) + " wmode " + std::to_string(wmode) + " k " +
                                          std::to_string(k) + " top_k " + std::to_string(top_k);
                const Fused want = direct_rrf(lists, k, wmode ? &w : nullptr, top_k);
                Fused got;
                rrf(views(lists), k, opt, got);
                check_same(got, want, where);
                // The same through a reused Fuser (stamps carry over between calls).
                Fused again;
                const size_t n = fuser.rrf(views(lists), k, opt);
                again.ids.resize(n);
                again.scores.resize(n);
                fuser.write(again.ids.data(), again.scores.data());
                check_same(again, want, where + " (reused Fuser)");
                ++cases;
              }
            }
          }
        }
      }
    }
  }
  CHECK(cases > 1000);
}

TEST(dense_codes_path) {  // ids already codes in first-appearance order
  const Lists lists = {{0, 1, 2, 3}, {2, 4, 0}, {5, 1}};
  Options opt;
  opt.dense_codes = 6;
  Fused got;
  rrf(views(lists), 60.0, opt, got);
  check_same(got, direct_rrf(lists, 60.0, nullptr, 0), "dense codes");
}

TEST(ties_keep_first_appearance) {
  // Two lists of distinct ids: rank r of both lists ties; list 0's id comes first.
  const Lists lists = {{10, 11, 12}, {20, 21, 22}};
  Fused got;
  rrf(views(lists), 60.0, Options{}, got);
  const std::vector<int64_t> want = {10, 20, 11, 21, 12, 22};
  CHECK(got.ids == want);
}

TEST(errors) {
  const Lists dup = {{1, 2, 3}, {4, 5, 4}};
  Fused out;
  bool typed = false;
  try {
    rrf(views(dup), 60.0, Options{}, out);
  } catch (const DuplicateIdError& e) { typed = e.list == 1 && e.position == 2 && e.first_position == 0; }
  CHECK(typed);
  const Lists ok = {{1, 2}};
  CHECK_THROWS(std::invalid_argument, rrf(views(ok), -1.0, Options{}, out));
  CHECK_THROWS(std::invalid_argument, rrf(views(ok), NAN, Options{}, out));
  const double bad_w[] = {INFINITY};
  Options opt;
  opt.weights = bad_w;
  CHECK_THROWS(std::invalid_argument, rrf(views(ok), 60.0, opt, out));
}

RAGFIND_TEST_MAIN
