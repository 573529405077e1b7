#!/usr/bin/env python3
"""Failover against rollback: what losing a parameter server costs a BSP job, with --replicas=2 and without.

For each replica count, `kestrel local` runs the same job twice on the same data: once uninterrupted, once
with server 1 killed (SIGKILL) a fixed delay after the first checkpoint is committed (the supervisor restarts
it). Reported, from the scheduler's log and the runs' summaries:
  - detection: kill -> the scheduler declares the server dead;
  - recovery: kill -> the job can train again (R=2: the failover, no rollback; R=1: every server restored
    the checkpoint; the rollback then also redoes the clocks since that checkpoint);
  - re-replication hold (R=2): how long the workers were held while the restarted server got its copies and
    every server moved to the routing that puts it back;
  - time lost: the killed run's wall time minus the uninterrupted run's (detection, recovery, re-replication
    and redone work together), and whether both ended with the same predictions (BSP: they must).
Every figure comes from this one invocation, so the ratios compare like with like on a shared machine.
"""
import argparse
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import time

LOG_TIME = re.compile(r"^[IWE](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+) ")


def log_time(line, year):
    m = LOG_TIME.match(line)
    if not m:
        return None
    mo, d, h, mi, s, us = (int(x) for x in m.groups())
    return datetime.datetime(year, mo, d, h, mi, s, us, tzinfo=datetime.timezone.utc).timestamp()


def first_line_time(path, needle, after=0.0):
    year = datetime.datetime.now(datetime.timezone.utc).year
    for line in open(path, errors="replace"):
        if needle in line:
            t = log_time(line, year)
            if t is not None and t >= after:
                return t, line.strip()
    return None, None


def run(args, name, replicas, kill):
    run_dir = os.path.join(args.work, name)
    cmd = [args.kestrel, "local", "--no_build", f"--config={args.config}", f"--data={args.data}",
           f"--run_dir={run_dir}", "--device=cpu", "--compute_threads=1",
           f"--checkpoint_every_clocks={args.checkpoint_every_clocks}", f"--heartbeat_interval={args.heartbeat}",
           f"--replicas={replicas}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    killed_at = None
    if kill:
        pids = os.path.join(run_dir, "pids.json")
        sched = os.path.join(run_dir, "scheduler.log")
        deadline = time.time() + 120
        pid = None
        while time.time() < deadline and pid is None:
            try:
                pid = json.load(open(pids))["server 1"]
            except (OSError, ValueError, KeyError):
                time.sleep(0.05)
        while time.time() < deadline:
            if os.path.exists(sched) and "committed at clock" in open(sched, errors="replace").read():
                break
            time.sleep(0.02)
        time.sleep(args.kill_delay)
        os.kill(pid, signal.SIGKILL)
        killed_at = time.time()
    if proc.wait() != 0:
        sys.exit(f"{name}: kestrel local failed; see {run_dir}")
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    out = {"wall_seconds": summary["wall_seconds"], "fingerprint": summary.get("fingerprint"),
           "auc": summary.get("auc"), "failovers": summary.get("failovers", 0),
           "rollbacks": summary.get("rollbacks", 0)}
    if kill:
        sched = os.path.join(run_dir, "scheduler.log")
        dead, _ = first_line_time(sched, "server rank 1 at", after=killed_at - 1)
        hold = None
        if replicas > 1:
            back, _ = first_line_time(sched, "failed over without a rollback", after=killed_at - 1)
            redone = 0
            held, _ = first_line_time(sched, "re-replicating onto server", after=killed_at - 1)
            released, _ = first_line_time(sched, "the workers go on", after=killed_at - 1)
            if held and released:
                hold = released - held
        else:
            back, line = first_line_time(sched, "every server restored", after=killed_at - 1)
            redone = None
            if line:
                m = re.search(r"continues from clock (\d+)", line)
                if m:
                    redone = f"from clock {m.group(1)}"
        out.update(detection_s=(dead - killed_at) if dead else None,
                   recovery_s=(back - killed_at) if back else None, redone=redone, rereplication_hold_s=hold)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kestrel", required=True)
    p.add_argument("--config", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--output", default="bench/results/failover_bench.md")
    p.add_argument("--kill_delay", type=float, default=1.0, help="seconds after the first checkpoint (default 1)")
    p.add_argument("--checkpoint_every_clocks", type=int, default=100)
    p.add_argument("--heartbeat", default="300ms")
    p.add_argument("--machine", default="")
    p.add_argument("--invocation", default="")
    args = p.parse_args()
    results = {}
    for replicas in (1, 2):
        plain = run(args, f"r{replicas}_plain", replicas, kill=False)
        killed = run(args, f"r{replicas}_killed", replicas, kill=True)
        killed["lost_s"] = killed["wall_seconds"] - plain["wall_seconds"]
        killed["identical"] = killed["fingerprint"] == plain["fingerprint"]
        results[replicas] = (plain, killed)
        print(f"R={replicas}: plain {plain}\n     killed {killed}", flush=True)

    def f(x):
        return "n/a" if x is None else f"{x:.2f}"

    rows = []
    for replicas, (plain, killed) in results.items():
        rows.append(f"| {replicas} | {plain['wall_seconds']:.1f} | {killed['wall_seconds']:.1f} | "
                    f"{f(killed['lost_s'])} | {f(killed['detection_s'])} | {f(killed['recovery_s'])} | "
                    f"{f(killed.get('rereplication_hold_s'))} | "
                    f"{killed['rollbacks']} | {killed['failovers']} | "
                    f"{'yes' if killed['identical'] else 'NO'} |")
    lost1, lost2 = results[1][1]["lost_s"], results[2][1]["lost_s"]
    rec1, rec2 = results[1][1]["recovery_s"], results[2][1]["recovery_s"]
    md = [
        "# Failover against rollback: one killed server in a BSP job",
        "",
        f"Machine: {args.machine}",
        f"Command: `{args.invocation}`",
        "",
        __doc__.strip(),
        "",
        "| replicas | uninterrupted s | killed s | time lost s | kill -> declared dead s | kill -> training again s "
        "| re-replication hold s | rollbacks | failovers | same predictions |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        *rows,
        "",
        f"Kill -> training again: R=2 {f(rec2)} s against R=1 {f(rec1)} s (R=1 then redoes the clocks since its "
        f"checkpoint: {results[1][1]['redone']}). Time lost to the kill: R=2 {f(lost2)} s, R=1 {f(lost1)} s. One run "
        "of each (wall times on a shared machine move by a second or two).",
        "",
    ]
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    open(args.output, "w").write("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
