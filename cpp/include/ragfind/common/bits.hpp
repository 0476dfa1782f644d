// Counting set bits of a bitmap. The portable baseline (x86-64 without POPCNT) turns
// __builtin_popcountll into a library call per word; count_bits() is compiled twice on x86-64
// (with and without POPCNT) and the loader picks one for the CPU (GCC/Clang target_clones).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ragfind::common {

/// Set bits in words[0, n).
std::size_t count_bits(const std::uint64_t* words, std::size_t n);

}  // namespace ragfind::common
