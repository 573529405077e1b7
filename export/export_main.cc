// kestrel_export: a committed checkpoint → a serving artifact (export/export.h).
//
//   kestrel_export --checkpoint_dir=/ckpt/ctr --config=job.pbtxt --out=/models/ctr-v1 [--checkpoint=ckpt-00000007]
//   kestrel_export --checkpoint_dir=/ckpt/ctr --config=job.pbtxt --out=/models/ctr-v2 --base_export=/models/ctr-v1
//
// The second form writes a delta: only the rows changed since the export in --base_export, and the keys it
// holds that training has since dropped (export/export.h describes the files and how a delta is applied).
//
// Exit codes: 0 exported, 1 failed (I/O), 2 bad flags, config, checkpoint or base export (a damaged file is named).
#include <string>

#include "absl/flags/flag.h"
#include "common/command_line.h"
#include "common/checkpoint_dir_flag.h"
#include "common/logging.h"
#include "google/protobuf/text_format.h"
#include "common/checkpoint_layout.h"
#include "export/export.h"

ABSL_FLAG(std::string, checkpoint, "", "Checkpoint to export, e.g. ckpt-00000007. Default: the latest committed.");
ABSL_FLAG(std::string, config, "", "The job config it was trained with (protobuf text format; required).");
ABSL_FLAG(std::string, out, "", "Export directory to create (required; must not hold an export).");
ABSL_FLAG(std::string, base_export, "",
          "An earlier export (full or delta) of the same job: write a delta against it (changed and new rows, "
          "and the keys it holds that are gone). Default: empty = a full export.");

namespace kestrel {
namespace {

int Run() {
  SetLogIdentity("export");
  ExportOptions options;
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  options.checkpoint = absl::GetFlag(FLAGS_checkpoint);
  options.out_dir = absl::GetFlag(FLAGS_out);
  options.base_export = absl::GetFlag(FLAGS_base_export);
  absl::StatusOr<std::string> text = ReadWholeFile(absl::GetFlag(FLAGS_config));
  if (!text.ok() || !google::protobuf::TextFormat::ParseFromString(*text, &options.job)) {
    KLOG(Error) << "--config: cannot read a JobConfig from '" << absl::GetFlag(FLAGS_config) << "'";
    return 2;
  }
  absl::StatusOr<ExportedModel> model = ExportCheckpoint(options);
  if (!model.ok()) {
    KLOG(Error) << "export failed: " << model.status();
    return absl::IsUnavailable(model.status()) ? 1 : 2;
  }
  return 0;
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  kestrel::ParseCommandLine(argc, argv, "Kestrel export: a committed checkpoint to a serving artifact.");
  return kestrel::Run();
}
