#include "serving/prediction_service.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/network_policy.h"
#include "common/peer_identity.h"
#include "common/status.h"
#include "grpcpp/health_check_service_interface.h"
#include "serving/served_model.h"
#include "worker/compute/backend_factory.h"

namespace kestrel {

constexpr PeerRoles kPredictRoles = RolesOf({PeerRole::kClient, PeerRole::kAdmin});

// One scoring thread: its backend, its scorer of the model it last scored with, and the thread.
class PredictionService::ScoringThread {
 public:
  ScoringThread(PredictionService* service, std::unique_ptr<Backend> backend)
      : service_(service), backend_(std::move(backend)), thread_([this] { Loop(); }) {}
  ~ScoringThread() { thread_.join(); }

 private:
  void Loop() {
    std::vector<Call> calls;
    std::vector<float> scores;
    while (service_->Take(&calls)) {
      const std::shared_ptr<const ServedModel> model = service_->source_->current();
      absl::Status ready = model == nullptr ? absl::UnavailableError("no model is loaded yet") : absl::OkStatus();
      if (ready.ok() && (scorer_ == nullptr || scorer_->model() != model)) {
        scorer_.reset();  // the old model's last reference from this thread
        absl::StatusOr<std::unique_ptr<ModelScorer>> scorer = ModelScorer::Create(model, backend_.get());
        if (scorer.ok()) {
          scorer_ = *std::move(scorer);
        } else {
          ready = absl::InternalError(absl::StrCat("cannot score with ", model->name, ": ", scorer.status().message()));
        }
      }
      if (!ready.ok()) {
        for (const Call& call : calls) service_->Finish(call, ready);
        continue;
      }
      ScoreBatch(*model, calls, &scores);
    }
  }

  // Scores the calls' lines as one batch and answers each call.
  void ScoreBatch(const ServedModel& model, const std::vector<Call>& calls, std::vector<float>* scores) {
    std::vector<const Call*> scored;
    const auto now = std::chrono::system_clock::now();
    for (const Call& call : calls) {
      if (call.context->IsCancelled()) {
        service_->Finish(call, absl::CancelledError("the caller cancelled the request"));
      } else if (call.context->deadline() < now) {
        service_->Finish(call, absl::DeadlineExceededError("the request's deadline passed while it was queued"));
      } else if (absl::Status added = scorer_->Add(LinesOf(*call.request)); !added.ok()) {
        service_->Finish(call, added);
      } else {
        scored.push_back(&call);
      }
    }
    scores->clear();
    const absl::Status status = scorer_->Score(scores);
    if (!status.ok()) KLOG(Error) << "scoring with " << model.name << " failed: " << status;
    size_t at = 0;
    for (const Call* call : scored) {
      const int n = call->request->lines_size();
      if (status.ok()) {
        call->response->mutable_scores()->Add(scores->begin() + at, scores->begin() + at + n);
        call->response->set_model(model.name);
        call->response->set_clock(model.loaded.model.clock());
        service_->examples_.Increment(n);
      }
      at += n;
      service_->Finish(*call, status.ok() ? status : absl::InternalError(absl::StrCat("scoring failed: ", status.message())));
    }
  }

  // The request's lines, as views (reused).
  absl::Span<const absl::string_view> LinesOf(const PredictRequest& request) {
    views_.assign(request.lines().begin(), request.lines().end());
    return views_;
  }

  PredictionService* const service_;
  const std::unique_ptr<Backend> backend_;
  std::vector<absl::string_view> views_;
  std::unique_ptr<ModelScorer> scorer_;
  std::thread thread_;  // last: started once the rest is built
};

PredictionService::PredictionService(const PredictionServiceOptions& options, ModelSource* source)
    : options_(options),
      source_(source),
      rpc_("kestrel_serve", "prediction service"),
      predict_(rpc_.method("Predict")),
      status_(rpc_.method("ModelStatus")),
      examples_(NewCounter("kestrel_serve_examples_total", "Examples scored.")),
      queued_gauge_(NewGauge("kestrel_serve_queued_requests", "Predict requests waiting for a scoring thread.")) {}

absl::StatusOr<std::unique_ptr<PredictionService>> PredictionService::Create(const PredictionServiceOptions& options,
                                                                             ModelSource* source) {
  if (options.max_batch < 1 || options.max_batch > kMaxPredictBatchLimit || options.max_queued < 1 ||
      options.threads < 1 || options.threads > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the prediction service needs max_batch in [1, ", kMaxPredictBatchLimit,
        "], max_queued >= 1 and 1 to 64 scoring threads; got ", options.max_batch, ", ", options.max_queued, ", ",
        options.threads));
  }
  std::unique_ptr<PredictionService> service(new PredictionService(options, source));
  std::vector<std::unique_ptr<Backend>> backends;
  for (int t = 0; t < options.threads; ++t) {
    KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, NewBackend(options.device, options.compute_threads));
    backends.push_back(std::move(backend));
  }
  for (auto& backend : backends) {
    service->threads_.push_back(std::make_unique<ScoringThread>(service.get(), std::move(backend)));
  }
  service->gauges_ = ScrapeHook([s = service.get()] { s->RefreshGauges(); });
  return service;
}

PredictionService::~PredictionService() { Stop(); }

void PredictionService::Stop() {
  gauges_.Reset();
  std::deque<Call> left;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    left.swap(queue_);
  }
  for (const Call& call : left) Finish(call, absl::UnavailableError("the prediction service is stopping"));
  threads_.clear();  // joins them
}

void PredictionService::RefreshGauges() {
  const std::shared_ptr<const ServedModel> model = source_->current();
  const ModelSource::Counters counters = source_->counters();
  NewGauge("kestrel_serve_model_clock", "Iterations trained into the model served.")
      .Set(model == nullptr ? -1 : model->loaded.model.clock());
  NewGauge("kestrel_serve_model_age_seconds",
           "Seconds since the model served was published to its serving directory (0: not from one).")
      .Set(model == nullptr || model->published_unix_micros == 0
               ? 0
               : absl::ToDoubleSeconds(absl::Now() - absl::FromUnixMicros(model->published_unix_micros)));
  AdvanceCounterTo(NewCounter("kestrel_serve_model_loads_total", "Models swapped in."), counters.loads);
  AdvanceCounterTo(NewCounter("kestrel_serve_failed_model_loads_total",
                              "Exports refused (damaged, out of order, of another job) or that failed to load."),
                   counters.failed_loads);
  absl::MutexLock lock(&mu_);
  queued_gauge_.Set(static_cast<double>(queue_.size()));
}

std::string PredictionService::Refusal(const PredictRequest& request) const {
  const auto& unknown = request.GetReflection()->GetUnknownFields(request);
  if (!unknown.empty()) {
    return absl::StrCat("the request has a field this service does not know (number ", unknown.field(0).number(),
                        "): PredictRequest holds `lines` only");
  }
  if (request.lines_size() == 0) return "the request holds no lines";
  if (request.lines_size() > options_.max_batch) {
    return absl::StrCat("the request holds ", request.lines_size(), " lines; at most ", options_.max_batch,
                        " (--max_batch)");
  }
  for (int i = 0; i < request.lines_size(); ++i) {
    if (request.lines(i).size() > kMaxPredictLineBytes) {
      return absl::StrCat("line ", i, " is ", request.lines(i).size(), " bytes; at most ", kMaxPredictLineBytes);
    }
  }
  return "";
}

void PredictionService::Finish(const Call& call, const absl::Status& status) {
  call.timing.End(status);
  call.reactor->Finish(ToGrpcStatus(status));
}

grpc::ServerUnaryReactor* PredictionService::Predict(grpc::CallbackServerContext* context,
                                                     const PredictRequest* request, PredictResponse* response) {
  Call call{context, request, response, context->DefaultReactor(), predict_.Begin()};
  const std::shared_ptr<const ServedModel> model = source_->current();
  if (model == nullptr) {
    Finish(call, absl::UnavailableError("no model is loaded yet"));
    return call.reactor;
  }
  const absl::StatusOr<std::optional<PeerIdentity>> caller =
      AuthorizePeer(context->auth_context().get(), model->loaded.model.job_id(), kPredictRoles, "Predict");
  if (!caller.ok()) {
    Finish(call, caller.status());
    return call.reactor;
  }
  if (const std::string refusal = Refusal(*request); !refusal.empty()) {
    Finish(call, absl::InvalidArgumentError(refusal));
    return call.reactor;
  }
  bool stopping;
  {
    absl::MutexLock lock(&mu_);
    stopping = stopping_;
    if (!stopping && queue_.size() < static_cast<size_t>(options_.max_queued)) {
      queue_.push_back(call);
      return call.reactor;
    }
  }
  Finish(call, stopping ? absl::UnavailableError("the prediction service is stopping")
                        : absl::ResourceExhaustedError(absl::StrCat("the prediction service is overloaded: ",
                                                                    options_.max_queued,
                                                                    " requests are queued (--max_queued); retry later")));
  return call.reactor;
}

bool PredictionService::Take(std::vector<Call>* calls) {
  calls->clear();
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](PredictionService* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return s->stopping_ || !s->queue_.empty(); },
      this));
  if (stopping_) return false;
  int64_t lines = 0;
  while (!queue_.empty() && (calls->empty() || lines + queue_.front().request->lines_size() <= kMaxJoinedExamples)) {
    lines += queue_.front().request->lines_size();
    calls->push_back(queue_.front());
    queue_.pop_front();
  }
  return true;
}

grpc::ServerUnaryReactor* PredictionService::ModelStatus(grpc::CallbackServerContext* context,
                                                         const ModelStatusRequest* request,
                                                         ModelStatusResponse* response) {
  Call call{context, nullptr, nullptr, context->DefaultReactor(), status_.Begin()};
  const std::shared_ptr<const ServedModel> model = source_->current();
  if (model != nullptr) {
    const absl::StatusOr<std::optional<PeerIdentity>> caller =
        AuthorizePeer(context->auth_context().get(), model->loaded.model.job_id(), kPredictRoles, "ModelStatus");
    if (!caller.ok()) {
      Finish(call, caller.status());
      return call.reactor;
    }
    response->set_job_id(model->loaded.model.job_id());
    response->set_model(model->name);
    response->set_checkpoint(model->loaded.model.checkpoint());
    response->set_clock(model->loaded.model.clock());
    response->set_published_unix_micros(model->published_unix_micros);
  }
  const ModelSource::Counters counters = source_->counters();
  response->set_loaded_unix_micros(model == nullptr ? 0 : absl::ToUnixMicros(counters.loaded_at));
  response->set_loads(counters.loads);
  response->set_failed_loads(counters.failed_loads);
  response->set_last_error(counters.last_error);
  Finish(call, absl::OkStatus());
  return call.reactor;
}

absl::StatusOr<std::unique_ptr<PredictionServer>> PredictionServer::Start(const PredictionServerOptions& options,
                                                                          ModelSource* source) {
  std::unique_ptr<PredictionServer> server(new PredictionServer());
  grpc::EnableDefaultHealthCheckService(true);
  KESTREL_ASSIGN_OR_RETURN(server->service_, PredictionService::Create(options.service, source));
  KESTREL_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                           MakeServerCredentials(options.tls, options.address));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, std::move(credentials), &server->port_);
  builder.RegisterService(server->service_.get());
  ApplyListenerNetworkPolicy(builder);
  builder.SetMaxReceiveMessageSize(kMaxPredictMessageBytes);
  builder.SetMaxSendMessageSize(kMaxPredictMessageBytes);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.address));
  }
  server->SetServing(source->current() != nullptr);
  return server;
}

void PredictionServer::SetServing(bool serving) {
  if (auto* health = server_->GetHealthCheckService()) {
    health->SetServingStatus(serving);
    health->SetServingStatus("kestrel.Predictor", serving);
  }
}

PredictionServer::~PredictionServer() { Shutdown(); }

void PredictionServer::Shutdown() {
  if (server_ == nullptr) return;
  if (auto* health = server_->GetHealthCheckService()) health->Shutdown();
  service_->Stop();  // answers what is queued, so no call is left unfinished
  server_->Shutdown(std::chrono::system_clock::now());
  server_->Wait();
  server_.reset();
  service_.reset();
}

}  // namespace kestrel
