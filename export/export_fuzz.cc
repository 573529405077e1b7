// Fuzz target: loading an export directory for scoring (export/load_export.h LoadExport: the MODEL file parser, the checks
// of every table it lists, and the .rows/.dense file loaders).
//
// Input: a flags byte, the MODEL body (text-format ExportedModel, FuzzInput::Bytes), then the contents of up to
// three table files (Bytes, Bytes, the rest). When the body parses, the i-th file is written under the name the
// i-th table gives (plain names only; the harness never writes outside its directory), and with flag bit 0 the
// table's size and CRC-32C in MODEL are set to the file's, so the fuzzer gets past the checksums. MODEL gets a
// valid checksum line unless bit 1 is set. Invariants when LoadExport succeeds:
//   - the shard holds every table MODEL lists, with its shape and job id;
//   - every sparse key of a .rows file pulls the values of its last record there, bit for bit, and every dense
//     block pulls its floats of the .dense file (the last block zero-padded).
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "common/checkpoint_layout.h"
#include "common/crc32c.h"
#include "common/fuzz_input.h"
#include "common/partition.h"
#include "google/protobuf/stubs/logging.h"
#include "google/protobuf/text_format.h"
#include "export/load_export.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

bool PlainName(const std::string& name) {
  return !name.empty() && name.size() < 200 && name != "." && name != ".." && name != "MODEL" &&
         name.find('/') == std::string::npos && name.find('\0') == std::string::npos;
}

// The floats of `bytes` at `offset` (n of them; zeros past the end).
std::vector<float> FloatsAt(const std::string& bytes, size_t offset, size_t n) {
  std::vector<float> out(n, 0.0f);
  if (offset < bytes.size()) std::memcpy(out.data(), bytes.data() + offset, std::min(bytes.size() - offset, n * 4));
  return out;
}

bool SameBits(const std::vector<float>& a, const std::string& b) {
  return a.size() * sizeof(float) == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), b.size()) == 0);
}

void CheckLoaded(const LoadedExport& loaded, const std::map<std::string, std::string>& files) {
  RequestContext ctx;
  ctx.job_id = loaded.model.job_id();
  for (const ExportedTable& t : loaded.model.tables()) {
    const TableConfig& config = t.config();
    const Table* table = loaded.shard->FindTable(config.name());
    FUZZ_CHECK(table != nullptr, "a table of MODEL is missing from the loaded shard");
    FUZZ_CHECK(table->dim() == config.dim() && table->config().kind() == config.kind());
    auto file = files.find(t.file());
    FUZZ_CHECK(file != files.end(), "LoadExport accepted a file the harness did not write");
    const std::string& bytes = file->second;
    const size_t dim = config.dim();
    std::string values;
    if (config.kind() == TableConfig::DENSE) {
      const uint64_t blocks = Partition::DenseBlockCount(config.dense_size(), config.dim());
      if (blocks > 4096) continue;  // (a file that large cannot come from a fuzz input)
      std::vector<uint64_t> ids(blocks);
      for (uint64_t b = 0; b < blocks; ++b) ids[b] = b;
      FUZZ_CHECK(loaded.shard->PullDense(ctx, config.name(), ids, 0, &values).ok());
      FUZZ_CHECK(SameBits(FloatsAt(bytes, 0, blocks * dim), values), "a dense table does not hold its file");
      continue;
    }
    const size_t record = sizeof(uint64_t) + dim * sizeof(float);
    std::map<uint64_t, std::vector<float>> last;  // key -> values of its last record
    for (size_t at = 0; at + record <= bytes.size(); at += record) {
      uint64_t key;
      std::memcpy(&key, bytes.data() + at, sizeof(key));
      last[key] = FloatsAt(bytes, at + sizeof(key), dim);
    }
    std::vector<uint64_t> keys;
    std::vector<float> expected;
    for (const auto& [key, row] : last) {
      keys.push_back(key);
      expected.insert(expected.end(), row.begin(), row.end());
    }
    FUZZ_CHECK(loaded.shard->Pull(ctx, config.name(), keys, 0, &values).ok());
    FUZZ_CHECK(SameBits(expected, values), "a sparse table does not hold its file's rows");
  }
}

}  // namespace
}  // namespace kestrel

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  google::protobuf::SetLogHandler(nullptr);  // text-format parse errors are expected by the thousand
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kestrel;  // NOLINT(build/namespaces): a fuzz entry point
  FuzzInput in(data, size);
  const uint8_t flags = in.U8();
  std::string body = in.Bytes();
  const std::string blobs[3] = {in.Bytes(), in.Bytes(), in.Rest()};

  const std::string dir = FuzzScratchDir() + "/export";
  std::error_code error;
  fs::remove_all(dir, error);
  fs::create_directories(dir, error);
  FUZZ_CHECK(!error);
  std::map<std::string, std::string> files;  // what the harness wrote, by name
  ExportedModel model;
  if (google::protobuf::TextFormat::ParseFromString(body, &model)) {
    for (int i = 0; i < model.tables_size() && i < 3; ++i) {
      ExportedTable* t = model.mutable_tables(i);
      if (!PlainName(t->file()) || files.count(t->file()) != 0) continue;
      FuzzWriteFile(dir + "/" + t->file(), blobs[i]);
      files[t->file()] = blobs[i];
      if ((flags & 1) != 0) {
        t->set_size(blobs[i].size());
        t->set_crc32c(Crc32c(blobs[i]));
      }
    }
    if ((flags & 1) != 0) FUZZ_CHECK(google::protobuf::TextFormat::PrintToString(model, &body));
  }
  FuzzWriteFile(dir + "/MODEL", (flags & 2) != 0 ? body : WithChecksumLine(body));

  absl::StatusOr<LoadedExport> loaded = LoadExport(dir);
  if (loaded.ok()) CheckLoaded(*loaded, files);
  return 0;
}
