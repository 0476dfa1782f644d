// A fixed exact dense scan workload for instruction counts: one thread, f32 and i8 rows, IP
// and L2, with and without a min-score threshold and an admission mask, k = 10 and 100. Only
// run_queries is meant to be counted (see tools/callgrind/run.sh). Prints a checksum of the
// results.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "ragfind/dense/exact_search.hpp"

using namespace ragfind::dense;

namespace {

constexpr std::size_t kRows = 20000, kDim = 128;
constexpr int kQueries = 20;

__attribute__((noinline)) std::uint64_t run_queries(const std::vector<RowsView>& views, const std::vector<float>& qs,
                                                    const std::vector<std::uint8_t>& mask) {
  std::uint64_t sum = 0;
  std::vector<std::int64_t> rows(100);
  std::vector<float> scores(100);
  for (const RowsView& v : views) {
    for (int qi = 0; qi < kQueries; ++qi) {
      for (int variant = 0; variant < 4; ++variant) {
        SearchOptions o;
        o.threads = 1;
        o.k = variant == 3 ? 100 : 10;
        o.metric = variant == 1 ? Metric::L2 : Metric::IP;
        o.allowed = variant == 2 ? mask.data() : nullptr;
        o.has_threshold = variant == 3;
        o.threshold = 0.5f;
        const std::size_t n = search_one(v, qs.data() + qi * kDim, o, rows.data(), scores.data());
        for (std::size_t i = 0; i < n; ++i) sum = sum * 31 + static_cast<std::uint64_t>(rows[i]);
      }
    }
  }
  return sum;
}

}  // namespace

int main() {
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> x(kRows * kDim), qs(kQueries * kDim);
  for (float& v : x) v = g(rng) * 0.1f;
  for (float& v : qs) v = g(rng) * 0.1f;
  std::vector<std::int8_t> x8(x.size());
  std::vector<float> scales(kRows), sq(kRows);
  for (std::size_t r = 0; r < kRows; ++r) {
    float mx = 1e-12f;
    for (std::size_t j = 0; j < kDim; ++j) mx = std::max(mx, std::abs(x[r * kDim + j]));
    scales[r] = mx / 127.f;
    double s = 0;
    for (std::size_t j = 0; j < kDim; ++j) {
      x8[r * kDim + j] = static_cast<std::int8_t>(std::lrint(x[r * kDim + j] / scales[r]));
      s += double(x8[r * kDim + j] * scales[r]) * (x8[r * kDim + j] * scales[r]);
    }
    sq[r] = static_cast<float>(s);
  }
  std::vector<std::uint8_t> mask(kRows);
  for (std::size_t r = 0; r < kRows; ++r) mask[r] = (r * 2654435761u >> 7) % 3 == 0;
  RowsView f32{Storage::F32, x.data(), kRows, kDim, nullptr, nullptr};
  RowsView i8{Storage::I8, x8.data(), kRows, kDim, scales.data(), sq.data()};
  std::printf("checksum %llu\n", static_cast<unsigned long long>(run_queries({f32, i8}, qs, mask)));
  return 0;
}
