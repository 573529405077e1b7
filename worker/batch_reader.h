// BatchReader: the job's data files (Criteo or libsvm, per DataConfig) read as Batches for one worker's shard.
// Thread-compatible.
#ifndef KESTREL_WORKER_BATCH_READER_H_
#define KESTREL_WORKER_BATCH_READER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "worker/batch.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/libsvm_reader.h"

namespace kestrel {

// Feature slots and dense inputs per example of a data format: Criteo 39 slots and 13 dense inputs (0 when
// dense inputs are off), libsvm data.libsvm_slots (default 64) and none.
int SlotsOf(const DataConfig& data);
int DenseInputsOf(const DataConfig& data, const ModelConfig& model);

class BatchReader {
 public:
  // `start`: where to continue (a position() saved earlier with the same files and options).
  static absl::StatusOr<std::unique_ptr<BatchReader>> Open(const DataConfig& data, const ModelConfig& model,
                                                           const std::vector<std::string>& files,
                                                           const ReaderOptions& options,
                                                           const ReaderPosition& start = {});

  // Replaces `batch` with up to `size` next examples (with `append`, adds them until it holds `size`);
  // returns how many examples the batch holds (fewer than `size` at the end of the data). `lines` (optional):
  // the global index of each example's line is appended to it.
  absl::StatusOr<int64_t> Fill(int64_t size, Batch* batch, bool append = false, std::vector<uint64_t>* lines = nullptr);
  // Where the reader is (to resume from; checkpointed with the worker's state).
  const ReaderPosition& position() const;
  uint64_t skipped() const;

 private:
  BatchReader() = default;

  int fields_ = 0;
  int dense_dim_ = 0;
  std::unique_ptr<CriteoReader> criteo_;
  std::unique_ptr<LibsvmReader> libsvm_;
  CriteoExample criteo_example_;
  LibsvmExample libsvm_example_;
};

}  // namespace kestrel

#endif  // KESTREL_WORKER_BATCH_READER_H_
