// CPU feature detection and the runtime SIMD level shared by every kernel family.
//
// Kernels are compiled once per ISA (cpp/src/kernels/<family>/<isa>.cpp, each with its own
// compiler flags) and registered in a KernelTable. At call time the table hands out the
// best implementation that is compiled, supported by this CPU and not above the active
// level, so tests can force every lower level and compare it with the scalar reference.
#pragma once

#include <string>
#include <vector>

namespace ragfind::common {

/// SIMD levels in increasing order of preference (NEON and the x86 levels never coexist).
enum class SimdLevel : int { Scalar = 0, NEON = 1, AVX2 = 2, AVX512 = 3 };
inline constexpr int kNumSimdLevels = 4;

/// What the processor (and the OS, for the AVX state) supports.
struct CpuFeatures {
  bool sse42 = false, avx = false, avx2 = false, fma = false, f16c = false, bmi2 = false;
  bool avx512f = false, avx512bw = false, avx512dq = false, avx512vl = false;
  bool avx512vnni = false, avx512bf16 = false, avx512fp16 = false;
  bool neon = false;
};

/// Features of the running CPU, detected once.
const CpuFeatures& cpu_features();

/// Lower-case name ("scalar", "neon", "avx2", "avx512").
const char* simd_level_name(SimdLevel level);

/// Parses a level name; throws std::invalid_argument naming the accepted values.
SimdLevel parse_simd_level(const std::string& name);

/// True when kernels for `level` were compiled into this build.
bool simd_level_compiled(SimdLevel level);

/// True when `level` is compiled and this CPU can run it.
bool simd_level_supported(SimdLevel level);

/// Every supported level, lowest first (always starts with Scalar).
std::vector<SimdLevel> supported_simd_levels();

/// The best supported level.
SimdLevel best_simd_level();

/// The level kernels dispatch to now: the best one, or RAGFIND_SIMD from the environment
/// when set (read once), or what set_simd_level chose last.
SimdLevel active_simd_level();

/// Forces kernels to `level`; throws std::invalid_argument if it is not supported here.
void set_simd_level(SimdLevel level);

/// One kernel's implementations, indexed by SimdLevel; nullptr where not compiled.
/// get() returns the best entry at or below the active level (Scalar must be set).
template <typename Fn>
struct KernelTable {
  Fn by_level[kNumSimdLevels] = {};

  Fn get() const { return at(active_simd_level()); }

  Fn at(SimdLevel level) const {
    int l = static_cast<int>(level);
    while (l > 0 && (by_level[l] == nullptr || !simd_level_supported(static_cast<SimdLevel>(l)))) --l;
    return by_level[l];
  }
};

}  // namespace ragfind::common
