// kestrel_serve: answers predictions over gRPC from an exported model, following a serving directory as training
// publishes to it (docs/serving.md).
//
//   kestrel_serve --serving_dir=/models/ctr --address=0.0.0.0:7070 --tls_ca=ca.pem --tls_cert=serving-0.pem \
//       --tls_key=serving-0.key
//   kestrel_serve --model=/models/ctr-v1 --address=127.0.0.1:7070
//
// Runs until SIGTERM or SIGINT. Exit codes: 0 stopped by a signal, 1 failed, 2 bad flags or a model that cannot
// be loaded (named).
#include <memory>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/command_line.h"
#include "common/logging.h"
#include "common/metrics_flags.h"
#include "common/metrics_server.h"
#include "common/process_setup.h"
#include "common/tls_flags.h"
#include "serving/model_source.h"
#include "serving/predict_limits.h"
#include "serving/prediction_service.h"

ABSL_FLAG(std::string, model, "", "An export directory to serve as it is (made by kestrel_export). Default: none.");
ABSL_FLAG(std::string, serving_dir, "",
          "A serving directory to follow: its MANIFEST's newest export is served, and each newer one swapped in "
          "as it is published. Default: none. Give exactly one of --model and --serving_dir.");
ABSL_FLAG(std::string, address, "127.0.0.1:7070", "Where to listen (host:port; port 0: any free port).");
ABSL_FLAG(std::string, port_file, "", "Write the bound port to this file once listening. Default: none.");
ABSL_FLAG(int, max_batch, kestrel::kDefaultMaxPredictBatch, "Most examples one request may carry.");
ABSL_FLAG(int, max_queued, kestrel::kDefaultMaxQueuedPredictions,
          "Most requests waiting to be scored; beyond it requests are answered RESOURCE_EXHAUSTED.");
ABSL_FLAG(int, scoring_threads, 1, "Scoring threads, each with its own compute backend.");
ABSL_FLAG(std::string, device, "cpu", "Compute backend: cpu, cuda, cuda:N or auto.");
ABSL_FLAG(int, compute_threads, 0,
          "CPU backend: compute threads of each scoring thread. 0: the cores this process may use.");
ABSL_FLAG(int, poll_ms, kestrel::kDefaultServingPollMs, "How often to look for a newer export (--serving_dir).");

namespace kestrel {
namespace {

int Run() {
  SetLogIdentity("serve");
  BlockShutdownSignals();
  ModelSourceOptions source_options;
  source_options.model_dir = absl::GetFlag(FLAGS_model);
  source_options.serving_dir = absl::GetFlag(FLAGS_serving_dir);
  absl::StatusOr<std::unique_ptr<ModelSource>> source = ModelSource::Open(source_options);
  if (!source.ok()) {
    KLOG(Error) << "cannot serve: " << source.status();
    return 2;
  }
  if (absl::GetFlag(FLAGS_poll_ms) < 10) {
    KLOG(Error) << "--poll_ms must be at least 10";
    return 2;
  }
  PredictionServerOptions options;
  options.address = absl::GetFlag(FLAGS_address);
  options.tls = TlsConfigFromFlags();
  options.service.max_batch = absl::GetFlag(FLAGS_max_batch);
  options.service.max_queued = absl::GetFlag(FLAGS_max_queued);
  options.service.threads = absl::GetFlag(FLAGS_scoring_threads);
  options.service.device = absl::GetFlag(FLAGS_device);
  options.service.compute_threads = absl::GetFlag(FLAGS_compute_threads);
  absl::StatusOr<std::unique_ptr<PredictionServer>> server = PredictionServer::Start(options, source->get());
  if (!server.ok()) {
    KLOG(Error) << "cannot start the prediction service: " << server.status();
    return absl::IsInvalidArgument(server.status()) || absl::IsFailedPrecondition(server.status()) ? 2 : 1;
  }
  absl::StatusOr<std::unique_ptr<MetricsServer>> metrics = MetricsServer::Start(MetricsServerOptionsFromFlags());
  if (!metrics.ok()) {
    KLOG(Error) << metrics.status();
    return 1;
  }
  if (absl::Status written = WritePortFile(absl::GetFlag(FLAGS_port_file), (*server)->port()); !written.ok()) {
    KLOG(Error) << written;
    return 1;
  }
  KLOG(Info) << "serving predictions on port " << (*server)->port() << " over " << DescribeTransport(options.tls);
  absl::Notification stop;
  std::thread poller([&] {
    const absl::Duration every = absl::Milliseconds(absl::GetFlag(FLAGS_poll_ms));
    while (!stop.WaitForNotificationWithTimeout(every)) {
      (*source)->Refresh().IgnoreError();  // a refusal is logged, counted and kept by the source
      (*server)->SetServing((*source)->current() != nullptr);
    }
  });
  const int signal = WaitForShutdownSignal();
  KLOG(Info) << "signal " << signal << ": stopping";
  stop.Notify();
  poller.join();
  (*server)->Shutdown();
  return 0;
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  kestrel::PreferPassiveOpenMpWaiting(argv);
  kestrel::ParseCommandLine(argc, argv, "Kestrel serve: answers predictions over gRPC from an exported model.");
  return kestrel::Run();
}
