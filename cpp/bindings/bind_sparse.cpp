// Bindings for the learned-sparse index (issue 6).
#include "bindings.hpp"

namespace py = pybind11;

namespace ragfind::bindings {

void bind_sparse(py::module_& m) {}

}  // namespace ragfind::bindings
