// kestrel.Worker: a training worker of a cluster job as Python drives it (worker/worker_session.h,
// worker/training_feed.h).
#ifndef KESTREL_PYTHON_KESTREL_WORKER_BINDING_H_
#define KESTREL_PYTHON_KESTREL_WORKER_BINDING_H_

#include <pybind11/pybind11.h>

namespace kestrel {
namespace py = pybind11;

// Defines kestrel.Worker in module `m`.
void BindWorker(py::module_& m);

}  // namespace kestrel

#endif  // KESTREL_PYTHON_KESTREL_WORKER_BINDING_H_
