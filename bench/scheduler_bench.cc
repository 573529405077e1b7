// scheduler_bench: how far one kestrel_scheduler goes. It starts the real scheduler binary (BSP) and drives it
// with simulated members from this process: S servers and W workers register, every member heartbeats, and
// every worker loops WaitToStart(c) -> Advance(c + 1) as fast as the scheduler lets it (no training, no
// parameter-server traffic), so the figures are the scheduler's own: BSP clocks per second (every worker
// through one barrier) and the latency of each RPC, against the member count.
//
// The members use gRPC's callback API on a few channels: one process simulates thousands without a thread
// each. They share the machine with the scheduler, so on a small machine the figures are a lower bound.
//
// With --lease_clocks (server-enforced clocks, docs/protocol.md) the scheduler grants leases: a worker asks
// WaitToStart(c), is permitted through the lease's end p, and reports Advance(p + 1) at once (the servers would
// enforce the consistency meanwhile) with renew, as workers do: each answer grants the next lease unless a hold
// is set, so a lease of worker steps costs one scheduler call.
//
//   bench/run_scheduler_bench.sh [--members=4x16,32x128,128x512,256x2048] [--seconds=5] [--lease_clocks=0,16]
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "bench/bench_util.h"
#include "common/status.h"
#include "grpcpp/grpcpp.h"
#include "proto/scheduler.grpc.pb.h"
#include "tests/server_process.h"

ABSL_FLAG(std::string, members, "4x16,32x128,128x512,256x2048",
          "Comma list of SERVERSxWORKERS job shapes to simulate, one scheduler each.");
ABSL_FLAG(std::string, lease_clocks, "0",
          "Comma list of the scheduler's --lease_clocks to measure every shape with (0: every iteration's barrier).");
ABSL_FLAG(double, seconds, 5, "Measured seconds per shape (after 1 s of warm-up).");
ABSL_FLAG(std::string, heartbeat_interval, "1s", "The scheduler's --heartbeat_interval.");
ABSL_FLAG(std::string, output, "bench/results/scheduler_bench.md", "Markdown report path ('' to skip).");
ABSL_FLAG(std::string, scheduler_binary, "", "kestrel_scheduler (default: found in the runfiles or bazel-bin).");
ABSL_FLAG(std::string, git_commit, "", "Commit being measured (default: git rev-parse --short HEAD).");
ABSL_FLAG(std::string, invocation, "", "The command that reproduces this run.");

namespace kestrel {
namespace {

constexpr int kMembersPerChannel = 100;  // the scheduler allows 256 concurrent calls per connection
constexpr char kJob[] = "simbench";

// Latency samples of one RPC, in milliseconds. Thread-safe.
class Latencies {
 public:
  void Add(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    ms_.push_back(absl::ToDoubleMilliseconds(d));
  }
  double Percentile(double q) {
    absl::MutexLock lock(&mu_);
    if (ms_.empty()) return 0;
    std::sort(ms_.begin(), ms_.end());
    return ms_[std::min(ms_.size() - 1, static_cast<size_t>(q * static_cast<double>(ms_.size())))];
  }
  size_t count() {
    absl::MutexLock lock(&mu_);
    return ms_.size();
  }

 private:
  absl::Mutex mu_;
  std::vector<double> ms_ ABSL_GUARDED_BY(mu_);
};

struct Shape {
  int servers = 0, workers = 0;
};

struct Result {
  Shape shape;
  int lease = 0;
  double clocks_per_s = 0;
  double advance_p50 = 0, advance_p99 = 0, wait_p99 = 0, heartbeat_p50 = 0, heartbeat_p99 = 0;
  int64_t clocks = 0;
  uint64_t declared_dead = 0;  // members the scheduler lost (heartbeats that could not keep up)
};

// One simulated job against one scheduler.
class Simulation {
 public:
  Simulation(const std::string& address, Shape shape) : shape_(shape) {
    const int members = shape.servers + shape.workers;
    for (int c = 0; c * kMembersPerChannel < members; ++c) {
      grpc::ChannelArguments args;
      args.SetInt("kestrel.channel", c);  // one connection each
      stubs_.push_back(Scheduler::NewStub(grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args)));
    }
  }

  absl::Status Register() {
    for (int s = 0; s < shape_.servers; ++s) {
      KESTREL_ASSIGN_OR_RETURN(RegisterResponse r, RegisterOne(ROLE_SERVER, s));
      members_.push_back({ROLE_SERVER, s, r.incarnation(), r.generation(), 0});
    }
    for (int w = 0; w < shape_.workers; ++w) {
      KESTREL_ASSIGN_OR_RETURN(RegisterResponse r, RegisterOne(ROLE_WORKER, w));
      members_.push_back({ROLE_WORKER, w, r.incarnation(), r.generation(), 0});
    }
    return absl::OkStatus();
  }

  // Heartbeats every member every `interval` (asynchronously) until Stop().
  void StartHeartbeats(absl::Duration interval) {
    heartbeats_ = std::thread([this, interval] {
      while (!stop_.WaitForNotificationWithTimeout(interval)) {
        for (size_t i = 0; i < members_.size(); ++i) {
          const Member& m = members_[i];
          auto call = std::make_shared<Call<HeartbeatRequest, HeartbeatResponse>>();
          call->request.set_job_id(kJob);
          call->request.set_role(m.role);
          call->request.set_id(m.rank);  // ids equal ranks: nothing is renumbered here
          call->request.set_incarnation(m.incarnation);
          Start(i, call, [](auto* stub, auto* c, auto* q, auto* r, auto cb) { stub->Heartbeat(c, q, r, std::move(cb)); },
                &heartbeat_);
        }
      }
    });
  }

  // Every worker loops WaitToStart -> Advance until Stop().
  void StartWorkers() {
    for (size_t i = 0; i < members_.size(); ++i) {
      if (members_[i].role == ROLE_WORKER) Wait(i);
    }
  }

  int64_t MinClock() {
    int64_t min = INT64_MAX;
    for (const Member& m : members_) {
      if (m.role == ROLE_WORKER) min = std::min(min, m.clock.load());
    }
    return min;
  }

  void Stop() {
    stop_.Notify();
    if (heartbeats_.joinable()) heartbeats_.join();
  }
  // After the scheduler is gone: every call has finished.
  void Drain() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(+[](int* n) { return *n == 0; }, &in_flight_));
  }

  Latencies advance_, wait_, heartbeat_;
  std::atomic<uint64_t> failures_{0};

 private:
  struct Member {
    MemberRole role;
    int rank;
    std::string incarnation;
    uint64_t generation;
    std::atomic<int64_t> clock;
    Member(MemberRole role, int rank, std::string incarnation, uint64_t generation, int64_t clock)
        : role(role), rank(rank), incarnation(std::move(incarnation)), generation(generation), clock(clock) {}
    Member(Member&& o) noexcept
        : role(o.role), rank(o.rank), incarnation(std::move(o.incarnation)), generation(o.generation),
          clock(o.clock.load()) {}
  };
  template <typename Req, typename Resp>
  struct Call {
    grpc::ClientContext context;
    Req request;
    Resp response;
    absl::Time start;
  };

  absl::StatusOr<RegisterResponse> RegisterOne(MemberRole role, int rank) {
    RegisterRequest request;
    request.set_job_id(kJob);
    request.set_role(role);
    request.set_requested_rank(rank);
    if (role == ROLE_SERVER) request.set_address(absl::StrCat("127.0.0.1:", 20000 + rank));
    RegisterResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::Status status = stubs_[0]->Register(&context, request, &response);
    if (!status.ok()) return absl::UnavailableError(status.error_message());
    return response;
  }

  Scheduler::Stub::async_interface* StubOf(size_t member) {
    return stubs_[member / kMembersPerChannel]->async();
  }

  // Starts the RPC `issue` makes (on the stub's callback API) for member `i`; `then` (optional) runs on success.
  template <typename Req, typename Resp, typename Issue>
  void Start(size_t i, std::shared_ptr<Call<Req, Resp>> call, Issue issue, Latencies* latencies,
             std::function<void()> then = nullptr) {
    {
      absl::MutexLock lock(&mu_);
      ++in_flight_;
    }
    call->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    call->start = absl::Now();
    issue(StubOf(i), &call->context, &call->request, &call->response,
          std::function<void(grpc::Status)>([this, call, latencies, then = std::move(then)](grpc::Status status) {
                           if (status.ok()) {
                             latencies->Add(absl::Now() - call->start);
                             if (then) then();
                           } else {
                             failures_.fetch_add(1);
                           }
                           absl::MutexLock lock(&mu_);
                           --in_flight_;
                         }));
  }

  void Wait(size_t i) {
    if (stop_.HasBeenNotified()) return;
    Member& m = members_[i];
    auto call = std::make_shared<Call<WaitToStartRequest, WaitToStartResponse>>();
    call->request.set_job_id(kJob);
    call->request.set_rank(m.rank);
    call->request.set_clock(m.clock.load());
    call->request.set_generation(m.generation);
    call->request.set_incarnation(m.incarnation);
    // Every permitted iteration is done at once: the report covers the lease (one iteration without leases).
    Start(i, call, [](auto* stub, auto* c, auto* q, auto* r, auto cb) { stub->WaitToStart(c, q, r, std::move(cb)); },
          &wait_, [this, i, call] {
            Advance(i, std::max(call->request.clock(), call->response.permitted_through()) + 1);
          });
  }

  void Advance(size_t i, int64_t finished) {
    Member& m = members_[i];
    auto call = std::make_shared<Call<AdvanceRequest, AdvanceResponse>>();
    call->request.set_job_id(kJob);
    call->request.set_rank(m.rank);
    call->request.set_finished(finished);
    call->request.set_generation(m.generation);
    call->request.set_incarnation(m.incarnation);
    call->request.set_renew(true);  // a lease's report asks for the next lease, as workers do (no leases: ignored)
    Start(i, call, [](auto* stub, auto* c, auto* q, auto* r, auto cb) { stub->Advance(c, q, r, std::move(cb)); },
          &advance_, [this, i, finished, call] {
      members_[i].clock.store(finished);
      if (call->response.has_permitted_through() && !stop_.HasBeenNotified()) {
        Advance(i, std::max(finished, call->response.permitted_through()) + 1);
      } else {
        Wait(i);
      }
    });
  }

  const Shape shape_;
  std::vector<std::unique_ptr<Scheduler::Stub>> stubs_;
  std::vector<Member> members_;
  std::thread heartbeats_;
  absl::Notification stop_;
  absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

absl::StatusOr<Result> RunShape(const std::string& binary, Shape shape, double seconds, int lease) {
  char dir_template[] = "/tmp/scheduler_bench.XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) return absl::InternalError("mkdtemp failed");
  KESTREL_ASSIGN_OR_RETURN(
      ServerProcess scheduler,
      ServerProcess::Start(binary,
                           {absl::StrCat("--job_id=", kJob), absl::StrCat("--num_servers=", shape.servers),
                            absl::StrCat("--num_workers=", shape.workers), "--consistency=bsp",
                            "--heartbeat_interval=" + absl::GetFlag(FLAGS_heartbeat_interval),
                            absl::StrCat("--lease_clocks=", lease)},
                           dir_template, "scheduler"));
  absl::Duration interval;
  if (!absl::ParseDuration(absl::GetFlag(FLAGS_heartbeat_interval), &interval)) {
    return absl::InvalidArgumentError("bad --heartbeat_interval");
  }
  Simulation sim(scheduler.address(), shape);
  sim.StartHeartbeats(interval / 3);
  KESTREL_RETURN_IF_ERROR(sim.Register());
  sim.StartWorkers();
  absl::SleepFor(absl::Seconds(1));
  const int64_t start_clock = sim.MinClock();
  const absl::Time start = absl::Now();
  absl::SleepFor(absl::Seconds(seconds));
  const int64_t end_clock = sim.MinClock();
  const absl::Duration elapsed = absl::Now() - start;
  sim.Stop();
  (void)scheduler.Stop(SIGTERM);  // fails the waits still pending
  sim.Drain();
  Result r;
  r.shape = shape;
  r.lease = lease;
  r.clocks = end_clock - start_clock;
  r.clocks_per_s = static_cast<double>(r.clocks) / absl::ToDoubleSeconds(elapsed);
  r.advance_p50 = sim.advance_.Percentile(0.5);
  r.advance_p99 = sim.advance_.Percentile(0.99);
  r.wait_p99 = sim.wait_.Percentile(0.99);
  r.heartbeat_p50 = sim.heartbeat_.Percentile(0.5);
  r.heartbeat_p99 = sim.heartbeat_.Percentile(0.99);
  {
    std::ifstream log(scheduler.log_path());
    for (std::string line; std::getline(log, line);) {
      if (line.find("declared dead") != std::string::npos) ++r.declared_dead;
    }
  }
  return r;
}

absl::Status Main(int argc, char** argv) {
  const std::string load_start = bench::LoadAverage();
  KESTREL_ASSIGN_OR_RETURN(std::string binary,
                           bench::FindBinary(absl::GetFlag(FLAGS_scheduler_binary), "scheduler/kestrel_scheduler",
                                             argv[0], "scheduler_binary"));
  const bench::Machine machine =
      bench::DescribeMachine(argc, argv, absl::GetFlag(FLAGS_git_commit), absl::GetFlag(FLAGS_invocation));
  std::vector<Result> results;
  for (absl::string_view item : absl::StrSplit(absl::GetFlag(FLAGS_members), ',', absl::SkipWhitespace())) {
    std::vector<std::string> parts = absl::StrSplit(item, 'x');
    Shape shape;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &shape.servers) ||
        !absl::SimpleAtoi(parts[1], &shape.workers) || shape.servers < 1 || shape.workers < 1) {
      return absl::InvalidArgumentError(absl::StrCat("--members: '", item, "' is not SERVERSxWORKERS"));
    }
    for (absl::string_view lease_text : absl::StrSplit(absl::GetFlag(FLAGS_lease_clocks), ',', absl::SkipEmpty())) {
      int lease = 0;
      if (!absl::SimpleAtoi(lease_text, &lease) || lease < 0) {
        return absl::InvalidArgumentError(absl::StrCat("--lease_clocks: '", lease_text, "'"));
      }
      KESTREL_ASSIGN_OR_RETURN(Result r, RunShape(binary, shape, absl::GetFlag(FLAGS_seconds), lease));
      std::printf(
          "lease %d, %d servers + %d workers: %.1f clocks/s; Advance p50 %.2f ms p99 %.2f ms; WaitToStart p99 %.2f "
          "ms; Heartbeat p50 %.2f ms p99 %.2f ms; %llu members declared dead\n",
          lease, shape.servers, shape.workers, r.clocks_per_s, r.advance_p50, r.advance_p99, r.wait_p99,
          r.heartbeat_p50, r.heartbeat_p99, static_cast<unsigned long long>(r.declared_dead));
      std::fflush(stdout);
      results.push_back(r);
    }
  }
  if (absl::GetFlag(FLAGS_output).empty()) return absl::OkStatus();
  std::string md = "# scheduler_bench: one kestrel_scheduler against the member count\n\n";
  absl::StrAppend(&md, bench::MachineMarkdown(machine, load_start), "\n\n", bench::CommandMarkdown(machine));
  absl::StrAppend(
      &md,
      "The real kestrel_scheduler (BSP), driven by simulated members in one process on the same machine: every "
      "member heartbeats 3 times per --heartbeat_interval (",
      absl::GetFlag(FLAGS_heartbeat_interval),
      "), every worker loops WaitToStart -> Advance with no work in between. A clock is one BSP barrier: every "
      "worker's Advance in, every worker's next WaitToStart answered. Measured for ",
      absl::GetFlag(FLAGS_seconds), " s after 1 s of warm-up. With a lease (`--lease_clocks` > 0: server-enforced "
      "clocks) a worker reports a whole lease at once, the report asking for the next lease (one call per lease; "
      "WaitToStart only when a report's answer grants none), so a clock here is the slowest "
      "worker's progress, and worker steps/s is what the scheduler would sustain if the servers enforced BSP.\n\n",
      "| lease | servers | workers | BSP clocks/s | worker steps/s | Advance p50 ms | Advance p99 ms | "
      "WaitToStart p99 ms | Heartbeat p50 ms | Heartbeat p99 ms | members declared dead |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Result& r : results) {
    absl::StrAppend(&md, absl::StrFormat("| %d | %d | %d | %.1f | %.0f | %.2f | %.2f | %.2f | %.2f | %.2f | %d |\n",
                                         r.lease, r.shape.servers, r.shape.workers, r.clocks_per_s,
                                         r.clocks_per_s * r.shape.workers, r.advance_p50,
                                         r.advance_p99, r.wait_p99, r.heartbeat_p50, r.heartbeat_p99,
                                         r.declared_dead));
  }
  std::ofstream(absl::GetFlag(FLAGS_output)) << md;
  std::printf("wrote %s\n", absl::GetFlag(FLAGS_output).c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::Status status = kestrel::Main(argc, argv);
  if (!status.ok()) {
    std::fprintf(stderr, "scheduler_bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
