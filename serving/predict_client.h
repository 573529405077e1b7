// PredictClient: a caller of a prediction service (kestrel_serve, proto/serving.proto) — what the Python package
// (kestrel.PredictClient), the load benchmark and the tests use. Errors are the service's status, as
// absl::Status (its code and message). Every call carries a deadline.
//
// Thread-safe: any number of threads may call one client (one gRPC channel).
#ifndef KESTREL_SERVING_PREDICT_CLIENT_H_
#define KESTREL_SERVING_PREDICT_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/tls.h"
#include "proto/serving.pb.h"
#include "serving/predict_limits.h"

namespace kestrel {

struct PredictClientOptions {
  // The service's host:port. Required.
  std::string address;
  // Transport security (common/tls.h): a client (or admin) certificate of the served job. Default: plaintext.
  TlsConfig tls;
  // Each call's deadline. Default: kDefaultPredictTimeoutMs.
  absl::Duration timeout = absl::Milliseconds(kDefaultPredictTimeoutMs);
};

class PredictClient {
 public:
  virtual ~PredictClient() = default;
  // Scores `lines` (examples in the served job's data format): one probability each, with the model that scored
  // them.
  [[nodiscard]] virtual absl::StatusOr<PredictResponse> Predict(absl::Span<const std::string> lines) = 0;
  // What the service serves.
  [[nodiscard]] virtual absl::StatusOr<ModelStatusResponse> ModelStatus() = 0;
};

// A client over a gRPC channel. InvalidArgument for an empty address or unusable TLS files.
[[nodiscard]] absl::StatusOr<std::unique_ptr<PredictClient>> NewPredictClient(const PredictClientOptions& options);

}  // namespace kestrel

#endif  // KESTREL_SERVING_PREDICT_CLIENT_H_
