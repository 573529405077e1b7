// PredictionService: the Predictor gRPC service (proto/serving.proto) over a ModelSource, and PredictionServer,
// a running one (what kestrel_serve starts).
//
// Predict is checked on gRPC's callback thread (cheap checks only: the caller's certificate names a client or
// admin of the served model's job; no unknown fields; 1 to max_batch lines, each at most kMaxPredictLineBytes)
// and queued; a full queue (max_queued requests) answers RESOURCE_EXHAUSTED at once, so a flood cannot grow
// memory. Scoring threads (each with its own compute backend and ModelScorer) take queued requests in arrival
// order, joining whole requests up to kMaxJoinedExamples examples into one batch, and finish each call from
// there: a request whose deadline passed or whose caller cancelled while it waited is answered
// DEADLINE_EXCEEDED / CANCELLED unscored; one with a line that does not parse INVALID_ARGUMENT naming the line
// (the others of its batch are scored); before any model loaded UNAVAILABLE. A batch is scored by one model
// state throughout (the ModelSource's current one when it was taken), so a model swap never fails a request.
// Each example's score depends on its own line and the model only, so joining changes no score.
//
// Metrics (Prometheus, common/metrics.h): kestrel_serve_requests_total{method,code} and
// kestrel_serve_request_duration_seconds{method} (arrival to reply), kestrel_serve_examples_total,
// kestrel_serve_queued_requests, and from the ModelSource kestrel_serve_model_clock,
// kestrel_serve_model_age_seconds (since its manifest entry was published), kestrel_serve_model_loads_total and
// kestrel_serve_failed_model_loads_total.
//
// Thread-safe. The service owns its queue and scoring threads and shares nothing but the ModelSource, which
// must outlive it. Destroying it answers what is still queued UNAVAILABLE and joins the threads.
#ifndef KESTREL_SERVING_PREDICTION_SERVICE_H_
#define KESTREL_SERVING_PREDICTION_SERVICE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"
#include "common/rpc_metrics.h"
#include "common/tls.h"
#include "grpcpp/grpcpp.h"
#include "proto/serving.grpc.pb.h"
#include "serving/model_source.h"
#include "serving/predict_limits.h"

namespace kestrel {

struct PredictionServiceOptions {
  // Most lines one request may carry. Default: kDefaultMaxPredictBatch; 1 to kMaxPredictBatchLimit.
  int max_batch = kDefaultMaxPredictBatch;
  // Most requests waiting for a scoring thread. Default: kDefaultMaxQueuedPredictions; at least 1.
  int max_queued = kDefaultMaxQueuedPredictions;
  // Scoring threads, each with its own backend. Default: 1.
  int threads = 1;
  // Compute backend of each scoring thread (worker/compute/backend_factory.h): cpu, cuda, cuda:N or auto.
  // Default: "cpu".
  std::string device = "cpu";
  // CPU backend: compute threads of each scoring thread (0: the cores this process may use). Default: 0.
  int compute_threads = 0;
};

class PredictionService final : public Predictor::CallbackService {
 public:
  // Starts the scoring threads (creating their backends). InvalidArgument for options out of range; the
  // backend's error when a device cannot be used.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<PredictionService>> Create(const PredictionServiceOptions& options,
                                                                                 ModelSource* source);
  ~PredictionService() override;
  // Answers what is queued, and every Predict from now on, UNAVAILABLE, and joins the scoring threads.
  // Idempotent.
  void Stop();

  grpc::ServerUnaryReactor* Predict(grpc::CallbackServerContext* context, const PredictRequest* request,
                                    PredictResponse* response) override;
  grpc::ServerUnaryReactor* ModelStatus(grpc::CallbackServerContext* context, const ModelStatusRequest* request,
                                        ModelStatusResponse* response) override;

 private:
  struct Call {
    grpc::CallbackServerContext* context;
    const PredictRequest* request;
    PredictResponse* response;
    grpc::ServerUnaryReactor* reactor;
    RpcMetrics::Call timing;
  };
  class ScoringThread;

  PredictionService(const PredictionServiceOptions& options, ModelSource* source);
  // Why `request` cannot be scored ("" if it can).
  std::string Refusal(const PredictRequest& request) const;
  // Takes queued calls (at least one, whole requests up to kMaxJoinedExamples lines) into `calls`; false once
  // stopping.
  bool Take(std::vector<Call>* calls);
  void Finish(const Call& call, const absl::Status& status);
  // Refreshes the gauges from the source (a scrape hook).
  void RefreshGauges();

  const PredictionServiceOptions options_;
  ModelSource* const source_;
  RpcMetrics rpc_;
  RpcMetrics::Method& predict_;
  RpcMetrics::Method& status_;
  prometheus::Counter& examples_;
  prometheus::Gauge& queued_gauge_;
  absl::Mutex mu_;
  std::deque<Call> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<ScoringThread>> threads_;
  ScrapeHook gauges_;
};

struct PredictionServerOptions {
  // Where to listen, e.g. "0.0.0.0:7070"; port 0 picks a free one (port()). Required.
  std::string address;
  // Transport security (common/tls.h): mutual TLS; callers need a client (or admin) certificate of the served
  // job. Default: none (plaintext, loopback only).
  TlsConfig tls;
  PredictionServiceOptions service;
};

// A listening prediction service: the Predictor service and gRPC's health service (SERVING once a model is
// loaded, "kestrel.Predictor" too). Thread-safe; owns the gRPC server and the service; the ModelSource must
// outlive it.
class PredictionServer {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<PredictionServer>> Start(const PredictionServerOptions& options,
                                                                               ModelSource* source);
  ~PredictionServer();
  int port() const { return port_; }
  // Health: SERVING when `serving` (a model is loaded), NOT_SERVING otherwise.
  void SetServing(bool serving);
  void Shutdown();

 private:
  PredictionServer() = default;
  std::unique_ptr<PredictionService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace kestrel

#endif  // KESTREL_SERVING_PREDICTION_SERVICE_H_
