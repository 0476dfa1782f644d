// Bindings for the MaxSim and the late-interaction index (issue 6).
#include "bindings.hpp"

namespace py = pybind11;

namespace ragfind::bindings {

void bind_late_interaction(py::module_& m) {}

}  // namespace ragfind::bindings
