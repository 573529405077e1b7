// What every part of the Python binding shares: the kestrel.KestrelError a refused call raises, the checks of
// numpy arguments, channel credentials from TLS files, and job configs parsed from text with their errors kept
// for the exception.
#ifndef KESTREL_PYTHON_KESTREL_BINDING_UTIL_H_
#define KESTREL_PYTHON_KESTREL_BINDING_UTIL_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "google/protobuf/message.h"
#include "grpcpp/security/credentials.h"
#include "proto/job.pb.h"

namespace kestrel {
namespace py = pybind11;

// Creates kestrel.KestrelError in module `m` (once, at import): a RuntimeError with `code` (the absl/gRPC
// status code's name) and `message`; and a subclass per code, named after it (InvalidArgumentError,
// NotFoundError, FailedPreconditionError, AbortedError, UnavailableError, ...), so a caller catches what it
// can act on: `except kestrel.UnavailableError`.
void RegisterKestrelError(py::module_& m);
// Raises the kestrel.KestrelError subclass of `status`'s code.
[[noreturn]] void Raise(const absl::Status& status);
// Raises kestrel.KestrelError unless `status` is OK.
void Check(const absl::Status& status);

// The keys of a 1-D C-contiguous numpy uint64 array (ValueError otherwise).
absl::Span<const uint64_t> KeysOf(const py::array& keys);
// A float32 C-contiguous array of `rows` x `dim` (any shape with that many elements when rows < 0).
const float* RowsOf(const py::array& a, int64_t rows, int64_t dim, const char* what);
// The values of a float32 C-contiguous array of any shape.
absl::Span<const float> FloatsOf(const py::array& a, const char* what);

// The channel credentials of the TLS files given (common/tls.h: mutual TLS when they are, plaintext on loopback
// when not, or anywhere with `insecure`; `crl`: a revocation list servers are checked against, "" for none).
std::shared_ptr<grpc::ChannelCredentials> CredentialsOf(const std::string& ca, const std::string& cert,
                                                        const std::string& key, bool insecure,
                                                        const std::string& crl = "");

// Parses `text` (protobuf text format) into `message`; ValueError naming the message type, `proto_file` and the
// first error otherwise.
void ParseText(const std::string& text, const char* proto_file, google::protobuf::Message* message);

// A job config in protobuf text format, with train/test file overrides (as kestrel_worker's --train_files and
// --test_files) and every default applied.
JobConfig ParseJob(const std::string& config_text, const std::vector<std::string>& train_files = {},
                   const std::vector<std::string>& test_files = {});

}  // namespace kestrel

#endif  // KESTREL_PYTHON_KESTREL_BINDING_UTIL_H_
