// kestrel_predict: scores Criteo or libsvm files with an exported model (export/export.h).
//
//   kestrel_predict --model=/models/ctr-v1 --input=test.tsv --output=scores.txt
//
// Writes one probability per example, in file order ("%.9g": the float round-trips exactly), and prints the
// examples' logloss, AUC and prediction fingerprint (the trainer's evaluation prints the same figures for the
// same model and rows) as one JSON line, a Record of kind "predict" (proto/records.proto). Exit codes: 0
// scored, 1 failed, 2 bad flags or a damaged export (named).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "common/command_line.h"
#include "common/logging.h"
#include "common/process_setup.h"
#include "worker/compute/backend_factory.h"
#include "export/export_format.h"
#include "export/load_export.h"
#include "export/score_export.h"
#include "common/evaluation.h"
#include "worker/records.h"

ABSL_FLAG(std::string, model, "", "Export directory made by kestrel_export (required).");
ABSL_FLAG(std::string, input, "", "Comma-separated data files in the model's format (required).");
ABSL_FLAG(std::string, output, "", "Where to write one probability per line. Default: none (figures only).");
ABSL_FLAG(std::string, device, "cpu", "Compute backend: cpu, cuda, cuda:N or auto.");
ABSL_FLAG(int, compute_threads, 0,
          "CPU backend: compute threads (GEMMs and every kernel). 0: the cores this process may use. For a fixed "
          "count results are bitwise repeatable.");
ABSL_FLAG(int64_t, max_examples, 0, "Score at most this many examples (0: all).");

namespace kestrel {
namespace {

int Run() {
  SetLogIdentity("predict");
  if (absl::Status built_in = CheckBuiltInModel(absl::GetFlag(FLAGS_model), "kestrel_predict"); !built_in.ok()) {
    KLOG(Error) << built_in.message();
    return 2;
  }
  absl::StatusOr<LoadedExport> loaded = LoadExport(absl::GetFlag(FLAGS_model));
  if (!loaded.ok()) {
    KLOG(Error) << "cannot load the model: " << loaded.status();
    return 2;
  }
  const std::vector<std::string> files = absl::StrSplit(absl::GetFlag(FLAGS_input), ',', absl::SkipEmpty());
  if (files.empty()) {
    KLOG(Error) << "give --input";
    return 2;
  }
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      NewBackend(absl::GetFlag(FLAGS_device), absl::GetFlag(FLAGS_compute_threads));
  if (!backend.ok()) {
    KLOG(Error) << backend.status();
    return 2;
  }
  std::vector<float> probs, labels;
  if (absl::Status s = ScoreExport(*loaded, backend->get(), files, absl::GetFlag(FLAGS_max_examples), &probs, &labels);
      !s.ok()) {
    KLOG(Error) << "scoring failed: " << s;
    return 1;
  }
  if (const std::string output = absl::GetFlag(FLAGS_output); !output.empty()) {
    if (absl::Status written = WritePredictions(output, probs); !written.ok()) {
      KLOG(Error) << written;
      return 1;
    }
  }
  Record record;
  record.set_kind("predict");
  record.set_examples(probs.size());
  record.set_logloss(LogLoss(probs, labels));
  record.set_auc(ExactAuc(probs, labels));
  record.set_fingerprint(FingerprintHex(PredictionFingerprint(probs)));
  record.set_checkpoint(loaded->model.checkpoint());
  record.set_clock(loaded->model.clock());
  std::printf("%s\n", RecordJson(record).c_str());
  return 0;
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  kestrel::PreferPassiveOpenMpWaiting(argv);
  kestrel::ParseCommandLine(argc, argv, "Kestrel predict: scores data files with an exported model.");
  return kestrel::Run();
}
