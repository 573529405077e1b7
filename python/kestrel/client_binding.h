// kestrel.Client: the C++ parameter-server client (worker/ps_client.h) as Python calls it — over in-process
// servers it owns, a running job's servers, or a kestrel.Worker's current pass. A Client is thread-safe as
// PsClient is; calls release the GIL.
#ifndef KESTREL_PYTHON_KESTREL_CLIENT_BINDING_H_
#define KESTREL_PYTHON_KESTREL_CLIENT_BINDING_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/shard.h"
#include "worker/ps_client.h"
#include "worker/worker_session.h"

namespace kestrel {
namespace py = pybind11;

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
  // A client over `servers` in-process servers it owns (tests and notebooks).
  static std::unique_ptr<Client> InProcess(int servers, const std::string& job_id);
  // The client of `worker`'s passes, each call through the current one's.
  static std::unique_ptr<Client> OfWorker(std::shared_ptr<WorkerCore> worker);
  // A client over an export (export/load_export.h) loaded into one in-process server: its tables answer reads
  // (scoring); create_table of a table the export has, with its dim, is accepted and changes nothing.
  static std::unique_ptr<Client> FromExport(const std::string& dir);
  // A client of a running job's servers (addresses in rank order), over mutual TLS when the files are given.
  static std::unique_ptr<Client> Connect(const std::vector<std::string>& addresses, const std::string& job_id,
                                         const std::string& tls_ca, const std::string& tls_cert,
                                         const std::string& tls_key, int rank,
                                         const std::string& tls_crl);

  void CreateTable(const std::string& text);
  py::array_t<float> Pull(const std::string& table, const py::array& keys, int dim, int64_t clock);
  void Push(const std::string& table, const py::array& keys, const py::array& grads, int64_t clock);
  py::array_t<float> PullDense(const std::string& table, int64_t size, int64_t clock);
  void PushDense(const std::string& table, const py::array& grads, int64_t clock);
  // One training step's pushes at `clock`: `sparse` (table, keys, grads [len(keys), dim]) and `dense` (table,
  // grads) tuples, sent as one request per server (PsClient::Step). Every gradient is checked before anything
  // is sent: a refused step leaves every table as it was.
  void Step(const std::vector<py::tuple>& sparse, const std::vector<py::tuple>& dense, int64_t clock);
  // In-process clients: every table's state at `clock` exported to `dir` (export/export.h ExportServers) for
  // the job `config` (text format). FailedPrecondition for a client of remote servers (export their
  // checkpoint with kestrel_export).
  void Export(const std::string& dir, const std::string& config, int64_t clock);
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
  bool serving_ = false;                          // FromExport's: tables exist already
  std::unique_ptr<PsClient> client_;
  std::shared_ptr<WorkerCore> worker_;  // set instead of client_ for a worker's client
};

// Defines kestrel.Client in module `m`.
void BindClient(py::module_& m);

}  // namespace kestrel

#endif  // KESTREL_PYTHON_KESTREL_CLIENT_BINDING_H_
