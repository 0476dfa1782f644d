#include "ragfind/common/cpu.hpp"

#include <atomic>
#include <cstdlib>
#include <stdexcept>

namespace ragfind::common {
namespace {

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  // __builtin_cpu_supports also checks that the OS saves the AVX/AVX-512 register state.
  __builtin_cpu_init();
  f.sse42 = __builtin_cpu_supports("sse4.2");
  f.avx = __builtin_cpu_supports("avx");
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.bmi2 = __builtin_cpu_supports("bmi2");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512vnni = __builtin_cpu_supports("avx512vnni");
  f.avx512bf16 = __builtin_cpu_supports("avx512bf16");
  f.avx512fp16 = __builtin_cpu_supports("avx512fp16");
  // F16C has no __builtin_cpu_supports name in older GCCs; every AVX2 CPU shipped has it,
  // but read CPUID leaf 1, ECX bit 29 to be exact.
  unsigned eax, ebx, ecx, edx;
  __asm__ volatile("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(1), "c"(0));
  f.f16c = (ecx >> 29) & 1u;
#elif defined(__aarch64__)
  f.neon = true;  // Advanced SIMD is mandatory on AArch64.
#endif
  return f;
}

bool cpu_runs(SimdLevel level) {
  const CpuFeatures& f = cpu_features();
  switch (level) {
    case SimdLevel::Scalar: return true;
    case SimdLevel::NEON: return f.neon;
    case SimdLevel::AVX2: return f.avx2 && f.fma && f.f16c;
    case SimdLevel::AVX512: return f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl && f.avx2 && f.fma && f.f16c;
  }
  return false;
}

int initial_level() {
  SimdLevel best = best_simd_level();
  const char* env = std::getenv("RAGFIND_SIMD");
  if (env == nullptr || *env == '\0') return static_cast<int>(best);
  // An unknown or unsupported request falls back to the best level rather than failing
  // at import; ragfind.capabilities() reports what was requested and what is active.
  try {
    SimdLevel wanted = parse_simd_level(env);
    if (simd_level_supported(wanted)) return static_cast<int>(wanted);
  } catch (const std::invalid_argument&) {}
  return static_cast<int>(best);
}

std::atomic<int>& level_slot() {
  static std::atomic<int> slot{initial_level()};
  return slot;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::Scalar: return "scalar";
    case SimdLevel::NEON: return "neon";
    case SimdLevel::AVX2: return "avx2";
    case SimdLevel::AVX512: return "avx512";
  }
  return "unknown";
}

SimdLevel parse_simd_level(const std::string& name) {
  for (int l = 0; l < kNumSimdLevels; ++l) {
    if (name == simd_level_name(static_cast<SimdLevel>(l))) return static_cast<SimdLevel>(l);
  }
  throw std::invalid_argument("unknown SIMD level '" + name + "': expected one of scalar, neon, avx2, avx512");
}

bool simd_level_compiled(SimdLevel level) {
  switch (level) {
    case SimdLevel::Scalar: return true;
    case SimdLevel::NEON:
#ifdef RAGFIND_HAVE_NEON
      return true;
#else
      return false;
#endif
    case SimdLevel::AVX2:
#ifdef RAGFIND_HAVE_AVX2
      return true;
#else
      return false;
#endif
    case SimdLevel::AVX512:
#ifdef RAGFIND_HAVE_AVX512
      return true;
#else
      return false;
#endif
  }
  return false;
}

bool simd_level_supported(SimdLevel level) { return simd_level_compiled(level) && cpu_runs(level); }

std::vector<SimdLevel> supported_simd_levels() {
  std::vector<SimdLevel> out;
  for (int l = 0; l < kNumSimdLevels; ++l) {
    if (simd_level_supported(static_cast<SimdLevel>(l))) out.push_back(static_cast<SimdLevel>(l));
  }
  return out;
}

SimdLevel best_simd_level() { return supported_simd_levels().back(); }

SimdLevel active_simd_level() { return static_cast<SimdLevel>(level_slot().load(std::memory_order_relaxed)); }

void set_simd_level(SimdLevel level) {
  if (!simd_level_supported(level)) {
    throw std::invalid_argument(std::string("SIMD level '") + simd_level_name(level) +
                                "' is not available on this CPU/build");
  }
  level_slot().store(static_cast<int>(level), std::memory_order_relaxed);
}

}  // namespace ragfind::common
