#include "ragfind/common/bits.hpp"

namespace ragfind::common {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__POPCNT__)
__attribute__((target_clones("popcnt", "default")))
#endif
std::size_t
count_bits(const std::uint64_t* words, std::size_t n) {
  std::size_t c = 0;
  for (std::size_t i = 0; i < n; ++i) c += static_cast<std::size_t>(__builtin_popcountll(words[i]));
  return c;
}

}  // namespace ragfind::common
