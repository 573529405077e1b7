#include "worker/clock_gate.h"

namespace kestrel {
namespace {

class SingleWorkerGate final : public ClockGate {
 public:
  absl::Status WaitToStart(int64_t) override { return absl::OkStatus(); }
  absl::Status Advance(int64_t, bool, const WorkerState&) override { return absl::OkStatus(); }
  absl::Status WaitAllFinished(int64_t) override { return absl::OkStatus(); }
};

}  // namespace

std::unique_ptr<ClockGate> NewSingleWorkerGate() { return std::make_unique<SingleWorkerGate>(); }

}  // namespace kestrel
