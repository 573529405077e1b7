#include "python/kestrel/binding_util.h"

#include "absl/strings/ascii.h"

#include "absl/strings/str_cat.h"
#include "common/tls.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "worker/trainer.h"

namespace kestrel {
namespace {

PyObject* g_error_type = nullptr;  // kestrel.KestrelError, made at import
// Its subclass per status code (absl::StatusCode's values 1..16), made at import.
PyObject* g_code_types[17] = {};

// "INVALID_ARGUMENT" -> "InvalidArgumentError".
std::string ClassName(absl::string_view code) {
  std::string name;
  bool upper = true;
  for (char c : code) {
    if (c == '_') {
      upper = true;
      continue;
    }
    name.push_back(upper ? c : static_cast<char>(absl::ascii_tolower(static_cast<unsigned char>(c))));
    upper = false;
  }
  return name + "Error";
}

}  // namespace

void RegisterKestrelError(py::module_& m) {
  g_error_type = PyErr_NewException("kestrel.KestrelError", PyExc_RuntimeError, nullptr);
  m.attr("KestrelError") = py::handle(g_error_type);
  for (int code = 1; code <= 16; ++code) {
    const std::string name = ClassName(absl::StatusCodeToString(static_cast<absl::StatusCode>(code)));
    const std::string qualified = "kestrel." + name;
    g_code_types[code] = PyErr_NewException(qualified.c_str(), g_error_type, nullptr);
    m.attr(name.c_str()) = py::handle(g_code_types[code]);
  }
}

void Raise(const absl::Status& status) {
  const std::string code = absl::StatusCodeToString(status.code());
  const int value = static_cast<int>(status.code());
  PyObject* type = value >= 1 && value <= 16 ? g_code_types[value] : g_error_type;
  py::object error = py::reinterpret_borrow<py::object>(type)(absl::StrCat(code, ": ", status.message()));
  error.attr("code") = code;
  error.attr("message") = std::string(status.message());
  PyErr_SetObject(type, error.ptr());
  throw py::error_already_set();
}

void Check(const absl::Status& status) {
  if (!status.ok()) Raise(status);
}

absl::Span<const uint64_t> KeysOf(const py::array& keys) {
  if (keys.ndim() != 1 || !keys.dtype().is(py::dtype::of<uint64_t>()) || !(keys.flags() & py::array::c_style)) {
    throw py::value_error("keys must be a 1-D C-contiguous numpy array of uint64");
  }
  return absl::MakeConstSpan(static_cast<const uint64_t*>(keys.data()), static_cast<size_t>(keys.shape(0)));
}

// A float32 C-contiguous array of `rows` x `dim` (any shape with that many elements when rows < 0).
const float* RowsOf(const py::array& a, int64_t rows, int64_t dim, const char* what) {
  if (!a.dtype().is(py::dtype::of<float>()) || !(a.flags() & py::array::c_style)) {
    throw py::value_error(absl::StrCat(what, " must be a C-contiguous numpy array of float32"));
  }
  if (rows >= 0 && (a.ndim() != 2 || a.shape(0) != rows || a.shape(1) != dim)) {
    throw py::value_error(absl::StrCat(what, " must have shape (", rows, ", ", dim, ")"));
  }
  return static_cast<const float*>(a.data());
}

absl::Span<const float> FloatsOf(const py::array& a, const char* what) {
  RowsOf(a, -1, 0, what);
  return absl::MakeConstSpan(static_cast<const float*>(a.data()), static_cast<size_t>(a.size()));
}

std::shared_ptr<grpc::ChannelCredentials> CredentialsOf(const std::string& ca, const std::string& cert,
                                                        const std::string& key, bool insecure, const std::string& crl) {
  TlsConfig tls;
  tls.crl_file = crl;
  tls.ca_file = ca;
  tls.cert_file = cert;
  tls.key_file = key;
  tls.insecure = insecure;
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials = MakeChannelCredentials(tls);
  Check(credentials.status());
  return *std::move(credentials);
}

namespace {

// Collects a text-format parse's errors for the exception instead of logging them.
struct TextErrors : google::protobuf::io::ErrorCollector {
  void AddError(int line, int column, const std::string& message) override {
    if (text.empty()) text = absl::StrCat(line + 1, ":", column + 1, ": ", message);
  }
  std::string text;
};

}  // namespace

void ParseText(const std::string& text, const char* proto_file, google::protobuf::Message* message) {
  TextErrors errors;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, message)) {
    throw py::value_error(absl::StrCat("config is not a ", message->GetDescriptor()->name(),
                                       " in protobuf text format (", proto_file, "): ", errors.text));
  }
}

JobConfig ParseJob(const std::string& config_text, const std::vector<std::string>& train_files,
                   const std::vector<std::string>& test_files) {
  JobConfig job;
  ParseText(config_text, "proto/job.proto", &job);
  if (!train_files.empty()) *job.mutable_data()->mutable_train_files() = {train_files.begin(), train_files.end()};
  if (!test_files.empty()) *job.mutable_data()->mutable_test_files() = {test_files.begin(), test_files.end()};
  return JobWithDefaults(job);
}

}  // namespace kestrel
