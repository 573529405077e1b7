#include "python/kestrel/data_binding.h"

#include <pybind11/stl.h>

#include <utility>

#include "python/kestrel/binding_util.h"

namespace kestrel {

py::dict BatchToDict(const Batch& b, const Schema& schema) {
  const int64_t n = b.size;
  py::dict out;
  out["labels"] = py::array_t<float>(n, b.labels.data());
  py::array_t<float> weights(n);
  for (int64_t i = 0; i < n; ++i) weights.mutable_data()[i] = b.weights.empty() ? 1.0f : b.weights[i];
  out["weights"] = weights;
  out["dense"] = py::array_t<float>({n, static_cast<int64_t>(b.dense_dim)}, b.dense.data());
  py::dict features;
  for (int f = 0; f < b.fields; ++f) {
    int64_t entries = 0;
    for (int64_t e = 0; e < n; ++e) entries += b.bag_end(e * b.fields + f) - b.bag_begin(e * b.fields + f);
    py::array_t<uint64_t> keys(entries);
    py::array_t<int64_t> offsets(n);
    py::array_t<float> values(entries);
    int64_t at = 0;
    for (int64_t e = 0; e < n; ++e) {
      offsets.mutable_data()[e] = at;
      for (uint32_t p = b.bag_begin(e * b.fields + f); p < b.bag_end(e * b.fields + f); ++p, ++at) {
        keys.mutable_data()[at] = b.keys[p];
        values.mutable_data()[at] = b.values[p];
      }
    }
    features[py::str(schema.field_names()[f])] = py::make_tuple(keys, offsets, values);
  }
  out["features"] = features;
  return out;
}

// The embedding table each field of `schema` looks up.
std::vector<std::string> FieldTables(const Schema& schema) {
  std::vector<std::string> names;
  for (int t : schema.field_tables()) names.push_back(schema.table_name(t));
  return names;
}

Reader::Reader(const std::string& config_text, std::vector<std::string> files, bool test, int part, int num_parts,
               int64_t epoch) {
  JobConfig job = ParseJob(config_text);
  const ModelConfig& model = job.model();
  // Files given here take the place of the config's training or test files before the schema is resolved, so
  // they get every check those do: a header that differs from the training files' (or the schema's columns) is
  // refused, naming both, never read by position.
  if (!files.empty()) {
    auto* replaced = test ? job.mutable_data()->mutable_test_files() : job.mutable_data()->mutable_train_files();
    replaced->Clear();
    for (const std::string& f : files) replaced->Add()->assign(f);
  }
  absl::StatusOr<std::shared_ptr<const Schema>> schema = Schema::Resolve(job.data(), model);
  Check(schema.status());
  schema_ = *std::move(schema);
  const auto& from = test ? job.data().test_files() : job.data().train_files();
  files.assign(from.begin(), from.end());
  ReaderOptions options = ReaderOptionsFor(job.data());
  options.part = part;
  options.num_parts = num_parts;
  if (!test && job.train().shuffle_buffer() > 0) {
    options.shuffle_window = static_cast<uint64_t>(job.train().shuffle_buffer());
    options.shuffle_seed = job.train().shuffle_seed() != 0 ? job.train().shuffle_seed() : model.seed();
    options.epoch = epoch;
  }
  absl::StatusOr<std::unique_ptr<BatchReader>> reader = BatchReader::Open(schema_, files, options);
  Check(reader.status());
  reader_ = *std::move(reader);
}

py::object Reader::Next(int64_t size) {
  if (size < 1) throw py::value_error("size must be >= 1");
  absl::StatusOr<int64_t> got;
  {
    py::gil_scoped_release release;
    got = reader_->Fill(size, &batch_);
  }
  Check(got.status());
  if (*got == 0) return py::none();
  return BatchToDict(batch_, *schema_);
}

void BindReader(py::module_& m) {
  py::class_<Reader>(m, "Reader")
      .def(py::init<const std::string&, std::vector<std::string>, bool, int, int, int64_t>(), py::arg("config"),
           py::arg("files") = std::vector<std::string>(), py::arg("test") = false, py::arg("part") = 0,
           py::arg("num_parts") = 1, py::arg("epoch") = 0,
           "Reads a job's data (its train files, or test ones with test=True, or `files`) as the C++ worker does: "
           "`config` is the JobConfig in protobuf text format.")
      .def("next", &Reader::Next, py::arg("size"), "The next batch (a dict), or None at the end.")
      .def_property_readonly("fields", &Reader::fields)
      .def_property_readonly("field_tables", &Reader::field_tables)
      .def_property_readonly("dense_dim", &Reader::dense_dim);
}

}  // namespace kestrel
