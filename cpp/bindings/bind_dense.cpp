// Bindings for the similarity kernels, exact dense index (issue 3).
#include "bindings.hpp"

namespace py = pybind11;

namespace ragfind::bindings {

void bind_dense(py::module_& m) {}

}  // namespace ragfind::bindings
