// kestrel.PredictClient: the Python binding of the prediction service's C++ client (serving/predict_client.h).
#ifndef KESTREL_PYTHON_KESTREL_PREDICT_BINDING_H_
#define KESTREL_PYTHON_KESTREL_PREDICT_BINDING_H_

#include <pybind11/pybind11.h>

namespace kestrel {

// Adds PredictClient to module `m`.
void BindPredictClient(pybind11::module_& m);

}  // namespace kestrel

#endif  // KESTREL_PYTHON_KESTREL_PREDICT_BINDING_H_
