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

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/partition.h"
#include "proto/records.pb.h"
#include "common/evaluation.h"
#include "worker/records.h"
#include "worker/training_feed.h"
#include "worker/worker_session.h"
#include "common/cluster_env.h"
#include "common/tls.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "proto/table.pb.h"
#include "server/shard.h"
#include "server/table.h"
#include "proto/job.pb.h"
#include "worker/data/batch.h"
#include "worker/batch_reader.h"
#include "worker/data/schema.h"
#include "worker/grpc_connector.h"
#include "worker/grpc_ps_client.h"
#include "worker/model.h"
#include "worker/trainer.h"
#include "inprocess/local_ps_client.h"
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

// The channel credentials of the TLS files given (common/tls.h: mutual TLS when they are, plaintext on loopback
// when not, or anywhere with `insecure`).
std::shared_ptr<grpc::ChannelCredentials> CredentialsOf(const std::string& ca, const std::string& cert,
                                                        const std::string& key, bool insecure) {
  TlsConfig tls;
  tls.ca_file = ca;
  tls.cert_file = cert;
  tls.key_file = key;
  tls.insecure = insecure;
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials = MakeChannelCredentials(tls);
  Check(credentials.status());
  return *std::move(credentials);
}

// Collects a text-format parse's errors for the exception instead of logging them.
struct TextErrors : google::protobuf::io::ErrorCollector {
  void AddError(int line, int column, const std::string& message) override {
    if (text.empty()) text = absl::StrCat(line + 1, ":", column + 1, ": ", message);
  }
  std::string text;
};

// What a kestrel.Worker and the Clients it hands out share: the session, and the iteration reading through it.
// Python's threads reach it under the GIL.
struct WorkerCore {
  std::unique_ptr<WorkerSession> session;
  int64_t read_clock = -1;   // the iteration that last passed WaitToStart
  int64_t fresh_clock = -1;  // what the row cache may assume of rows pulled for it (CacheRead::fresh_clock)
  std::optional<int64_t> wait_clock;  // server-enforced clocks: what its reads wait for (ClockGate::WaitClock)
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

  // The client of `worker`'s passes, each call through the current one's.
  static std::unique_ptr<Client> OfWorker(std::shared_ptr<WorkerCore> worker) {
    auto client = std::unique_ptr<Client>(new Client());
    client->worker_ = std::move(worker);
    return client;
  }

  static std::unique_ptr<Client> Connect(const std::vector<std::string>& addresses, const std::string& job_id,
                                         const std::string& tls_ca, const std::string& tls_cert,
                                         const std::string& tls_key, int rank) {
    if (addresses.empty()) throw py::value_error("give the servers' addresses");
    absl::StatusOr<Partition> partition = Partition::Uniform(static_cast<int>(addresses.size()));
    Check(partition.status());
    std::shared_ptr<grpc::ChannelCredentials> credentials = CredentialsOf(tls_ca, tls_cert, tls_key, false);
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

  void CreateTable(const std::string& text) {
    TableConfig config;
    TextErrors errors;
    google::protobuf::TextFormat::Parser parser;
    parser.RecordErrorsTo(&errors);
    if (!parser.ParseFromString(text, &config)) {
      throw py::value_error(absl::StrCat("config is not a TableConfig in protobuf text format (proto/table.proto): ",
                                         errors.text));
    }
    PsClient* ps = Current();
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = ps->CreateTable(config);
    }
    Check(status);
  }

  py::array_t<float> Pull(const std::string& table, const py::array& keys, int dim, int64_t clock) {
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

  void Push(const std::string& table, const py::array& keys, const py::array& grads, int64_t clock) {
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

  py::array_t<float> PullDense(const std::string& table, int64_t size, int64_t clock) {
    if (size < 1 || size > Table::kMaxDenseSize) {
      throw py::value_error(absl::StrCat("size must be in [1, ", Table::kMaxDenseSize, "]"));
    }
    py::array_t<float> out(static_cast<py::ssize_t>(size));
    float* data = out.mutable_data();
    PsClient* ps = Current();
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = ps->PullDense(table, absl::MakeSpan(data, static_cast<size_t>(size)), CallClock{clock});
    }
    Check(status);
    return out;
  }

  void PushDense(const std::string& table, const py::array& grads, int64_t clock) {
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

  int num_servers() { return Current()->partition().num_servers(); }

 private:
  Client() = default;

  // The client calls go to: this one's own, or its worker's current pass's (stamped with the pass's generation:
  // once the job rolled back, its calls fail until the worker recovers).
  PsClient* Current() { return worker_ == nullptr ? client_.get() : worker_->session->client(); }
  // A training read of the iteration that passed the worker's gate may be answered by the row cache.
  CallClock ClockOf(int64_t clock) const {
    if (worker_ != nullptr && clock == worker_->read_clock) {
      return CallClock{clock, CacheRead{clock, worker_->fresh_clock}, worker_->wait_clock};
    }
    return CallClock{clock};
  }

  std::vector<std::unique_ptr<Shard>> shards_;  // in-process servers (declared first: destroyed after the client)
  std::unique_ptr<PsClient> client_;
  std::shared_ptr<WorkerCore> worker_;  // set instead of client_ for a worker's client
};

// One batch as Python sees it (kestrel.Reader.next, kestrel.Worker.next_batch): see Reader.
py::dict BatchToDict(const Batch& b, const Schema& schema) {
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
    features[py::str(schema.field_names()[f])] = py::make_tuple(keys, offsets, values);
  }
  out["features"] = features;
  return out;
}

// The embedding table each field of `schema` looks up.
std::vector<std::string> FieldTables(const Schema& schema) {
  std::vector<std::string> names;
  for (int t : schema.field_tables()) names.push_back(schema.table_name(t));
  return names;
}

// A job config in protobuf text format, with train/test file overrides (as kestrel_worker's --train_files and
// --test_files) and every default applied.
JobConfig ParseJob(const std::string& config_text, const std::vector<std::string>& train_files = {},
                   const std::vector<std::string>& test_files = {}) {
  JobConfig job;
  TextErrors errors;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(config_text, &job)) {
    throw py::value_error(
        absl::StrCat("config is not a JobConfig in protobuf text format (proto/job.proto): ", errors.text));
  }
  if (!train_files.empty()) *job.mutable_data()->mutable_train_files() = {train_files.begin(), train_files.end()};
  if (!test_files.empty()) *job.mutable_data()->mutable_test_files() = {test_files.begin(), test_files.end()};
  return JobWithDefaults(job);
}

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
    const JobConfig job = ParseJob(config_text);
    const ModelConfig& model = job.model();
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
    return BatchToDict(batch_, *schema_);
  }

  std::vector<std::string> fields() const { return schema_->field_names(); }
  std::vector<std::string> field_tables() const { return FieldTables(*schema_); }
  int dense_dim() const { return schema_->dense_dim(); }

 private:
  std::shared_ptr<const Schema> schema_;
  std::unique_ptr<BatchReader> reader_;
  Batch batch_;
};

// A training worker of a cluster job (kestrel.Worker): joins the job as kestrel_worker does (worker/worker_session.h:
// registration, heartbeats, generations, rollbacks, rescales, leaving), reads this rank's batches with the job's
// own data order (worker/training_feed.h) and asks the scheduler for each iteration (BSP / SSP / ASP). Python
// drives the loop (kestrel.train): next_batch, wait_to_start, the model's pulls and pushes through `client`,
// advance; recover after a failure.
class Worker {
 public:
  Worker(const std::string& config_text, std::string scheduler, int rank, const std::string& job_id,
         const std::string& tls_ca, const std::string& tls_cert, const std::string& tls_key, bool insecure,
         const std::string& address, const std::vector<std::string>& train_files,
         const std::vector<std::string>& test_files, double scheduler_timeout_s, double recovery_timeout_s,
         bool row_cache)
      : job_(ParseJob(config_text, train_files, test_files)) {
    // Identity as kestrel_worker resolves it: explicit arguments first, then the launcher's environment.
    ExplicitSettings flags;
    flags.rank = rank;
    flags.scheduler = scheduler;
    absl::StatusOr<ClusterIdentity> id =
        ResolveClusterIdentity(ClusterRole::kWorker, flags, ProcessEnvironment(), ProcessHostname());
    Check(id.status());
    if (id->scheduler.empty()) {
      throw py::value_error("no scheduler address: give scheduler= (host:port) or set KESTREL_SCHEDULER");
    }
    absl::StatusOr<std::shared_ptr<const Schema>> schema = Schema::Resolve(job_.data(), job_.model());
    Check(schema.status());
    schema_ = *std::move(schema);
    std::shared_ptr<grpc::ChannelCredentials> credentials = CredentialsOf(tls_ca, tls_cert, tls_key, insecure);
    WorkerSessionOptions options;
    options.scheduler = id->scheduler;
    options.job_id = job_id;
    options.id = id->rank;
    options.address = address;
    options.connector = NewGrpcConnector(std::move(credentials));
    options.scheduler_timeout = absl::Seconds(scheduler_timeout_s);
    options.recovery_timeout = absl::Seconds(recovery_timeout_s);
    options.row_cache = row_cache;
    absl::StatusOr<std::unique_ptr<WorkerSession>> session;
    {
      py::gil_scoped_release release;
      session = WorkerSession::Join(std::move(options));
    }
    Check(session.status());
    core_->session = *std::move(session);
    OpenFeed();
  }

  int id() const { return core_->session->id(); }
  int rank() const { return pass().rank; }
  int num_workers() const { return pass().num_workers; }
  int num_servers() const { return pass().num_servers; }
  int64_t start_clock() const { return pass().clock; }
  uint64_t generation() const { return pass().generation; }
  uint64_t rollbacks() const { return pass().rollbacks; }
  uint64_t layout_generation() const { return pass().layout_generation; }
  bool rolled_back() const { return pass().rolled_back; }
  bool superseded() const { return core_->session->Superseded(); }
  std::string consistency() const { return std::string(pass().consistency.name()); }
  int staleness() const { return pass().consistency.staleness; }
  int64_t total() const { return feed_->total(); }
  std::string config() const { return job_.DebugString(); }
  // By rank, the address each worker registered with ("" for none), as the scheduler knows it now.
  std::vector<std::string> WorkerAddresses() {
    absl::StatusOr<DescribeResponse> d;
    {
      py::gil_scoped_release release;
      d = core_->session->scheduler()->Describe();
    }
    Check(d.status());
    return {d->view().worker_addresses().begin(), d->view().worker_addresses().end()};
  }
  std::unique_ptr<Client> client() { return Client::OfWorker(core_); }

  // The next iteration's (clock, batch), or None when this worker has trained every iteration. The batch after
  // it is read meanwhile on another thread (as kestrel_worker's reader thread does).
  py::object NextBatch() {
    if (!pending_.valid()) StartRead();
    {
      py::gil_scoped_release release;
      pending_.wait();
    }
    pending_.get();
    Check(read_.more.status());
    if (!*read_.more) return py::none();
    current_ = 1 - current_;
    batch_clock_ = read_.clock;
    after_ = read_.after;
    py::dict batch = BatchToDict(batches_[current_], *schema_);
    StartRead();
    return py::make_tuple(batch_clock_, batch);
  }

  // Blocks until the job's consistency mode lets iteration `clock` start.
  void WaitToStart(int64_t clock) {
    ClockGate* gate = core_->session->gate();
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = gate->WaitToStart(clock);
    }
    Check(status);
    core_->read_clock = clock;
    core_->fresh_clock = pass().consistency.row_cache_own_clock() ? clock : gate->KnownMinClock();
    core_->wait_clock = gate->WaitClock(clock);
    if (core_->wait_clock.has_value()) core_->fresh_clock = std::max(core_->fresh_clock, *core_->wait_clock);
  }

  // This worker has finished `finished` iterations, their pushes acknowledged: tells the scheduler, with the
  // reader's state after the last batch next_batch returned (for checkpoints and replacements).
  void Advance(int64_t finished) {
    if (finished != batch_clock_ + 1) {
      throw py::value_error(absl::StrCat("advance(", finished, "): the last batch taken was iteration ", batch_clock_,
                                         ", so the next clock is ", batch_clock_ + 1));
    }
    const WorkerState state = feed_->StateOf(finished, after_);
    ClockGate* gate = core_->session->gate();
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = gate->Advance(finished, finished == feed_->total(), state);
    }
    Check(status);
  }

  // Blocks until every worker has finished every iteration (before the final evaluation).
  void WaitAllFinished() {
    ClockGate* gate = core_->session->gate();
    const int64_t total = feed_->total();
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = gate->WaitAllFinished(total);
    }
    Check(status);
  }

  // After the pass's training failed with `message`: True when the job rolled back or was rescaled and the next
  // pass is open (start_clock, rank and client are the new pass's; the next batch is its first); False when a
  // rescale left this worker out (it has nothing more to do). Otherwise raises: the failure was this worker's own.
  bool Recover(const std::string& message) {
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = core_->session->Recover(absl::AbortedError(message));
    }
    if (absl::IsOutOfRange(status)) return false;
    Check(status);
    core_->read_clock = -1;
    OpenFeed();
    return true;
  }

  // Asks the scheduler to roll the job back to its last checkpoint, naming `reason` (then recover()).
  void RequestRollback(const std::string& reason) {
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = core_->session->RequestRollback(reason);
    }
    Check(status);
  }

  // The job is finished and this worker is done with it.
  void Leave() {
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = core_->session->Leave(feed_->total());
    }
    Check(status);
  }

  // Fields and tables of the job's schema, as kestrel.Reader has them.
  std::vector<std::string> fields() const { return schema_->field_names(); }
  std::vector<std::string> field_tables() const { return FieldTables(*schema_); }
  int dense_dim() const { return schema_->dense_dim(); }

  ~Worker() { WaitRead(); }

 private:
  const WorkerPass& pass() const { return core_->session->pass(); }

  // Reads the next batch into the slot not handed out last, on another thread.
  void StartRead() {
    const int slot = 1 - current_;
    pending_ = std::async(std::launch::async, [this, slot] {
      read_.more = feed_->Next(&batches_[slot], &read_.clock, &read_.after, nullptr);
    });
  }
  void WaitRead() {
    if (!pending_.valid()) return;
    py::gil_scoped_release release;
    pending_.wait();
    pending_ = {};
  }

  void OpenFeed() {
    WaitRead();  // the read in flight is of the feed being replaced
    TrainingFeedOptions options;
    options.job = job_;
    options.schema = schema_;
    options.rank = pass().rank;
    options.num_workers = pass().num_workers;
    options.start_clock = pass().clock;
    options.start_state = pass().state;
    absl::StatusOr<std::unique_ptr<TrainingFeed>> feed;
    {
      py::gil_scoped_release release;
      feed = TrainingFeed::Open(std::move(options));
    }
    Check(feed.status());
    feed_ = *std::move(feed);
    batch_clock_ = pass().clock - 1;
  }

  const JobConfig job_;
  std::shared_ptr<const Schema> schema_;
  std::shared_ptr<WorkerCore> core_ = std::make_shared<WorkerCore>();
  std::unique_ptr<TrainingFeed> feed_;
  // The batch handed out last is batches_[current_]; the next one is read into the other (pending_).
  Batch batches_[2];
  int current_ = 0;
  struct Read {
    absl::StatusOr<bool> more = false;
    int64_t clock = 0;
    ReaderPosition after;
  } read_;  // pending_'s result
  std::future<void> pending_;
  ReaderPosition after_;      // the reader after the batch handed out last
  int64_t batch_clock_ = -1;  // that batch's iteration
};

// kestrel.auc, kestrel.logloss, kestrel.fingerprint: the figures kestrel_worker's evaluation reports
// (common/evaluation.h), of float32 arrays.
absl::Span<const float> FloatsOf(const py::array& a, const char* what) {
  RowsOf(a, -1, 0, what);
  return absl::MakeConstSpan(static_cast<const float*>(a.data()), static_cast<size_t>(a.size()));
}

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

PYBIND11_MODULE(_kestrel, m) {
  using kestrel::Client;
  m.doc() = "Kestrel's C++ parameter-server client (the kestrel package wraps it).";
  kestrel::g_error_type = PyErr_NewException("kestrel.KestrelError", PyExc_RuntimeError, nullptr);
  m.attr("KestrelError") = py::handle(kestrel::g_error_type);
  m.def("job_settings", &kestrel::JobSettings, py::arg("config"),
        "A JobConfig's (text format) model type, embedding_dim, hidden widths, batch_size, epochs and seed, "
        "defaults applied.");
  m.def("duration_seconds", &kestrel::DurationSeconds, py::arg("text"),
        "The seconds of a duration as kestrel_worker's flags take it (absl::ParseDuration: 90s, 10m, 1h30m).");
  m.def("unique_keys", &kestrel::UniqueKeys, py::arg("keys"),
        "(distinct keys in first-seen order, int64 position of each key's distinct key) of uint64 keys.");
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
  py::class_<kestrel::Worker>(m, "Worker")
      .def(py::init<const std::string&, std::string, int, const std::string&, const std::string&, const std::string&,
                    const std::string&, bool, const std::string&, const std::vector<std::string>&,
                    const std::vector<std::string>&, double, double, bool>(),
           py::arg("config"), py::arg("scheduler") = "", py::arg("rank") = -1, py::arg("job_id") = "kestrel",
           py::arg("tls_ca") = "", py::arg("tls_cert") = "", py::arg("tls_key") = "", py::arg("insecure") = false,
           py::arg("address") = "", py::arg("train_files") = std::vector<std::string>(),
           py::arg("test_files") = std::vector<std::string>(), py::arg("scheduler_timeout") = 60.0,
           py::arg("recovery_timeout") = 600.0, py::arg("row_cache") = true,
           "Joins a cluster job as a training worker (see kestrel.Worker's docs in kestrel/__init__.py).")
      .def_property_readonly("id", &kestrel::Worker::id)
      .def_property_readonly("rank", &kestrel::Worker::rank)
      .def_property_readonly("num_workers", &kestrel::Worker::num_workers)
      .def_property_readonly("num_servers", &kestrel::Worker::num_servers)
      .def_property_readonly("start_clock", &kestrel::Worker::start_clock)
      .def_property_readonly("generation", &kestrel::Worker::generation)
      .def_property_readonly("rollbacks", &kestrel::Worker::rollbacks)
      .def_property_readonly("layout_generation", &kestrel::Worker::layout_generation)
      .def_property_readonly("rolled_back", &kestrel::Worker::rolled_back)
      .def_property_readonly("superseded", &kestrel::Worker::superseded,
                             "True once the job rolled back or was rescaled since this pass began (recover next).")
      .def_property_readonly("consistency", &kestrel::Worker::consistency)
      .def_property_readonly("staleness", &kestrel::Worker::staleness)
      .def_property_readonly("total", &kestrel::Worker::total)
      .def_property_readonly("config", &kestrel::Worker::config)
      .def_property_readonly("client", &kestrel::Worker::client)
      .def_property_readonly("fields", &kestrel::Worker::fields)
      .def_property_readonly("field_tables", &kestrel::Worker::field_tables)
      .def_property_readonly("dense_dim", &kestrel::Worker::dense_dim)
      .def("worker_addresses", &kestrel::Worker::WorkerAddresses)
      .def("next_batch", &kestrel::Worker::NextBatch)
      .def("wait_to_start", &kestrel::Worker::WaitToStart, py::arg("clock"))
      .def("advance", &kestrel::Worker::Advance, py::arg("finished"))
      .def("wait_all_finished", &kestrel::Worker::WaitAllFinished)
      .def("recover", &kestrel::Worker::Recover, py::arg("message"))
      .def("request_rollback", &kestrel::Worker::RequestRollback, py::arg("reason"))
      .def("leave", &kestrel::Worker::Leave);
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
