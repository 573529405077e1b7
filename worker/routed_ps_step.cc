// RoutedPsClient's fused Step: every table's push and read in one request per server. The parts are planned
// (checked, their servers' shares found, dense tensors cut into blocks), the requests written with the keys and
// gradients encoded straight into them, sent to every server at once (retried on UNAVAILABLE), and the dense
// reads' blocks scattered into the caller's tensors. See worker/routed_ps_client.h.
#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/half.h"
#include "common/held_reads.h"
#include "common/retry.h"
#include "common/limits.h"
#include "worker/dense_blocks.h"
#include "worker/routed_ps_client.h"


namespace kestrel {

// One part of a Step, planned: where each server's keys (or dense blocks) start, and the dense blocks' padded rows.
struct RoutedPsClient::StepPlan {
  std::vector<size_t> push_offsets, pull_offsets;
  CallBuffers push_blocks, pull_blocks;
  ValueType push_type = VALUE_TYPE_FLOAT32, pull_type = VALUE_TYPE_FLOAT32;
  int dim = 0;
};

// A Step's requests, one per server (serialized and shared, so that a retry sends the same bytes), where each
// one's answer lands, and the largest request or answer in bytes.
struct RoutedPsClient::StepRequests {
  std::vector<std::shared_ptr<const std::string>> bytes;
  std::vector<std::vector<StepRead>> reads;
  size_t largest = 0;
};

absl::Status RoutedPsClient::Step(absl::Span<const StepPart> parts, const CallClock& push, const CallClock& pull) {
  if (parts.size() > static_cast<size_t>(kMaxStepTables)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a step of %d tables: at most %d", parts.size(), kMaxStepTables));
  }
  std::vector<StepPlan> plans(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    const StepPart& p = parts[i];
    plans[i].push_type = WireType(p.table);
    plans[i].pull_type = PullType(p.table);
    plans[i].dim = p.dim;
    KESTREL_RETURN_IF_ERROR(p.dense ? PlanDensePart(p, push.clock, &plans[i]) : PlanSparsePart(p, &plans[i]));
  }
  StepRequests requests;
  KESTREL_RETURN_IF_ERROR(WriteStepRequests(parts, push, pull, &plans, &requests));
  // Past half the message limit the separate calls, which split their requests, carry the step instead.
  if (requests.largest > static_cast<size_t>(options_.max_message_bytes) / 2) return PsClient::Step(parts, push, pull);
  KESTREL_RETURN_IF_ERROR(SendStepRequests(requests, pull.wait_clock.has_value()));
  for (size_t i = 0; i < parts.size(); ++i) {  // the dense reads landed in padded blocks
    const StepPart& p = parts[i];
    if (p.dense && p.pull) ScatterDenseBlocks(plans[i].pull_blocks, plans[i].dim, p.rows, p.pull_floats);
  }
  return absl::OkStatus();
}

absl::Status RoutedPsClient::PlanDensePart(const StepPart& p, int64_t clock, StepPlan* plan) {
  const bool pushes = p.push && p.push_floats > 0;  // an empty push is the worker's empty part
  if (!pushes && !p.pull) {
    NoDenseBlocks(partition_, &plan->push_blocks);
    return absl::OkStatus();
  }
  KESTREL_ASSIGN_OR_RETURN(TableConfig config, DenseConfig(p.table, pushes ? p.push_floats : p.pull_floats, clock));
  plan->dim = config.dim();
  if (pushes) {
    KESTREL_RETURN_IF_ERROR(CheckGradients(p.table, absl::MakeConstSpan(p.grads, p.push_floats), plan->dim,
                                           [](size_t block) { return block; }));
    GroupDenseBlocks(partition_, config, &plan->push_blocks);
    GatherDenseBlocks(p.grads, p.push_floats, plan->dim, &plan->push_blocks);
  } else {
    NoDenseBlocks(partition_, &plan->push_blocks);
  }
  if (p.pull) {
    GroupDenseBlocks(partition_, config, &plan->pull_blocks);
    plan->pull_blocks.rows.resize(plan->pull_blocks.ids.size() * plan->dim);
  }
  return absl::OkStatus();
}

absl::Status RoutedPsClient::PlanSparsePart(const StepPart& p, StepPlan* plan) {
  if (p.push) {
    KESTREL_RETURN_IF_ERROR(CheckBatch(*p.push_keys, p.dim));
    KESTREL_RETURN_IF_ERROR(
        CheckGradients(p.table, absl::MakeConstSpan(p.grads, p.push_keys->num_unique() * p.dim), p.dim,
                       [&](size_t row) { return p.push_keys->unique_keys()[row]; }));
    BatchOffsets(*p.push_keys, &plan->push_offsets);
  }
  if (p.pull) {
    KESTREL_RETURN_IF_ERROR(CheckBatch(*p.pull_keys, p.dim));
    BatchOffsets(*p.pull_keys, &plan->pull_offsets);
  }
  return absl::OkStatus();
}

absl::Status RoutedPsClient::WriteStepRequests(absl::Span<const StepPart> parts, const CallClock& push,
                                               const CallClock& pull, std::vector<StepPlan>* plans,
                                               StepRequests* requests) {
  // Table i's push is request id + i on the server (see HandleStepPushes): the ids are reserved.
  const int servers = partition_.num_servers();
  requests->bytes.resize(servers);
  requests->reads.resize(servers);
  for (int s = 0; s < servers; ++s) {
    RequestHeader header;
    FillHeader(&header, push.clock);
    SetOwner(&header, s);  // a replicated job's request names its range group
    next_request_id_.fetch_add(kMaxStepTables - 1, std::memory_order_relaxed);
    if (pull.wait_clock.has_value()) header.set_wait_clock(*pull.wait_clock);
    std::vector<StepTableWrite> tables(parts.size());
    size_t answer = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      answer += WriteStepTable(parts[i], s, &(*plans)[i], &tables[i], &requests->reads[s]);
    }
    KESTREL_ASSIGN_OR_RETURN(std::string bytes, WriteStepRequest(header, pull.clock, tables));
    requests->largest = std::max({requests->largest, bytes.size(), answer});
    requests->bytes[s] = std::make_shared<const std::string>(std::move(bytes));
  }
  return absl::OkStatus();
}

size_t RoutedPsClient::WriteStepTable(const StepPart& p, int s, StepPlan* plan, StepTableWrite* t,
                                      std::vector<StepRead>* reads) {
  t->table = p.table;
  t->dense = p.dense;
  t->dim = plan->dim;
  if (p.push) {  // the gradients are encoded straight from the caller's rows (dense: the padded blocks)
    t->push = true;
    t->push_type = plan->push_type;
    const uint64_t* ids = p.dense ? plan->push_blocks.ids.data() : p.push_keys->unique_keys().data();
    const float* rows = p.dense ? plan->push_blocks.rows.data() : p.grads;
    const std::vector<size_t>& offsets = p.dense ? plan->push_blocks.offsets : plan->push_offsets;
    t->push_keys = absl::MakeConstSpan(ids + offsets[s], offsets[s + 1] - offsets[s]);
    t->grads = rows == nullptr ? nullptr : rows + offsets[s] * plan->dim;
  }
  if (!p.pull) return 0;
  // The answer's rows land straight in the caller's rows (dense: the padded blocks).
  t->pull = true;
  t->pull_type = plan->pull_type;
  const uint64_t* ids = p.dense ? plan->pull_blocks.ids.data() : p.pull_keys->unique_keys().data();
  const std::vector<size_t>& offsets = p.dense ? plan->pull_blocks.offsets : plan->pull_offsets;
  t->pull_keys = absl::MakeConstSpan(ids + offsets[s], offsets[s + 1] - offsets[s]);
  float* out = (p.dense ? plan->pull_blocks.rows.data() : p.rows) + offsets[s] * plan->dim;
  reads->push_back({out, t->pull_keys.size() * plan->dim, plan->pull_type});
  return t->pull_keys.size() * plan->dim * BytesPerValue(plan->pull_type);
}

absl::Status RoutedPsClient::SendStepRequests(const StepRequests& requests, bool waiting) {
  const int servers = partition_.num_servers();
  std::vector<absl::Status> statuses(servers);
  Completion all(servers);
  for (int s = 0; s < servers; ++s) {
    StepOwner(s, requests.bytes[s], requests.reads[s], [&, s](absl::Status status) {
      statuses[s] = std::move(status);
      all.Done();
    });
  }
  all.Wait();
  for (int s = 0; s < servers; ++s) {
    if (IsTransient(statuses[s])) {
      statuses[s] = WithRetries(s, waiting, [&](std::function<void(absl::Status)> done) {
        StepOwner(s, requests.bytes[s], requests.reads[s], std::move(done));
      });
    }
  }
  // A read held for a rescale (common/held_reads.h) comes back only when every server took the pushes: the
  // caller takes the step as pushed. Any other failure wins.
  absl::Status held;
  for (int s = 0; s < servers; ++s) {
    if (statuses[s].ok()) continue;
    if (!HeldClockOf(statuses[s]).has_value()) return OnServer(s, statuses[s]);
    if (held.ok()) held = OnServer(s, statuses[s]);
  }
  return held;
}

}  // namespace kestrel
