// kestrel_worker: one training worker of a cluster, or a whole single-process training run (--local).
//
//   kestrel_worker --config=job.pbtxt --scheduler=host:7000 [--rank=N] [--device=auto|cpu|cuda|cuda:N]
//   kestrel_worker --config=job.pbtxt --local
//
// In a cluster it registers with kestrel_scheduler, learns the servers, the partition and the consistency mode
// from it, heartbeats, and trains its shard of the data (worker/trainer.h); worker 0 also evaluates and writes
// the evaluation records. Exit codes: 0 trained, 1 training failed, 2 bad flags or config, 3 the scheduler
// declared this worker dead or superseded.
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/process_setup.h"
#include "google/protobuf/text_format.h"
#include "scheduler/scheduler_client.h"
#include "worker/compute/backend_factory.h"
#include "worker/grpc_ps_client.h"
#include "worker/local_trainer.h"
#include "worker/scheduler_gate.h"
#include "worker/trainer.h"

ABSL_FLAG(absl::Duration, recovery_timeout, absl::Minutes(10),
          "How long a worker whose training stopped waits for the job to roll back and rejoins before giving up.");
ABSL_FLAG(std::string, config, "", "Job config (protobuf text format, proto/job.proto). Required.");
ABSL_FLAG(std::string, scheduler, "", "host:port of kestrel_scheduler (cluster mode).");
ABSL_FLAG(bool, local, false, "Train in this process on in-process tables instead of joining a cluster.");
ABSL_FLAG(int, local_shards, 1, "--local: in-process server shards.");
ABSL_FLAG(int, rank, -1, "Worker rank to take; -1: any free rank.");
ABSL_FLAG(std::string, job_id, "kestrel", "Job id every request carries.");
ABSL_FLAG(std::string, device, "auto", "Compute backend: auto (CUDA when a GPU is present), cpu, cuda, cuda:N.");
ABSL_FLAG(std::string, train_files, "", "Comma-separated training files (override data.train_files).");
ABSL_FLAG(std::string, test_files, "", "Comma-separated test files (override data.test_files).");
ABSL_FLAG(std::string, metrics_out, "", "Append JSON-lines training and evaluation records to this file.");
ABSL_FLAG(absl::Duration, scheduler_timeout, absl::Seconds(60),
          "How long to retry registering and to wait for every server to join.");

namespace kestrel {
namespace {

absl::StatusOr<JobConfig> LoadConfig() {
  const std::string path = absl::GetFlag(FLAGS_config);
  if (path.empty()) return absl::InvalidArgumentError("--config is required");
  std::ifstream in(path);
  if (!in.good()) return absl::NotFoundError(absl::StrCat("cannot read --config ", path));
  std::stringstream text;
  text << in.rdbuf();
  JobConfig job;
  if (!google::protobuf::TextFormat::ParseFromString(text.str(), &job)) {
    return absl::InvalidArgumentError(absl::StrCat("--config ", path, " is not a valid JobConfig (proto/job.proto)"));
  }
  if (!absl::GetFlag(FLAGS_train_files).empty()) {
    job.mutable_data()->clear_train_files();
    for (absl::string_view f : absl::StrSplit(absl::GetFlag(FLAGS_train_files), ',')) {
      job.mutable_data()->add_train_files(std::string(f));
    }
  }
  if (!absl::GetFlag(FLAGS_test_files).empty()) {
    job.mutable_data()->clear_test_files();
    for (absl::string_view f : absl::StrSplit(absl::GetFlag(FLAGS_test_files), ',')) {
      job.mutable_data()->add_test_files(std::string(f));
    }
  }
  return job;
}

void Report(const TrainResult& r) {
  KLOG(Info) << absl::StrFormat(
      "finished: %d iterations, %d examples in %.2f s (%.0f examples/s); test logloss %.5f AUC %.5f "
      "(fingerprint %016x)",
      r.steps, r.examples, r.seconds, r.examples_per_second, r.eval.logloss, r.eval.auc, r.eval.fingerprint);
}

int RunCluster(const JobConfig& job, Backend* backend) {
  SchedulerClientOptions scheduler_options;
  scheduler_options.job_id = absl::GetFlag(FLAGS_job_id);
  std::unique_ptr<SchedulerClient> scheduler =
      NewGrpcSchedulerClient(absl::GetFlag(FLAGS_scheduler), scheduler_options);
  const absl::Time deadline = absl::Now() + absl::GetFlag(FLAGS_scheduler_timeout);
  absl::StatusOr<RegisterResponse> reg;
  do {
    reg = scheduler->Register(ROLE_WORKER, "", absl::GetFlag(FLAGS_rank));
    // UNAVAILABLE: the scheduler is not up yet; ALREADY_EXISTS: our crashed predecessor is not declared dead yet.
    if (reg.ok() || !(absl::IsUnavailable(reg.status()) || absl::IsAlreadyExists(reg.status()))) break;
    absl::SleepFor(absl::Milliseconds(500));
  } while (absl::Now() < deadline);
  if (!reg.ok()) {
    KLOG(Error) << "cannot register with the scheduler at " << absl::GetFlag(FLAGS_scheduler) << ": " << reg.status();
    return 1;
  }
  const int rank = reg->rank();
  SetLogIdentity(absl::StrCat("worker[", rank, "]"));
  KLOG(Info) << "registered as worker " << rank << " (generation " << reg->view().generation() << ", " << reg->clock()
             << " iterations already done)";
  Heartbeater heartbeater(scheduler.get(), ROLE_WORKER, rank, reg->incarnation(),
                          absl::Milliseconds(reg->view().heartbeat_interval_ms()) / 2, [](absl::Status status) {
                            KLOG(Error) << "the scheduler refused this worker: " << status << "; exiting";
                            std::_Exit(3);
                          });
  // Wait until every server has joined.
  ClusterView view;
  while (true) {
    absl::StatusOr<DescribeResponse> d = scheduler->Describe();
    if (d.ok() && d->view().job_state() != "forming") {
      view = d->view();
      break;
    }
    if (absl::Now() > deadline) {
      KLOG(Error) << "the job did not form within --scheduler_timeout (" << (d.ok() ? d->view().job_state() : d.status().ToString()) << ")";
      return 1;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  absl::StatusOr<Partition> partition = Partition::Parse(view.partition());
  if (!partition.ok()) {
    KLOG(Error) << "the scheduler's partition is invalid: " << partition.status();
    return 1;
  }
  uint64_t generation = reg->view().generation();  // stamped on requests; a rejoin moves it
  uint64_t rollbacks = reg->rollbacks();
  int64_t clock = reg->clock();
  WorkerState state = reg->state();
  // Each pass trains from (clock, state); a rollback (a server died and every server restored the last
  // checkpoint) ends the pass with an error, and the worker rejoins and continues from the checkpoint.
  while (true) {
    PsClientOptions ps_options;
    ps_options.job_id = absl::GetFlag(FLAGS_job_id);
    ps_options.worker_rank = rank;
    ps_options.bsp_pushes = view.consistency() == "bsp";
    std::vector<std::string> servers(view.server_addresses().begin(), view.server_addresses().end());
    absl::StatusOr<std::unique_ptr<PsClient>> client = NewGrpcPsClient(ps_options, *partition, servers);
    if (!client.ok()) {
      KLOG(Error) << "cannot create the parameter-server client: " << client.status();
      return 1;
    }
    (*client)->SetGeneration(generation);
    std::unique_ptr<ClockGate> gate = NewSchedulerGate(scheduler.get(), rank, generation, rollbacks);

    TrainerOptions options;
    options.job = job;
    options.rank = rank;
    options.num_workers = view.num_workers();
    options.partition = *partition;
    options.start_clock = clock;
    options.start_state = state;
    options.prefetch_pulls = view.consistency() == "asp" || (view.consistency() == "ssp" && view.staleness() >= 1);
    options.evaluate = rank == 0;
    options.metrics_path = absl::GetFlag(FLAGS_metrics_out);
    KLOG(Info) << "training with " << view.num_servers() << " servers, " << view.num_workers() << " workers, "
               << view.consistency() << (view.consistency() == "ssp" ? absl::StrCat("(", view.staleness(), ")") : "")
               << " from clock " << clock << " (generation " << generation << ")";
    absl::StatusOr<TrainResult> result;
    {
      Trainer trainer(options, client->get(), gate.get(), backend);
      result = trainer.Run();
    }
    if (result.ok()) {
      Report(*result);
      return 0;
    }
    // Did the job roll back? Ask until it has (the scheduler may not have noticed the dead server yet), it is
    // clear it has not (the job runs on without a rollback: the error was this worker's own), or time runs out.
    KLOG(Warning) << "training stopped: " << result.status() << "; asking the scheduler whether the job rolls back";
    const absl::Time give_up = absl::Now() + absl::GetFlag(FLAGS_recovery_timeout);
    const absl::Time grace = absl::Now() + absl::Milliseconds(3 * view.heartbeat_interval_ms());
    absl::StatusOr<RegisterResponse> rejoined;
    while (true) {
      rejoined = scheduler->Rejoin(rank, reg->incarnation());
      if (rejoined.ok() && rejoined->rollbacks() > rollbacks) break;
      if (absl::IsFailedPrecondition(rejoined.status())) {
        KLOG(Error) << "the scheduler refused this worker: " << rejoined.status();
        return 3;
      }
      const bool running = rejoined.ok() && rejoined->view().job_state() == "running";
      if ((running && absl::Now() > grace) || absl::Now() > give_up) {
        KLOG(Error) << "training failed: " << result.status();
        return 1;
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    rollbacks = rejoined->rollbacks();
    view = rejoined->view();
    generation = view.generation();
    clock = rejoined->clock();
    state = rejoined->state();
    KLOG(Info) << "the job rolled back to clock " << clock << "; continuing from there (generation " << generation
               << ")";
  }
}

int Run() {
  SetLogIdentity("worker");
  absl::StatusOr<JobConfig> job = LoadConfig();
  if (!job.ok()) {
    KLOG(Error) << job.status();
    return 2;
  }
  absl::StatusOr<std::unique_ptr<Backend>> backend = NewBackend(absl::GetFlag(FLAGS_device));
  if (!backend.ok()) {
    KLOG(Error) << backend.status();
    return 2;
  }
  KLOG(Info) << "compute backend: " << (*backend)->name();
  if (absl::GetFlag(FLAGS_local)) {
    LocalTrainingOptions options;
    options.num_shards = absl::GetFlag(FLAGS_local_shards);
    options.metrics_path = absl::GetFlag(FLAGS_metrics_out);
    absl::StatusOr<TrainResult> result = TrainInProcess(*job, backend->get(), options);
    if (!result.ok()) {
      KLOG(Error) << "training failed: " << result.status();
      return 1;
    }
    Report(*result);
    return 0;
  }
  if (absl::GetFlag(FLAGS_scheduler).empty()) {
    KLOG(Error) << "give --scheduler=host:port (or --local)";
    return 2;
  }
  return RunCluster(*job, backend->get());
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Kestrel training worker: trains a sparse recommendation model.");
  absl::ParseCommandLine(argc, argv);
  return kestrel::Run();
}
