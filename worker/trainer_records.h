// The records (proto/records.proto) a Trainer writes at the end of a run and after an evaluation, built from its
// results. Pure functions.
#ifndef KESTREL_WORKER_TRAINER_RECORDS_H_
#define KESTREL_WORKER_TRAINER_RECORDS_H_

#include <cstdint>
#include <string>

#include "proto/records.pb.h"
#include "worker/row_cache.h"
#include "worker/trainer.h"

namespace kestrel {

// The "train" record of worker `worker` after `done` of its `steps` iterations: the log window's loss and rate.
// A job's iterations in all for logs: the number, or "?" while a stream's end is open (INT64_MAX).
std::string StepsText(int64_t steps);

Record TrainRecord(int worker, int64_t done, int64_t steps, double logloss, double examples_per_second);
// The "done" record of worker `worker`'s run; `cache` (may be null): its row cache, whose hit ratio it reports.
Record DoneRecord(int worker, const TrainResult& result, const RowCache* cache);
// The record of worker `worker`'s evaluation: `kind` "eval" (the test split) or "validation".
Record EvalRecord(int worker, const EvalResult& eval, const char* kind = "eval");

}  // namespace kestrel

#endif  // KESTREL_WORKER_TRAINER_RECORDS_H_
