#include <pybind11/stl.h>

#include "bindings.hpp"
#include "ragfind/common/cpu.hpp"

namespace py = pybind11;

namespace ragfind::bindings {

void bind_cpu(py::module_& m) {
  using namespace common;
  m.def(
      "cpu_features",
      [] {
        const CpuFeatures& f = cpu_features();
        py::dict d;
        d["sse4.2"] = f.sse42;
        d["avx"] = f.avx;
        d["avx2"] = f.avx2;
        d["fma"] = f.fma;
        d["f16c"] = f.f16c;
        d["bmi2"] = f.bmi2;
        d["avx512f"] = f.avx512f;
        d["avx512bw"] = f.avx512bw;
        d["avx512dq"] = f.avx512dq;
        d["avx512vl"] = f.avx512vl;
        d["avx512vnni"] = f.avx512vnni;
        d["avx512bf16"] = f.avx512bf16;
        d["avx512fp16"] = f.avx512fp16;
        d["neon"] = f.neon;
        return d;
      },
      "Dict of CPU feature flags detected at import.");
  m.def(
      "compiled_simd_levels",
      [] {
        std::vector<std::string> out;
        for (int l = 0; l < kNumSimdLevels; ++l)
          if (simd_level_compiled(static_cast<SimdLevel>(l)))
            out.emplace_back(simd_level_name(static_cast<SimdLevel>(l)));
        return out;
      },
      "SIMD levels whose kernels were compiled into this build, lowest first.");
  m.def(
      "supported_simd_levels",
      [] {
        std::vector<std::string> out;
        for (SimdLevel l : supported_simd_levels()) out.emplace_back(simd_level_name(l));
        return out;
      },
      "Compiled SIMD levels this CPU can run, lowest first.");
  m.def("best_simd_level", [] { return std::string(simd_level_name(best_simd_level())); });
  m.def(
      "get_simd_level", [] { return std::string(simd_level_name(active_simd_level())); },
      "The SIMD level kernels dispatch to now.");
  m.def(
      "set_simd_level", [](const std::string& name) { set_simd_level(parse_simd_level(name)); }, py::arg("level"),
      "Force kernels to a supported level; raises ValueError otherwise.");
}

}  // namespace ragfind::bindings
