// The job-size limits every process agrees on: how many servers and workers one job may have. Each process
// checks what it receives (flags, requests, checkpoints) against these, so a job one accepts the others accept.
#ifndef KESTREL_COMMON_LIMITS_H_
#define KESTREL_COMMON_LIMITS_H_

namespace kestrel {

// Servers in one job: server ranks and ids are in [0, kMaxServers).
inline constexpr int kMaxServers = 65536;

// Workers in one job: worker ranks and ids are in [0, kMaxWorkers).
inline constexpr int kMaxWorkers = 1 << 20;

// Tables one ParameterServer.Step names (proto/ps.proto StepRequest); its table i's push is request id + i.
inline constexpr int kMaxStepTables = 64;

}  // namespace kestrel

#endif  // KESTREL_COMMON_LIMITS_H_
