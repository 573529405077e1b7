// Fuzz target: the scheduler's core, Membership (membership.h) and ClockTable (clock_table.h), driven as the
// Scheduler service and the job controller drive them, by arbitrary sequences of operations.
//
// Input: the job size (1-3 servers, 1-4 workers) and consistency (BSP, SSP(0-3), ASP; with the policy byte's high
// bit, leases of 1-8 clocks: server-enforced clocks), then operations with
// arbitrary ranks, incarnations (current, stale, forged) and generations: Register, Heartbeat, Rejoin (a
// heartbeat, then the rank's generation), WaitToStart and Advance (each after CheckWorker, as the service
// does), time passing and ExpireSilent, MarkWorkerDone, holds (SetHold, HoldAtEarliest) and rollbacks
// (BeginRollback, SetHold(0), Reset to a clock, EndRollback). A shadow of what was answered checks:
//   - the generation never goes back; ranks stay in [0, job size); a worker's generation is at most the job's;
//   - only the current incarnation of a live member heartbeats, and only with the generation its rank's requests
//     carry does a worker pass CheckWorker;
//   - a clock only moves forward, one iteration at a time (with leases: at most to MaxPermitted() + 1), except by
//     a rollback's Reset;
//   - a WaitToStart is answered once; answered OK only when the policy allows it (MinClock() >= the clock's
//     required min clock; with leases, always) and the hold does not stop it; a lease ends below the hold and
//     within MaxPermitted(); waiting requests are counted by num_waiting(), and the next required min clock is
//     above MinClock() (a request that could run never waits).
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/fuzz_input.h"
#include "scheduler/clock_table.h"
#include "scheduler/membership.h"

namespace kestrel {
namespace {

struct Fuzz {
  std::unique_ptr<Membership> membership;
  std::unique_ptr<ClockTable> clocks;
  int num_servers = 1;
  int num_workers = 1;
  absl::Time now = absl::UnixEpoch();
  // By (role, rank): every incarnation this rank was given, the current one last.
  std::map<std::pair<Role, int>, std::vector<std::string>> incarnations;
  std::vector<int64_t> shadow_clocks;
  uint64_t generation = 1;
  size_t waiting = 0;  // WaitToStart calls not answered yet
  int64_t callbacks_run = 0, callbacks_made = 0;
};

Role RoleOf(uint8_t b) { return (b & 1) != 0 ? Role::kServer : Role::kWorker; }

int RankOf(FuzzInput& in, int n) { return static_cast<int>(in.U8() % (n + 3)) - 2; }  // -2 .. n

// An incarnation to present: the rank's current one, an older one, a forged one or a malformed one.
std::string IncarnationOf(FuzzInput& in, Fuzz& f, Role role, int rank) {
  const uint8_t how = in.U8();
  auto it = f.incarnations.find({role, rank});
  if (how % 4 <= 1 && it != f.incarnations.end()) {
    const std::vector<std::string>& all = it->second;
    return how % 4 == 0 ? all.back() : all[(how >> 2) % all.size()];
  }
  if (how % 4 == 2) {
    std::string forged(kIncarnationBytes, '\0');
    for (char& c : forged) c = static_cast<char>(in.U8());
    return forged;
  }
  return in.Bytes();
}

bool IsCurrent(const Fuzz& f, Role role, int rank, const std::string& incarnation) {
  auto it = f.incarnations.find({role, rank});
  return it != f.incarnations.end() && it->second.back() == incarnation;
}

bool Alive(const Fuzz& f, Role role, int rank) {
  for (const Member& m : f.membership->Members()) {
    if (m.role == role && m.rank == rank) return m.alive;
  }
  return false;
}

void CheckInvariants(Fuzz& f) {
  const uint64_t generation = f.membership->generation();
  FUZZ_CHECK(generation >= f.generation, "the job generation went back");
  f.generation = generation;
  int servers = 0, workers = 0;
  for (const Member& m : f.membership->Members()) {
    const int n = m.role == Role::kServer ? f.num_servers : f.num_workers;
    FUZZ_CHECK(m.rank >= 0 && m.rank < n, "a member's rank is outside the job");
    (m.role == Role::kServer ? servers : workers)++;
    FUZZ_CHECK(m.incarnation.size() == kIncarnationBytes);
    FUZZ_CHECK(IsCurrent(f, m.role, m.rank, m.incarnation), "a member holds an incarnation it was never given");
  }
  FUZZ_CHECK(servers <= f.num_servers && workers <= f.num_workers);
  const std::vector<uint64_t> generations = f.membership->WorkerGenerations();
  FUZZ_CHECK(generations.size() == static_cast<size_t>(f.num_workers));
  for (uint64_t g : generations) FUZZ_CHECK(g <= generation, "a worker's generation is ahead of the job's");
  for (int r = 0; r < f.num_workers; ++r) {
    const int64_t clock = f.clocks->ClockOf(r);
    FUZZ_CHECK(clock >= f.shadow_clocks[r], "a worker's clock went back");
    f.shadow_clocks[r] = clock;
  }
  FUZZ_CHECK(f.clocks->ClockOf(f.num_workers) == -1 && f.clocks->ClockOf(-1) == -1);
  FUZZ_CHECK(f.clocks->num_waiting() == f.waiting, "num_waiting() does not count the unanswered requests");
  FUZZ_CHECK(f.clocks->NextRequiredMinClock() > f.clocks->MinClock(), "a request that could run is waiting");
  int64_t min_clock = f.shadow_clocks[0];
  for (int64_t c : f.shadow_clocks) min_clock = std::min(min_clock, c);
  FUZZ_CHECK(f.clocks->MinClock() == min_clock);
}

// Who a WaitToStart or Advance claims to be: a rank, an incarnation and a generation (the rank's, or another).
struct WorkerCall {
  int rank;
  std::string incarnation;
  uint64_t generation;
};

WorkerCall ReadWorkerCall(FuzzInput& in, Fuzz& f) {
  WorkerCall call;
  call.rank = RankOf(in, f.num_workers);
  call.incarnation = IncarnationOf(in, f, Role::kWorker, call.rank);
  call.generation = in.U8() % 2 == 0 && call.rank >= 0 && call.rank < f.num_workers
                        ? f.membership->WorkerGenerations()[call.rank]
                        : in.U64() % (f.generation + 2);
  return call;
}

void WaitToStart(FuzzInput& in, Fuzz& f) {
  const WorkerCall call = ReadWorkerCall(in, f);
  const int rank = call.rank;
  const uint8_t c = in.U8();
  const int64_t clock = c == 0xff ? in.I64() : f.clocks->ClockOf(rank) + static_cast<int>(c % 6) - 1;
  const uint64_t epoch = f.clocks->epoch();  // read before the check, as the service does
  if (!f.membership->CheckWorker(rank, call.incarnation, call.generation).ok()) return;
  ++f.waiting;
  ++f.callbacks_made;
  auto answered = std::make_shared<bool>(false);
  Fuzz* fp = &f;
  f.clocks->WaitToStart(rank, clock, [fp, clock, answered](absl::Status status) {
    FUZZ_CHECK(!*answered, "a WaitToStart was answered twice");
    *answered = true;
    --fp->waiting;
    ++fp->callbacks_run;
    if (!status.ok()) return;
    FUZZ_CHECK(clock >= 0 && clock < fp->clocks->hold(), "a held iteration was allowed to start");
    FUZZ_CHECK(fp->clocks->MaxPermitted() >= clock);
    const int lease = fp->clocks->lease_clocks();
    if (lease == 0) {
      FUZZ_CHECK(fp->clocks->MinClock() >= fp->clocks->policy().RequiredMinClock(clock),
                 "an iteration started before the policy allows");
      return;
    }
    const int64_t through = fp->clocks->PermittedThrough(clock);
    FUZZ_CHECK(through >= clock && through <= clock + lease - 1, "a lease is longer than lease_clocks");
    FUZZ_CHECK(through < fp->clocks->hold(), "a lease reaches past the hold");
    FUZZ_CHECK(through <= fp->clocks->MaxPermitted(), "a lease reaches past MaxPermitted()");
  }, epoch);
}

void Advance(FuzzInput& in, Fuzz& f) {
  const WorkerCall call = ReadWorkerCall(in, f);
  const int rank = call.rank;
  const absl::Status checked = f.membership->CheckWorker(rank, call.incarnation, call.generation);
  if (checked.ok()) {
    FUZZ_CHECK(rank >= 0 && rank < f.num_workers && Alive(f, Role::kWorker, rank));
    FUZZ_CHECK(IsCurrent(f, Role::kWorker, rank, call.incarnation), "CheckWorker accepted another incarnation");
    FUZZ_CHECK(call.generation == f.membership->WorkerGenerations()[rank], "CheckWorker accepted another generation");
  }
  const uint8_t c = in.U8();
  const int64_t before = f.clocks->ClockOf(rank);
  const int64_t permitted = f.clocks->MaxPermitted();
  const int64_t finished = c == 0xff ? in.I64() : before + static_cast<int>(c % 4) - 1;
  if (!checked.ok()) return;
  const absl::Status advanced = f.clocks->Advance(rank, finished);
  if (advanced.ok()) {
    FUZZ_CHECK(finished == before || finished == before + 1 ||
                   (f.clocks->lease_clocks() > 0 && finished > before && finished <= permitted + 1),
               "a clock moved by more than one iteration (with leases: past what was permitted)");
    FUZZ_CHECK(f.clocks->ClockOf(rank) == finished);
  } else {
    FUZZ_CHECK(f.clocks->ClockOf(rank) == before, "a refused Advance moved the clock");
  }
  if ((c & 0x80) != 0 && advanced.ok()) f.membership->MarkWorkerDone(rank).IgnoreError();
}

void Rollback(FuzzInput& in, Fuzz& f) {
  const uint64_t before = f.membership->generation();
  const uint64_t generation = f.membership->BeginRollback();
  FUZZ_CHECK(generation > before);
  for (uint64_t g : f.membership->WorkerGenerations()) FUZZ_CHECK(g == 0 || g == generation);
  f.clocks->SetHold(0);
  // A rollback goes to the clock of a checkpoint: one every worker had reached (the manifest's cut).
  int64_t clock = f.clocks->MinClock() - static_cast<int64_t>(in.U8() % 4);
  if (clock < 0) clock = 0;
  f.clocks->Reset(clock, absl::AbortedError("rollback"));
  FUZZ_CHECK(f.waiting == 0, "a rollback left requests waiting");
  FUZZ_CHECK(f.clocks->AllAt(clock) && f.clocks->MaxPermitted() == clock - 1);
  for (int64_t& c : f.shadow_clocks) c = clock;
  f.membership->EndRollback();
  f.clocks->SetHold(in.Bool() ? ClockTable::kNoHold : clock + in.U8() % 4);
}

}  // namespace
}  // namespace kestrel

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kestrel;  // NOLINT(build/namespaces): a fuzz entry point
  FuzzInput in(data, size);
  Fuzz f;
  f.num_servers = 1 + in.U8() % 3;
  f.num_workers = 1 + in.U8() % 4;
  const uint8_t policy = in.U8();
  const ConsistencyPolicy consistency = policy % 3 == 0   ? ConsistencyPolicy::Bsp()
                                        : policy % 3 == 1 ? ConsistencyPolicy::Ssp((policy >> 2) % 4)
                                                          : ConsistencyPolicy::Asp();
  MembershipOptions options;
  options.num_servers = f.num_servers;
  options.num_workers = f.num_workers;
  auto membership = Membership::Create(options);
  const int lease = (policy & 0x80) != 0 ? 1 + ((policy >> 4) & 7) : 0;
  auto clocks = ClockTable::Create(f.num_workers, consistency, lease);
  FUZZ_CHECK(membership.ok() && clocks.ok());
  f.membership = std::move(membership).value();
  f.clocks = std::move(clocks).value();
  f.shadow_clocks.assign(f.num_workers, 0);

  for (int ops = 0; !in.empty() && ops < 512; ++ops) {
    const uint8_t op = in.U8();
    const int kind = (op & 0x0f) % 10;  // the high bits are the operation's flags
    switch (kind) {
      case 0: {  // Register
        const Role role = RoleOf(op >> 4);
        const int n = role == Role::kServer ? f.num_servers : f.num_workers;
        const int requested = RankOf(in, n) + ((op & 0x80) != 0 ? 1 : 0);  // mostly -1 .. n
        const absl::StatusOr<Registration> r =
            f.membership->Register(role, (op & 0x40) != 0 ? "" : "host:1", requested, f.now);
        if (!r.ok()) break;
        FUZZ_CHECK(r->rank >= 0 && r->rank < n && (requested == -1 || requested == r->rank));
        FUZZ_CHECK(r->incarnation.size() == kIncarnationBytes);
        FUZZ_CHECK(r->generation == f.membership->generation());
        auto& given = f.incarnations[{role, r->rank}];
        for (const std::string& old : given) FUZZ_CHECK(old != r->incarnation, "an incarnation was given twice");
        given.push_back(r->incarnation);
        break;
      }
      case 1:
      case 8: {  // Heartbeat; a Rejoin is a worker's heartbeat, then its rank's generation
        const Role role = kind == 8 ? Role::kWorker : RoleOf(op >> 4);
        const int rank = RankOf(in, role == Role::kServer ? f.num_servers : f.num_workers);
        const std::string incarnation = IncarnationOf(in, f, role, rank);
        const bool alive = Alive(f, role, rank);
        const absl::StatusOr<uint64_t> beat = f.membership->Heartbeat(role, rank, incarnation, f.now);
        if (!beat.ok()) break;
        FUZZ_CHECK(alive && IsCurrent(f, role, rank, incarnation), "a heartbeat of another incarnation was accepted");
        FUZZ_CHECK(*beat == f.membership->generation());
        if (kind == 8) FUZZ_CHECK(f.membership->WorkerGenerations()[rank] >= 1);
        break;
      }
      case 2:
        WaitToStart(in, f);
        break;
      case 3:
        Advance(in, f);
        break;
      case 4: {  // time passes; the scheduler declares silent members dead
        f.now += absl::Milliseconds(50 * static_cast<int>(in.U8()));
        const uint64_t before = f.membership->generation();
        const JobState state = f.membership->state();
        const std::vector<Member> expired = f.membership->ExpireSilent(f.now);
        for (const Member& m : expired) FUZZ_CHECK(!Alive(f, m.role, m.rank));
        if (!expired.empty() && state != JobState::kFinished) FUZZ_CHECK(f.membership->generation() > before);
        if (expired.empty()) FUZZ_CHECK(f.membership->generation() == before);
        break;
      }
      case 5:
        f.membership->MarkWorkerDone(RankOf(in, f.num_workers)).IgnoreError();
        break;
      case 6:
        Rollback(in, f);
        break;
      case 7:
        if (in.Bool()) {
          f.clocks->SetHold(f.clocks->MinClock() + in.U8() % 4);
        } else {
          const int64_t hold = f.clocks->HoldAtEarliest();
          FUZZ_CHECK(hold <= f.clocks->MaxPermitted() + 1 || hold == ClockTable::kNoHold);
        }
        break;
      case 9: {  // CheckWorker with an arbitrary generation
        const int rank = RankOf(in, f.num_workers);
        const std::string incarnation = IncarnationOf(in, f, Role::kWorker, rank);
        const uint64_t generation = in.U64();
        if (f.membership->CheckWorker(rank, incarnation, generation).ok()) {
          FUZZ_CHECK(generation == f.membership->WorkerGenerations()[rank]);
          FUZZ_CHECK(IsCurrent(f, Role::kWorker, rank, incarnation) && Alive(f, Role::kWorker, rank));
        }
        break;
      }
    }
    CheckInvariants(f);
  }
  // Shutting down fails whatever still waits, once.
  f.clocks->CancelAll(absl::UnavailableError("shutting down"));
  FUZZ_CHECK(f.waiting == 0 && f.callbacks_run == f.callbacks_made);
  return 0;
}
