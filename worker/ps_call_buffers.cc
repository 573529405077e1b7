// The process-wide pool of the raw-keys forms' buffers (worker/ps_call_buffers.h).
#include "worker/ps_call_buffers.h"

namespace kestrel {

BufferPool<RawKeysBuffers>& RawKeysPool() {
  static auto* pool = new BufferPool<RawKeysBuffers>();
  return *pool;
}

}  // namespace kestrel
