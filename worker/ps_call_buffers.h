// The buffers a routed PsClient call (worker/routed_ps_client.h) fills and reuses: its requests (Rpc), the dense
// blocks and ids of a call (CallBuffers), the raw-keys forms' KeyBatch (RawKeysBuffers), and the pool that lends
// them to one call at a time (BufferPool), so that calls reuse earlier calls' capacity instead of allocating.
#ifndef KESTREL_WORKER_PS_CALL_BUFFERS_H_
#define KESTREL_WORKER_PS_CALL_BUFFERS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/key_batch.h"
#include "proto/ps.pb.h"

namespace kestrel {

// One request of a call: rows [first_row, first_row + rows) of the call's server-grouped id list. A call reuses
// the Rpcs of earlier calls: it sets every per-call field again.
struct Rpc {
  int owner = 0;   // the range group (its owner server)
  int server = 0;  // where the current attempt goes: the group's primary
  int seq = 0;  // index among this call's requests to the same server
  size_t first_row = 0;
  size_t rows = 0;
  float* pull_into = nullptr;        // kPull: where the rows land
  const void* push_from = nullptr;   // pushes: where the encoded gradient rows are read from
  size_t push_bytes = 0;
  std::vector<uint16_t> wire;        // pushes of a half type: the encoded rows
  PullRequest pull_request;
  PullResponse pull_response;
  PushRequest push_request;
  PushResponse push_response;
  absl::Status status;
};

// Buffers one call reuses from earlier calls: request/response strings keep their capacity.
struct CallBuffers {
  std::vector<float> rows;        // dense blocks: pulled values or gradients
  std::vector<uint64_t> ids;      // dense block ids grouped by server
  std::vector<size_t> offsets;    // server s's ids are [offsets[s], offsets[s+1])
  std::vector<std::unique_ptr<Rpc>> rpcs;
};

// Buffers of the raw-keys forms: the KeyBatch built from the keys, and its unique rows.
struct RawKeysBuffers {
  KeyBatch batch;
  std::vector<float> rows;
};

// A free list of T, each lent to one call at a time, so calls reuse earlier calls' buffers. Owns every T that is
// not lent; a Lease owns its T until it ends, and must not outlive the pool. Thread-safe.
template <typename T>
class BufferPool {
 public:
  // Borrows a T (a new one when none is free) for its lifetime.
  class Lease {
   public:
    explicit Lease(BufferPool* pool) : pool_(pool) {
      absl::MutexLock lock(&pool_->mu_);
      if (pool_->free_.empty()) {
        item_ = std::make_unique<T>();
      } else {
        item_ = std::move(pool_->free_.back());
        pool_->free_.pop_back();
      }
    }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() {
      absl::MutexLock lock(&pool_->mu_);
      pool_->free_.push_back(std::move(item_));
    }
    T& operator*() const { return *item_; }

   private:
    BufferPool* const pool_;
    std::unique_ptr<T> item_;
  };

 private:
  absl::Mutex mu_;
  std::vector<std::unique_ptr<T>> free_ ABSL_GUARDED_BY(mu_);
};

// One pool for every client's raw-keys calls (a decorator's nested call takes a buffer of its own). Never
// destroyed.
BufferPool<RawKeysBuffers>& RawKeysPool();

}  // namespace kestrel

#endif  // KESTREL_WORKER_PS_CALL_BUFFERS_H_
