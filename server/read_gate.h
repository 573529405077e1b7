// ReadGate: the servers' half of BSP and SSP. A range group (server/shard.h) answers a worker's training read
// only once every worker's updates that the read must see are in its tables, so workers need no barrier at the
// scheduler: the clocks travel with the requests (RequestHeader.wait_clock).
//
// For each table the gate knows `through`: the highest clock c such that every worker's updates of every clock
// <= c are applied there.
//   BSP   the table's BspAggregator applies a clock once every worker's parts are in (Applied(table, c)).
//   SSP   pushes apply on arrival; a worker's clock c is complete on a table once all `parts` of its push of c
//         have been applied (Pushed(...)), and `through` is the lowest complete clock over the job's workers.
// Every worker pushes every table once per clock, with an empty part to a server it has nothing for
// (PsClientOptions::bsp_pushes), so a table's clock always completes.
//
// A read that needs every worker's clocks < `need` (BSP: its own iteration; SSP(s): its iteration - s) is
// answered at once when through >= need - 1, else its callback waits (bounded: kMaxWaitingReads) and runs when
// a push or an applied clock raises `through` (handed to the pusher to run), when the gate is reset (a restore: every wait fails Aborted), or
// when its deadline passes (Expire: Unavailable, the client asks again). Callbacks run outside the lock on the
// thread that released them and must not block.
//
// Clocks start at the floor: a restored checkpoint of clock c holds every update of clocks < c, so StartAt(c)
// makes every clock < c complete.
//
// Holds (elastic jobs, common/held_reads.h): HoldReads(from, at) answers every read that needs clocks >= `from`
// (one waiting included) with ReadsHeldAt(at) instead of letting it wait, until ReleaseReads() or StartAt().
//
// Thread-safe.
#ifndef KESTREL_SERVER_READ_GATE_H_
#define KESTREL_SERVER_READ_GATE_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kestrel {

// Most reads one range group holds waiting at once; more are refused (Unavailable: retry), so no sender can make
// a server hold unbounded requests.
inline constexpr size_t kMaxWaitingReads = size_t{1} << 14;

class ReadGate {
 public:
  using Callback = std::function<void(absl::Status)>;

  // `bsp`: clocks complete when the aggregator applies them; else by the workers' pushes (SSP). `num_workers`:
  // the job's workers (0: not known yet; SSP reads then wait until SetWorkers).
  ReadGate(bool bsp, int num_workers);

  // The job has `num_workers` workers from now on (a rescale, or the scheduler's first word); SSP progress of
  // ranks beyond it is dropped. Releases the reads this allows.
  void SetWorkers(int num_workers);
  // A restore (or a rescale's new layout): every waiting read fails with `cancel`, all progress is forgotten and
  // clocks < `clock` count as complete on every table (clock 0: nothing is).
  void StartAt(int64_t clock, const absl::Status& cancel);

  // Clocks < `clock` are complete on every table (a restored checkpoint's clock): releases the reads this allows.
  void Raise(int64_t clock);

  // Reads needing clocks >= `from` are answered ReadsHeldAt(`at`) from now on, the waiting ones at once. Lifted by
  // ReleaseReads() and StartAt().
  void HoldReads(int64_t from, int64_t at);
  void ReleaseReads();

  // BSP: `table` applied clock `clock` (every worker's parts). The reads this allows are added to `ready`: the
  // caller runs them with OK once it holds no lock a read takes.
  void Applied(absl::string_view table, int64_t clock, std::vector<Callback>* ready);
  // SSP: part `part` of `parts` of worker `worker`'s push of `clock` to `table` is applied (or was a repeat).
  void Pushed(absl::string_view table, int worker, int64_t clock, int part, int parts, std::vector<Callback>* ready);

  // A read of `table` that must see every worker's clocks < `need`: true when it may run now. Otherwise `done`
  // runs later: OK once it may run, or an error (the gate reset, the deadline passed). Unavailable when
  // kMaxWaitingReads reads already wait.
  [[nodiscard]] absl::StatusOr<bool> Await(absl::string_view table, int64_t need, absl::Time deadline, Callback done);
  // Fails the waits whose deadline is before `now` with Unavailable; returns how many.
  size_t Expire(absl::Time now);

  // The clocks complete on `table` for every worker: through + 1 (the floor for a table never pushed).
  int64_t Complete(absl::string_view table) const;
  // The lowest Complete() over the tables pushed so far, or the floor when none was.
  int64_t CompleteAll() const;
  // The clocks of `worker` complete on every table: its own pushes under SSP (where a replacement continues),
  // CompleteAll() under BSP (a clock counts once applied, so a replacement redoes one some worker lacks).
  int64_t CompleteFor(int worker) const;
  // SSP: the clocks `worker` pushed completely to `table` (the floor for a table never pushed). BSP: Complete().
  int64_t PushedBy(absl::string_view table, int worker) const;
  size_t waiting() const;

 private:
  struct WorkerClock {
    int64_t done = -1;         // every clock <= done is complete
    int64_t collecting = -1;   // done + 1 while some parts of it arrived
    std::vector<bool> parts;   // which parts of `collecting` arrived
    int received = 0;
  };
  struct Waiter {
    absl::Time deadline;
    Callback done;
  };
  struct TableClocks {
    int64_t through = -1;
    std::vector<WorkerClock> workers;  // SSP
    std::multimap<int64_t, Waiter> waiting;  // by the `through` each needs
  };

  TableClocks& TableLocked(absl::string_view table) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SSP: recomputes `through` from the workers.
  void RecomputeLocked(TableClocks& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the waits `t.through` allows into `ready`.
  void ReleaseLocked(TableClocks& t, std::vector<Callback>* ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const bool bsp_;
  mutable absl::Mutex mu_;
  int num_workers_ ABSL_GUARDED_BY(mu_);
  int64_t floor_ ABSL_GUARDED_BY(mu_) = -1;  // clocks <= floor_ are complete everywhere
  static constexpr int64_t kNotHeld = std::numeric_limits<int64_t>::max();
  int64_t held_from_ ABSL_GUARDED_BY(mu_) = kNotHeld;  // HoldReads: reads needing clocks >= it are held
  int64_t held_at_ ABSL_GUARDED_BY(mu_) = 0;
  size_t waiting_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, TableClocks> tables_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_READ_GATE_H_
