// parallel_for (ragfind/common/parallel.hpp): every item runs exactly once, worker numbers stay
// below the worker count, and the first exception a worker throws reaches the caller after
// every worker has stopped (nothing terminates the process).
#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "check.hpp"
#include "ragfind/common/parallel.hpp"

using ragfind::common::parallel_for;
using ragfind::common::resolve_threads;

TEST(every_item_runs_once) {
  for (std::size_t count : {0, 1, 2, 3, 17, 1000, 20000}) {
    for (int threads : {0, 1, 2, 3, 8, 64}) {
      std::unique_ptr<std::atomic<int>[]> hits(new std::atomic<int>[count + 1]);
      for (std::size_t i = 0; i <= count; ++i) hits[i] = 0;
      const int nt = resolve_threads(threads, count);
      std::atomic<int> bad_worker{0};
      parallel_for(count, threads, [&](std::size_t i, int worker) {
        hits[i].fetch_add(1);
        if (worker < 0 || worker >= nt) bad_worker.fetch_add(1);
      });
      long wrong = 0;
      for (std::size_t i = 0; i < count; ++i) wrong += hits[i].load() != 1;
      CHECK_MSG(wrong == 0, std::to_string(wrong) + " items not run exactly once (count " + std::to_string(count) +
                                ", threads " + std::to_string(threads) + ")");
      CHECK_EQ(bad_worker.load(), 0);
    }
  }
}

TEST(resolve_threads_bounds) {
  CHECK_EQ(resolve_threads(4, 2), 2);
  CHECK_EQ(resolve_threads(4, 100), 4);
  CHECK_EQ(resolve_threads(1, 100), 1);
  CHECK_EQ(resolve_threads(3, 0), 1);
  CHECK(resolve_threads(0, 1000000) >= 1);
  CHECK(resolve_threads(-5, 1000000) == resolve_threads(0, 1000000));
}

TEST(per_worker_scratch_is_private) {  // one worker's items run one after another
  const int threads = 4;
  std::vector<int> busy(threads, 0);
  std::atomic<int> overlaps{0};
  parallel_for(4000, threads, [&](std::size_t, int worker) {
    if (busy[worker]++ != 0) overlaps.fetch_add(1);
    std::this_thread::yield();
    --busy[worker];
  });
  CHECK_EQ(overlaps.load(), 0);
}

TEST(exception_reaches_caller) {
  for (int threads : {1, 2, 4, 16}) {
    for (std::size_t bad : {0, 1, 500, 999}) {
      std::atomic<long> ran{0};
      bool caught = false;
      try {
        parallel_for(1000, threads, [&](std::size_t i, int) {
          ran.fetch_add(1);
          if (i == bad) throw std::runtime_error("item " + std::to_string(i));
        });
      } catch (const std::runtime_error& e) { caught = std::string(e.what()) == "item " + std::to_string(bad); }
      CHECK_MSG(caught, "threads " + std::to_string(threads) + ", failing item " + std::to_string(bad));
      CHECK(ran.load() >= 1 && ran.load() <= 1000);
      if (threads == 1) CHECK_EQ(ran.load(), static_cast<long>(bad) + 1);  // stops at the failure
    }
  }
}

TEST(first_of_several_exceptions_and_no_new_items_after) {
  std::atomic<long> after{0};
  std::atomic<bool> failed{false};
  bool caught = false;
  try {
    parallel_for(100000, 4, [&](std::size_t i, int) {
      if (failed.load()) after.fetch_add(1);
      if (i % 7 == 3) {
        failed.store(true);
        throw std::invalid_argument("bad");
      }
    });
  } catch (const std::invalid_argument&) { caught = true; }
  CHECK(caught);
  // Workers stop taking items once one has failed: at most a handful (one in flight per
  // worker, plus those that read the counter before the stop) run after the first failure.
  CHECK_MSG(after.load() < 1000, std::to_string(after.load()) + " items ran after the failure");
}

TEST(non_standard_exception_type) {
  struct Custom {
    int code;
  };
  bool caught = false;
  try {
    parallel_for(10, 3, [](std::size_t i, int) {
      if (i == 4) throw Custom{42};
    });
  } catch (const Custom& c) { caught = c.code == 42; }
  CHECK(caught);
}

RAGFIND_TEST_MAIN
