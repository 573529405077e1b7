#!/usr/bin/env python3
"""One `kestrel local` job, measured from outside (bench/run_gpu_bench.sh's cluster part); standard library only.

Runs `python3 <kestrel> local <args> --run_dir RUN` and, while it runs, samples every 0.2 s:
- the CPU time (utime + stime in /proc/<pid>/stat) of each server and worker process named in RUN/pids.json
  (a restarted process's pid is new: every pid seen is counted once, at its last sample);
- the bytes sent over the loopback interface (/proc/net/dev, "lo"): all of the job's traffic, TCP/IP and TLS
  overhead included, and any other loopback traffic on the machine at the time;
- the workers' records in RUN/metrics.jsonl (proto/records.proto).
The figures are taken when the last worker's "done" record appears (its training loop ended; the final
evaluation and checkpoint come after), and the run's examples/s is the workers' examples (summed) over the
longest worker's training seconds, as the records give them. Prints one JSON line on stdout:

  {"ok": true, "workers": 2, "examples": 999424, "seconds": 12.3, "examples_per_second": 81254.0, "auc": 0.78,
   "logloss": 0.45, "wire_bytes": 1.2e9, "wire_bytes_per_example": 1201.0, "server_cpu_seconds": 20.1,
   "server_cpu_seconds_per_1000": 0.0201, "worker_cpu_seconds": 15.0, "worker_cpu_seconds_per_1000": 0.015, ...}

Exit 0 when the job finished and the figures are there, 1 otherwise (the JSON line still says what was seen).
Usage: gpu_bench_cluster.py --kestrel scripts/kestrel --run_dir RUN --timeout 300 -- --config ... --workers 2
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """utime + stime of `pid` in seconds, or None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # After the command name: state is field 3, utime and stime fields 14 and 15 (proc(5)).
    return (int(fields[11]) + int(fields[12])) / TICKS


def loopback_bytes():
    try:
        with open("/proc/net/dev") as f:
            for line in f:
                name, _, counters = line.partition(":")
                if name.strip() == "lo":
                    return int(counters.split()[8])  # transmitted bytes (on lo: also the received ones)
    except (OSError, ValueError, IndexError):
        pass
    return None


def read_records(path):
    records = []
    try:
        with open(path) as f:
            for line in f:
                if line.endswith("\n"):
                    try:
                        records.append(json.loads(line))
                    except json.JSONDecodeError:
                        pass
    except OSError:
        pass
    return records


def number(value):
    return float(value) if isinstance(value, (int, float, str)) else float("nan")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kestrel", required=True, help="the launcher script (scripts/kestrel)")
    p.add_argument("--run_dir", required=True)
    p.add_argument("--workers", type=int, required=True, help="the job's workers (as given to kestrel local)")
    p.add_argument("--timeout", type=float, default=300, help="seconds before the job is stopped")
    p.add_argument("--log", required=True, help="the launcher's stdout and stderr go here")
    p.add_argument("local_args", nargs=argparse.REMAINDER, help="-- then kestrel local's flags")
    args = p.parse_args()
    local_args = args.local_args[1:] if args.local_args[:1] == ["--"] else args.local_args
    os.makedirs(args.run_dir, exist_ok=True)
    metrics = os.path.join(args.run_dir, "metrics.jsonl")
    with open(args.log, "ab") as log:
        launcher = subprocess.Popen([sys.executable, args.kestrel, "local", "--run_dir", args.run_dir] + local_args,
                                    stdout=log, stderr=subprocess.STDOUT)

    def stop(*_):  # SIGINT lets the launcher stop its processes (they also die with it: PR_SET_PDEATHSIG)
        if launcher.poll() is None:
            launcher.send_signal(signal.SIGINT)
            try:
                launcher.wait(20)
            except subprocess.TimeoutExpired:
                launcher.kill()
    signal.signal(signal.SIGTERM, lambda *_: (stop(), sys.exit(1)))

    start = time.time()
    lo_start = loopback_bytes()
    cpu = {}  # pid -> (role, last CPU seconds)
    at_done = None
    timed_out = False
    while launcher.poll() is None:
        try:
            with open(os.path.join(args.run_dir, "pids.json")) as f:
                pids = json.load(f)
        except (OSError, ValueError):
            pids = {}
        for name, pid in pids.items():
            role = name.split()[0]
            if role in ("server", "worker"):
                seconds = cpu_seconds(pid)
                if seconds is not None:
                    cpu[pid] = (role, seconds)
        if at_done is None:
            done = [r for r in read_records(metrics) if r.get("kind") == "done"]
            if len({r.get("worker") for r in done}) >= args.workers:
                at_done = {"elapsed": time.time() - start, "lo": loopback_bytes(),
                           "server": sum(s for role, s in cpu.values() if role == "server"),
                           "worker": sum(s for role, s in cpu.values() if role == "worker")}
        if time.time() - start > args.timeout:
            timed_out = True
            stop()
            break
        time.sleep(0.2)
    code = launcher.wait()

    records = read_records(metrics)
    done = {}
    for r in records:
        if r.get("kind") == "done":
            done[r.get("worker")] = r
    evals = [r for r in records if r.get("kind") == "eval"]
    result = {"ok": False, "launcher_exit": code, "timed_out": timed_out, "workers": args.workers,
              "wall_seconds": round(time.time() - start, 1)}
    if len(done) >= args.workers:
        examples = sum(number(r.get("examples", 0)) for r in done.values())
        seconds = max(number(r.get("seconds", 0)) for r in done.values())
        result.update(examples=examples, seconds=seconds,
                      examples_per_second=examples / seconds if seconds > 0 else 0.0,
                      phases={str(w): r.get("phases", {}) for w, r in sorted(done.items())})
        if at_done:
            if lo_start is not None and at_done["lo"] is not None:
                result["wire_bytes"] = at_done["lo"] - lo_start
                result["wire_bytes_per_example"] = result["wire_bytes"] / examples if examples else None
            result.update(server_cpu_seconds=at_done["server"], worker_cpu_seconds=at_done["worker"],
                          server_cpu_seconds_per_1000=1000 * at_done["server"] / examples if examples else None,
                          worker_cpu_seconds_per_1000=1000 * at_done["worker"] / examples if examples else None)
    if evals:
        result.update(auc=number(evals[-1].get("auc")), logloss=number(evals[-1].get("logloss")))
    try:
        with open(os.path.join(args.run_dir, "summary.json")) as f:
            summary = json.load(f)
        result.update(summary_ok=summary.get("ok"), restarts=summary.get("restarts"),
                      checkpoints_committed=summary.get("checkpoints_committed"))
    except (OSError, ValueError):
        pass
    result["ok"] = code == 0 and not timed_out and "examples_per_second" in result and "auc" in result
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
