// Writes the seed corpus of every fuzz target (tests/fuzz_corpus/<target>/seed-*): small valid inputs in each
// target's framing (common/fuzz_input.h), made with Kestrel's own encoders, so fuzzing starts from requests,
// manifests, exports, data lines and scheduler sessions that go deep rather than from noise.
//
// Usage: fuzz_seeds <corpus root>   (scripts/make_fuzz_seeds.sh runs it over tests/fuzz_corpus). It replaces
// the seed-* files and never touches regressions/.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checkpoint_layout.h"
#include "common/crc32c.h"
#include "common/fuzz_input.h"
#include "common/half.h"
#include "common/partition.h"
#include "common/step_wire.h"
#include "google/protobuf/text_format.h"
#include "proto/checkpoint.pb.h"
#include "proto/ps.pb.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

class Corpus {
 public:
  Corpus(const std::string& root, const std::string& target) : dir_(root + "/" + target) {
    fs::create_directories(dir_);
    for (const auto& entry : fs::directory_iterator(dir_)) {
      if (entry.path().filename().string().rfind("seed-", 0) == 0) fs::remove(entry.path());
    }
  }
  void Add(const std::string& name, const FuzzOutput& input) {
    std::ofstream out(dir_ + "/seed-" + name, std::ios::binary);
    out << input.str();
  }

 private:
  std::string dir_;
};

std::string Packed(const std::vector<uint64_t>& keys) {
  return std::string(reinterpret_cast<const char*>(keys.data()), keys.size() * sizeof(uint64_t));
}
std::string Packed(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

// ---- data_line: flags (bit 7: read the files too; bit 6: header lines; bits 2-5: shuffle window; bits 0-1:
// shards - 1), file 1 (Bytes), file 2 (rest).

std::string CriteoLine(int label, int64_t first, const std::string& token, bool missing) {
  std::string line = absl::StrCat(label);
  for (int j = 0; j < 13; ++j) absl::StrAppend(&line, "\t", missing && j % 3 == 1 ? "" : absl::StrCat(first + j));
  for (int f = 0; f < 26; ++f) absl::StrAppend(&line, "\t", missing && f % 4 == 2 ? "" : token);
  return line;
}

void DataLineSeeds(const std::string& root) {
  Corpus corpus(root, "data_line");
  const std::string criteo = CriteoLine(1, 5, "05db9164", false) + "\n" + CriteoLine(0, -3, "68fd1e64", true) + "\n";
  const std::string libsvm = "+1 1:0.708333 2:1 3:1 4:-0.320755\n-1 1:0.583333 2:-1 # comment\n0 qid:3 7:2.5e-3\n";
  corpus.Add("criteo", FuzzOutput().U8(0x80).Bytes(criteo).Raw(CriteoLine(0, 0, "a", true)));
  corpus.Add("criteo-crlf-3-shards", FuzzOutput().U8(0x82).Bytes(criteo + "\r\n\n").Raw(criteo));
  corpus.Add("criteo-parse-only", FuzzOutput().U8(0).Bytes(CriteoLine(1, 1 << 20, "ffffffff", false)).Raw(""));
  corpus.Add("libsvm", FuzzOutput().U8(0x80).Bytes(libsvm).Raw("+1 3:1 10:0.5"));
  corpus.Add("libsvm-4-shards", FuzzOutput().U8(0x83).Bytes(libsvm + "\n\n" + libsvm).Raw(libsvm));
  corpus.Add("mixed", FuzzOutput().U8(0x81).Bytes(criteo + libsvm).Raw("\r\n" + libsvm + criteo));
  corpus.Add("criteo-header-shuffled-2-shards",
             FuzzOutput().U8(0x80 | 0x40 | 5 << 2 | 1).Bytes("label\tI1\n" + criteo + criteo).Raw("h\n\n" + criteo));
  corpus.Add("libsvm-shuffled-3-shards", FuzzOutput().U8(0x80 | 3 << 2 | 2).Bytes(libsvm + libsvm).Raw(libsvm));
}

// ---- schema_line: a schema byte (mod 4: Criteo, the CSV, the TSV, libsvm; worker/data/schema_line_fuzz.cc),
// then lines.

void SchemaLineSeeds(const std::string& root) {
  Corpus corpus(root, "schema_line");
  corpus.Add("criteo", FuzzOutput().U8(0).Raw(CriteoLine(1, 5, "05db9164", false) + "\n" +
                                               CriteoLine(0, -3, "68fd1e64", true) + "\r\n2\t1\n"));
  corpus.Add("csv", FuzzOutput().U8(1).Raw("1,2.5,17,a|b||c|d|e,3.5,40\n0,1,NA,\"x|\"\"y\"\"\",-,\n"
                                           "1,1,-4,,\"7\",1e3\n1,-1,1,a,1,1\n1,1,x,a,1,1\n0,0,1,a,\"1,1\n"));
  corpus.Add("tsv", FuzzOutput().U8(2).Raw("1\tff::10::abc\ta,b,c\t5\n0\t\t\t\n1\tzz\ta\t1\n1\t1\ta,b,c,d\t1\n"));
  corpus.Add("libsvm", FuzzOutput().U8(3).Raw("+1 1:0.5 7:2 # c\n-1 1:1 2:1 3:1 4:1 5:1\n0 qid:3 9:1e-3\nx\n"));
}

// ---- bsp_aggregator: workers - 1, dim - 1, then ops. Add: op (bit 6 full keys, 5 mismatch, 4 apply at
// once), worker + 1, clock byte (3 = the clock after the last applied), index + 1, count, n keys, keys, grads.

FuzzOutput& BspPart(FuzzOutput& out, uint8_t op, int worker, uint8_t clock, int index, int count,
                    const std::vector<uint8_t>& keys, int dim) {
  out.U8(op).U8(worker + 1).U8(clock).U8(index + 1).U8(count).U8(keys.size());
  for (uint8_t k : keys) out.U8(k);
  for (size_t i = 0; i < keys.size() * dim; ++i) out.U8(static_cast<uint8_t>(8 * (i % 5) - 16));
  return out;
}

void BspSeeds(const std::string& root) {
  Corpus corpus(root, "bsp_aggregator");
  {
    FuzzOutput out;
    out.U8(1).U8(1);  // 2 workers, dim 2
    BspPart(out, 0x10, 0, 3, 0, 1, {1, 2, 3}, 2);
    BspPart(out, 0x10, 1, 3, 0, 1, {2, 3, 4}, 2);  // completes clock 0
    BspPart(out, 0x10, 0, 4, 0, 2, {5}, 2);
    BspPart(out, 0x10, 0, 4, 1, 2, {6, 7}, 2);
    BspPart(out, 0x10, 1, 4, 0, 1, {5, 7}, 2);  // completes clock 1
    corpus.Add("two-workers-two-clocks", out);
  }
  {
    FuzzOutput out;
    out.U8(2).U8(0);  // 3 workers, dim 1
    BspPart(out, 0x00, 0, 3, 0, 1, {9}, 1);
    BspPart(out, 0x00, 0, 3, 0, 1, {9}, 1);   // a repeat
    BspPart(out, 0x00, 1, 3, 0, 1, {}, 1);    // an empty part
    BspPart(out, 0x00, 2, 3, 0, 1, {9, 10}, 1);  // completes clock 0, not applied yet
    BspPart(out, 0x00, 0, 3, 0, 1, {9}, 1);   // a repeat while applying: Unavailable
    out.U8(7);                                // Applied
    BspPart(out, 0x00, 2, 3, 0, 1, {9, 10}, 1);  // a repeat of an applied part
    corpus.Add("repeats-while-applying", out);
  }
  {
    FuzzOutput out;
    out.U8(0).U8(2);  // 1 worker, dim 3
    for (int c = 0; c < 4; ++c) BspPart(out, 0x50, 0, c == 0 ? 3 : 4, 0, 1, {1, 200, 3}, 3);
    BspPart(out, 0x10, 0, 6, 0, 1, {1}, 3);  // skips ahead
    corpus.Add("one-worker-sequence", out);
  }
}

// ---- ps_request: config (bit 0 BSP with 2 workers, bit 1 shard index 1), then (op, Bytes(message)).
// op % 6: 0 Pull, 1 PullDense, 2 Push, 3 PushDense, 4 CreateTable, 5 read a PullResponse of op >> 3 floats.

RequestHeader Header(int rank, int64_t clock, uint64_t request_id) {
  RequestHeader h;
  h.set_job_id("job");
  h.set_worker_rank(rank);
  h.set_clock(clock);
  h.set_request_id(request_id);
  return h;
}

std::string PushBytes(const RequestHeader& header, const char* table, const std::vector<uint64_t>& keys, int dim,
                      int part = 0, int parts = 1) {
  PushRequest request;
  *request.mutable_header() = header;
  request.set_table(table);
  request.set_keys(Packed(keys));
  std::vector<float> grads(keys.size() * dim);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  request.set_values(Packed(grads));
  request.set_dim(dim);
  request.set_part(part);
  request.set_parts(parts);
  return request.SerializeAsString();
}

std::string PullBytes(const RequestHeader& header, const char* table, const std::vector<uint64_t>& keys, int dim) {
  PullRequest request;
  *request.mutable_header() = header;
  request.set_table(table);
  request.set_keys(Packed(keys));
  request.set_dim(dim);
  return request.SerializeAsString();
}

// Dense blocks of table "w" (10 floats in blocks of 3) that shard `shard` of 2 owns.
std::vector<uint64_t> OwnedBlocks(int shard) {
  const Partition partition = *Partition::Uniform(2);
  std::vector<uint64_t> blocks;
  for (uint64_t b = 0; b < 4; ++b) {
    if (partition.OwnerOf(Partition::DenseBlockKey("w", b)) == shard) blocks.push_back(b);
  }
  return blocks;
}

void PsRequestSeeds(const std::string& root) {
  Corpus corpus(root, "ps_request");
  const std::vector<uint64_t> mine = {1, 2, 0x1234, 0x7fffffffffffff00};  // shard 0 of 2 owns keys below 2^63
  const std::vector<uint64_t> theirs = {0x8000000000000001, 0xfffffffffffffff0};
  {
    FuzzOutput out;
    out.U8(0);
    out.U8(2).Bytes(PushBytes(Header(0, 0, 1), "emb", mine, 4));
    out.U8(2).Bytes(PushBytes(Header(0, 0, 1), "emb", mine, 4));  // a retry
    out.U8(0).Bytes(PullBytes(Header(0, 1, 0), "emb", mine, 4));
    out.U8(8 * 3).Bytes(PullBytes(Header(1, 1, 0), "emb", {2, 0x1234}, 0));  // sliced in 4-byte pieces
    out.U8(2).Bytes(PushBytes(Header(-1, 0, 0), "one", {7, 8}, 1));
    out.U8(0).Bytes(PullBytes(Header(-1, 0, 0), "one", {7, 8, 9}, 1));
    corpus.Add("sparse-push-pull", out);
  }
  {
    FuzzOutput out;
    out.U8(2);  // shard 1
    out.U8(2).Bytes(PushBytes(Header(0, 0, 1), "emb", theirs, 4));
    out.U8(0).Bytes(PullBytes(Header(0, 0, 0), "emb", theirs, 4));
    out.U8(2).Bytes(PushBytes(Header(0, 0, 2), "emb", mine, 4));  // not this shard's keys
    corpus.Add("shard-1-ownership", out);
  }
  {
    FuzzOutput out;
    out.U8(0);
    const std::vector<uint64_t> blocks = OwnedBlocks(0);
    out.U8(3).Bytes(PushBytes(Header(0, 0, 1), "w", blocks, 3));
    out.U8(1).Bytes(PullBytes(Header(0, 1, 0), "w", blocks, 3));
    out.U8(1).Bytes(PullBytes(Header(0, 1, 0), "w", {0, 1, 2, 3}, 3));
    corpus.Add("dense", out);
  }
  {
    FuzzOutput out;
    out.U8(1);  // BSP, 2 workers
    out.U8(2).Bytes(PushBytes(Header(0, 0, 1), "emb", {1, 2}, 4, 0, 2));
    out.U8(2).Bytes(PushBytes(Header(0, 0, 2), "emb", {0x1234}, 4, 1, 2));
    out.U8(2).Bytes(PushBytes(Header(1, 0, 1), "emb", {2, 0x1234}, 4));  // completes clock 0
    out.U8(0).Bytes(PullBytes(Header(1, 0, 0), "emb", {1, 2, 0x1234}, 4));  // a pull of the applied clock
    out.U8(0).Bytes(PullBytes(Header(1, 1, 0), "emb", {1, 2, 0x1234}, 4));
    out.U8(3).Bytes(PushBytes(Header(0, 1, 3), "w", OwnedBlocks(0), 3));
    out.U8(2).Bytes(PushBytes(Header(0, 5, 4), "emb", {1}, 4));  // skips ahead
    corpus.Add("bsp", out);
  }
  {
    FuzzOutput out;
    out.U8(0);
    CreateTableRequest create;
    *create.mutable_header() = Header(-1, 0, 0);
    TableConfig* config = create.mutable_config();
    config->set_name("new.table-1");
    config->set_kind(TableConfig::DENSE);
    config->set_dim(5);
    config->set_dense_size(12);
    config->mutable_initializer()->set_type(InitializerConfig::TRUNCATED_NORMAL);
    config->mutable_optimizer()->set_type(OptimizerConfig::ADAM);
    out.U8(4).Bytes(create.SerializeAsString());
    out.U8(4).Bytes(create.SerializeAsString());  // idempotent
    config->set_dim(6);
    out.U8(4).Bytes(create.SerializeAsString());  // a different config
    PullResponse response;
    response.set_dim(2);
    response.set_values(Packed(std::vector<float>{1, 2, 3, 4}));
    out.U8(5 + 6 * 0).Bytes(response.SerializeAsString());
    out.U8(35).Bytes(response.SerializeAsString());
    corpus.Add("create-table-and-responses", out);
  }
}

// ---- checkpoint: flags (0 LATEST checksum, 1 no LATEST, 2 MANIFEST checksum, 3 load, 4 prune), name,
// LATEST body, MANIFEST body (Bytes each), the shard file (rest).

std::string ManifestText(uint64_t sequence, const std::string& partition, int servers, const std::string& file) {
  CheckpointManifest m;
  m.set_format_version(1);
  m.set_sequence(sequence);
  m.set_clock(40);
  m.set_job_id("job");
  m.set_partition(partition);
  m.set_num_servers(servers);
  m.set_num_workers(2);
  m.set_consistency(CONSISTENCY_BSP);
  TableConfig* table = m.add_tables();
  table->set_name("emb");
  table->set_dim(4);
  for (int s = 0; s < servers; ++s) {
    ShardCheckpoint* shard = m.add_shards();
    shard->set_shard(s);
    shard->set_dir(CheckpointLayout::ShardDirName(s));
    CheckpointFile* f = shard->add_files();
    f->set_name("000001.sst");
    f->set_size(file.size());
    f->set_crc32c(Crc32c(file));
  }
  for (int w = 0; w < 2; ++w) {
    WorkerCheckpoint* worker = m.add_workers();
    worker->set_rank(w);
    worker->mutable_state()->set_clock(40);
  }
  m.set_reason("every 20 clocks");
  std::string text;
  google::protobuf::TextFormat::PrintToString(m, &text);
  return text;
}

void CheckpointSeeds(const std::string& root) {
  Corpus corpus(root, "checkpoint");
  const std::string file = "SST file contents \x01\x02\x03";
  const std::string one = CheckpointLayout::CheckpointName(1);
  const std::string seven = CheckpointLayout::CheckpointName(7);
  const std::string uniform = Partition::Uniform(1)->ToString();
  const std::string two = Partition::Uniform(2, 2)->ToString();
  corpus.Add("committed", FuzzOutput().U8(1 | 4).Bytes(one).Bytes(one + "\n").Bytes(ManifestText(1, uniform, 1, file)).Raw(file));
  corpus.Add("committed-load", FuzzOutput().U8(1 | 4 | 8).Bytes(seven).Bytes(seven + "\n").Bytes(ManifestText(7, uniform, 1, file)).Raw(file));
  corpus.Add("committed-prune", FuzzOutput().U8(1 | 4 | 16).Bytes(one).Bytes(one + "\n").Bytes(ManifestText(1, uniform, 1, file)).Raw(file));
  corpus.Add("two-servers", FuzzOutput().U8(1 | 4 | 8).Bytes(one).Bytes(one + "\n").Bytes(ManifestText(1, two, 2, file)).Raw(file));
  corpus.Add("no-latest", FuzzOutput().U8(2 | 4).Bytes(one).Bytes("").Bytes(ManifestText(1, uniform, 1, file)).Raw(file));
  corpus.Add("unframed", FuzzOutput().U8(0).Bytes(one).Bytes(one + "\n").Bytes(ManifestText(1, uniform, 1, file)).Raw(file));
  corpus.Add("explicit-partition", FuzzOutput().U8(1 | 4).Bytes(one).Bytes(one + "\n")
      .Bytes(ManifestText(1, "0x0-0x7fffffffffffffff:0,0x8000000000000000-0xffffffffffffffff:1", 2, file)).Raw(file));
}

// ---- export: flags (0 set sizes and CRCs, 1 no checksum line), MODEL body, up to three table files.

void ExportSeeds(const std::string& root) {
  Corpus corpus(root, "export");
  std::string rows;
  for (uint64_t key : {3ull, 9ull, 3ull, 0xffffffffffffffffull}) {
    rows.append(reinterpret_cast<const char*>(&key), sizeof(key));
    rows += Packed(std::vector<float>{0.5f * key, -1.0f});
  }
  const std::string dense = Packed(std::vector<float>{1, 2, 3, 4, 5, 6, 7});
  ExportedModel model;
  model.set_format_version(1);
  model.set_checkpoint(CheckpointLayout::CheckpointName(3));
  model.set_clock(30);
  model.set_job_id("job");
  ExportedTable* sparse = model.add_tables();
  sparse->mutable_config()->set_name("emb");
  sparse->mutable_config()->set_dim(2);
  sparse->mutable_config()->mutable_optimizer()->set_type(OptimizerConfig::ADAGRAD);
  sparse->set_file("emb.rows");
  sparse->set_rows(4);
  sparse->set_size(rows.size());
  sparse->set_crc32c(Crc32c(rows));
  ExportedTable* w = model.add_tables();
  w->mutable_config()->set_name("w");
  w->mutable_config()->set_kind(TableConfig::DENSE);
  w->mutable_config()->set_dim(3);
  w->mutable_config()->set_dense_size(7);
  w->mutable_config()->mutable_initializer()->set_type(InitializerConfig::CONSTANT);
  w->set_file("w.dense");
  w->set_rows(3);
  w->set_size(dense.size());
  w->set_crc32c(Crc32c(dense));
  std::string text;
  google::protobuf::TextFormat::PrintToString(model, &text);
  corpus.Add("sparse-and-dense", FuzzOutput().U8(0).Bytes(text).Bytes(rows).Bytes(dense).Raw(""));
  corpus.Add("fixed-up", FuzzOutput().U8(1).Bytes(text).Bytes(rows.substr(0, 16)).Bytes(dense).Raw(""));
  corpus.Add("unframed", FuzzOutput().U8(2).Bytes(text).Bytes(rows).Bytes(dense).Raw(""));
  model.mutable_tables()->SwapElements(0, 1);
  ExportedTable* one = model.add_tables();
  *one = *sparse;
  one->mutable_config()->set_name("one");
  one->mutable_config()->set_dim(1);
  one->set_file("one.rows");
  google::protobuf::TextFormat::PrintToString(model, &text);
  corpus.Add("three-tables-fixed-up", FuzzOutput().U8(1).Bytes(text).Bytes(dense).Bytes(rows).Raw(rows.substr(0, 24)));
}

// ---- scheduler: servers - 1, workers - 1, policy (% 3: BSP, SSP(bits 2-3), ASP), then ops (low 4 bits % 10):
// 0 Register (bit 4 server, bit 6 no address, bit 7 rank + 1; then rank + 2), 1 Heartbeat (bit 4 server),
// 2 WaitToStart, 3 Advance, 4 time, 5 MarkWorkerDone, 6 rollback, 7 hold, 8 Rejoin, 9 CheckWorker.
// Ranks are written + 2; an incarnation byte 0 is the current one; a generation byte 0 is the rank's.

void SchedulerSeeds(const std::string& root) {
  Corpus corpus(root, "scheduler");
  auto job = [](uint8_t policy, int workers, int iterations, bool failures) {
    FuzzOutput out;
    out.U8(0).U8(workers - 1).U8(policy);
    out.U8(0x10).U8(1);  // a server takes any rank (-1)
    for (int w = 0; w < workers; ++w) out.U8(0x00).U8(1);  // workers take ranks 0, 1, ...
    for (int i = 0; i < iterations; ++i) {
      for (int w = 0; w < workers; ++w) out.U8(2).U8(w + 2).U8(0).U8(0).U8(1);  // WaitToStart(current clock)
      for (int w = 0; w < workers; ++w) out.U8(3).U8(w + 2).U8(0).U8(0).U8(2);  // Advance(clock + 1)
      out.U8(1 | 0x10).U8(2).U8(0);                                            // the server heartbeats
      for (int w = 0; w < workers; ++w) out.U8(1).U8(w + 2).U8(0);
      out.U8(4).U8(4);  // 200 ms pass
      if (failures && i == 1) {
        out.U8(4).U8(40);              // 2 s: everyone is declared dead
        out.U8(0x80).U8(1);            // worker 0 re-registers at rank 0
        out.U8(3).U8(2).U8(1).U8(0).U8(2);  // a zombie's Advance with an older incarnation
        out.U8(6).U8(0).U8(1);         // rollback to the min clock
        out.U8(8).U8(2).U8(0);         // worker 0 rejoins
      }
    }
    out.U8(7).U8(0);  // HoldAtEarliest
    for (int w = 0; w < workers; ++w) out.U8(5).U8(w + 2);  // MarkWorkerDone
    return out;
  };
  corpus.Add("bsp-2-workers", job(0, 2, 3, false));
  corpus.Add("ssp-3-workers-failures", job(1 | (2 << 2), 3, 4, true));
  corpus.Add("asp-4-workers", job(2, 4, 2, false));
  corpus.Add("bsp-failures", job(0, 2, 3, true));
}

// ---- step_request: config as ps_request, then (op, Bytes(message)); op % 3: 0 a StepRequest sliced in
// 1 + (op >> 2) byte pieces, 1 a step for WriteStepRequest (header fields, pull clock, tables), 2 a StepResponse
// read as 1 + (op >> 2) % 3 reads.

std::string StepBytes(const RequestHeader& header, int64_t pull_clock, const std::vector<uint64_t>& keys,
                      const std::vector<uint64_t>& blocks, ValueType wire) {
  std::vector<float> grads(keys.size() * 4, 0.25f), dense(blocks.size() * 3, -0.5f), one(keys.size(), 1.0f);
  StepTableWrite emb, w, wide;
  emb.table = "emb";
  emb.dim = 4;
  emb.push = emb.pull = true;
  emb.push_keys = emb.pull_keys = keys;
  emb.grads = grads.data();
  emb.push_type = emb.pull_type = wire;
  w.table = "w";
  w.dense = true;
  w.dim = 3;
  w.push = w.pull = true;
  w.push_keys = w.pull_keys = blocks;
  w.grads = dense.data();
  wide.table = "one";
  wide.dim = 1;
  wide.push = true;
  wide.push_keys = keys;
  wide.grads = one.data();
  RequestHeader h = header;
  h.set_wait_clock(pull_clock);
  return *WriteStepRequest(h, pull_clock, {emb, w, wide});
}

void StepRequestSeeds(const std::string& root) {
  Corpus corpus(root, "step_request");
  const std::vector<uint64_t> mine = {1, 2, 0x1234, 0x7fffffffffffff00};
  {
    FuzzOutput out;
    out.U8(1);  // BSP, shard 0
    out.U8(0).Bytes(StepBytes(Header(0, 0, 100), 1, mine, OwnedBlocks(0), VALUE_TYPE_FLOAT32));
    out.U8(0).Bytes(StepBytes(Header(0, 0, 100), 1, mine, OwnedBlocks(0), VALUE_TYPE_FLOAT32));  // a retry
    out.U8(4 * 5).Bytes(StepBytes(Header(1, 0, 200), 1, {2, 0x1234}, OwnedBlocks(0), VALUE_TYPE_FLOAT32));
    out.U8(4 * 2).Bytes(StepBytes(Header(1, 1, 300), 2, {1}, {}, VALUE_TYPE_FLOAT16));
    corpus.Add("bsp-steps", out);
  }
  {
    FuzzOutput out;
    out.U8(0);
    out.U8(0).Bytes(StepBytes(Header(-1, 3, 7), 4, mine, OwnedBlocks(0), VALUE_TYPE_BFLOAT16));
    FuzzOutput write;
    write.Bytes("job").U64(5).U64(77).U64(6).U8(2);
    write.Bytes("emb").U8(2 | 4 | (1 << 3)).U8(3).U8(2).U64(9).U64(11).U32(65536).U32(1).U32(2).U32(3).U32(4).U32(5);
    write.U8(1).U64(9);
    write.Bytes("w").U8(1 | 2).U8(2).U8(1).U64(0).U32(7).U32(8).U8(0);
    out.U8(1).Bytes(write.str());
    StepResponseWriter writer;
    const float halves[2] = {0.5f, -3.0f};
    (void)EncodeValues(VALUE_TYPE_FLOAT16, halves, 2, 0, writer.AddPull(2, 1, VALUE_TYPE_FLOAT16));
    PullResponse dense;
    dense.set_dim(2);
    dense.set_values(Packed(std::vector<float>{1.0f, -1.0f}));
    writer.AddPull(dense);
    std::vector<grpc::Slice> slices;
    (void)writer.Finish().Dump(&slices);
    std::string answer;
    for (const grpc::Slice& slice : slices) answer.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    out.U8(104).Bytes(answer);  // read as 2 fp16 values, then 2 fp32 ones: what it carries
    out.U8(2 + 4 * 9).Bytes(answer);
    corpus.Add("ssp-step-write-and-answers", out);
  }
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus root, e.g. tests/fuzz_corpus>\n", argv[0]);
    return 2;
  }
  const std::string root = argv[1];
  kestrel::DataLineSeeds(root);
  kestrel::SchemaLineSeeds(root);
  kestrel::BspSeeds(root);
  kestrel::PsRequestSeeds(root);
  kestrel::StepRequestSeeds(root);
  kestrel::CheckpointSeeds(root);
  kestrel::ExportSeeds(root);
  kestrel::SchedulerSeeds(root);
  std::printf("wrote the seed corpora under %s\n", root.c_str());
  return 0;
}
