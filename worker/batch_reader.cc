#include "worker/batch_reader.h"

#include "absl/strings/str_cat.h"

namespace kestrel {

int SlotsOf(const DataConfig& data) {
  if (data.format() == DataConfig::LIBSVM) return data.libsvm_slots() > 0 ? data.libsvm_slots() : 64;
  return kCriteoFields;
}

int DenseInputsOf(const DataConfig& data, const ModelConfig& model) {
  return data.format() == DataConfig::CRITEO && !model.no_dense_inputs() ? kCriteoIntegerFields : 0;
}

absl::StatusOr<std::unique_ptr<BatchReader>> BatchReader::Open(const DataConfig& data, const ModelConfig& model,
                                                               const std::vector<std::string>& files,
                                                               const ReaderOptions& options,
                                                               const ReaderPosition& start) {
  if (files.empty()) return absl::InvalidArgumentError("no data files given");
  std::unique_ptr<BatchReader> reader(new BatchReader());
  reader->fields_ = SlotsOf(data);
  reader->dense_dim_ = DenseInputsOf(data, model);
  if (data.format() == DataConfig::LIBSVM) {
    auto r = OpenLibsvmReader(files, options, start);
    if (!r.ok()) return r.status();
    reader->libsvm_ = std::move(r).value();
  } else {
    auto r = OpenCriteoReader(files, options, start);
    if (!r.ok()) return r.status();
    reader->criteo_ = std::move(r).value();
  }
  return reader;
}

absl::StatusOr<int64_t> BatchReader::Fill(int64_t size, Batch* batch, bool append, std::vector<uint64_t>* lines) {
  if (!append) batch->Reset(fields_, dense_dim_);
  while (batch->size < size) {
    absl::StatusOr<bool> more =
        criteo_ != nullptr ? criteo_->Next(&criteo_example_) : libsvm_->Next(&libsvm_example_);
    if (!more.ok()) return more.status();
    if (!*more) break;
    if (lines != nullptr) lines->push_back(position().global_line - 1);
    if (criteo_ != nullptr) {
      AppendCriteo(criteo_example_, batch);
    } else {
      absl::Status appended = AppendLibsvm(libsvm_example_, batch);
      if (!appended.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(libsvm_->Where(), ": ", appended.message()));
      }
    }
  }
  return batch->size;
}

const ReaderPosition& BatchReader::position() const {
  return criteo_ != nullptr ? criteo_->position() : libsvm_->position();
}

uint64_t BatchReader::skipped() const { return criteo_ != nullptr ? criteo_->skipped() : libsvm_->skipped(); }

}  // namespace kestrel
