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

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/partition.h"
#include "common/tls.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "proto/table.pb.h"
#include "server/shard.h"
#include "server/table.h"
#include "proto/job.pb.h"
#include "worker/batch.h"
#include "worker/batch_reader.h"
#include "worker/data/schema.h"
#include "worker/grpc_ps_client.h"
#include "worker/model.h"
#include "worker/trainer.h"
#include "worker/local_ps_client.h"
#include "worker/ps_client.h"

namespace py = pybind11;

namespace kestrel {
namespace {

// kestrel.KestrelError: a RuntimeError with `code` (the absl/gRPC status code's name) and `message`.
PyObject* g_error_type = nullptr;

[[noreturn]] void Raise(const absl::Status& status) {
  const std::string code = absl::StatusCodeToString(status.code());
  py::object error = py::reinterpret_borrow<py::object>(g_error_type)(
      absl::StrCat(code, ": ", status.message()));
  error.attr("code") = code;
  error.attr("message") = std::string(status.message());
  PyErr_SetObject(g_error_type, error.ptr());
  throw py::error_already_set();
}

void Check(const absl::Status& status) {
  if (!status.ok()) Raise(status);
}

absl::Span<const uint64_t> KeysOf(const py::array& keys) {
  if (keys.ndim() != 1 || !keys.dtype().is(py::dtype::of<uint64_t>()) ||
      !(keys.flags() & py::array::c_style)) {
    throw py::value_error("keys must be a 1-D C-contiguous numpy array of uint64");
  }
  return absl::MakeConstSpan(static_cast<const uint64_t*>(keys.data()), static_cast<size_t>(keys.shape(0)));
}

// A float32 C-contiguous array of `rows` x `dim` (any shape with that many elements when rows < 0).
const float* RowsOf(const py::array& a, int64_t rows, int64_t dim, const char* what) {
  if (!a.dtype().is(py::dtype::of<float>()) || !(a.flags() & py::array::c_style)) {
    throw py::value_error(absl::StrCat(what, " must be a C-contiguous numpy array of float32"));
  }
  if (rows >= 0 && (a.ndim() != 2 || a.shape(0) != rows || a.shape(1) != dim)) {
    throw py::value_error(absl::StrCat(what, " must have shape (", rows, ", ", dim, ")"));
  }
  return static_cast<const float*>(a.data());
}

// Collects a text-format parse's errors for the exception instead of logging them.
struct TextErrors : google::protobuf::io::ErrorCollector {
  void AddError(int line, int column, const std::string& message) override {
    if (text.empty()) text = absl::StrCat(line + 1, ":", column + 1, ": ", message);
  }
  std::string text;
};

class Client {
 public:
  static std::unique_ptr<Client> InProcess(int servers, const std::string& job_id) {
    if (servers < 1) throw py::value_error("servers must be >= 1");
    absl::StatusOr<Partition> partition = Partition::Uniform(servers);
    Check(partition.status());
    auto client = std::unique_ptr<Client>(new Client());
    std::vector<Shard*> shards;
    for (int s = 0; s < servers; ++s) {
      ShardOptions options;
      options.job_id = job_id;
      options.owner = s;
      absl::StatusOr<std::unique_ptr<Shard>> shard = Shard::Create(options, *partition);
      Check(shard.status());
      shards.push_back(shard->get());
      client->shards_.push_back(std::move(shard).value());
    }
    PsClientOptions options;
    options.job_id = job_id;
    client->client_ = NewLocalPsClient(options, shards);
    return client;
  }

  static std::unique_ptr<Client> Connect(const std::vector<std::string>& addresses, const std::string& job_id,
                                         const std::string& tls_ca, const std::string& tls_cert,
                                         const std::string& tls_key, int rank) {
    if (addresses.empty()) throw py::value_error("give the servers' addresses");
    absl::StatusOr<Partition> partition = Partition::Uniform(static_cast<int>(addresses.size()));
    Check(partition.status());
    TlsConfig tls;
    tls.ca_file = tls_ca;
    tls.cert_file = tls_cert;
    tls.key_file = tls_key;
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials = MakeChannelCredentials(tls);
    Check(credentials.status());
    PsClientOptions options;
    options.job_id = job_id;
    options.worker_rank = rank;
    absl::StatusOr<std::unique_ptr<PsClient>> client =
        NewGrpcPsClient(options, *std::move(partition), addresses, *std::move(credentials));
    Check(client.status());
    auto result = std::unique_ptr<Client>(new Client());
    result->client_ = std::move(client).value();
    return result;
  }

  void CreateTable(const std::string& text) {
    TableConfig config;
    TextErrors errors;
    google::protobuf::TextFormat::Parser parser;
    parser.RecordErrorsTo(&errors);
    if (!parser.ParseFromString(text, &config)) {
      throw py::value_error(absl::StrCat("config is not a TableConfig in protobuf text format (proto/table.proto): ",
                                         errors.text));
    }
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = client_->CreateTable(config);
    }
    Check(status);
  }

  py::array_t<float> Pull(const std::string& table, const py::array& keys, int dim, int64_t clock) {
    // Checked before the answer's array is allocated (the servers refuse any other dim anyway).
    if (dim < 1 || dim > Table::kMaxDim) throw py::value_error(absl::StrCat("dim must be in [1, ", Table::kMaxDim, "]"));
    const absl::Span<const uint64_t> k = KeysOf(keys);
    py::array_t<float> rows({static_cast<py::ssize_t>(k.size()), static_cast<py::ssize_t>(dim)});
    float* out = rows.mutable_data();
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = client_->Pull(table, k, dim, out, CallClock{clock});
    }
    Check(status);
    return rows;
  }

  void Push(const std::string& table, const py::array& keys, const py::array& grads, int64_t clock) {
    const absl::Span<const uint64_t> k = KeysOf(keys);
    if (grads.ndim() != 2) throw py::value_error("grads must be 2-D: one row per key");
    const int64_t dim = grads.shape(1);
    const float* g = RowsOf(grads, static_cast<int64_t>(k.size()), dim, "grads");
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = client_->Push(table, k, static_cast<int>(dim), g, CallClock{clock});
    }
    Check(status);
  }

  py::array_t<float> PullDense(const std::string& table, int64_t size, int64_t clock) {
    if (size < 1 || size > Table::kMaxDenseSize) {
      throw py::value_error(absl::StrCat("size must be in [1, ", Table::kMaxDenseSize, "]"));
    }
    py::array_t<float> out(static_cast<py::ssize_t>(size));
    float* data = out.mutable_data();
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = client_->PullDense(table, absl::MakeSpan(data, static_cast<size_t>(size)), CallClock{clock});
    }
    Check(status);
    return out;
  }

  void PushDense(const std::string& table, const py::array& grads, int64_t clock) {
    const float* g = RowsOf(grads, -1, 0, "grads");
    const size_t n = static_cast<size_t>(grads.size());
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = client_->PushDense(table, absl::MakeConstSpan(g, n), CallClock{clock});
    }
    Check(status);
  }

  int num_servers() const { return client_->partition().num_servers(); }

 private:
  Client() = default;

  std::vector<std::unique_ptr<Shard>> shards_;  // in-process servers (declared first: destroyed after the client)
  std::unique_ptr<PsClient> client_;
};

// A job's training or test data read by the C++ reader (worker/batch_reader.h) with the job's Schema: the same
// keys, pooling, shuffle and sharding as the C++ worker. Each batch is a dict:
//   "labels": float32 [B], "weights": float32 [B] (all 1 without a weight column), "dense": float32 [B, dense_dim],
//   "features": {field name: (keys uint64 [n], offsets int64 [B], values float32 [n])} — a field's entries of
//   every example in order, each example's starting at its offset; a value is the feature's value times its
//   pooling weight (MEAN, SQRT_N), so summing value * row per example is the schema's pooling.
class Reader {
 public:
  Reader(const std::string& config_text, std::vector<std::string> files, bool test, int part, int num_parts,
         int64_t epoch) {
    JobConfig job;
    if (!google::protobuf::TextFormat::ParseFromString(config_text, &job)) {
      throw py::value_error("config is not a JobConfig in protobuf text format (proto/job.proto)");
    }
    const ModelConfig model = WithDefaults(job.model());
    absl::StatusOr<std::shared_ptr<const Schema>> schema = Schema::Resolve(job.data(), model);
    Check(schema.status());
    schema_ = *std::move(schema);
    if (files.empty()) {
      const auto& from = test ? job.data().test_files() : job.data().train_files();
      files.assign(from.begin(), from.end());
    }
    ReaderOptions options;
    options.on_error = job.data().skip_malformed() ? ReaderOptions::OnError::kSkip : ReaderOptions::OnError::kFail;
    options.part = part;
    options.num_parts = num_parts;
    if (!test && job.train().shuffle_buffer() > 0) {
      options.shuffle_window = static_cast<uint64_t>(job.train().shuffle_buffer());
      options.shuffle_seed = job.train().shuffle_seed() != 0 ? job.train().shuffle_seed() : model.seed();
      options.epoch = epoch;
    }
    absl::StatusOr<std::unique_ptr<BatchReader>> reader = BatchReader::Open(schema_, files, options);
    Check(reader.status());
    reader_ = *std::move(reader);
  }

  // The next batch of up to `size` examples, or None at the end of the data.
  py::object Next(int64_t size) {
    if (size < 1) throw py::value_error("size must be >= 1");
    absl::StatusOr<int64_t> got;
    {
      py::gil_scoped_release release;
      got = reader_->Fill(size, &batch_);
    }
    Check(got.status());
    if (*got == 0) return py::none();
    const Batch& b = batch_;
    const int64_t n = b.size;
    py::dict out;
    out["labels"] = py::array_t<float>(n, b.labels.data());
    py::array_t<float> weights(n);
    for (int64_t i = 0; i < n; ++i) weights.mutable_data()[i] = b.weights.empty() ? 1.0f : b.weights[i];
    out["weights"] = weights;
    out["dense"] = py::array_t<float>({n, static_cast<int64_t>(b.dense_dim)}, b.dense.data());
    py::dict features;
    for (int f = 0; f < b.fields; ++f) {
      int64_t entries = 0;
      for (int64_t e = 0; e < n; ++e) entries += b.bag_end(e * b.fields + f) - b.bag_begin(e * b.fields + f);
      py::array_t<uint64_t> keys(entries);
      py::array_t<int64_t> offsets(n);
      py::array_t<float> values(entries);
      int64_t at = 0;
      for (int64_t e = 0; e < n; ++e) {
        offsets.mutable_data()[e] = at;
        for (uint32_t p = b.bag_begin(e * b.fields + f); p < b.bag_end(e * b.fields + f); ++p, ++at) {
          keys.mutable_data()[at] = b.keys[p];
          values.mutable_data()[at] = b.values[p];
        }
      }
      features[py::str(schema_->field_names()[f])] = py::make_tuple(keys, offsets, values);
    }
    out["features"] = features;
    return out;
  }

  std::vector<std::string> fields() const { return schema_->field_names(); }
  // The embedding table each field looks up.
  std::vector<std::string> field_tables() const {
    std::vector<std::string> names;
    for (int t : schema_->field_tables()) names.push_back(schema_->table_name(t));
    return names;
  }
  int dense_dim() const { return schema_->dense_dim(); }

 private:
  std::shared_ptr<const Schema> schema_;
  std::unique_ptr<BatchReader> reader_;
  Batch batch_;
};

// The training settings of a job config with every default applied (worker/trainer.h JobWithDefaults): what a
// Python model needs to build what the built-in one would.
py::dict JobSettings(const std::string& config_text) {
  JobConfig job;
  if (!google::protobuf::TextFormat::ParseFromString(config_text, &job)) {
    throw py::value_error("config is not a JobConfig in protobuf text format (proto/job.proto)");
  }
  job = JobWithDefaults(job);
  py::dict out;
  out["model"] = ModelConfig::Type_Name(job.model().type());
  out["embedding_dim"] = job.model().embedding_dim();
  out["hidden"] = std::vector<int>(job.model().hidden().begin(), job.model().hidden().end());
  out["batch_size"] = job.train().batch_size();
  out["epochs"] = job.train().epochs();
  out["seed"] = job.model().seed();
  return out;
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

PYBIND11_MODULE(_kestrel, m) {
  using kestrel::Client;
  m.doc() = "Kestrel's C++ parameter-server client (the kestrel package wraps it).";
  kestrel::g_error_type = PyErr_NewException("kestrel.KestrelError", PyExc_RuntimeError, nullptr);
  m.attr("KestrelError") = py::handle(kestrel::g_error_type);
  m.def("job_settings", &kestrel::JobSettings, py::arg("config"),
        "A JobConfig's (text format) model type, embedding_dim, hidden widths, batch_size, epochs and seed, "
        "defaults applied.");
  m.def("feature_keys", &kestrel::FeatureKeys, py::arg("ids"),
        "The parameter-server keys of uint64 ids (a bijection that spreads them over the servers' key ranges).");
  py::class_<kestrel::Reader>(m, "Reader")
      .def(py::init<const std::string&, std::vector<std::string>, bool, int, int, int64_t>(), py::arg("config"),
           py::arg("files") = std::vector<std::string>(), py::arg("test") = false, py::arg("part") = 0,
           py::arg("num_parts") = 1, py::arg("epoch") = 0,
           "Reads a job's data (its train files, or test ones with test=True, or `files`) as the C++ worker does: "
           "`config` is the JobConfig in protobuf text format.")
      .def("next", &kestrel::Reader::Next, py::arg("size"), "The next batch (a dict), or None at the end.")
      .def_property_readonly("fields", &kestrel::Reader::fields)
      .def_property_readonly("field_tables", &kestrel::Reader::field_tables)
      .def_property_readonly("dense_dim", &kestrel::Reader::dense_dim);
  py::class_<Client>(m, "Client")
      .def_static("in_process", &Client::InProcess, py::arg("servers") = 1, py::arg("job_id") = "kestrel",
                  "A client over `servers` in-process servers it owns.")
      .def_static("connect", &Client::Connect, py::arg("addresses"), py::arg("job_id") = "kestrel",
                  py::arg("tls_ca") = "", py::arg("tls_cert") = "", py::arg("tls_key") = "", py::arg("rank") = -1,
                  "A client of a running job's servers (addresses in rank order), over mutual TLS when the files "
                  "are given.")
      .def("create_table", &Client::CreateTable, py::arg("config"),
           "Creates a table on every server from a TableConfig in protobuf text format (idempotent).")
      .def("pull", &Client::Pull, py::arg("table"), py::arg("keys"), py::arg("dim"), py::arg("clock") = 0,
           "The rows of `keys` (uint64), float32 [len(keys), dim].")
      .def("push", &Client::Push, py::arg("table"), py::arg("keys"), py::arg("grads"), py::arg("clock") = 0,
           "Pushes one gradient row per key (float32 [len(keys), dim]); duplicate keys' rows are summed.")
      .def("pull_dense", &Client::PullDense, py::arg("table"), py::arg("size"), py::arg("clock") = 0)
      .def("push_dense", &Client::PushDense, py::arg("table"), py::arg("grads"), py::arg("clock") = 0)
      .def_property_readonly("num_servers", &Client::num_servers);
}
