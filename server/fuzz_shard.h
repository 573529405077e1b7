// The in-memory Shard and the sliced buffers the server-side request fuzz targets (ps_request_fuzz,
// step_request_fuzz) run against. Test only.
#ifndef KESTREL_SERVER_FUZZ_SHARD_H_
#define KESTREL_SERVER_FUZZ_SHARD_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "grpcpp/support/byte_buffer.h"
#include "server/shard.h"

namespace kestrel {

// The job id the fuzz shard belongs to.
inline constexpr char kFuzzJob[] = "job";

// A shard of job kFuzzJob, index (config >> 1) & 1 of 2 uniform servers, SSP (or BSP with 2 workers when
// config & 1), at most 64 keys per request and 1 KiB per response, holding a sparse table "emb" (dim 4,
// Adagrad), a dense "w" (10 floats in blocks of 3, SGD) and a sparse dim-1 "one" (FTRL). Aborts on failure.
std::unique_ptr<Shard> MakeFuzzShard(uint8_t config);

// `bytes` cut into slices of `piece` bytes (the last shorter), as the network delivers a message.
grpc::ByteBuffer Sliced(const std::string& bytes, size_t piece);

}  // namespace kestrel

#endif  // KESTREL_SERVER_FUZZ_SHARD_H_
