// A whole job on loopback for cross-process tests: a real kestrel_scheduler, kestrel_server and kestrel_worker
// processes training LR in BSP over mutual TLS (each process with the certificate of its role and rank,
// tests/test_cluster_tls.h), and what it leaves when it finishes: worker 0's last evaluation and the servers'
// full-table fingerprints (read as an admin). Used by tests/recovery_test.cc and tests/rescale_test.cc.
//
// Not thread-safe; one owner per ClusterJob.
#ifndef KESTREL_TESTS_CLUSTER_JOB_H_
#define KESTREL_TESTS_CLUSTER_JOB_H_

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/partition.h"
#include "grpcpp/grpcpp.h"
#include "proto/ps.grpc.pb.h"
#include "proto/scheduler.grpc.pb.h"
#include "tests/records.h"
#include "tests/server_process.h"
#include "tests/test_cluster_tls.h"
#include "worker/data/datagen.h"
#include "gtest/gtest.h"

namespace kestrel {

// The job id every ClusterJob runs as.
inline constexpr char kJob[] = "rec";

// TEST_TMPDIR, else /tmp.
inline std::string TmpDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

// The last `n` lines of the log at `path`, each on its own indented line.
inline std::string LogTail(const std::string& path, size_t n) {
  std::ifstream log(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(log, line);) lines.push_back(line);
  std::string tail;
  for (size_t i = lines.size() > n ? lines.size() - n : 0; i < lines.size(); ++i) absl::StrAppend(&tail, "\n  ", lines[i]);
  return tail;
}

// What a finished job leaves: worker 0's last evaluation and the servers' full-table fingerprints.
struct Outcome {
  std::string eval_fingerprint;
  double logloss = 0;
  double auc = 0;
  std::map<std::string, uint64_t> tables;  // name -> sum over servers of the rows' fingerprints
  std::string describe;
  DescribeResponse scheduler;  // the scheduler's records at the end (rollbacks, failovers)
  int servers = 0;             // the job's server count at the end
};

// One job: its processes and how to (re)start each.
class ClusterJob {
 public:
  // `bounded`: the model's sparse table admits keys on their second push, expires rows after 40 clocks and
  // keeps about 1000 rows per server (server/bounded_policy.h), so admission, expiry and eviction all happen.
  // `replicas`: copies of every key range (docs/replication.md); 1 = none.
  // `epochs`: passes over the training data (the reference job's: 2).
  // `servers` and `workers`: the counts the job starts with (a rescale may change them).
  // `model`: the job's model block ("model { ... }") instead of the logistic regression (then `bounded` is ignored).
  ClusterJob(std::string dir, std::string data, bool bounded = false, int replicas = 1, int epochs = 2,
             int servers = 2, int workers = 2, const std::string& model = "")
      : dir_(std::move(dir)),
        data_(std::move(data)),
        replicas_(replicas),
        num_servers_(servers),
        num_workers_(workers),
        servers_(kMaxRanks),
        workers_(kMaxRanks) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    config_ = dir_ + "/job.pbtxt";
    std::ofstream(config_) << (!model.empty() ? model
                               : bounded ? "model { type: LOGISTIC_REGRESSION sparse_capacity { admit_after: 2 "
                                           "ttl_clocks: 40 max_memory_bytes: 65536 } }"
                                         : "model { type: LOGISTIC_REGRESSION }")
                           << "\n"
                           << "data { format: CRITEO train_files: '" << data_ << "/train.tsv' test_files: '" << data_
                           << "/test.tsv' }\n"
                           << "train { batch_size: 128 epochs: " << epochs << " log_every_steps: 100 }\n";
  }

  std::string checkpoints() const { return dir_ + "/ckpt"; }

  // Starts (or restarts) the scheduler; `fault` sets KESTREL_FAULT_POINT. `servers` and `workers` (> 0) are the
  // counts it is launched with instead of the job's (a launcher that restarts it with the counts it started with).
  [[nodiscard]] absl::Status StartScheduler(bool resume, const std::string& fault = "", int port = 0, int servers = 0,
                              int workers = 0) {
    std::vector<std::string> args = {"--job_id=rec", absl::StrCat("--num_servers=", servers > 0 ? servers : num_servers_),
                                     absl::StrCat("--num_workers=", workers > 0 ? workers : num_workers_),
                                     "--consistency=" + consistency_,
                                     "--heartbeat_interval=300ms", "--checkpoint_dir=" + checkpoints(),
                                     "--checkpoint_every_clocks=50", "--keep_checkpoints=2",
                                     absl::StrCat("--replicas=", replicas_)};
    if (resume) args.push_back("--resume");
    if (staleness_ > 0) args.push_back(absl::StrCat("--staleness=", staleness_));
    if (lease_clocks_ >= 0) args.push_back(absl::StrCat("--lease_clocks=", lease_clocks_));
    if (elastic_timeout_ > absl::ZeroDuration()) {
      args.push_back("--elastic");
      args.push_back("--elastic_timeout=" + absl::FormatDuration(elastic_timeout_));
    }
    if (port != 0) args.push_back(absl::StrCat("--port=", port));  // after the default --port=0: it wins
    auto p = StartWithFault(fault, "scheduler/kestrel_scheduler", args, "scheduler", 0, dir_,
                            absl::StrCat("scheduler", ++starts_));
    if (!p.ok()) return p.status();
    scheduler_.emplace(std::move(p).value());
    return absl::OkStatus();
  }

  // `num_servers`: the server count it is launched for (default: the job's at the start; a rescale's new
  // servers are launched for the count they join).
  [[nodiscard]] absl::Status StartServer(int s, const std::string& fault = "", int num_servers = 0) {
    std::vector<std::string> args = {"--job_id=rec", absl::StrCat("--num_servers=", num_servers > 0 ? num_servers : num_servers_),
                                     absl::StrCat("--rank=", s), absl::StrCat("--bsp_workers=", consistency_ == "bsp" ? num_workers_ : 0),
                                     "--scheduler=" + scheduler_->address(), "--checkpoint_dir=" + checkpoints(),
                                     absl::StrCat("--replicas=", replicas_)};
    auto p = StartWithFault(fault, "server/kestrel_server", args, "server", s, dir_,
                            absl::StrCat("server", s, "_", ++starts_));
    if (!p.ok()) return p.status();
    servers_[s].emplace(std::move(p).value());
    return absl::OkStatus();
  }

  // `fault` sets KESTREL_FAULT_POINT (common/fault_injection.h), e.g. "worker.push.before@40".
  [[nodiscard]] absl::Status StartWorker(int w, const std::string& fault = "") {
    absl::StatusOr<std::vector<std::string>> args = TestClusterTls::Get().WithFlags(
        {"--job_id=rec", "--config=" + config_, "--scheduler=" + scheduler_->address(), absl::StrCat("--rank=", w),
         "--device=cpu", "--metrics_out=" + dir_ + "/metrics.jsonl",
         line_logs_ ? LineLog(w) : "--line_log="},
        kJob, "worker", w);
    if (!args.ok()) return args.status();
    if (!fault.empty()) setenv("KESTREL_FAULT_POINT", fault.c_str(), 1);
    auto p = ServerProcess::Spawn(RunfilePath("cmd/kestrel_worker"), *args, dir_,
                                  absl::StrCat("worker", w, "_", ++starts_));
    unsetenv("KESTREL_FAULT_POINT");
    if (!p.ok()) return p.status();
    workers_[w].emplace(std::move(p).value());
    return absl::OkStatus();
  }

  [[nodiscard]] absl::Status StartAll(bool resume, const std::string& scheduler_fault = "", const std::string& server_fault = "") {
    if (absl::Status s = StartScheduler(resume, scheduler_fault); !s.ok()) return s;
    for (int s = 0; s < num_servers_; ++s) {
      if (absl::Status st = StartServer(s, s == 1 ? server_fault : ""); !st.ok()) return st;
    }
    for (int w = 0; w < num_workers_; ++w) {
      if (absl::Status st = StartWorker(w); !st.ok()) return st;
    }
    return absl::OkStatus();
  }

  void Kill(std::optional<ServerProcess>& p) {
    if (p.has_value()) (void)p->Stop(SIGKILL);
    p.reset();
  }
  void KillAll() {
    for (auto& w : workers_) Kill(w);
    for (auto& s : servers_) Kill(s);
    Kill(scheduler_);
  }

  std::optional<ServerProcess>& server(int s) { return servers_[s]; }
  std::optional<ServerProcess>& worker(int w) { return workers_[w]; }
  const std::string& dir() const { return dir_; }
  // Workers started from now on write their line logs (--line_log) to LineLogPath(rank).
  void EnableLineLogs() { line_logs_ = true; }
  std::string LineLogPath(int w) const { return absl::StrCat(dir_, "/lines", w, ".txt"); }
  // A rescale moved the job to `servers` and `workers` (the ranks Finish and Supervise look at).
  void Rescaled(int servers, int workers) {
    num_servers_ = servers;
    num_workers_ = workers;
    worker_ids_.clear();
  }
  // An elastic job removed members: the ids (--rank) of the workers left (Finish waits for them).
  void WorkersLeft(std::vector<int> ids) {
    num_workers_ = static_cast<int>(ids.size());
    worker_ids_ = std::move(ids);
  }
  // The scheduler runs with --elastic: a member dead for `timeout` is removed (docs/elasticity.md).
  void EnableElastic(absl::Duration timeout) { elastic_timeout_ = timeout; }
  // Server-enforced clocks: the scheduler grants leases of `clocks` iterations (--lease_clocks; 0: the scheduler
  // is every iteration's barrier, the fallback protocol). Default: the scheduler's default (leases).
  void SetLeaseClocks(int clocks) { lease_clocks_ = clocks; }
  // The job's consistency ("bsp", "ssp" with `staleness`, "asp"). Default: BSP.
  void SetConsistency(const std::string& mode, int staleness = 0) {
    consistency_ = mode;
    staleness_ = staleness;
  }
  std::optional<ServerProcess>& scheduler() { return scheduler_; }

  // Restarts every server and worker that exits with code 3 (refused by the scheduler), as a supervisor
  // (kestrel local, Kubernetes) would, until both workers have exited 0.
  [[nodiscard]] absl::Status Supervise(absl::Duration timeout = absl::Minutes(3)) {
    const absl::Time deadline = absl::Now() + timeout;
    int done = 0;
    std::vector<bool> finished(num_workers_, false);
    while (done < num_workers_) {
      if (absl::Now() > deadline) return absl::DeadlineExceededError("the job did not finish under supervision");
      for (int s = 0; s < num_servers_; ++s) {
        absl::StatusOr<int> code = servers_[s]->Wait(absl::ZeroDuration());
        if (!code.ok()) continue;
        if (*code != 3) return absl::InternalError(absl::StrCat("server ", s, " exited with ", *code));
        if (absl::Status st = StartServer(s); !st.ok()) return st;
      }
      for (int w = 0; w < num_workers_; ++w) {
        if (finished[w]) continue;
        absl::StatusOr<int> code = workers_[w]->Wait(absl::ZeroDuration());
        if (!code.ok()) continue;
        if (*code == 0) {
          finished[w] = true;
          ++done;
          continue;
        }
        if (*code != 3) return absl::InternalError(absl::StrCat("worker ", w, " exited with ", *code, "; see ",
                                                                workers_[w]->log_path()));
        if (absl::Status st = StartWorker(w); !st.ok()) return st;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    workers_finished_ = true;
    return absl::OkStatus();
  }

  // Waits for every worker to exit 0, then reads the outcome from worker 0's records and the servers of the
  // job's layout at the end.
  [[nodiscard]] absl::StatusOr<Outcome> Finish(absl::Duration timeout = absl::Minutes(3)) {
    std::vector<int> ids = worker_ids_;
    for (int w = 0; ids.empty() && w < num_workers_; ++w) ids.push_back(w);
    for (int w : ids) {
      if (workers_finished_) break;
      absl::StatusOr<int> code = workers_[w]->Wait(timeout);
      if (!code.ok() || *code != 0) {
        std::string scheduler = "no scheduler";
        if (scheduler_.has_value()) {
          absl::StatusOr<int> exited = scheduler_->Wait(absl::ZeroDuration());
          scheduler = absl::StrCat("the scheduler ", exited.ok() ? absl::StrCat("exited with ", *exited) : "runs",
                                   "; its last lines:", LogTail(scheduler_->log_path(), 12));
        }
        return absl::InternalError(absl::StrCat("worker ", w, " ended with ",
                                                code.ok() ? absl::StrCat("exit code ", *code) : code.status().ToString(),
                                                "; see ", workers_[w]->log_path(), "; its last lines:",
                                                LogTail(workers_[w]->log_path(), 8), "\n", scheduler));
      }
    }
    Outcome out;
    absl::StatusOr<Record> eval = LastRecord(dir_ + "/metrics.jsonl", "eval");
    if (!eval.ok()) return eval.status();
    out.eval_fingerprint = eval->fingerprint();
    out.logloss = eval->logloss();
    out.auc = eval->auc();
    // Full-table fingerprints read every row: an admin's request.
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> admin =
        TestClusterTls::Get().Credentials(kJob, "admin", 0);
    if (!admin.ok()) return admin.status();
    {  // The scheduler's records, and who serves each range group now.
      auto stub = Scheduler::NewStub(grpc::CreateChannel(scheduler_->address(), *admin));
      DescribeRequest request;
      request.set_job_id(kJob);
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      grpc::Status status = stub->Describe(&context, request, &out.scheduler);
      if (!status.ok()) return absl::UnavailableError(status.error_message());
    }
    absl::StatusOr<Partition> partition = Partition::Parse(out.scheduler.view().partition());
    if (!partition.ok()) return partition.status();
    const int servers = partition->num_servers();
    std::vector<bool> out_of_service(servers, false);
    for (int s : out.scheduler.view().out_of_service()) out_of_service[s] = true;
    absl::StatusOr<Routing> routing = Routing::Create(*partition, out_of_service);
    if (!routing.ok()) return routing.status();
    out.servers = servers;
    for (int owner = 0; owner < servers; ++owner) {  // each range group from its primary
      const int s = routing->PrimaryOfOwner(owner);
      if (s < 0) return absl::DataLossError(absl::StrCat("no copy of server ", owner, "'s ranges is in service"));
      // Rank s's process: its id (--rank) differs once an elastic removal renumbered the ranks.
      const int id = s < out.scheduler.view().server_ids_size() ? out.scheduler.view().server_ids(s) : s;
      auto stub = ParameterServer::NewStub(grpc::CreateChannel(servers_[id]->address(), *admin));
      StatsRequest request;
      request.mutable_header()->set_job_id("rec");
      request.mutable_header()->set_worker_rank(-1);
      if (replicas_ > 1) request.mutable_header()->set_owner(owner);
      request.set_fingerprints(true);
      StatsResponse response;
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      grpc::Status status = stub->Stats(&context, request, &response);
      if (!status.ok()) return absl::UnavailableError(status.error_message());
      for (const TableDescription& t : response.tables()) out.tables[t.config().name()] += t.fingerprint();
    }
    return out;
  }

  // The scheduler's Describe (as an admin), or an error.
  [[nodiscard]] absl::StatusOr<DescribeResponse> DescribeJob() {
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> admin =
        TestClusterTls::Get().Credentials(kJob, "admin", 0);
    if (!admin.ok()) return admin.status();
    auto stub = Scheduler::NewStub(grpc::CreateChannel(scheduler_->address(), *admin));
    DescribeRequest request;
    request.set_job_id(kJob);
    DescribeResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Status status = stub->Describe(&context, request, &response);
    if (!status.ok()) return absl::UnavailableError(status.error_message());
    return response;
  }

  // Waits until every worker has finished at least `clock` iterations.
  [[nodiscard]] absl::Status WaitForClock(int64_t clock, absl::Duration timeout = absl::Minutes(2)) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      absl::StatusOr<DescribeResponse> d = DescribeJob();
      if (d.ok() && d->min_clock() >= clock) return absl::OkStatus();
      absl::SleepFor(absl::Milliseconds(5));
    }
    return absl::DeadlineExceededError(absl::StrCat("the job did not reach clock ", clock));
  }

  // The clock of the newest committed checkpoint, or -1.
  int64_t LatestCheckpointClock() const {
    std::ifstream latest(checkpoints() + "/LATEST");
    std::string name;
    if (!std::getline(latest, name)) return -1;
    std::ifstream manifest(checkpoints() + "/" + name + "/MANIFEST");
    std::string line;
    while (std::getline(manifest, line)) {
      if (line.rfind("clock: ", 0) == 0) {
        int64_t clock = -1;
        if (absl::SimpleAtoi(line.substr(7), &clock)) return clock;
      }
    }
    return -1;
  }

 private:
  std::string LineLog(int w) const { return "--line_log=" + LineLogPath(w); }

  // Starts a process with KESTREL_FAULT_POINT=`fault` in its environment (inherited at fork) and the
  // certificate of `role` and `rank`.
  [[nodiscard]] static absl::StatusOr<ServerProcess> StartWithFault(const std::string& fault, const std::string& binary,
                                                      std::vector<std::string> args, const std::string& role,
                                                      int rank, const std::string& dir, const std::string& name) {
    absl::StatusOr<std::vector<std::string>> with_tls =
        TestClusterTls::Get().WithFlags(std::move(args), kJob, role, rank);
    if (!with_tls.ok()) return with_tls.status();
    if (!fault.empty()) setenv("KESTREL_FAULT_POINT", fault.c_str(), 1);
    auto p = ServerProcess::Start(RunfilePath(binary), *with_tls, dir, name);
    unsetenv("KESTREL_FAULT_POINT");
    return p;
  }

  static constexpr int kMaxRanks = 8;
  const std::string dir_;
  const std::string data_;
  const int replicas_;
  int num_servers_;
  int num_workers_;
  std::string config_;
  int starts_ = 0;
  bool line_logs_ = false;
  bool workers_finished_ = false;  // Supervise() saw both exit 0
  absl::Duration elastic_timeout_ = absl::ZeroDuration();
  int lease_clocks_ = -1;  // -1: the scheduler's default
  std::string consistency_ = "bsp";
  int staleness_ = 0;
  std::vector<int> worker_ids_;  // WorkersLeft(); empty: 0 .. num_workers_ - 1
  std::optional<ServerProcess> scheduler_;
  std::vector<std::optional<ServerProcess>> servers_;  // by rank, up to kMaxRanks
  std::vector<std::optional<ServerProcess>> workers_;
};

// Every line log of a finished job: per epoch, the training lines read (each at most once is checked here).
struct LineAudit {
  std::map<int64_t, std::set<uint64_t>> by_epoch;
  std::vector<int64_t> clocks;  // by worker (in the order of the ids asked for): the iterations it trained
  std::string problem;  // the first line read twice in an epoch, or a clock trained twice by a rank
};

// The line logs (--line_log) of the workers with ids `ids`.
inline LineAudit Audit(const ClusterJob& job, const std::vector<int>& ids) {
  LineAudit audit;
  for (int w : ids) {
    std::ifstream in(job.LineLogPath(w));
    int64_t last_clock = -1;
    audit.clocks.push_back(0);
    for (std::string text; std::getline(in, text);) {
      ++audit.clocks.back();
      std::istringstream fields(text);
      int64_t clock = 0, epoch = 0;
      fields >> clock >> epoch;
      if (clock <= last_clock && audit.problem.empty()) {
        audit.problem = absl::StrCat("worker ", w, " trained clock ", clock, " after clock ", last_clock);
      }
      last_clock = clock;
      for (uint64_t line; fields >> line;) {
        if (!audit.by_epoch[epoch].insert(line).second && audit.problem.empty()) {
          audit.problem = absl::StrCat("line ", line, " was read twice in epoch ", epoch, " (worker ", w, ")");
        }
      }
    }
  }
  return audit;
}

// The reference a test suite compares with: a job of `servers` x `workers` in `dir`, run to its end unscaled.
[[nodiscard]] inline absl::StatusOr<Outcome> RunReference(const std::string& dir, const std::string& data, int epochs,
                                            int servers = 2, int workers = 2) {
  ClusterJob job(dir, data, /*bounded=*/false, /*replicas=*/1, epochs, servers, workers);
  if (absl::Status started = job.StartAll(/*resume=*/false); !started.ok()) return started;
  absl::StatusOr<Outcome> outcome = job.Finish();
  job.KillAll();
  if (outcome.ok() && outcome->tables.empty()) return absl::InternalError("the reference job wrote no table");
  return outcome;
}

inline bool Equal(const Outcome& a, const Outcome& b) {
  return a.eval_fingerprint == b.eval_fingerprint && a.logloss == b.logloss && a.tables == b.tables;
}

inline std::string DescribeOutcome(const Outcome& o) {
  std::string s = absl::StrCat("predictions ", o.eval_fingerprint, " logloss ", absl::StrFormat("%.17g", o.logloss));
  for (const auto& [name, f] : o.tables) absl::StrAppend(&s, " ", name, "=", absl::Hex(f));
  return s;
}


// A test suite's shared setup: generated data under TmpDir()/<name>_data and the unscaled reference run of
// 2 servers x 2 workers for `epochs` epochs (its outcome and final clock). Wrap in ASSERT_NO_FATAL_FAILURE.
inline void SetUpDataAndReference(const std::string& name, int epochs, std::string** data, Outcome** reference,
                                  int64_t* final_clock) {
  *data = new std::string(TmpDir() + "/" + name + "_data");
  std::filesystem::create_directories(**data);
  ASSERT_TRUE(GenerateCriteoData(SmallDatagenOptions(), **data).ok());
  absl::StatusOr<Outcome> outcome = RunReference(TmpDir() + "/" + name + "_reference", **data, epochs);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  *reference = new Outcome(*outcome);
  *final_clock = outcome->scheduler.min_clock();
  std::printf("reference: %s, %lld clocks\n", DescribeOutcome(**reference).c_str(),
              static_cast<long long>(*final_clock));
}

}  // namespace kestrel

#endif  // KESTREL_TESTS_CLUSTER_JOB_H_
