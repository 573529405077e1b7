#include "python/kestrel/predict_binding.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "python/kestrel/binding_util.h"
#include "serving/predict_client.h"

namespace kestrel {
namespace {

// A PredictClient: its calls release the GIL; a refused call raises the KestrelError of the service's status.
class PyPredictClient {
 public:
  PyPredictClient(const std::string& address, const std::string& tls_ca, const std::string& tls_cert,
                  const std::string& tls_key, double timeout, const std::string& tls_crl) {
    PredictClientOptions options;
    options.address = address;
    options.tls.ca_file = tls_ca;
    options.tls.cert_file = tls_cert;
    options.tls.key_file = tls_key;
    options.tls.crl_file = tls_crl;
    options.timeout = absl::Seconds(timeout);
    absl::StatusOr<std::unique_ptr<PredictClient>> client = NewPredictClient(options);
    Check(client.status());
    client_ = *std::move(client);
  }

  py::dict Predict(const std::vector<std::string>& lines) {
    absl::StatusOr<PredictResponse> response;
    {
      py::gil_scoped_release release;
      response = client_->Predict(lines);
    }
    Check(response.status());
    py::array_t<float> scores(response->scores_size());
    std::copy(response->scores().begin(), response->scores().end(), scores.mutable_data());
    py::dict out;
    out["scores"] = scores;
    out["model"] = response->model();
    out["clock"] = response->clock();
    return out;
  }

  py::dict Status() {
    absl::StatusOr<ModelStatusResponse> status;
    {
      py::gil_scoped_release release;
      status = client_->ModelStatus();
    }
    Check(status.status());
    py::dict out;
    out["job_id"] = status->job_id();
    out["model"] = status->model();
    out["checkpoint"] = status->checkpoint();
    out["clock"] = status->clock();
    out["loaded_unix_micros"] = status->loaded_unix_micros();
    out["published_unix_micros"] = status->published_unix_micros();
    out["loads"] = status->loads();
    out["failed_loads"] = status->failed_loads();
    out["last_error"] = status->last_error();
    return out;
  }

 private:
  std::unique_ptr<PredictClient> client_;
};

}  // namespace

void BindPredictClient(py::module_& m) {
  py::class_<PyPredictClient>(m, "PredictClient",
                              "A client of kestrel_serve (docs/serving.md). Thread-safe; calls release the GIL.")
      .def(py::init<const std::string&, const std::string&, const std::string&, const std::string&, double,
                    const std::string&>(),
           py::arg("address"), py::arg("tls_ca") = "", py::arg("tls_cert") = "", py::arg("tls_key") = "",
           py::arg("timeout") = kDefaultPredictTimeoutMs / 1000.0, py::arg("tls_crl") = "",
           "A client of the service at host:port; mutual TLS with a client certificate of the served job when the "
           "files are given (`tls_crl`: a revocation list the service is checked against). `timeout`: each call's "
           "deadline, in seconds.")
      .def("predict", &PyPredictClient::Predict, py::arg("lines"),
           "Scores example lines in the served job's data format: {'scores': float32 array, one per line, "
           "'model': the export that scored them, 'clock': its training clock}.")
      .def("status", &PyPredictClient::Status,
           "What the service serves: job_id, model, checkpoint, clock, loaded_unix_micros, "
           "published_unix_micros, loads, failed_loads, last_error.");
}

}  // namespace kestrel
