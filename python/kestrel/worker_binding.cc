#include "python/kestrel/worker_binding.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/cluster_env.h"
#include "python/kestrel/binding_util.h"
#include "python/kestrel/client_binding.h"
#include "python/kestrel/data_binding.h"
#include "worker/grpc_connector.h"
#include "worker/training_feed.h"
#include "worker/worker_session.h"

namespace kestrel {
namespace {

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
         bool row_cache, const std::string& tls_crl)
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
    std::shared_ptr<grpc::ChannelCredentials> credentials = CredentialsOf(tls_ca, tls_cert, tls_key, insecure, tls_crl);
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
    if (!job_.data().train_stream().empty()) {
      Raise(absl::UnimplementedError("a Python worker trains data.train_files; data.train_stream is kestrel_worker's"));
    }
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

}  // namespace

void BindWorker(py::module_& m) {
  py::class_<Worker>(m, "Worker")
      .def(py::init<const std::string&, std::string, int, const std::string&, const std::string&, const std::string&,
                    const std::string&, bool, const std::string&, const std::vector<std::string>&,
                    const std::vector<std::string>&, double, double, bool, const std::string&>(),
           py::arg("config"), py::arg("scheduler") = "", py::arg("rank") = -1, py::arg("job_id") = "kestrel",
           py::arg("tls_ca") = "", py::arg("tls_cert") = "", py::arg("tls_key") = "", py::arg("insecure") = false,
           py::arg("address") = "", py::arg("train_files") = std::vector<std::string>(),
           py::arg("test_files") = std::vector<std::string>(), py::arg("scheduler_timeout") = 60.0,
           py::arg("recovery_timeout") = 600.0, py::arg("row_cache") = true, py::arg("tls_crl") = "",
           "Joins a cluster job as a training worker (see kestrel.Worker's docs in kestrel/__init__.py).")
      .def_property_readonly("id", &Worker::id)
      .def_property_readonly("rank", &Worker::rank)
      .def_property_readonly("num_workers", &Worker::num_workers)
      .def_property_readonly("num_servers", &Worker::num_servers)
      .def_property_readonly("start_clock", &Worker::start_clock)
      .def_property_readonly("generation", &Worker::generation)
      .def_property_readonly("rollbacks", &Worker::rollbacks)
      .def_property_readonly("layout_generation", &Worker::layout_generation)
      .def_property_readonly("rolled_back", &Worker::rolled_back)
      .def_property_readonly("superseded", &Worker::superseded,
                             "True once the job rolled back or was rescaled since this pass began (recover next).")
      .def_property_readonly("consistency", &Worker::consistency)
      .def_property_readonly("staleness", &Worker::staleness)
      .def_property_readonly("total", &Worker::total)
      .def_property_readonly("config", &Worker::config)
      .def_property_readonly("client", &Worker::client)
      .def_property_readonly("fields", &Worker::fields)
      .def_property_readonly("field_tables", &Worker::field_tables)
      .def_property_readonly("dense_dim", &Worker::dense_dim)
      .def("worker_addresses", &Worker::WorkerAddresses)
      .def("next_batch", &Worker::NextBatch)
      .def("wait_to_start", &Worker::WaitToStart, py::arg("clock"))
      .def("advance", &Worker::Advance, py::arg("finished"))
      .def("wait_all_finished", &Worker::WaitAllFinished)
      .def("recover", &Worker::Recover, py::arg("message"))
      .def("request_rollback", &Worker::RequestRollback, py::arg("reason"))
      .def("leave", &Worker::Leave);
}

}  // namespace kestrel
