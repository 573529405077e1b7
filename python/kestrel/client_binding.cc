#include "python/kestrel/client_binding.h"

#include <pybind11/stl.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/key_batch.h"
#include "common/limits.h"
#include "export/export.h"
#include "export/load_export.h"
#include "inprocess/local_ps_client.h"
#include "python/kestrel/binding_util.h"
#include "server/table.h"
#include "worker/grpc_ps_client.h"
#include "worker/routed_ps_client.h"

namespace kestrel {

std::unique_ptr<Client> Client::InProcess(int servers, const std::string& job_id) {
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

std::unique_ptr<Client> Client::FromExport(const std::string& dir) {
  absl::StatusOr<LoadedExport> loaded = LoadExport(dir);
  Check(loaded.status());
  auto client = std::unique_ptr<Client>(new Client());
  PsClientOptions options;
  options.job_id = loaded->model.job_id();
  client->shards_.push_back(std::move(loaded->shard));
  client->client_ = NewLocalPsClient(options, {client->shards_.front().get()});
  client->serving_ = true;
  return client;
}

void Client::Export(const std::string& dir, const std::string& config, int64_t clock) {
  if (shards_.empty() || serving_) {
    Raise(absl::FailedPreconditionError("only a client of in-process servers exports them; a cluster's model is "
                                        "its checkpoint's (kestrel_export)"));
  }
  const JobConfig job = ParseJob(config);
  std::vector<Shard*> servers;
  for (const auto& shard : shards_) servers.push_back(shard.get());
  absl::StatusOr<ExportedModel> exported;
  {
    py::gil_scoped_release release;
    exported = ExportServers(servers, job, clock, dir);
  }
  Check(exported.status());
}

std::unique_ptr<Client> Client::OfWorker(std::shared_ptr<WorkerCore> worker) {
  auto client = std::unique_ptr<Client>(new Client());
  client->worker_ = std::move(worker);
  return client;
}

std::unique_ptr<Client> Client::Connect(const std::vector<std::string>& addresses, const std::string& job_id,
                                        const std::string& tls_ca, const std::string& tls_cert,
                                        const std::string& tls_key, int rank, const std::string& tls_crl) {
  if (addresses.empty()) throw py::value_error("give the servers' addresses");
  absl::StatusOr<Partition> partition = Partition::Uniform(static_cast<int>(addresses.size()));
  Check(partition.status());
  std::shared_ptr<grpc::ChannelCredentials> credentials = CredentialsOf(tls_ca, tls_cert, tls_key, false, tls_crl);
  PsClientOptions options;
  options.job_id = job_id;
  options.worker_rank = rank;
  absl::StatusOr<std::unique_ptr<PsClient>> client =
      NewGrpcPsClient(options, *std::move(partition), addresses, std::move(credentials));
  Check(client.status());
  auto result = std::unique_ptr<Client>(new Client());
  result->client_ = std::move(client).value();
  return result;
}

void Client::CreateTable(const std::string& text) {
  TableConfig config;
  ParseText(text, "proto/table.proto", &config);
  if (serving_) {  // an export's table: configured for serving already
    const Table* table = shards_.front()->FindTable(config.name());
    if (table == nullptr) {
      Raise(absl::NotFoundError(absl::StrCat("the export has no table '", config.name(), "'")));
    }
    return;
  }
  PsClient* ps = Current();
  absl::Status status;
  {
    py::gil_scoped_release release;
    status = ps->CreateTable(config);
  }
  Check(status);
}

py::array_t<float> Client::Pull(const std::string& table, const py::array& keys, int dim, int64_t clock) {
  // Checked before the answer's array is allocated (the servers refuse any other dim anyway).
  if (dim < 1 || dim > Table::kMaxDim) throw py::value_error(absl::StrCat("dim must be in [1, ", Table::kMaxDim, "]"));
  const absl::Span<const uint64_t> k = KeysOf(keys);
  py::array_t<float> rows({static_cast<py::ssize_t>(k.size()), static_cast<py::ssize_t>(dim)});
  float* out = rows.mutable_data();
  PsClient* ps = Current();
  absl::Status status;
  {
    py::gil_scoped_release release;
    status = ps->Pull(table, k, dim, out, ClockOf(clock));
  }
  Check(status);
  return rows;
}

void Client::Push(const std::string& table, const py::array& keys, const py::array& grads, int64_t clock) {
  const absl::Span<const uint64_t> k = KeysOf(keys);
  if (grads.ndim() != 2) throw py::value_error("grads must be 2-D: one row per key");
  const int64_t dim = grads.shape(1);
  const float* g = RowsOf(grads, static_cast<int64_t>(k.size()), dim, "grads");
  PsClient* ps = Current();
  absl::Status status;
  {
    py::gil_scoped_release release;
    status = ps->Push(table, k, static_cast<int>(dim), g, CallClock{clock});
  }
  Check(status);
}

py::array_t<float> Client::PullDense(const std::string& table, int64_t size, int64_t clock) {
  if (size < 1 || size > Table::kMaxDenseSize) {
    throw py::value_error(absl::StrCat("size must be in [1, ", Table::kMaxDenseSize, "]"));
  }
  py::array_t<float> out(static_cast<py::ssize_t>(size));
  float* data = out.mutable_data();
  PsClient* ps = Current();
  absl::Status status;
  {
    py::gil_scoped_release release;
    // A training read waits at the servers for the clocks it must see (server-enforced clocks), as sparse reads do.
    status = ps->PullDense(table, absl::MakeSpan(data, static_cast<size_t>(size)), ClockOf(clock));
  }
  Check(status);
  return out;
}

void Client::PushDense(const std::string& table, const py::array& grads, int64_t clock) {
  const float* g = RowsOf(grads, -1, 0, "grads");
  const size_t n = static_cast<size_t>(grads.size());
  PsClient* ps = Current();
  absl::Status status;
  {
    py::gil_scoped_release release;
    status = ps->PushDense(table, absl::MakeConstSpan(g, n), CallClock{clock});
  }
  Check(status);
}

void Client::Step(const std::vector<py::tuple>& sparse, const std::vector<py::tuple>& dense, int64_t clock) {
  PsClient* ps = Current();
  const size_t n = sparse.size() + dense.size();
  if (n > static_cast<size_t>(kMaxStepTables)) {
    throw py::value_error(absl::StrCat("a step of ", n, " tables: at most ", kMaxStepTables));
  }
  std::vector<KeyBatch> batches(sparse.size());
  std::vector<std::vector<float>> reduced(sparse.size());  // duplicate keys' gradients summed
  std::vector<StepPart> parts;
  parts.reserve(n);
  for (size_t i = 0; i < sparse.size(); ++i) {
    const py::tuple& t = sparse[i];
    if (t.size() != 3) throw py::value_error("a sparse part is (table, keys, grads)");
    const absl::Span<const uint64_t> keys = KeysOf(t[1].cast<py::array>());
    const py::array grads = t[2].cast<py::array>();
    if (grads.ndim() != 2) throw py::value_error("grads must be 2-D: one row per key");
    const int64_t dim = grads.shape(1);
    const float* g = RowsOf(grads, static_cast<int64_t>(keys.size()), dim, "grads");
    absl::Status shape = CheckShape(keys.size(), static_cast<int>(dim));
    Check(shape);
    batches[i].Build(keys, ps->partition());
    StepPart part;
    part.table = t[0].cast<std::string>();
    part.dim = static_cast<int>(dim);
    part.push = true;
    part.push_keys = &batches[i];
    if (batches[i].identity()) {
      part.grads = g;
    } else {
      reduced[i].resize(batches[i].num_unique() * static_cast<size_t>(dim));
      batches[i].Reduce(g, static_cast<int>(dim), reduced[i].data());
      part.grads = reduced[i].data();
    }
    parts.push_back(std::move(part));
  }
  for (const py::tuple& t : dense) {
    if (t.size() != 2) throw py::value_error("a dense part is (table, grads)");
    const py::array grads = t[1].cast<py::array>();
    StepPart part;
    part.table = t[0].cast<std::string>();
    part.dense = true;
    part.push = true;
    part.grads = RowsOf(grads, -1, 0, "grads");
    part.push_floats = static_cast<size_t>(grads.size());
    parts.push_back(std::move(part));
  }
  absl::Status status;
  {
    py::gil_scoped_release release;
    status = ps->Step(parts, CallClock{clock}, CallClock{clock});
  }
  Check(status);
}

void BindClient(py::module_& m) {
  py::class_<Client>(m, "Client")
      .def_static("in_process", &Client::InProcess, py::arg("servers") = 1, py::arg("job_id") = "kestrel",
                  "A client over `servers` in-process servers it owns.")
      .def_static("from_export", &Client::FromExport, py::arg("dir"),
                  "A client over an export's tables, loaded into this process (scoring).")
      .def("export", &Client::Export, py::arg("dir"), py::arg("config"), py::arg("clock"),
           "In-process servers: every table's state at `clock` exported to `dir` for the job `config`.")
      .def_static("connect", &Client::Connect, py::arg("addresses"), py::arg("job_id") = "kestrel",
                  py::arg("tls_ca") = "", py::arg("tls_cert") = "", py::arg("tls_key") = "", py::arg("rank") = -1,
                  py::arg("tls_crl") = "",
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
      .def("step", &Client::Step, py::arg("sparse"), py::arg("dense"), py::arg("clock"),
           "One training step's pushes at `clock`, as one request per server: sparse (table, keys, grads) and "
           "dense (table, grads) tuples. Every gradient is checked first; a refused step changes no table.")
      .def_property_readonly("num_servers", &Client::num_servers);
}

}  // namespace kestrel
