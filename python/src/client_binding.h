// Registers kvtier._kvtier.Client (client_binding.cc).
#pragma once

#include <pybind11/pybind11.h>

namespace kvtier::python {

void BindClient(pybind11::module_& m);

}  // namespace kvtier::python
