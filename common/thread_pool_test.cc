#include "common/thread_pool.h"

#include <atomic>
#include <set>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

TEST(ThreadPoolTest, RunsEveryTaskBeforeDestruction) {
  std::atomic<int> sum{0};
  {
    ThreadPool pool(3);
    EXPECT_EQ(pool.size(), 3);
    for (int i = 1; i <= 1000; ++i) pool.Schedule([&sum, i] { sum += i; });
  }
  EXPECT_EQ(sum.load(), 500500);
}

TEST(ThreadPoolTest, UsesSeveralThreads) {
  absl::Mutex mu;
  std::set<std::thread::id> ids;
  int started = 0;
  {
    ThreadPool pool(2);
    // Each task waits until both have started, so two threads must run them.
    for (int i = 0; i < 2; ++i) {
      pool.Schedule([&] {
        absl::MutexLock lock(&mu);
        ++started;
        ids.insert(std::this_thread::get_id());
        mu.Await(absl::Condition(+[](int* n) { return *n == 2; }, &started));
      });
    }
  }
  EXPECT_EQ(ids.size(), 2u);
}

TEST(ThreadPoolTest, TryScheduleRefusesBeyondTheBound) {
  absl::Notification started, release;
  std::atomic<int> ran{0};
  {
    ThreadPool pool(1, /*max_queued=*/2);
    ASSERT_TRUE(pool.TrySchedule([&] {  // occupies the thread
      started.Notify();
      release.WaitForNotification();
      ++ran;
    }));
    started.WaitForNotification();  // it left the queue, which is empty again
    EXPECT_TRUE(pool.TrySchedule([&] { ++ran; }));
    EXPECT_TRUE(pool.TrySchedule([&] { ++ran; }));
    EXPECT_FALSE(pool.TrySchedule([&] { ++ran; })) << "two are waiting: the third is refused";
    release.Notify();
  }
  EXPECT_EQ(ran.load(), 3);
}

}  // namespace
}  // namespace kestrel
