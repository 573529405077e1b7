#include "scheduler/clock_table.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <queue>
#include <random>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

std::unique_ptr<ClockTable> Make(int workers, ConsistencyPolicy policy) {
  auto table = ClockTable::Create(workers, policy);
  EXPECT_TRUE(table.ok()) << table.status();
  return std::move(table).value();
}

// Advances `rank` one iteration at a time to `clock` (as a worker does).
absl::Status AdvanceTo(ClockTable& table, int rank, int64_t clock) {
  for (int64_t c = table.ClockOf(rank) + 1; c <= clock; ++c) {
    if (absl::Status s = table.Advance(rank, c); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// Asks for `clock` and reports whether the answer came at once (and with which status).
struct Ask {
  bool answered = false;
  absl::Status status;
};
std::shared_ptr<Ask> Start(ClockTable& table, int rank, int64_t clock) {
  auto ask = std::make_shared<Ask>();
  table.WaitToStart(rank, clock, [ask](absl::Status s) {
    ask->answered = true;
    ask->status = std::move(s);
  });
  return ask;
}

TEST(ClockTableTest, BspIsABarrier) {
  auto table = Make(3, ConsistencyPolicy::Bsp());
  EXPECT_TRUE(Start(*table, 0, 0)->answered);  // iteration 0 never waits
  auto ask = Start(*table, 0, 1);
  EXPECT_FALSE(ask->answered);
  ASSERT_TRUE(table->Advance(0, 1).ok());
  ASSERT_TRUE(table->Advance(1, 1).ok());
  EXPECT_FALSE(ask->answered) << "worker 2 has not finished iteration 0";
  ASSERT_TRUE(table->Advance(2, 1).ok());
  EXPECT_TRUE(ask->answered);
  EXPECT_TRUE(ask->status.ok());
  EXPECT_EQ(table->num_waiting(), 0u);
}

TEST(ClockTableTest, SspAllowsStalenessAndNoMore) {
  auto table = Make(2, ConsistencyPolicy::Ssp(2));
  // Worker 0 runs ahead while worker 1 is stuck at clock 0: iterations 0, 1, 2 may start; 3 may not.
  for (int64_t c = 0; c <= 2; ++c) {
    EXPECT_TRUE(Start(*table, 0, c)->answered) << c;
    ASSERT_TRUE(table->Advance(0, c + 1).ok());
  }
  auto blocked = Start(*table, 0, 3);
  EXPECT_FALSE(blocked->answered);
  EXPECT_EQ(table->NextRequiredMinClock(), 1);
  ASSERT_TRUE(table->Advance(1, 1).ok());
  EXPECT_TRUE(blocked->answered);
}

TEST(ClockTableTest, AspNeverWaits) {
  auto table = Make(4, ConsistencyPolicy::Asp());
  EXPECT_TRUE(Start(*table, 3, 1000000)->answered);
  EXPECT_EQ(table->num_waiting(), 0u);
}

TEST(ClockTableTest, ValidatesRanksAndClocks) {
  auto table = Make(2, ConsistencyPolicy::Bsp());
  EXPECT_EQ(Start(*table, 2, 0)->status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Start(*table, -1, 0)->status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Start(*table, 0, -1)->status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table->Advance(5, 1).code(), absl::StatusCode::kInvalidArgument);
  for (int64_t c = 1; c <= 3; ++c) ASSERT_TRUE(table->Advance(0, c).ok());
  EXPECT_TRUE(table->Advance(0, 3).ok()) << "repeating the current clock is a no-op";
  EXPECT_EQ(table->Advance(0, 2).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(table->ClockOf(0), 3);
  EXPECT_EQ(table->MinClock(), 0);
  EXPECT_FALSE(ClockTable::Create(0, ConsistencyPolicy::Bsp()).ok());
  EXPECT_FALSE(ClockTable::Create(2, ConsistencyPolicy::Ssp(-1)).ok());
}

// A rogue (or buggy) worker that reports a clock far ahead must not release a BSP barrier for the others.
TEST(ClockTableTest, ClocksMoveOneIterationAtATime) {
  auto table = Make(2, ConsistencyPolicy::Bsp());
  ASSERT_TRUE(table->Advance(0, 1).ok());
  auto waiting = Start(*table, 0, 1);  // worker 0 waits for worker 1 to finish iteration 0
  EXPECT_FALSE(waiting->answered);
  for (int64_t jump : {int64_t{2}, int64_t{3}, int64_t{1000000}, std::numeric_limits<int64_t>::max()}) {
    absl::Status status = table->Advance(1, jump);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << jump;
    EXPECT_NE(status.message().find("may report 1 next"), std::string::npos) << status;
  }
  EXPECT_EQ(table->ClockOf(1), 0);
  EXPECT_FALSE(waiting->answered) << "the barrier held";
  ASSERT_TRUE(table->Advance(1, 1).ok());
  EXPECT_TRUE(waiting->answered && waiting->status.ok());
}

TEST(ClockTableTest, CancelAllFailsEveryWaiter) {
  auto table = Make(2, ConsistencyPolicy::Bsp());
  auto a = Start(*table, 0, 1), b = Start(*table, 1, 1);
  EXPECT_EQ(table->CancelAll(absl::AbortedError("rollback")), 2u);
  EXPECT_EQ(a->status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(b->status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(table->num_waiting(), 0u);
}

// A request checked against the job (the worker's generation) before a cancellation and queued after it would
// wait forever on the timeline the cancellation ended: given the epoch read before the check, it is answered
// with the cancellation's status instead, while a request of the current epoch waits as usual.
TEST(ClockTableTest, RequestFromBeforeACancellationIsAnsweredNotQueued) {
  auto table = Make(2, ConsistencyPolicy::Bsp());
  const uint64_t before = table->epoch();
  table->Reset(0, absl::AbortedError("rolled back"));
  EXPECT_EQ(table->epoch(), before + 1);
  absl::Status stale = absl::UnknownError("not answered");
  table->WaitToStart(0, 1, [&](absl::Status s) { stale = s; }, before);
  EXPECT_EQ(stale.code(), absl::StatusCode::kAborted) << stale;
  EXPECT_EQ(stale.message(), "rolled back");
  EXPECT_EQ(table->num_waiting(), 0u);
  absl::Status current = absl::UnknownError("not answered");
  table->WaitToStart(0, 1, [&](absl::Status s) { current = s; }, table->epoch());
  EXPECT_EQ(current.code(), absl::StatusCode::kUnknown) << "waits for worker 1, as BSP says";
  EXPECT_EQ(table->num_waiting(), 1u);
  ASSERT_TRUE(table->Advance(0, 1).ok());
  ASSERT_TRUE(table->Advance(1, 1).ok());
  EXPECT_TRUE(current.ok()) << current;
}

// Discrete-event simulation: each worker repeatedly asks for its next iteration, works for a random time once
// allowed, then advances. Checked at every step: a granted read never violates the bound (min clock >=
// required at grant time), a request waits only when the bound forbids it, and after every Advance no waiting
// request could run.
void Simulate(int workers, ConsistencyPolicy policy, uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "workers " << workers << " mode " << static_cast<int>(policy.mode)
                                  << " staleness " << policy.staleness << " seed " << seed);
  auto table = Make(workers, policy);
  std::mt19937_64 rng(seed);
  // Some workers are much slower than others, and delays vary per iteration.
  std::vector<double> speed(workers);
  for (auto& s : speed) s = std::uniform_real_distribution<double>(0.2, 3.0)(rng);
  constexpr int64_t kIterations = 30;
  using Event = std::pair<double, int>;  // (time the worker finishes its current iteration, rank)
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> finishing;
  std::vector<int64_t> running(workers, -1);  // iteration being computed, -1 while waiting
  double now = 0;
  int64_t max_lead = 0;

  std::function<void(int)> request = [&](int rank) {
    const int64_t c = table->ClockOf(rank);
    if (c >= kIterations) return;
    const int64_t min_before = table->MinClock();
    const bool allowed_now = min_before >= policy.RequiredMinClock(c);
    bool answered_inline = true;
    bool in_call = true;
    table->WaitToStart(rank, c, [&, rank, c](absl::Status status) {
      ASSERT_TRUE(status.ok());
      ASSERT_GE(table->MinClock(), policy.RequiredMinClock(c)) << "read of iteration " << c << " too early";
      if (!in_call) answered_inline = false;
      max_lead = std::max(max_lead, c - table->MinClock());
      running[rank] = c;
      const double work = std::exponential_distribution<double>(1.0)(rng) * speed[rank];
      finishing.push({now + work, rank});
    });
    in_call = false;
    // A request that the bound allows is answered at once; one it forbids waits.
    ASSERT_EQ(allowed_now, running[rank] == c && answered_inline) << "iteration " << c;
  };

  for (int r = 0; r < workers; ++r) request(r);
  while (!finishing.empty()) {
    auto [time, rank] = finishing.top();
    finishing.pop();
    now = time;
    const int64_t finished = running[rank] + 1;
    running[rank] = -1;
    ASSERT_TRUE(table->Advance(rank, finished).ok());
    ASSERT_LT(table->MinClock(), table->NextRequiredMinClock()) << "a runnable request is still waiting";
    request(rank);
  }
  for (int r = 0; r < workers; ++r) EXPECT_EQ(table->ClockOf(r), kIterations) << "worker " << r << " stalled";
  EXPECT_EQ(table->num_waiting(), 0u);
  if (policy.mode != CONSISTENCY_ASP) {
    // A worker starting c while the slowest has finished m is c - m ahead: at most s.
    EXPECT_LE(max_lead, policy.staleness);
  }
}

TEST(ClockTablePropertyTest, BoundsHoldAndNobodyWaitsNeedlessly) {
  for (uint64_t seed = 0; seed < 40; ++seed) {
    for (int workers : {2, 3, 5, 8}) {
      Simulate(workers, ConsistencyPolicy::Bsp(), seed);
      for (int s : {0, 1, 3}) Simulate(workers, ConsistencyPolicy::Ssp(s), seed);
      Simulate(workers, ConsistencyPolicy::Asp(), seed);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(ClockTableThreadsTest, RealThreadsRespectTheBound) {
  // 6 threads, SSP(1), random sleeps: every grant must see min clock >= c - 1.
  constexpr int kWorkers = 6, kIterations = 40;
  auto table = Make(kWorkers, ConsistencyPolicy::Ssp(1));
  std::atomic<int> violations{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorkers; ++r) {
    threads.emplace_back([&, r] {
      std::mt19937 rng(r);
      for (int64_t c = 0; c < kIterations; ++c) {
        absl::Notification granted;
        table->WaitToStart(r, c, [&](absl::Status s) {
          if (!s.ok() || table->MinClock() < c - 1) ++violations;
          granted.Notify();
        });
        granted.WaitForNotification();
        absl::SleepFor(absl::Microseconds(rng() % 300));
        ASSERT_TRUE(table->Advance(r, c + 1).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(table->MinClock(), kIterations);
}

TEST(ClockTableTest, HoldStopsEveryWorkerAtTheCut) {
  // ASP never waits, except at a hold: every worker stops at clock 3, and the cut is reached when all are there.
  auto table = Make(2, ConsistencyPolicy::Asp());
  table->SetHold(3);
  for (int64_t c = 0; c < 3; ++c) ASSERT_TRUE(Start(*table, 0, c)->answered);
  ASSERT_TRUE(AdvanceTo(*table, 0, 3).ok());
  auto held = Start(*table, 0, 3);
  EXPECT_FALSE(held->answered) << "iteration 3 is held";
  EXPECT_EQ(table->MaxPermitted(), 2);
  EXPECT_FALSE(table->AllAt(3));
  ASSERT_TRUE(Start(*table, 1, 0)->answered);
  ASSERT_TRUE(AdvanceTo(*table, 1, 3).ok());
  EXPECT_TRUE(table->AllAt(3));
  EXPECT_EQ(table->num_waiting(), 1u);
  table->SetHold(ClockTable::kNoHold);
  EXPECT_TRUE(held->answered);
  EXPECT_TRUE(held->status.ok());
  EXPECT_EQ(table->MaxPermitted(), 3);
}

TEST(ClockTableTest, ReleasedHoldStillObeysTheConsistencyPolicy) {
  auto table = Make(2, ConsistencyPolicy::Bsp());
  table->SetHold(0);  // nothing may start (a rollback in progress)
  auto first = Start(*table, 0, 0);
  EXPECT_FALSE(first->answered);
  table->SetHold(1);
  EXPECT_TRUE(first->answered);
  ASSERT_TRUE(table->Advance(0, 1).ok());
  auto second = Start(*table, 0, 1);
  EXPECT_FALSE(second->answered) << "held";
  table->SetHold(ClockTable::kNoHold);
  EXPECT_FALSE(second->answered) << "released, but BSP waits for worker 1";
  ASSERT_TRUE(table->Advance(1, 1).ok());
  EXPECT_TRUE(second->answered);
}

// Found by //scheduler:scheduler_fuzz: a request already waiting on the policy when the hold was lowered below
// its clock was released by the next Advance, starting an iteration past the checkpoint's cut.
TEST(ClockTableTest, LoweredHoldStopsRequestsAlreadyWaiting) {
  for (const bool at_earliest : {true, false}) {
    SCOPED_TRACE(at_earliest ? "HoldAtEarliest" : "SetHold");
    auto table = Make(2, ConsistencyPolicy::Bsp());
    ASSERT_TRUE(AdvanceTo(*table, 0, 5).ok());
    ASSERT_TRUE(AdvanceTo(*table, 1, 4).ok());
    ASSERT_TRUE(Start(*table, 1, 4)->answered);
    auto waiting = Start(*table, 0, 5);  // BSP: waits for worker 1 to finish iteration 4
    EXPECT_FALSE(waiting->answered);
    if (at_earliest) {
      EXPECT_EQ(table->HoldAtEarliest(), 5);
    } else {
      table->SetHold(5);
    }
    ASSERT_TRUE(table->Advance(1, 5).ok());
    EXPECT_FALSE(waiting->answered) << "iteration 5 started past the hold at 5";
    EXPECT_TRUE(table->AllAt(5));
    EXPECT_EQ(table->MaxPermitted(), 4);
    EXPECT_EQ(table->num_waiting(), 1u);
    table->SetHold(ClockTable::kNoHold);
    EXPECT_TRUE(waiting->answered);
    EXPECT_TRUE(waiting->status.ok());
    EXPECT_EQ(table->MaxPermitted(), 5);
  }
}

TEST(ClockTableTest, ResetRollsEveryClockBackAndFailsWaits) {
  auto table = Make(2, ConsistencyPolicy::Bsp());
  ASSERT_TRUE(AdvanceTo(*table, 0, 5).ok());
  ASSERT_TRUE(AdvanceTo(*table, 1, 4).ok());
  auto waiting = Start(*table, 0, 5);
  table->SetHold(5);
  auto held = Start(*table, 1, 5);
  int listened = 0;
  table->SetListener([&] { ++listened; });
  table->Reset(2, absl::AbortedError("rolled back"));
  EXPECT_TRUE(waiting->answered);
  EXPECT_EQ(waiting->status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(held->status.code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(table->AllAt(2));
  EXPECT_EQ(table->MaxPermitted(), 1);
  EXPECT_EQ(table->ClockOf(0), 2);
  ASSERT_TRUE(table->Advance(0, 3).ok());
  EXPECT_EQ(listened, 1);
}

TEST(ClockTableTest, HoldAtRefusesABoundaryAlreadyPassedAndResizeMovesEveryClock) {
  auto table = *ClockTable::Create(2, ConsistencyPolicy::Bsp());
  int answered = 0;
  table->WaitToStart(0, 0, [&](absl::Status s) { answered += s.ok(); });
  table->WaitToStart(1, 0, [&](absl::Status s) { answered += s.ok(); });
  ASSERT_EQ(answered, 2);
  EXPECT_FALSE(table->HoldAt(0)) << "iteration 0 was already permitted";
  EXPECT_TRUE(table->HoldAt(2));
  EXPECT_EQ(table->hold(), 2);
  EXPECT_FALSE(table->HoldAt(3)) << "only lowers";
  ASSERT_TRUE(table->Advance(0, 1).ok());
  ASSERT_TRUE(table->Advance(1, 1).ok());
  table->WaitToStart(0, 1, [&](absl::Status s) { answered += s.ok(); });
  table->WaitToStart(1, 1, [&](absl::Status s) { answered += s.ok(); });
  ASSERT_TRUE(table->Advance(0, 2).ok());
  ASSERT_TRUE(table->Advance(1, 2).ok());
  absl::Status held;
  table->WaitToStart(0, 2, [&](absl::Status s) { held = s; });
  EXPECT_TRUE(table->AllAt(2));
  // A rescale to 3 workers at the boundary: the held request is answered (rejoin), everyone is at 2.
  table->Resize(3, 2, absl::AbortedError("rescaled"));
  EXPECT_TRUE(absl::IsAborted(held)) << held;
  EXPECT_EQ(table->num_workers(), 3);
  EXPECT_TRUE(table->AllAt(2));
  EXPECT_EQ(table->ClockOf(2), 2);
  EXPECT_TRUE(absl::IsInvalidArgument(table->Advance(3, 3)));
  table->Resize(1, 2, absl::AbortedError("rescaled"));
  EXPECT_EQ(table->ClockOf(2), -1);
  EXPECT_TRUE(absl::IsInvalidArgument(table->Advance(1, 3)));
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

// Leases (server-enforced clocks): permission comes at once whatever the other workers' clocks (the servers
// enforce BSP), for a lease that never reaches past a hold; a report may move a clock by a whole lease.
TEST(ClockTableLeaseTest, LeasesIgnoreThePolicyStopAtHoldsAndReportWholeLeases) {
  auto table = *ClockTable::Create(2, ConsistencyPolicy::Bsp(), /*lease_clocks=*/16);
  EXPECT_EQ(table->lease_clocks(), 16);
  auto first = Start(*table, 0, 0);
  ASSERT_TRUE(first->answered);
  EXPECT_TRUE(first->status.ok());
  EXPECT_EQ(table->PermittedThrough(0), 15);
  EXPECT_EQ(table->MaxPermitted(), 15);
  // A checkpoint asks for the earliest boundary every worker can stop at: past every lease granted.
  EXPECT_EQ(table->HoldAtEarliest(), 16);
  ASSERT_TRUE(table->Advance(0, 16).ok());  // the whole lease at once
  EXPECT_FALSE(table->Advance(0, 18).ok());  // never past what was permitted
  auto held = Start(*table, 0, 16);
  EXPECT_FALSE(held->answered);
  // Worker 1 is at 0 and asks for 0: leased up to the hold, not beyond.
  auto other = Start(*table, 1, 0);
  ASSERT_TRUE(other->answered);
  EXPECT_EQ(table->PermittedThrough(0), 15);
  table->SetHold(40);
  ASSERT_TRUE(held->answered);
  EXPECT_TRUE(held->status.ok());
  EXPECT_EQ(table->PermittedThrough(16), 31);
  auto near_hold = Start(*table, 0, 32);
  ASSERT_TRUE(near_hold->answered);
  EXPECT_EQ(table->PermittedThrough(32), 39);  // capped by the hold
  EXPECT_FALSE(ClockTable::Create(2, ConsistencyPolicy::Bsp(), -1).ok());
}

// The lease a report asks for (AdvanceRequest.renew): granted at once exactly when WaitToStart would be.
TEST(ClockTableLeaseTest, TryLeaseGrantsWhatWaitToStartWouldAnswerAtOnce) {
  auto table = *ClockTable::Create(2, ConsistencyPolicy::Bsp(), /*lease_clocks=*/8);
  const uint64_t epoch = table->epoch();
  EXPECT_EQ(table->TryLease(0, 0, epoch), 7);
  EXPECT_EQ(table->MaxPermitted(), 7);
  table->SetHold(12);
  EXPECT_EQ(table->TryLease(1, 8, epoch), 11);  // stops short of the hold
  EXPECT_EQ(table->TryLease(1, 12, epoch), std::nullopt);  // held: the worker waits with WaitToStart
  EXPECT_EQ(table->TryLease(2, 0, epoch), std::nullopt);  // no such rank
  EXPECT_EQ(table->TryLease(0, -1, epoch), std::nullopt);
  table->Reset(4, absl::AbortedError("rolled back"));
  EXPECT_EQ(table->TryLease(0, 4, epoch), std::nullopt);  // asked before the rollback
  EXPECT_EQ(table->TryLease(0, 4, table->epoch()), 11);
  auto barrier = *ClockTable::Create(2, ConsistencyPolicy::Bsp());
  EXPECT_EQ(barrier->TryLease(0, 0, barrier->epoch()), std::nullopt);  // no leases: the table is the barrier
}

// A rescale asked for at a boundary reserves it: leases stop short of it, a checkpoint's release does not lift
// the hold past it, and lifting the reservation lets SetHold move on.
TEST(ClockTableLeaseTest, ReservedHoldSurvivesACheckpointsReleaseUntilLifted) {
  auto table = *ClockTable::Create(1, ConsistencyPolicy::Bsp(), /*lease_clocks=*/8);
  const uint64_t epoch = table->epoch();
  EXPECT_EQ(table->TryLease(0, 0, epoch), 7);
  table->ReserveHoldAt(12);
  EXPECT_EQ(table->hold(), 12);
  EXPECT_EQ(table->TryLease(0, 8, epoch), 11);  // stops short of the reserved boundary
  table->SetHold(ClockTable::kNoHold);           // a checkpoint's release
  EXPECT_EQ(table->hold(), 12);
  EXPECT_EQ(table->TryLease(0, 12, epoch), std::nullopt);
  EXPECT_TRUE(table->HoldAt(12));  // the rescale holds there
  table->ReserveHoldAt(ClockTable::kNoHold);
  table->SetHold(ClockTable::kNoHold);
  EXPECT_EQ(table->TryLease(0, 12, epoch), 19);
  // A boundary already permitted cannot be reserved: the hold stays where it was.
  table->ReserveHoldAt(15);
  EXPECT_EQ(table->hold(), ClockTable::kNoHold);
  EXPECT_FALSE(table->HoldAt(15));
}

}  // namespace
}  // namespace kestrel
