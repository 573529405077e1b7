// _kestrel: the Python binding of Kestrel's C++ parameter-server client (worker/ps_client.h), built by Bazel with
// pybind11. Python never re-implements what the client does — routing by the partition, request splitting,
// retries with exactly-once request ids, the wire's value types, mutual TLS: it hands numpy arrays to it.
//
//   Client.in_process(servers, job_id)   a client over in-process servers (Shards) it owns: tests and notebooks
//   Client.connect(addresses, job_id, tls_ca, tls_cert, tls_key)   a client of a running job's servers over gRPC
//   create_table(config)                 a TableConfig in protobuf text format (proto/table.proto)
//   pull(table, keys, dim) -> float32 [len(keys), dim]; push(table, keys, grads); pull_dense / push_dense
//   feature_keys(ids)                    the keys of ids, spread over the servers (Partition::FeatureKey)
//
// Keys are a 1-D numpy uint64 array (any order, duplicates allowed: pushes sum a key's rows); rows and gradients
// 2-D float32 C-contiguous arrays, read and written in place (no copies on the Python side). Calls release the
// GIL. A refused call raises kestrel.KestrelError carrying the server's status code (`code`, e.g.
// "INVALID_ARGUMENT") and message; nothing of it was applied. A Client is thread-safe as PsClient is.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/evaluation.h"
#include "export/export_format.h"
#include "common/partition.h"
#include "proto/records.pb.h"
#include "python/kestrel/binding_util.h"
#include "python/kestrel/client_binding.h"
#include "python/kestrel/data_binding.h"
#include "python/kestrel/predict_binding.h"
#include "python/kestrel/worker_binding.h"
#include "worker/records.h"

namespace kestrel {
namespace {

// Appends one record (a dict with proto/records.proto's fields) to the JSON-lines file `path`, as the C++ worker
// writes its --metrics_out.
void WriteRecord(const std::string& path, const std::string& json) {
  absl::StatusOr<Record> record = ParseRecord(json);
  if (!record.ok()) throw py::value_error(std::string(record.status().message()));
  RecordWriter(path).Write(*record);
}

// The training settings of a job config with every default applied (worker/trainer.h JobWithDefaults): what a
// Python model needs to build what the built-in one would.
py::dict JobSettings(const std::string& config_text) {
  const JobConfig job = ParseJob(config_text);
  py::dict out;
  out["model"] = ModelConfig::Type_Name(job.model().type());
  out["embedding_dim"] = job.model().embedding_dim();
  out["hidden"] = std::vector<int>(job.model().hidden().begin(), job.model().hidden().end());
  out["batch_size"] = job.train().batch_size();
  out["epochs"] = job.train().epochs();
  out["log_every_steps"] = job.train().log_every_steps();
  out["seed"] = job.model().seed();
  return out;
}

// The seconds of a duration in absl's form ("90s", "10m", "1h30m", "250ms"): what kestrel_worker's duration flags
// take.
double DurationSeconds(const std::string& text) {
  absl::Duration d;
  if (!absl::ParseDuration(text, &d)) throw py::value_error(absl::StrCat("'", text, "' is not a duration (e.g. 90s, 10m)"));
  return absl::ToDoubleSeconds(d);
}

// The distinct keys of `keys` in first-seen order and, for each key, the position of its distinct key: a hash
// set's pass (kestrel.torch pulls each distinct row once per step).
py::tuple UniqueKeys(const py::array& keys) {
  const absl::Span<const uint64_t> in = KeysOf(keys);
  py::array_t<int64_t> inverse(static_cast<py::ssize_t>(in.size()));
  std::vector<uint64_t> unique;
  {
    py::gil_scoped_release release;
    absl::flat_hash_map<uint64_t, int64_t> position;
    position.reserve(in.size());
    int64_t* where = inverse.mutable_data();
    for (size_t i = 0; i < in.size(); ++i) {
      auto [it, added] = position.try_emplace(in[i], static_cast<int64_t>(unique.size()));
      if (added) unique.push_back(in[i]);
      where[i] = it->second;
    }
  }
  return py::make_tuple(py::array_t<uint64_t>(static_cast<py::ssize_t>(unique.size()), unique.data()), inverse);
}

// Partition::FeatureKey of every id: the keys of ids spread evenly over the servers' key ranges.
py::array_t<uint64_t> FeatureKeys(const py::array& ids) {
  const absl::Span<const uint64_t> in = KeysOf(ids);
  py::array_t<uint64_t> out(static_cast<py::ssize_t>(in.size()));
  uint64_t* keys = out.mutable_data();
  for (size_t i = 0; i < in.size(); ++i) keys[i] = Partition::FeatureKey(in[i]);
  return out;
}

}  // namespace
}  // namespace kestrel

namespace py = pybind11;

PYBIND11_MODULE(_kestrel, m) {
  m.doc() = "Kestrel's C++ parameter-server client (the kestrel package wraps it).";
  kestrel::RegisterKestrelError(m);
  m.attr("PYTHON_MODULE_FILE") = kestrel::kPythonModuleFile;  // an export's PyTorch part (export/export_format.h)
  m.def("job_settings", &kestrel::JobSettings, py::arg("config"),
        "A JobConfig's (text format) model type, embedding_dim, hidden widths, batch_size, epochs and seed, "
        "defaults applied.");
  m.def("duration_seconds", &kestrel::DurationSeconds, py::arg("text"),
        "The seconds of a duration as kestrel_worker's flags take it (absl::ParseDuration: 90s, 10m, 1h30m).");
  m.def("unique_keys", &kestrel::UniqueKeys, py::arg("keys"),
        "(distinct keys in first-seen order, int64 position of each key's distinct key) of uint64 keys.");
  m.def("feature_keys", &kestrel::FeatureKeys, py::arg("ids"),
        "The parameter-server keys of uint64 ids (a bijection that spreads them over the servers' key ranges).");
  m.def("auc", [](const py::array& labels, const py::array& scores) {
          return kestrel::ExactAuc(kestrel::FloatsOf(scores, "scores"), kestrel::FloatsOf(labels, "labels"));
        }, py::arg("labels"), py::arg("scores"),
        "Exact area under the ROC curve (ties count half), as kestrel_worker's evaluation computes it.");
  m.def("logloss", [](const py::array& labels, const py::array& probabilities) {
          return kestrel::LogLoss(kestrel::FloatsOf(probabilities, "probabilities"), kestrel::FloatsOf(labels, "labels"));
        }, py::arg("labels"), py::arg("probabilities"), "Mean log loss, as kestrel_worker's evaluation computes it.");
  m.def("fingerprint", [](const py::array& predictions) {
          return kestrel::FingerprintHex(kestrel::PredictionFingerprint(kestrel::FloatsOf(predictions, "predictions")));
        }, py::arg("predictions"),
        "16 hex digits hashing every prediction's float bits in order: equal models give equal fingerprints.");
  m.def("write_record", &kestrel::WriteRecord, py::arg("path"), py::arg("json"),
        "Appends one record (JSON with proto/records.proto's fields) to the JSON-lines file `path`.");
  kestrel::BindReader(m);
  kestrel::BindWorker(m);
  kestrel::BindClient(m);
  kestrel::BindPredictClient(m);
}
