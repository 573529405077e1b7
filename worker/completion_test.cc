// Completion: Wait() returns once every outstanding call has called Done(), from any thread, before or while
// the caller waits.
#include "worker/completion.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace kestrel {
namespace {

TEST(CompletionTest, NothingPendingReturnsAtOnce) {
  Completion none(0);
  none.Wait();
}

TEST(CompletionTest, CallsDoneBeforeTheWait) {
  Completion all(2);
  all.Done();
  all.Done();
  all.Wait();
}

TEST(CompletionTest, WaitsForEveryThread) {
  constexpr int kCalls = 16;
  Completion all(kCalls);
  std::atomic<int> finished{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kCalls; ++i) {
    threads.emplace_back([&] {
      finished.fetch_add(1);
      all.Done();
    });
  }
  all.Wait();
  EXPECT_EQ(finished.load(), kCalls);
  for (std::thread& t : threads) t.join();
}

}  // namespace
}  // namespace kestrel
