#include "scheduler/membership.h"

#include <map>
#include <random>
#include <set>
#include <tuple>

#include "common/test_seed.h"
#include "gmock/gmock.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

using ::testing::HasSubstr;

const absl::Time kStart = absl::FromUnixSeconds(1000);

std::unique_ptr<Membership> Make(int servers, int workers) {
  MembershipOptions options;
  options.num_servers = servers;
  options.num_workers = workers;
  options.heartbeat_interval = absl::Seconds(1);
  options.heartbeat_timeout = absl::Milliseconds(1500);
  auto m = Membership::Create(options);
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(m).value();
}

TEST(MembershipTest, FormsOnceEveryRankRegistered) {
  auto m = Make(2, 2);
  auto s0 = m->Register(Role::kServer, "h:1", -1, kStart);
  ASSERT_TRUE(s0.ok());
  EXPECT_EQ(s0->rank, 0);
  EXPECT_EQ(s0->state, JobState::kForming);
  auto s1 = m->Register(Role::kServer, "h:2", -1, kStart);
  auto w1 = m->Register(Role::kWorker, "", 1, kStart);  // a requested rank
  ASSERT_TRUE(s1.ok() && w1.ok());
  EXPECT_EQ(s1->rank, 1);
  EXPECT_EQ(w1->rank, 1);
  EXPECT_EQ(m->state(), JobState::kForming);
  auto w0 = m->Register(Role::kWorker, "", -1, kStart);
  ASSERT_TRUE(w0.ok());
  EXPECT_EQ(w0->rank, 0);
  EXPECT_EQ(w0->state, JobState::kRunning);
  EXPECT_EQ(m->generation(), 1u);
  EXPECT_EQ(m->Members().size(), 4u);
}

TEST(MembershipTest, RefusesTakenRanksAndBadRegistrations) {
  auto m = Make(1, 1);
  ASSERT_TRUE(m->Register(Role::kWorker, "", 0, kStart).ok());
  EXPECT_EQ(m->Register(Role::kWorker, "", 0, kStart).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(m->Register(Role::kWorker, "", -1, kStart).status().code(), absl::StatusCode::kResourceExhausted);
  // A rank beyond the job's may belong to a rescale not asked for yet: retry. Beyond any job: never.
  EXPECT_EQ(m->Register(Role::kWorker, "", 1, kStart).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(m->Register(Role::kWorker, "", 1 << 20, kStart).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m->Register(Role::kWorker, "", -2, kStart).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m->Register(Role::kServer, "", 0, kStart).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(Membership::Create(MembershipOptions{0, 1}).ok());
}

TEST(MembershipTest, LiveAddressesFollowRegistrationsAndDeaths) {
  auto m = Make(1, 2);
  ASSERT_TRUE(m->Register(Role::kServer, "h:1", 0, kStart).ok());
  ASSERT_TRUE(m->Register(Role::kWorker, "w0:29500", 0, kStart).ok());
  EXPECT_EQ(m->LiveAddresses(Role::kWorker), (std::vector<std::string>{"w0:29500", ""}));
  ASSERT_TRUE(m->Register(Role::kWorker, "", 1, kStart).ok());  // a worker's address is optional
  EXPECT_EQ(m->LiveAddresses(Role::kWorker), (std::vector<std::string>{"w0:29500", ""}));
  EXPECT_EQ(m->LiveServerAddresses(), std::vector<std::string>{"h:1"});
  ASSERT_EQ(m->ExpireSilent(kStart + absl::Seconds(2)).size(), 3u);
  EXPECT_EQ(m->LiveAddresses(Role::kWorker), (std::vector<std::string>{"", ""}));
  ASSERT_TRUE(m->Register(Role::kWorker, "w0b:29500", 0, kStart + absl::Seconds(2)).ok());
  EXPECT_EQ(m->LiveAddresses(Role::kWorker), (std::vector<std::string>{"w0b:29500", ""}));
  // At most kMaxAddressBytes, whatever the role.
  for (Role role : {Role::kServer, Role::kWorker}) {
    auto refused = m->Register(role, std::string(kMaxAddressBytes + 1, 'a'), role == Role::kServer ? 0 : 1,
                               kStart + absl::Seconds(2));
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << RoleName(role);
    EXPECT_THAT(refused.status().message(), HasSubstr("at most 512 bytes"));
  }
  EXPECT_TRUE(m->Register(Role::kWorker, std::string(kMaxAddressBytes, 'a'), 1, kStart + absl::Seconds(2)).ok());
}

TEST(MembershipTest, SilentMemberIsDeclaredDeadWithinTwoIntervals) {
  auto m = Make(1, 2);
  auto server = *m->Register(Role::kServer, "h:1", -1, kStart);
  auto w0 = *m->Register(Role::kWorker, "", -1, kStart);
  auto w1 = *m->Register(Role::kWorker, "", -1, kStart);
  // Everyone heartbeats every second; worker 1 stops after t = 1 s.
  absl::Time declared;
  for (int step = 1; step <= 40; ++step) {
    const absl::Time now = kStart + absl::Milliseconds(250) * step;  // the scheduler checks every interval / 4
    if (step % 4 == 0) {
      ASSERT_TRUE(m->Heartbeat(Role::kServer, 0, server.incarnation, now).ok());
      ASSERT_TRUE(m->Heartbeat(Role::kWorker, 0, w0.incarnation, now).ok());
      if (now <= kStart + absl::Seconds(1)) { ASSERT_TRUE(m->Heartbeat(Role::kWorker, 1, w1.incarnation, now).ok()); }
    }
    auto dead = m->ExpireSilent(now);
    if (!dead.empty()) {
      ASSERT_EQ(dead.size(), 1u);
      EXPECT_EQ(dead[0].rank, 1);
      EXPECT_EQ(dead[0].role, Role::kWorker);
      declared = now;
      break;
    }
  }
  ASSERT_NE(declared, absl::Time());
  EXPECT_LE(declared - (kStart + absl::Seconds(1)), absl::Seconds(2)) << "not declared dead within 2 intervals";
  EXPECT_GT(declared - (kStart + absl::Seconds(1)), absl::Seconds(1)) << "declared dead before a missed beat";
  EXPECT_EQ(m->state(), JobState::kRecovering);
  EXPECT_EQ(m->generation(), 2u);
}

// A stall of the scheduler itself (6 s without a check, as SIGSTOP or a VM pause makes) is nobody's silence:
// nobody is declared dead for it, a member that dies afterwards still is, and a member already silent before the
// stall keeps that silence. A scheduler that is merely slow (checks 600 ms apart) still declares the silent dead.
TEST(MembershipTest, StallsOfTheSchedulerAreNobodysSilence) {
  MembershipOptions options;
  options.num_servers = 1;
  options.num_workers = 2;
  options.heartbeat_timeout = absl::Milliseconds(1500);
  options.stall_threshold = absl::Milliseconds(500);
  auto m = *Membership::Create(options);
  auto server = *m->Register(Role::kServer, "h:1", -1, kStart);
  auto w0 = *m->Register(Role::kWorker, "", -1, kStart);
  auto w1 = *m->Register(Role::kWorker, "", -1, kStart);
  absl::Time now = kStart;
  EXPECT_TRUE(m->ExpireSilent(now).empty());
  ASSERT_TRUE(m->Heartbeat(Role::kWorker, 1, w1.incarnation, now + absl::Milliseconds(200)).ok());
  now += absl::Milliseconds(250);
  EXPECT_TRUE(m->ExpireSilent(now).empty());
  now += absl::Seconds(6);  // the stall: no check, no heartbeat heard
  EXPECT_TRUE(m->ExpireSilent(now).empty()) << "declared dead for a stall of the scheduler";
  EXPECT_EQ(m->stalled(), absl::Milliseconds(5500));
  EXPECT_EQ(m->generation(), 1u);
  // Afterwards the server and worker 0 heartbeat again; worker 1 never does: it is declared dead once its
  // silence while the scheduler ran (50 ms before the stall, 500 ms of it, then the checks) passes 1.5 s.
  absl::Time declared;
  for (int step = 1; step <= 20 && declared == absl::Time(); ++step) {
    now += absl::Milliseconds(250);
    ASSERT_TRUE(m->Heartbeat(Role::kServer, 0, server.incarnation, now).ok());
    ASSERT_TRUE(m->Heartbeat(Role::kWorker, 0, w0.incarnation, now).ok());
    for (const Member& dead : m->ExpireSilent(now)) {
      EXPECT_EQ(dead.role, Role::kWorker);
      EXPECT_EQ(dead.rank, 1);
      declared = now;
    }
  }
  ASSERT_NE(declared, absl::Time());
  EXPECT_EQ(declared - (kStart + absl::Milliseconds(6250)), absl::Seconds(1)) << "its silence was not kept";

  // A slow scheduler: checks 600 ms apart count 500 ms each; a silent member is still declared dead.
  auto slow = *Membership::Create(options);
  auto s2 = *slow->Register(Role::kServer, "h:1", -1, kStart);
  slow->Register(Role::kWorker, "", -1, kStart).IgnoreError();
  slow->Register(Role::kWorker, "", -1, kStart).IgnoreError();
  bool any_dead = false;
  for (int step = 1; step <= 10 && !any_dead; ++step) {
    const absl::Time t = kStart + absl::Milliseconds(600) * step;
    ASSERT_TRUE(slow->Heartbeat(Role::kServer, 0, s2.incarnation, t).ok());
    any_dead = !slow->ExpireSilent(t).empty();
  }
  EXPECT_TRUE(any_dead) << "a slow scheduler never declared its silent workers dead";
}

// deaf_grace: a scheduler cut off from everyone hears no heartbeat at all. It declares a member dead only once it
// heard someone else after that member's deadline, and after a deaf period every member gets the grace.
TEST(MembershipTest, ADeafSchedulerDeclaresNoOneDead) {
  MembershipOptions options;
  options.num_servers = 1;
  options.num_workers = 2;
  options.heartbeat_timeout = absl::Milliseconds(1500);
  options.deaf_grace = absl::Seconds(3);
  auto m = *Membership::Create(options);
  auto server = *m->Register(Role::kServer, "h:1", -1, kStart);
  auto w0 = *m->Register(Role::kWorker, "", -1, kStart);
  auto w1 = *m->Register(Role::kWorker, "", -1, kStart);
  // Cut off for 10 s, checking every 250 ms: nobody is heard, nobody is declared dead.
  absl::Time now = kStart;
  for (; now < kStart + absl::Seconds(10); now += absl::Milliseconds(250)) {
    EXPECT_TRUE(m->ExpireSilent(now).empty()) << "declared dead while the scheduler heard no one, at "
                                              << absl::FormatDuration(now - kStart);
  }
  EXPECT_EQ(m->deaf_periods(), 0);
  // Healed: the server is heard first; the workers come back within the grace, worker 1 never does.
  ASSERT_TRUE(m->Heartbeat(Role::kServer, 0, server.incarnation, now).ok());
  EXPECT_EQ(m->deaf_periods(), 1);
  const absl::Time healed = now;
  absl::Time declared;
  for (int step = 1; step <= 40 && declared == absl::Time(); ++step) {
    now += absl::Milliseconds(250);
    ASSERT_TRUE(m->Heartbeat(Role::kServer, 0, server.incarnation, now).ok());
    if (now >= healed + absl::Seconds(2)) { ASSERT_TRUE(m->Heartbeat(Role::kWorker, 0, w0.incarnation, now).ok()); }
    for (const Member& dead : m->ExpireSilent(now)) {
      EXPECT_EQ(dead.role, Role::kWorker);
      EXPECT_EQ(dead.rank, 1) << "a member heard within the grace was declared dead";
      declared = now;
    }
  }
  ASSERT_NE(declared, absl::Time()) << "a member never heard again was never declared dead";
  EXPECT_GT(declared - healed, absl::Seconds(3)) << "declared dead within the grace";
  EXPECT_LE(declared - healed, absl::Seconds(3) + absl::Milliseconds(500));
  EXPECT_EQ(m->generation(), 2u);

  // One member's crash while the others are heard is still found within the timeout and a heartbeat interval.
  auto crash = *Membership::Create(options);
  auto s2 = *crash->Register(Role::kServer, "h:1", -1, kStart);
  auto a = *crash->Register(Role::kWorker, "", -1, kStart);
  crash->Register(Role::kWorker, "", -1, kStart).IgnoreError();  // worker 1: never heard again
  absl::Time found;
  for (absl::Time t = kStart + absl::Milliseconds(250); t < kStart + absl::Seconds(5) && found == absl::Time();
       t += absl::Milliseconds(250)) {
    ASSERT_TRUE(crash->Heartbeat(Role::kServer, 0, s2.incarnation, t).ok());
    ASSERT_TRUE(crash->Heartbeat(Role::kWorker, 0, a.incarnation, t).ok());
    if (!crash->ExpireSilent(t).empty()) found = t;
  }
  EXPECT_EQ(found, kStart + absl::Milliseconds(1750));

  // Without the rule (deaf_grace infinite) the same cut declares everyone dead.
  options.deaf_grace = absl::InfiniteDuration();
  auto plain = *Membership::Create(options);
  plain->Register(Role::kServer, "h:1", -1, kStart).IgnoreError();
  plain->Register(Role::kWorker, "", -1, kStart).IgnoreError();
  plain->Register(Role::kWorker, "", -1, kStart).IgnoreError();
  EXPECT_EQ(plain->ExpireSilent(kStart + absl::Seconds(2)).size(), 3u);
}

// Both rules at once: a stall of the scheduler inside a deaf grace lengthens the grace; it never shortens it.
TEST(MembershipTest, AStallInsideTheDeafGraceKeepsTheGrace) {
  MembershipOptions options;
  options.num_servers = 1;
  options.num_workers = 1;
  options.heartbeat_timeout = absl::Milliseconds(1500);
  options.stall_threshold = absl::Milliseconds(500);
  options.deaf_grace = absl::Seconds(3);
  auto m = *Membership::Create(options);
  auto server = *m->Register(Role::kServer, "h:1", -1, kStart);
  m->Register(Role::kWorker, "", -1, kStart).IgnoreError();  // never heard again
  absl::Time now = kStart;
  for (; now < kStart + absl::Seconds(10); now += absl::Milliseconds(250)) EXPECT_TRUE(m->ExpireSilent(now).empty());
  ASSERT_TRUE(m->Heartbeat(Role::kServer, 0, server.incarnation, now).ok());  // the first voice: the grace starts
  const absl::Time healed = now;
  EXPECT_TRUE(m->ExpireSilent(now).empty());
  now += absl::Seconds(1);  // a stall of 1 s (500 ms of it past the threshold) inside the grace
  EXPECT_TRUE(m->ExpireSilent(now).empty());
  absl::Time declared;
  while (declared == absl::Time() && now < healed + absl::Seconds(10)) {
    now += absl::Milliseconds(250);
    ASSERT_TRUE(m->Heartbeat(Role::kServer, 0, server.incarnation, now).ok());
    if (!m->ExpireSilent(now).empty()) declared = now;
  }
  ASSERT_NE(declared, absl::Time());
  EXPECT_GT(declared - healed, absl::Milliseconds(3500)) << "the grace (3 s) plus the stall's excess (500 ms)";
}

TEST(MembershipTest, ReplacementTakesTheRankAndZombiesAreRefused) {
  auto m = Make(1, 1);
  auto server = *m->Register(Role::kServer, "h:1", -1, kStart);
  auto old = *m->Register(Role::kWorker, "", -1, kStart);
  ASSERT_TRUE(m->Heartbeat(Role::kServer, 0, server.incarnation, kStart + absl::Seconds(2)).ok());
  // Incarnations are 128 random bits: distinct, and neither small numbers, neighbours of a known one, a
  // truncated or an empty one is taken; the refusal does not reveal the right one.
  ASSERT_EQ(server.incarnation.size(), kIncarnationBytes);
  ASSERT_NE(server.incarnation, old.incarnation);
  std::string neighbour = old.incarnation;
  neighbour.back() ^= 1;
  for (const std::string& guess : {std::string(16, '\0'), std::string(15, '\0') + "\1", neighbour,
                                   server.incarnation.substr(0, 8), std::string(), server.incarnation + "x"}) {
    absl::StatusOr<uint64_t> refused = m->Heartbeat(Role::kServer, 0, guess, kStart + absl::Seconds(2));
    EXPECT_FALSE(refused.ok()) << absl::CEscape(guess);
    EXPECT_EQ(refused.status().message().find(server.incarnation), std::string::npos) << refused.status();
  }
  EXPECT_EQ(m->Heartbeat(Role::kServer, 0, server.incarnation.substr(0, 8), kStart).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_EQ(m->ExpireSilent(kStart + absl::Seconds(2)).size(), 1u);  // the worker went silent
  // The dead incarnation is told to re-register.
  auto stale = m->Heartbeat(Role::kWorker, 0, old.incarnation, kStart + absl::Seconds(2));
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(stale.status().message()), HasSubstr("declared dead"));
  // Its replacement takes rank 0 (no rank requested: the dead one is reused) and the generation moves on.
  auto fresh = *m->Register(Role::kWorker, "", -1, kStart + absl::Seconds(3));
  EXPECT_EQ(fresh.rank, 0);
  EXPECT_EQ(fresh.generation, 3u);
  EXPECT_EQ(fresh.state, JobState::kRunning);
  // A revived zombie of the old incarnation is refused, and so is a request of an old generation.
  auto zombie = m->Heartbeat(Role::kWorker, 0, old.incarnation, kStart + absl::Seconds(3));
  EXPECT_EQ(zombie.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(zombie.status().message()), HasSubstr("superseded"));
  EXPECT_TRUE(m->Heartbeat(Role::kWorker, 0, fresh.incarnation, kStart + absl::Seconds(3)).ok());
  // Per-worker checks: the old incarnation is refused (even with the new generation), and so is the old
  // generation; only exactly the new incarnation and generation are accepted: a generation from the future
  // (which used to skip the check) is refused too.
  EXPECT_EQ(m->CheckWorker(0, old.incarnation, fresh.generation).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(m->CheckWorker(0, fresh.incarnation, old.generation).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(m->CheckWorker(0, fresh.incarnation, fresh.generation + 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m->CheckWorker(0, fresh.incarnation, ~uint64_t{0}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m->CheckWorker(0, "", fresh.generation).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(m->CheckWorker(0, fresh.incarnation, fresh.generation).ok());
  EXPECT_EQ(m->WorkerGenerations(), std::vector<uint64_t>{fresh.generation});
}

TEST(MembershipTest, FinishesWhenEveryWorkerIsDoneAndLeavingIsNoFailure) {
  auto m = Make(1, 2);
  ASSERT_TRUE(m->Register(Role::kServer, "h:1", -1, kStart).ok());
  ASSERT_TRUE(m->Register(Role::kWorker, "", -1, kStart).ok());
  ASSERT_TRUE(m->Register(Role::kWorker, "", -1, kStart).ok());
  EXPECT_EQ(*m->MarkWorkerDone(0), JobState::kRunning);
  EXPECT_EQ(*m->MarkWorkerDone(1), JobState::kFinished);
  EXPECT_EQ(m->MarkWorkerDone(2).status().code(), absl::StatusCode::kInvalidArgument);
  const uint64_t generation = m->generation();
  EXPECT_EQ(m->ExpireSilent(kStart + absl::Seconds(10)).size(), 3u);  // everyone leaves
  EXPECT_EQ(m->state(), JobState::kFinished);
  EXPECT_EQ(m->generation(), generation);
}

// A server declared dead stays owed a rollback even once its replacement registered (the replacement holds
// none of the lost rows), until BeginRollback.
TEST(MembershipTest, ALostServerIsRememberedUntilTheRollback) {
  auto m = Make(2, 1);
  ASSERT_TRUE(m->Register(Role::kServer, "h:1", 0, kStart).ok());
  auto s1 = m->Register(Role::kServer, "h:2", 1, kStart);
  auto w = m->Register(Role::kWorker, "", 0, kStart);
  ASSERT_TRUE(s1.ok() && w.ok());
  EXPECT_FALSE(m->AnyServerDead());
  const absl::Time later = kStart + absl::Seconds(1);
  ASSERT_TRUE(m->Heartbeat(Role::kServer, 0, m->Members()[0].incarnation, later).ok());
  ASSERT_TRUE(m->Heartbeat(Role::kWorker, 0, w->incarnation, later).ok());
  ASSERT_EQ(m->ExpireSilent(later + absl::Milliseconds(600)).size(), 1u);
  ASSERT_TRUE(m->Register(Role::kServer, "h:3", 1, later + absl::Seconds(2)).ok());
  EXPECT_TRUE(m->AllServersAlive());
  EXPECT_TRUE(m->AnyServerDead()) << "the replacement registered before anyone rolled back";
  m->BeginRollback();
  EXPECT_FALSE(m->AnyServerDead());
  m->EndRollback();
}

// A worker leaves only a finished job; it is then no live member (its heartbeats are refused). A rollback of
// the finished job that restores its final checkpoint makes it finished again, every worker done.
TEST(MembershipTest, WorkersLeaveOnlyAFinishedJobAndAFinalRestoreFinishesItAgain) {
  auto m = Make(1, 2);
  ASSERT_TRUE(m->Register(Role::kServer, "h:1", -1, kStart).ok());
  auto w0 = m->Register(Role::kWorker, "", -1, kStart);
  auto w1 = m->Register(Role::kWorker, "", -1, kStart);
  ASSERT_TRUE(w0.ok() && w1.ok());
  EXPECT_EQ(m->MarkWorkerLeft(0).code(), absl::StatusCode::kFailedPrecondition) << "the job is running";
  ASSERT_EQ(*m->MarkWorkerDone(0), JobState::kRunning);
  ASSERT_EQ(*m->MarkWorkerDone(1), JobState::kFinished);
  ASSERT_TRUE(m->MarkWorkerLeft(1).ok());
  EXPECT_EQ(m->MarkWorkerLeft(2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(m->AnyWorkerAlive());
  EXPECT_EQ(m->Heartbeat(Role::kWorker, 1, w1->incarnation, kStart).status().code(),
            absl::StatusCode::kFailedPrecondition);
  m->BeginRollback();
  EXPECT_EQ(m->state(), JobState::kRecovering);
  m->EndRollback(/*finished=*/true);
  EXPECT_EQ(m->state(), JobState::kFinished);
  ASSERT_TRUE(m->MarkWorkerLeft(0).ok());
  EXPECT_FALSE(m->AnyWorkerAlive());
}

TEST(MembershipTest, FailOverPutsDeadServersOutOfServiceOnlyWhenCovered) {
  auto m = Make(3, 1);
  std::vector<Registration> servers;
  for (int s = 0; s < 3; ++s) servers.push_back(*m->Register(Role::kServer, absl::StrCat("h:", s), s, kStart));
  auto w = *m->Register(Role::kWorker, "", 0, kStart);
  EXPECT_TRUE(m->FailOver([](const std::vector<bool>&) { return true; }).empty()) << "nobody is dead";

  const absl::Time later = kStart + absl::Seconds(1);
  ASSERT_TRUE(m->Heartbeat(Role::kServer, 0, servers[0].incarnation, later).ok());
  ASSERT_TRUE(m->Heartbeat(Role::kServer, 2, servers[2].incarnation, later).ok());
  ASSERT_TRUE(m->Heartbeat(Role::kWorker, 0, w.incarnation, later).ok());
  ASSERT_EQ(m->ExpireSilent(later + absl::Milliseconds(600)).size(), 1u);  // server 1
  EXPECT_TRUE(m->AnyServerDead());
  EXPECT_EQ(m->state(), JobState::kRecovering);

  // Refused (some range would have no copy): nothing changes.
  std::vector<bool> seen;
  EXPECT_TRUE(m->FailOver([&](const std::vector<bool>& out) {
                  seen = out;
                  return false;
                }).empty());
  EXPECT_EQ(seen, (std::vector<bool>{false, true, false}));
  EXPECT_EQ(m->routing().generation, 0u);
  EXPECT_TRUE(m->AnyServerDead());

  EXPECT_EQ(m->FailOver([](const std::vector<bool>&) { return true; }), std::vector<int>{1});
  EXPECT_FALSE(m->AnyServerDead());
  EXPECT_EQ(m->state(), JobState::kRunning) << "running without server 1";
  EXPECT_EQ(m->routing().generation, 1u);
  EXPECT_EQ(m->routing().out_of_service, std::vector<int>{1});
  EXPECT_EQ(m->routing().failovers, 1u);
  EXPECT_EQ(m->WorkerGenerations()[0], w.generation) << "the worker's requests stay valid";

  // The replacement registers and stays out of service. Its own death loses nothing: no failover or rollback is
  // owed, and the job keeps running.
  auto replacement = m->Register(Role::kServer, "h:9", 1, later);
  ASSERT_TRUE(replacement.ok());
  EXPECT_FALSE(m->AnyServerDead());
  EXPECT_EQ(m->routing().out_of_service, std::vector<int>{1});
  EXPECT_EQ(m->LiveServerAddresses(), (std::vector<std::string>{"h:0", "h:9", "h:2"}));
  const absl::Time later2 = later + absl::Seconds(1);
  ASSERT_TRUE(m->Heartbeat(Role::kServer, 0, servers[0].incarnation, later2).ok());
  ASSERT_TRUE(m->Heartbeat(Role::kServer, 2, servers[2].incarnation, later2).ok());
  ASSERT_TRUE(m->Heartbeat(Role::kWorker, 0, w.incarnation, later2).ok());
  ASSERT_EQ(m->ExpireSilent(later2 + absl::Milliseconds(600)).size(), 1u);
  EXPECT_FALSE(m->AnyServerDead());
  EXPECT_EQ(m->state(), JobState::kRunning);
  EXPECT_TRUE(m->FailOver([](const std::vector<bool>&) { return true; }).empty());
  EXPECT_EQ(m->LiveServerAddresses(), (std::vector<std::string>{"h:0", "", "h:2"}));
  // A rollback puts every server back in service.
  m->BeginRollback();
  m->EndRollback();
  EXPECT_TRUE(m->routing().out_of_service.empty());
  EXPECT_EQ(m->routing().generation, 2u);
  EXPECT_EQ(m->routing().failovers, 1u);
}

TEST(MembershipTest, RescaleAdmitsJoiningRanksThenMovesTheCountsAndRemovesTheLeavers) {
  auto m = Make(3, 1);
  std::vector<std::string> servers;
  for (int s = 0; s < 3; ++s) servers.push_back(m->Register(Role::kServer, absl::StrCat("h:", s), s, kStart)->incarnation);
  ASSERT_TRUE(m->Register(Role::kWorker, "", 0, kStart).ok());
  ASSERT_EQ(m->state(), JobState::kRunning);
  EXPECT_TRUE(absl::IsUnavailable(m->Register(Role::kServer, "h:9", 3, kStart).status())) << "no rescale pending";
  EXPECT_TRUE(absl::IsInvalidArgument(m->BeginScale({3, 1}))) << "nothing to change";
  EXPECT_TRUE(absl::IsInvalidArgument(m->BeginScale({0, 1})));

  // Grow to 4: rank 3 registers as joining; the job neither waits for it nor counts it.
  ASSERT_TRUE(m->BeginScale({4, 1}).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(m->BeginScale({5, 1}))) << "one at a time";
  EXPECT_FALSE(m->ScaleReady());
  auto joining = m->Register(Role::kServer, "h:3", -1, kStart);
  ASSERT_TRUE(joining.ok()) << joining.status();
  EXPECT_EQ(joining->rank, 3);
  EXPECT_TRUE(joining->joining);
  EXPECT_TRUE(m->ScaleReady());
  EXPECT_EQ(m->TargetServerAddresses(), (std::vector<std::string>{"h:0", "h:1", "h:2", "h:3"}));
  EXPECT_EQ(m->LiveServerAddresses().size(), 3u);
  EXPECT_TRUE(m->Heartbeat(Role::kServer, 3, joining->incarnation, kStart).ok());
  const uint64_t generation = m->generation();
  ASSERT_TRUE(m->CommitScale("p4").ok());
  EXPECT_EQ(m->layout().num_servers, 4);
  EXPECT_EQ(m->layout().partition, "p4");
  EXPECT_EQ(m->layout().generation, 1u);
  EXPECT_EQ(m->generation(), generation) << "a rescale is not a failure: no worker's generation moves";
  EXPECT_EQ(m->state(), JobState::kRunning);

  // Shrink to 2: ranks 2 and 3 are removed; their heartbeats say so (OutOfRange: exit), not "dead".
  ASSERT_TRUE(m->BeginScale({2, 1}).ok());
  EXPECT_TRUE(m->ScaleReady()) << "nobody to wait for";
  ASSERT_TRUE(m->CommitScale("p2").ok());
  EXPECT_EQ(m->layout().num_servers, 2);
  EXPECT_TRUE(absl::IsOutOfRange(m->Heartbeat(Role::kServer, 2, servers[2], kStart).status()));
  EXPECT_TRUE(absl::IsOutOfRange(m->Heartbeat(Role::kServer, 3, joining->incarnation, kStart).status()));
  EXPECT_TRUE(m->Heartbeat(Role::kServer, 1, servers[1], kStart).ok());
  // The removed ranks' silence later is nobody's death: only server 1, silent too, expires.
  EXPECT_TRUE(m->Heartbeat(Role::kServer, 0, servers[0], kStart + absl::Seconds(10)).ok());
  ASSERT_TRUE(m->Heartbeat(Role::kWorker, 0, m->Members()[2].incarnation, kStart + absl::Seconds(10)).ok());
  const std::vector<Member> expired = m->ExpireSilent(kStart + absl::Seconds(10));
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].role, Role::kServer);
  EXPECT_EQ(expired[0].rank, 1);
}

TEST(MembershipTest, CancelledRescaleLetsTheJoiningRanksGo) {
  auto m = Make(1, 1);
  ASSERT_TRUE(m->Register(Role::kServer, "h:0", 0, kStart).ok());
  ASSERT_TRUE(m->Register(Role::kWorker, "", 0, kStart).ok());
  ASSERT_TRUE(m->BeginScale({2, 1}).ok());
  auto joining = m->Register(Role::kServer, "h:1", 1, kStart);
  ASSERT_TRUE(joining.ok());
  m->CancelScale();
  EXPECT_FALSE(m->pending_scale().has_value());
  EXPECT_EQ(m->layout().num_servers, 1);
  EXPECT_TRUE(absl::IsOutOfRange(m->Heartbeat(Role::kServer, 1, joining->incarnation, kStart).status()));
  EXPECT_TRUE(absl::IsUnavailable(m->Register(Role::kServer, "h:1", 1, kStart).status()));
}

TEST(MembershipTest, RemovingADeadMiddleRankRenumbersTheRanksAboveItKeepingTheirIds) {
  auto m = Make(3, 3);
  std::vector<std::string> servers, workers;
  for (int s = 0; s < 3; ++s) servers.push_back(m->Register(Role::kServer, absl::StrCat("h:", s), s, kStart)->incarnation);
  for (int w = 0; w < 3; ++w) workers.push_back(m->Register(Role::kWorker, "", w, kStart)->incarnation);
  ASSERT_EQ(m->state(), JobState::kRunning);
  EXPECT_TRUE(absl::IsFailedPrecondition(m->BeginScale({3, 2, {}, {1}}))) << "worker 1 is alive";

  // Worker 1 and server 1 go silent; the others keep beating.
  const absl::Time later = kStart + absl::Seconds(3);
  for (int s : {0, 2}) ASSERT_TRUE(m->Heartbeat(Role::kServer, s, servers[s], later).ok());
  for (int w : {0, 2}) ASSERT_TRUE(m->Heartbeat(Role::kWorker, w, workers[w], later).ok());
  ASSERT_EQ(m->ExpireSilent(later).size(), 2u);
  EXPECT_TRUE(m->DeadFor(absl::Seconds(5), later + absl::Seconds(4)).empty()) << "not dead long enough";
  const DeadMembers dead = m->DeadFor(absl::Seconds(5), later + absl::Seconds(5));
  EXPECT_EQ(dead.servers, std::vector<int>{1});
  EXPECT_EQ(dead.workers, std::vector<int>{1});
  EXPECT_EQ(m->state(), JobState::kRecovering);
  EXPECT_TRUE(absl::IsInvalidArgument(m->BeginScale({2, 3, {}, {1}}))) << "a removal cannot add ranks";
  EXPECT_TRUE(absl::IsInvalidArgument(m->BeginScale({3, 2, {}, {1, 1}})));

  // Removing them while the job recovers (it cannot run without them).
  ASSERT_TRUE(m->BeginScale({2, 2, {1}, {1}}).ok()) << "a removal may begin while the job recovers";
  EXPECT_TRUE(m->ScaleReady());
  EXPECT_EQ(m->TargetServerAddresses(), (std::vector<std::string>{"h:0", "h:2"}));
  const uint64_t generation = m->generation();
  ASSERT_TRUE(m->CommitScale("p2").ok());
  const JobLayout layout = m->layout();
  EXPECT_EQ(layout.num_servers, 2);
  EXPECT_EQ(layout.num_workers, 2);
  EXPECT_EQ(layout.server_ids, (std::vector<int>{0, 2}));
  EXPECT_EQ(layout.worker_ids, (std::vector<int>{0, 2}));
  EXPECT_EQ(m->state(), JobState::kRunning) << "every member left is alive";
  // Worker id 2 is rank 1 now, at a new generation (its requests of the old layout named rank 2); worker 0
  // keeps its generation.
  EXPECT_GT(m->generation(), generation);
  const std::vector<uint64_t> generations = m->WorkerGenerations();
  ASSERT_EQ(generations.size(), 2u);
  EXPECT_EQ(generations[1], m->generation());
  EXPECT_LT(generations[0], generations[1]);
  // Heartbeats name the id; the answer says the rank.
  int rank = -1;
  ASSERT_TRUE(m->Heartbeat(Role::kWorker, 2, workers[2], later, 0, &rank).ok());
  EXPECT_EQ(rank, 1);
  ASSERT_TRUE(m->Heartbeat(Role::kServer, 2, servers[2], later, 0, &rank).ok());
  EXPECT_EQ(rank, 1);
  EXPECT_TRUE(m->CheckWorker(1, workers[2], generations[1]).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(m->CheckWorker(1, workers[2], generation)))
      << "a request of the old layout is refused";
  // The removed ids are told they are out, now and when they come back.
  EXPECT_TRUE(absl::IsOutOfRange(m->Heartbeat(Role::kWorker, 1, workers[1], later).status()));
  EXPECT_TRUE(absl::IsOutOfRange(m->Register(Role::kWorker, "", 1, later).status()));
  EXPECT_TRUE(absl::IsOutOfRange(m->Register(Role::kServer, "h:1", 1, later).status()));
  // A later rescale that grows the job may take a removed id back: it joins after the ranks kept.
  ASSERT_TRUE(m->BeginScale({2, 3}).ok());
  auto back = m->Register(Role::kWorker, "", 1, later);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->joining);
  EXPECT_EQ(back->rank, 2);
  ASSERT_TRUE(m->CommitScale("p2").ok());
  EXPECT_EQ(m->layout().worker_ids, (std::vector<int>{0, 2, 1}));
}

TEST(MembershipTest, JoiningMembersTakeTheNewRanksInTheOrderOfTheirIds) {
  auto m = Make(1, 1);
  ASSERT_TRUE(m->Register(Role::kServer, "h:0", 0, kStart).ok());
  ASSERT_TRUE(m->Register(Role::kWorker, "", 0, kStart).ok());
  ASSERT_TRUE(m->BeginScale({1, 3}).ok());
  auto five = m->Register(Role::kWorker, "", 5, kStart);
  ASSERT_TRUE(five.ok());
  EXPECT_EQ(five->rank, 1);
  auto two = m->Register(Role::kWorker, "", 2, kStart);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->rank, 1);
  EXPECT_TRUE(absl::IsAlreadyExists(m->Register(Role::kWorker, "", 5, kStart).status()));
  EXPECT_TRUE(absl::IsUnavailable(m->Register(Role::kWorker, "", 7, kStart).status())) << "no place left";
  int rank = -1;
  ASSERT_TRUE(m->Heartbeat(Role::kWorker, 5, five->incarnation, kStart, 0, &rank).ok());
  EXPECT_EQ(rank, 2);
  ASSERT_TRUE(m->CommitScale("p1").ok());
  EXPECT_EQ(m->layout().worker_ids, (std::vector<int>{0, 2, 5}));
}

TEST(MembershipTest, ResumedIdsAreTheCheckpointsAndAreValidated) {
  MembershipOptions options;
  options.num_servers = 2;
  options.num_workers = 2;
  options.worker_ids = {0, 3};
  auto m = Membership::Create(options);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->layout().worker_ids, (std::vector<int>{0, 3}));
  EXPECT_EQ((*m)->layout().server_ids, (std::vector<int>{0, 1}));
  auto registered = (*m)->Register(Role::kWorker, "", 3, kStart);
  ASSERT_TRUE(registered.ok());
  EXPECT_EQ(registered->rank, 1);
  EXPECT_TRUE(absl::IsUnavailable((*m)->Register(Role::kWorker, "", 1, kStart).status()));
  options.worker_ids = {3, 3};
  EXPECT_TRUE(absl::IsInvalidArgument(Membership::Create(options).status()));
  options.worker_ids = {0};
  EXPECT_TRUE(absl::IsInvalidArgument(Membership::Create(options).status()));
}

// Random deaths, removals of dead ranks from anywhere, and growths taking new ids: after every rescale the ranks
// are dense, every id is held once, each live member's heartbeat (by id) answers the rank the layout gives its
// id, worker generations only move forward, and removed ids are refused when they come back.
TEST(MembershipTest, RandomRemovalsAndGrowthsKeepRanksDenseAndIdsUnique) {
  const TestSeed seed(5);
  std::mt19937 rng(seed.value());
  for (int trial = 0; trial < 50; ++trial) {
    const int servers = std::uniform_int_distribution<int>(1, 4)(rng);
    const int workers = std::uniform_int_distribution<int>(1, 5)(rng);
    auto m = Make(servers, workers);
    std::map<std::pair<Role, int>, std::string> live;  // (role, id) -> incarnation
    absl::Time now = kStart;
    for (int s = 0; s < servers; ++s) live[{Role::kServer, s}] = m->Register(Role::kServer, "h", s, now)->incarnation;
    for (int w = 0; w < workers; ++w) live[{Role::kWorker, w}] = m->Register(Role::kWorker, "", w, now)->incarnation;
    std::set<std::pair<Role, int>> removed;
    int next_id = 10;
    for (int step = 0; step < 8; ++step) {
      const JobLayout before = m->layout();
      now += absl::Seconds(5);
      // Some members die (the others heartbeat); at least one of each role stays.
      std::vector<int> dead_servers, dead_workers;
      for (auto [role, ids, dead] : {std::make_tuple(Role::kServer, before.server_ids, &dead_servers),
                                     std::make_tuple(Role::kWorker, before.worker_ids, &dead_workers)}) {
        for (int r = 0; r < static_cast<int>(ids.size()); ++r) {
          const bool dies = static_cast<int>(dead->size()) + 1 < static_cast<int>(ids.size()) &&
                            std::uniform_int_distribution<int>(0, 3)(rng) == 0;
          if (dies) {
            dead->push_back(r);
          } else {
            ASSERT_TRUE(m->Heartbeat(role, ids[r], live[{role, ids[r]}], now).ok());
          }
        }
      }
      m->ExpireSilent(now);
      const std::vector<uint64_t> generations_before = m->WorkerGenerations();
      if (!dead_servers.empty() || !dead_workers.empty()) {
        ScaleTarget target{before.num_servers - static_cast<int>(dead_servers.size()),
                           before.num_workers - static_cast<int>(dead_workers.size()), dead_servers, dead_workers};
        ASSERT_TRUE(m->BeginScale(target).ok());
        ASSERT_TRUE(m->CommitScale("p").ok());
        for (int r : dead_servers) removed.insert({Role::kServer, before.server_ids[r]});
        for (int r : dead_workers) removed.insert({Role::kWorker, before.worker_ids[r]});
      } else if (std::uniform_int_distribution<int>(0, 1)(rng) == 0) {
        // Grow by one worker taking a new id (or a removed one back).
        ASSERT_TRUE(m->BeginScale({before.num_servers, before.num_workers + 1}).ok());
        const int id = next_id++;
        auto joined = m->Register(Role::kWorker, "", id, now);
        ASSERT_TRUE(joined.ok()) << joined.status();
        live[{Role::kWorker, id}] = joined->incarnation;
        ASSERT_TRUE(m->CommitScale("p").ok());
      }
      const JobLayout after = m->layout();
      ASSERT_EQ(static_cast<int>(after.server_ids.size()), after.num_servers);
      ASSERT_EQ(static_cast<int>(after.worker_ids.size()), after.num_workers);
      for (auto [role, ids] : {std::make_pair(Role::kServer, after.server_ids),
                               std::make_pair(Role::kWorker, after.worker_ids)}) {
        EXPECT_EQ(std::set<int>(ids.begin(), ids.end()).size(), ids.size()) << "an id held twice";
        for (int r = 0; r < static_cast<int>(ids.size()); ++r) {
          EXPECT_EQ(removed.count({role, ids[r]}), 0u) << "a removed id is in the layout";
          int rank = -1;
          ASSERT_TRUE(m->Heartbeat(role, ids[r], live[{role, ids[r]}], now, 0, &rank).ok());
          EXPECT_EQ(rank, r);
        }
      }
      // A kept worker's generation never goes back.
      const std::vector<uint64_t> generations = m->WorkerGenerations();
      for (int r = 0; r < after.num_workers; ++r) {
        const auto was = std::find(before.worker_ids.begin(), before.worker_ids.end(), after.worker_ids[r]);
        if (was != before.worker_ids.end()) {
          EXPECT_GE(generations[r], generations_before[was - before.worker_ids.begin()]);
        }
      }
      for (const auto& [role, id] : removed) {
        EXPECT_TRUE(absl::IsOutOfRange(m->Register(role, "h", id, now).status()));
      }
      EXPECT_EQ(m->state(), JobState::kRunning);
    }
  }
}

}  // namespace
}  // namespace kestrel
