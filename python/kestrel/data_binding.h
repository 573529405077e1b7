// kestrel.Reader and the batches Python sees: a job's data read by the C++ reader (worker/batch_reader.h) with the
// job's schema, the same keys, pooling, shuffle and sharding as the C++ worker.
#ifndef KESTREL_PYTHON_KESTREL_DATA_BINDING_H_
#define KESTREL_PYTHON_KESTREL_DATA_BINDING_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "worker/batch_reader.h"
#include "worker/data/batch.h"
#include "worker/data/schema.h"

namespace kestrel {
namespace py = pybind11;

// One batch as Python sees it (kestrel.Reader.next, kestrel.Worker.next_batch): see Reader.
py::dict BatchToDict(const Batch& b, const Schema& schema);

// The embedding table each field of `schema` looks up.
std::vector<std::string> FieldTables(const Schema& schema);

// A job's training or test data read by the C++ reader (worker/batch_reader.h) with the job's Schema: the same
// keys, pooling, shuffle and sharding as the C++ worker. Each batch is a dict:
//   "labels": float32 [B], "weights": float32 [B] (all 1 without a weight column), "dense": float32 [B, dense_dim],
//   "features": {field name: (keys uint64 [n], offsets int64 [B], values float32 [n])} — a field's entries of
//   every example in order, each example's starting at its offset; a value is the feature's value times its
//   pooling weight (MEAN, SQRT_N), so summing value * row per example is the schema's pooling.
class Reader {
 public:
  Reader(const std::string& config_text, std::vector<std::string> files, bool test, int part, int num_parts,
         int64_t epoch);
  // The next batch of up to `size` examples, or None at the end of the data.
  py::object Next(int64_t size);
  std::vector<std::string> fields() const { return schema_->field_names(); }
  std::vector<std::string> field_tables() const { return FieldTables(*schema_); }
  int dense_dim() const { return schema_->dense_dim(); }

 private:
  std::shared_ptr<const Schema> schema_;
  std::unique_ptr<BatchReader> reader_;
  Batch batch_;
};

// Defines kestrel.Reader in module `m`.
void BindReader(py::module_& m);

}  // namespace kestrel

#endif  // KESTREL_PYTHON_KESTREL_DATA_BINDING_H_
