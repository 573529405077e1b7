#include "server/read_gate.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kestrel {
namespace {

const absl::Time kFar = absl::InfiniteFuture();

// The gate's updates, running the reads they release as a shard does.
void Run(std::vector<ReadGate::Callback>& ready) {
  for (ReadGate::Callback& done : ready) done(absl::OkStatus());
}
void Applied(ReadGate& gate, absl::string_view table, int64_t clock) {
  std::vector<ReadGate::Callback> ready;
  gate.Applied(table, clock, &ready);
  Run(ready);
}
void Pushed(ReadGate& gate, absl::string_view table, int worker, int64_t clock, int part, int parts) {
  std::vector<ReadGate::Callback> ready;
  gate.Pushed(table, worker, clock, part, parts, &ready);
  Run(ready);
}

// Records what a waiting read was answered.
struct Answers {
  std::vector<std::string> got;
  ReadGate::Callback Named(std::string name) {
    return [this, name](absl::Status status) { got.push_back(name + ":" + (status.ok() ? "ok" : status.ToString())); };
  }
};

TEST(ReadGateTest, BspReadWaitsForThePreviousClockToBeApplied) {
  ReadGate gate(/*bsp=*/true, 2);
  Answers answers;
  EXPECT_TRUE(*gate.Await("emb", 0, kFar, answers.Named("c0")));  // clock 0 sees nothing
  EXPECT_FALSE(*gate.Await("emb", 1, kFar, answers.Named("c1")));
  EXPECT_FALSE(*gate.Await("emb", 2, kFar, answers.Named("c2")));
  EXPECT_FALSE(*gate.Await("wide", 1, kFar, answers.Named("wide1")));
  EXPECT_EQ(gate.waiting(), 3u);
  Applied(gate, "emb", 0);
  EXPECT_EQ(answers.got, std::vector<std::string>{"c1:ok"});
  Applied(gate, "emb", 0);  // a repeat changes nothing
  Applied(gate, "emb", 1);
  EXPECT_EQ(answers.got, (std::vector<std::string>{"c1:ok", "c2:ok"}));
  EXPECT_EQ(gate.Complete("emb"), 2);
  EXPECT_EQ(gate.Complete("wide"), 0);
  EXPECT_EQ(gate.CompleteAll(), 0);
  EXPECT_EQ(gate.waiting(), 1u);
}

TEST(ReadGateTest, SspReadWaitsForEveryWorkersCompletePush) {
  ReadGate gate(/*bsp=*/false, 2);
  Answers answers;
  // SSP(1): a read of iteration 3 needs every worker's clocks < 2.
  EXPECT_FALSE(*gate.Await("emb", 2, kFar, answers.Named("r")));
  Pushed(gate, "emb", 0, 0, 0, 1);
  Pushed(gate, "emb", 0, 1, 0, 2);
  Pushed(gate, "emb", 0, 1, 1, 2);  // worker 0: clocks 0 and 1 complete
  Pushed(gate, "emb", 1, 0, 0, 1);
  Pushed(gate, "emb", 1, 1, 1, 2);
  Pushed(gate, "emb", 1, 1, 1, 2);  // a retried part counts once
  EXPECT_TRUE(answers.got.empty());
  EXPECT_EQ(gate.Complete("emb"), 1);
  Pushed(gate, "emb", 1, 3, 0, 1);  // out of order: ignored
  Pushed(gate, "emb", 1, 1, 0, 2);
  EXPECT_EQ(answers.got, std::vector<std::string>{"r:ok"});
  EXPECT_EQ(gate.Complete("emb"), 2);
  EXPECT_EQ(gate.CompleteFor(0), 2);
  Pushed(gate, "emb", 0, 2, 0, 1);
  EXPECT_EQ(gate.CompleteFor(0), 3);  // where a replacement of worker 0 would continue
  EXPECT_EQ(gate.CompleteFor(1), 2);
  Pushed(gate, "emb", 1, 0, 0, 1);  // an old clock again: nothing
  Pushed(gate, "emb", 7, 2, 0, 1);  // a rank beyond the job: nothing
  EXPECT_EQ(gate.Complete("emb"), 2);
}

TEST(ReadGateTest, SspWithoutKnownWorkersWaitsUntilTold) {
  ReadGate gate(/*bsp=*/false, 0);
  Answers answers;
  EXPECT_FALSE(*gate.Await("emb", 1, kFar, answers.Named("r")));
  Pushed(gate, "emb", 0, 0, 0, 1);
  EXPECT_TRUE(answers.got.empty());
  gate.SetWorkers(1);  // the new rank starts at the table's complete clocks, then pushes
  Pushed(gate, "emb", 0, 0, 0, 1);
  EXPECT_EQ(answers.got, std::vector<std::string>{"r:ok"});
}

TEST(ReadGateTest, RestoreCancelsWaitsAndStartsAtTheCheckpointClock) {
  ReadGate gate(/*bsp=*/true, 2);
  Answers answers;
  EXPECT_FALSE(*gate.Await("emb", 5, kFar, answers.Named("old")));
  gate.StartAt(0, absl::AbortedError("rolled back"));
  ASSERT_EQ(answers.got.size(), 1u);
  EXPECT_EQ(answers.got[0], "old:ABORTED: rolled back");
  EXPECT_EQ(gate.waiting(), 0u);
  EXPECT_FALSE(*gate.Await("emb", 4, kFar, answers.Named("new")));  // arrived before the clock was set
  gate.Raise(4);  // the checkpoint holds every update of clocks < 4
  EXPECT_EQ(answers.got.back(), "new:ok");
  EXPECT_TRUE(*gate.Await("emb", 4, kFar, answers.Named("x")));
  EXPECT_FALSE(*gate.Await("emb", 5, kFar, answers.Named("y")));
  EXPECT_EQ(gate.Complete("dense"), 4);
}

TEST(ReadGateTest, SspRaiseMovesEveryWorkerToTheFloor) {
  ReadGate gate(/*bsp=*/false, 2);
  gate.Raise(3);
  EXPECT_EQ(gate.Complete("emb"), 3);
  Pushed(gate, "emb", 0, 3, 0, 1);
  EXPECT_EQ(gate.Complete("emb"), 3);
  Pushed(gate, "emb", 1, 3, 0, 1);
  EXPECT_EQ(gate.Complete("emb"), 4);
}

TEST(ReadGateTest, WaitsExpireAtTheirDeadlineAndAreBounded) {
  ReadGate gate(/*bsp=*/true, 1);
  Answers answers;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  EXPECT_FALSE(*gate.Await("emb", 3, t0 + absl::Seconds(1), answers.Named("soon")));
  EXPECT_FALSE(*gate.Await("emb", 3, t0 + absl::Seconds(9), answers.Named("late")));
  EXPECT_EQ(gate.Expire(t0), 0u);
  EXPECT_EQ(gate.Expire(t0 + absl::Seconds(2)), 1u);
  ASSERT_EQ(answers.got.size(), 1u);
  EXPECT_NE(answers.got[0].find("soon:UNAVAILABLE"), std::string::npos) << answers.got[0];
  EXPECT_EQ(gate.waiting(), 1u);
  for (size_t i = 1; i < kMaxWaitingReads; ++i) {
    ASSERT_FALSE(*gate.Await("emb", 3, kFar, [](absl::Status) {}));
  }
  absl::StatusOr<bool> full = gate.Await("emb", 3, kFar, [](absl::Status) {});
  EXPECT_TRUE(absl::IsUnavailable(full.status())) << full.status();
  EXPECT_TRUE(*gate.Await("emb", 0, kFar, [](absl::Status) {}));  // a read that needs nothing still runs
}

TEST(ReadGateTest, HeldReadsAreAnsweredWithTheBoundaryAndTheOthersRunOn) {
  ReadGate gate(/*bsp=*/false, 2);
  Answers answers;
  // Worker 1 died after pushing clock 0: reads needing clock 1 of it wait.
  Pushed(gate, "emb", 0, 0, 0, 1);
  Pushed(gate, "emb", 1, 0, 0, 1);
  Pushed(gate, "emb", 0, 1, 0, 1);
  EXPECT_FALSE(*gate.Await("emb", 2, kFar, answers.Named("waiting")));
  EXPECT_EQ(gate.PushedBy("emb", 0), 2);
  EXPECT_EQ(gate.PushedBy("emb", 1), 1);
  EXPECT_EQ(gate.PushedBy("never", 1), 0);  // the floor
  // The scheduler holds reads of iteration >= 2 (needing clocks >= 2): the waiting read is answered at once.
  gate.HoldReads(/*from=*/2, /*at=*/2);
  ASSERT_EQ(answers.got.size(), 1u);
  EXPECT_NE(answers.got[0].find("reads held at clock 2"), std::string::npos) << answers.got[0];
  EXPECT_EQ(gate.waiting(), 0u);
  absl::StatusOr<bool> held = gate.Await("emb", 3, kFar, answers.Named("later"));
  EXPECT_TRUE(absl::IsAborted(held.status())) << held.status();
  // Reads below the hold still run.
  EXPECT_TRUE(*gate.Await("emb", 1, kFar, answers.Named("below")));
  gate.ReleaseReads();
  EXPECT_FALSE(*gate.Await("emb", 2, kFar, answers.Named("after")));
  // A switch (StartAt) lifts a hold too.
  gate.HoldReads(2, 2);
  gate.StartAt(2, absl::AbortedError("switched"));
  EXPECT_TRUE(*gate.Await("emb", 2, kFar, answers.Named("switched")));
}

}  // namespace
}  // namespace kestrel
