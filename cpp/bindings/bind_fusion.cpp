// Bindings for the rank and score fusion (issue 5).
#include "bindings.hpp"

namespace py = pybind11;

namespace ragfind::bindings {

void bind_fusion(py::module_& m) {}

}  // namespace ragfind::bindings
