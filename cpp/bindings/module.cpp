#include "bindings.hpp"

PYBIND11_MODULE(_core, m) {
  m.doc() = "ragfind native core (C++ kernels behind the ragfind Python API)";
  using namespace ragfind::bindings;
  bind_cpu(m);
  bind_bm25(m);
  bind_dense(m);
  bind_hnsw(m);
  bind_fusion(m);
  bind_late_interaction(m);
  bind_sparse(m);
  bind_metadata(m);
  bind_pq(m);
  bind_passages(m);
  bind_text(m);
}
