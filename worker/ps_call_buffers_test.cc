// BufferPool: a lease lends one item at a time and gives it back when it ends, so a later call reuses it (with
// its capacity); concurrent leases never share an item; the raw-keys pool is one pool for the process.
#include "worker/ps_call_buffers.h"

#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

TEST(BufferPoolTest, ALaterLeaseReusesTheItemAndItsCapacity) {
  BufferPool<CallBuffers> pool;
  CallBuffers* first = nullptr;
  {
    BufferPool<CallBuffers>::Lease lease(&pool);
    first = &*lease;
    (*lease).rows.resize(1000);
  }
  BufferPool<CallBuffers>::Lease again(&pool);
  EXPECT_EQ(&*again, first);
  EXPECT_EQ((*again).rows.size(), 1000u);  // handed back as it was left: the call resizes what it uses
}

TEST(BufferPoolTest, OverlappingLeasesGetDistinctItems) {
  BufferPool<RawKeysBuffers> pool;
  BufferPool<RawKeysBuffers>::Lease a(&pool);
  BufferPool<RawKeysBuffers>::Lease b(&pool);
  EXPECT_NE(&*a, &*b);
}

TEST(BufferPoolTest, ConcurrentCallsNeverShareAnItem) {
  BufferPool<CallBuffers> pool;
  absl::Mutex mu;
  std::set<CallBuffers*> in_use;
  bool shared = false;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        BufferPool<CallBuffers>::Lease lease(&pool);
        {
          absl::MutexLock lock(&mu);
          if (!in_use.insert(&*lease).second) shared = true;
        }
        (*lease).ids.push_back(i);
        absl::MutexLock lock(&mu);
        in_use.erase(&*lease);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_FALSE(shared);
}

TEST(BufferPoolTest, TheRawKeysPoolIsOnePool) { EXPECT_EQ(&RawKeysPool(), &RawKeysPool()); }

}  // namespace
}  // namespace kestrel
