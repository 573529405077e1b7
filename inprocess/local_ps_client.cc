#include "inprocess/local_ps_client.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/half.h"
#include "common/step_wire.h"
#include "common/thread_pool.h"
#include "server/ps_handlers.h"

namespace kestrel {
namespace {

// Runs each request on the calling thread with one shard, on a pool of one thread per shard with more, so the
// shards of one call work concurrently, as separate servers would.
class LocalTransport final : public PsTransport {
 public:
  explicit LocalTransport(std::vector<Shard*> shards)
      : shards_(std::move(shards)),
        pool_(shards_.size() > 1 ? std::make_unique<ThreadPool>(static_cast<int>(shards_.size())) : nullptr) {}

  // Rows go straight from the shard's table into `out` (no response message).
  void PullInto(int server, const PullRequest& request, float* out, size_t floats, absl::Duration deadline,
                std::function<void(absl::Status)> done) override {
    Shard* shard = shards_[server];
    WhenClocksAllow(*shard, request, TableConfig::SPARSE, deadline, done, [shard, &request, out, floats, done] {
      // fp32 rows go straight into `out`; half types (and an answer of another size) land in `wire` and are
      // decoded as the network client would.
      std::vector<char> wire;
      size_t answered = floats;
      ValueType answered_type = request.value_type();
      absl::Status status = HandlePullInto(*shard, request, [&](size_t n, int, ValueType type) -> void* {
        answered = n;
        answered_type = type;
        if (n == floats && type == VALUE_TYPE_FLOAT32) return out;
        wire.resize(std::max<size_t>(1, n * BytesPerValue(type)));
        return wire.data();
      });
      if (status.ok() && (answered != floats || answered_type != request.value_type())) {
        status = absl::DataLossError(
            absl::StrFormat("the pull answered %d values, expected %d", answered, floats));
      }
      if (status.ok() && !wire.empty()) status = DecodeValues(answered_type, wire.data(), floats, 0, out);
      done(std::move(status));
    });
  }

  int num_servers() const override { return static_cast<int>(shards_.size()); }

  void Call(int server, PsMethod method, const google::protobuf::Message& request,
            google::protobuf::Message* response, absl::Duration deadline,
            std::function<void(absl::Status)> done) override {
    Shard* shard = shards_[server];
    auto call = [shard, method, &request, response, done] { CallNow(*shard, method, request, response, done); };
    if (method == PsMethod::kPull || method == PsMethod::kPullDense) {
      WhenClocksAllow(*shard, MessageAs<PullRequest>(request),
                      method == PsMethod::kPull ? TableConfig::SPARSE : TableConfig::DENSE, deadline, done,
                      std::move(call));
    } else {
      Dispatch(std::move(call));
    }
  }

  // The request's bytes read as the gRPC edge reads them (ReadStepRequest), the pushes now, the reads once every
  // table read has the clocks they wait for, answered through a StepResponseWriter and decoded by ReadStepPulls.
  void Step(int server, std::shared_ptr<const std::string> request, absl::Span<const StepRead> reads,
            absl::Duration deadline, std::function<void(absl::Status)> done) override {
    Shard* shard = shards_[server];
    auto step = std::make_shared<StepRequestView>();
    grpc::Slice bytes(request->data(), request->size());
    if (absl::Status read = ReadStepRequest(grpc::ByteBuffer(&bytes, 1), step.get()); !read.ok()) {
      return done(shard->Count(read));
    }
    std::vector<StepRead> targets(reads.begin(), reads.end());
    Dispatch([shard, step, targets = std::move(targets), deadline, done] {
      if (absl::Status pushed = HandleStepPushes(*shard, *step); !pushed.ok()) return done(pushed);
      AwaitStepTables(
          *shard, step, 0, absl::Now() + deadline,
          [shard, step, targets, done] {
            StepResponseWriter writer;
            absl::Status answered = HandleStepPulls(*shard, *step, &writer);
            done(answered.ok() ? ReadStepPulls(writer.Finish(), targets) : answered);
          },
          done);
    });
  }

 private:
  // Waits for the clocks of step's pulled tables from the `next`-th on (Shard::AwaitClocks), then runs `read`.
  static void AwaitStepTables(Shard& shard, std::shared_ptr<const StepRequestView> step, size_t next,
                              absl::Time until, std::function<void()> read, std::function<void(absl::Status)> done) {
    const RequestHeader& header = *step->header;
    for (; next < step->tables.size(); ++next) {
      const StepTableFields& t = step->tables[next];
      if (!t.pull || !header.has_wait_clock()) continue;
      absl::StatusOr<bool> ready = shard.AwaitClocks(
          ContextOf(header), t.table, t.dense ? TableConfig::DENSE : TableConfig::SPARSE, header.wait_clock(), until,
          [&shard, step, next, until, read, done](absl::Status waited) {
            if (!waited.ok()) return done(std::move(waited));
            AwaitStepTables(shard, step, next + 1, until, read, done);
          });
      if (!ready.ok()) return done(ready.status());
      if (!*ready) return;
    }
    read();
  }

  // Runs `read` (which answers `done`) as a server would: for a training read with header.wait_clock once the
  // shard's clocks allow it (Shard::AwaitClocks), on the thread that released it; else dispatched now.
  void WhenClocksAllow(Shard& shard, const PullRequest& request, TableConfig::Kind kind, absl::Duration deadline,
                       const std::function<void(absl::Status)>& done, std::function<void()> read) {
    if (!request.header().has_wait_clock()) return Dispatch(std::move(read));
    absl::StatusOr<bool> ready = shard.AwaitClocks(
        ContextOf(request.header()), request.table(), kind, request.header().wait_clock(), absl::Now() + deadline,
        [done, read](absl::Status waited) {
          if (waited.ok()) return read();
          done(std::move(waited));
        });
    if (!ready.ok()) return done(ready.status());
    if (*ready) Dispatch(std::move(read));
  }

  void Dispatch(std::function<void()> task) {
    if (pool_ == nullptr) return task();
    pool_->Schedule(std::move(task));
  }

  static void CallNow(Shard& shard, PsMethod method, const google::protobuf::Message& request,
                      google::protobuf::Message* response, const std::function<void(absl::Status)>& done) {
    switch (method) {
      case PsMethod::kPull:
        return done(HandlePull(shard, MessageAs<PullRequest>(request), MessageAs<PullResponse>(response)));
      case PsMethod::kPush:
        return done(HandlePush(shard, MessageAs<PushRequest>(request), MessageAs<PushResponse>(response)));
      case PsMethod::kPullDense:
        return done(HandlePullDense(shard, MessageAs<PullRequest>(request), MessageAs<PullResponse>(response)));
      case PsMethod::kPushDense:
        return done(HandlePushDense(shard, MessageAs<PushRequest>(request), MessageAs<PushResponse>(response)));
      case PsMethod::kCreateTable:
        return done(HandleCreateTable(shard, MessageAs<CreateTableRequest>(request), MessageAs<CreateTableResponse>(response)));
      case PsMethod::kDescribeTables:
        return done(HandleDescribeTables(shard, MessageAs<DescribeTablesRequest>(request),
                                         MessageAs<DescribeTablesResponse>(response)));
      case PsMethod::kStats:
        return done(HandleStats(shard, MessageAs<StatsRequest>(request), MessageAs<StatsResponse>(response)));
      case PsMethod::kStep:
        return done(absl::InvalidArgumentError("the local transport takes Steps through PsTransport::Step"));
    }
  }

  const std::vector<Shard*> shards_;
  const std::unique_ptr<ThreadPool> pool_;  // null with one shard
};

}  // namespace

std::unique_ptr<PsClient> NewLocalPsClient(const PsClientOptions& options, std::vector<Shard*> shards) {
  Partition partition = shards.front()->partition();
  return NewPsClient(options, std::move(partition), std::make_unique<LocalTransport>(std::move(shards)));
}

}  // namespace kestrel
