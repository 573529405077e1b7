// kestrel_publish: publishes a training job's checkpoints into a serving directory as a chain of full and delta
// exports, for kestrel_serve (serving/publisher.h, docs/serving.md). Runs beside the scheduler until SIGTERM or
// SIGINT (or, with --once, publishes the newest checkpoint and exits).
//
//   kestrel_publish --checkpoint_dir=/ckpt/ctr --config=job.pbtxt --serving_dir=/models/ctr
//
// A publication that fails (a damaged checkpoint, a full disk) is logged and counted
// (kestrel_publish_failures_total) and tried again at the next poll; the manifest keeps naming the last good
// chain. Exit codes: 0 stopped by a signal (or --once published or found nothing new), 1 --once failed, 2 bad
// flags or config.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/checkpoint_dir_flag.h"
#include "common/checkpoint_layout.h"
#include "common/command_line.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/metrics_flags.h"
#include "common/metrics_server.h"
#include "common/process_setup.h"
#include "google/protobuf/text_format.h"
#include "serving/publisher.h"
#include "worker/data/schema.h"
#include "worker/train_stream.h"
#include "worker/trainer.h"

ABSL_FLAG(std::string, config, "", "The job config it trains with (protobuf text format; required).");
ABSL_FLAG(std::string, serving_dir, "", "The serving directory to publish into (created; required).");
ABSL_FLAG(int, full_every, kestrel::PublisherOptions().full_every,
          "A full export every this many publications; deltas in between.");
ABSL_FLAG(int, keep_chains, kestrel::PublisherOptions().keep_chains,
          "Chains (a full export and its deltas) kept in the serving directory; older ones are removed.");
ABSL_FLAG(absl::Duration, poll, absl::Seconds(1), "How often to look for a newer committed checkpoint.");
ABSL_FLAG(bool, once, false, "Publish the newest checkpoint (if new) and exit. Default: false (run until a signal).");

namespace kestrel {
namespace {

int Run() {
  SetLogIdentity("publish");
  BlockShutdownSignals();
  PublisherOptions options;
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  options.serving_dir = absl::GetFlag(FLAGS_serving_dir);
  options.full_every = absl::GetFlag(FLAGS_full_every);
  options.keep_chains = absl::GetFlag(FLAGS_keep_chains);
  absl::StatusOr<std::string> text = ReadWholeFile(absl::GetFlag(FLAGS_config));
  if (!text.ok() || !google::protobuf::TextFormat::ParseFromString(*text, &options.job)) {
    KLOG(Error) << "--config: cannot read a JobConfig from '" << absl::GetFlag(FLAGS_config) << "'";
    return 2;
  }
  // The format as the schema resolved it, so that serving needs no training file (a job that follows a directory:
  // from its first file, as its workers resolve it).
  JobConfig with_defaults = JobWithDefaults(options.job);
  if (const std::string& stream = with_defaults.data().train_stream(); !stream.empty()) {
    absl::StatusOr<std::vector<std::string>> files = TrainStream(stream, absl::ZeroDuration()).List();
    if (files.ok() && !files->empty()) with_defaults.mutable_data()->add_train_files(stream + "/" + files->front());
  }
  if (auto schema = Schema::Resolve(with_defaults.data(), with_defaults.model()); schema.ok()) {
    *options.job.mutable_data() = (*schema)->Pinned(options.job.data());
  } else {
    KLOG(Warning) << "publishing the config as given (its data format could not be resolved: " << schema.status() << ")";
  }
  absl::StatusOr<std::unique_ptr<Publisher>> publisher = Publisher::Open(std::move(options));
  if (!publisher.ok()) {
    KLOG(Error) << publisher.status();
    return 2;
  }
  prometheus::Counter& published = NewCounter("kestrel_publish_exports_total", "Exports published.");
  prometheus::Counter& failures = NewCounter("kestrel_publish_failures_total", "Publications that failed.");
  auto publish_once = [&]() -> bool {
    absl::StatusOr<std::optional<ServingEntry>> entry = (*publisher)->PublishLatest();
    if (!entry.ok()) {
      KLOG(Error) << "publishing failed (the serving directory keeps its last chain): " << entry.status();
      failures.Increment();
      return false;
    }
    if (entry->has_value()) published.Increment();
    return true;
  };
  if (absl::GetFlag(FLAGS_once)) return publish_once() ? 0 : 1;
  absl::StatusOr<std::unique_ptr<MetricsServer>> metrics = MetricsServer::Start(MetricsServerOptionsFromFlags());
  if (!metrics.ok()) {
    KLOG(Error) << metrics.status();
    return 1;
  }
  absl::Notification stop;
  std::thread poller([&] {
    do {
      publish_once();
    } while (!stop.WaitForNotificationWithTimeout(absl::GetFlag(FLAGS_poll)));
  });
  KLOG(Info) << "signal " << WaitForShutdownSignal() << ": stopping";
  stop.Notify();
  poller.join();
  publish_once();  // the checkpoint the job's end may have committed
  return 0;
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  kestrel::ParseCommandLine(argc, argv, "Kestrel publish: a job's checkpoints into a serving directory.");
  return kestrel::Run();
}
