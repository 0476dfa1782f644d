// Bindings for the analyzer, inverted index, BM25 (issue 2).
#include "bindings.hpp"

namespace py = pybind11;

namespace ragfind::bindings {

void bind_bm25(py::module_& m) {}

}  // namespace ragfind::bindings
