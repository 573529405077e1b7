#!/usr/bin/env python3
"""Jepsen-style network faults on a real cluster: `kestrel local --hosts` puts the scheduler, each server and each
worker on a host of its own (a network namespace with its own address, scripts/hostnet.py), over mutual TLS, and
`kestrel net` cuts and heals the links between them while the job trains. Every scenario must end with the
uninterrupted loopback run's fingerprint (BSP: bitwise identical), and the host network must leave nothing behind.

  network_faults.py --bin DIR --kestrel PATH [--scenarios a,b] [--seeds 1,2,...]

Scenarios (default all): hosts (the job across 5 hosts = loopback), kill9 (the harness killed with SIGKILL leaves
no namespace, link or process), scheduler (the scheduler cut from everyone for 6 s: nobody restarts), worker (a
worker cut off past the failure timeout, then healed), server (an unreplicated server cut off past the timeout:
rollback), flap (a worker-server link down/up every 500 ms for 10 s, or until the job ends), chaos (seeded random
partitions; --seeds), replicated (a replicated primary cut off: failover, the healed old primary takes no writes),
split (a replicated primary cut from the scheduler only, workers still reaching it: the lease fences it),
split_unfenced (the same with the fence disabled by kestrel_server --unsafe_no_primary_fence: must NOT end as
uninterrupted; only when named, see BY_HAND). Exits 0 when all pass, 1 otherwise, 77 when this machine cannot
make network namespaces.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

HEARTBEAT = "300ms"
MANY = 20  # restarts allowed per process in a random schedule (each fault may cost one)
JOB = """model { type: DEEPFM embedding_dim: 8 hidden: [64, 32] }
data { format: CRITEO }
train { batch_size: 256 epochs: EPOCHS log_every_steps: 50 }
"""


class Failed(Exception):
    def __init__(self, message, output=""):
        super().__init__(message)
        self.output = output  # what the failed command printed before it failed


class Harness:
    def __init__(self, args):
        self.args = args
        self.tmp = args.tmp or tempfile.mkdtemp(prefix="kestrel-netfaults-")
        os.makedirs(self.tmp, exist_ok=True)
        self.env = dict(os.environ, KESTREL_BIN=args.bin)
        data = os.path.join(self.tmp, "data")
        if not os.path.exists(os.path.join(data, "test.tsv")):
            subprocess.run([os.path.join(args.bin, "worker/data/kestrel_datagen"), "--small", f"--out_dir={data}"],
                           check=True, stderr=subprocess.DEVNULL)
        self.config = os.path.join(self.tmp, "job.pbtxt")
        with open(self.config, "w") as f:
            f.write(JOB.replace("EPOCHS", str(args.epochs)))
        self.reference = {}

    def start(self, name, *extra, hosts=True):
        run = os.path.join(self.tmp, name)
        argv = [self.args.kestrel, "local", "--no_build", f"--config={self.config}",
                f"--data={os.path.join(self.tmp, 'data')}", f"--run_dir={run}", "--device=cpu", "--compute_threads=1",
                "--checkpoint_every_clocks=50", f"--heartbeat_interval={HEARTBEAT}"] + list(extra)
        if hosts:
            argv.append("--hosts")
        log = open(os.path.join(self.tmp, name + ".out"), "w")
        return run, subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT)

    def finish(self, name, run, proc, timeout=300):
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise Failed(f"{name}: the job did not end within {timeout} s; see {run}")
        path = os.path.join(run, "summary.json")
        if not os.path.exists(path):
            raise Failed(f"{name}: no summary (exit {proc.returncode}); see {self.tmp}/{name}.out")
        summary = json.load(open(path))
        if not summary.get("ok"):
            raise Failed(f"{name}: the job failed; see {self.tmp}/{name}.out")
        return summary

    def run(self, name, *extra, hosts=True, during=None):
        run, proc = self.start(name, *extra, hosts=hosts)
        if during:
            try:
                during(run)
            except BaseException:
                proc.kill()
                raise
        return self.finish(name, run, proc)

    def net(self, run, *argv):
        done = subprocess.run([self.args.kestrel, "net", f"--run_dir={run}"] + list(argv), env=self.env,
                              capture_output=True, text=True)
        print(done.stdout, end="", flush=True)
        if done.returncode != 0:
            raise Failed(f"kestrel net {' '.join(argv)}: {done.stderr.strip()}", done.stdout)
        return done.stdout

    def net_while_running(self, name, run, proc, *argv):
        """`kestrel net` on the job `proc` for as long as it runs: a schedule cut short because the job ended (and
        took its hosts along) is no error. Returns what `kestrel net` printed, each fault a line."""
        try:
            return self.net(run, *argv)
        except Failed as e:
            try:
                proc.wait(10)  # the launcher removes its hosts last, then writes its summary and exits
            except subprocess.TimeoutExpired:
                proc.kill()
                raise e
            print(f"{name}: the job ended before the schedule did (its remaining faults were not applied)", flush=True)
            return e.output

    def fingerprint(self, replicas=1):
        """The uninterrupted loopback run's fingerprint (computed once per replica count)."""
        if replicas not in self.reference:
            summary = self.run(f"loopback_r{replicas}", f"--replicas={replicas}", hosts=False)
            self.reference[replicas] = summary["fingerprint"]
            print(f"loopback reference (replicas {replicas}): fingerprint {summary['fingerprint']}, "
                  f"AUC {summary['auc']:.4f}", flush=True)
        return self.reference[replicas]

    def expect_same(self, name, summary, replicas=1):
        want = self.fingerprint(replicas)
        if summary.get("fingerprint") != want:
            raise Failed(f"{name}: fingerprint {summary.get('fingerprint')} differs from the uninterrupted run's "
                         f"{want}; see {self.tmp}/{name}")
        print(f"{name}: fingerprint {want} as uninterrupted; restarts {summary['restarts'] or 'none'}"
              f"{'; rollbacks ' + str(summary['rollbacks']) if summary.get('rollbacks') else ''}"
              f"{'; failovers ' + str(summary['failovers']) if summary.get('failovers') else ''}", flush=True)


def wait_for(predicate, what, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise Failed(f"timed out waiting for {what}")


def grep(path, pattern):
    try:
        return re.search(pattern, open(path, errors="replace").read()) is not None
    except FileNotFoundError:
        return False


def after_first_checkpoint(run):
    wait_for(lambda: grep(os.path.join(run, "scheduler.log"), "committed at clock"), "the first checkpoint")


def fault(h, cut, heal, seconds):
    """A `during` hook: after the first checkpoint, `kestrel net` cut (a list), `seconds` later heal."""
    def during(run):
        after_first_checkpoint(run)
        h.net(run, *cut)
        time.sleep(seconds)
        h.net(run, *heal)
    return during


def namespaces_of(state):
    return {(h["pid"], h["ns"]) for h in state["hosts"].values()}


def leftovers(namespaces, pids=()):
    """What of a host network (and its processes) is still there: namespaces any process is in, live pids."""
    wanted = {ns for _, ns in namespaces}
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}/ns/net").st_ino in wanted:
                    found.append(f"process {entry} in a host namespace")
            except OSError:
                pass
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] != "Z":
                    found.append(f"process {pid} alive")
        except OSError:
            pass
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    found += [f"interface {m}" for m in re.findall(r"^\d+: (k\d+)@", links, re.M)]
    return found


# --- scenarios ---------------------------------------------------------------------------------------------------

def scenario_hosts(h):
    """The job across 5 hosts ends as on loopback; its namespaces go with it."""
    seen = {}

    def note(run):
        wait_for(lambda: os.path.exists(os.path.join(run, "hosts.json")), "hosts.json")
        seen["state"] = json.load(open(os.path.join(run, "hosts.json")))
    summary = h.run("hosts", during=note)
    state = seen["state"]
    if len(state["hosts"]) != 5 or len({x["address"] for x in state["hosts"].values()}) != 5:
        raise Failed(f"hosts: expected 5 hosts with 5 addresses, got {state['hosts']}")
    h.expect_same("hosts", summary)
    left = leftovers(namespaces_of(state))
    if left:
        raise Failed(f"hosts: left behind after the job: {left}")
    print(f"hosts: 5 namespaces ({', '.join(x['address'] for x in state['hosts'].values())}), none left after",
          flush=True)


def scenario_kill9(h):
    """SIGKILL of the harness: every namespace, link and process of the job goes with it."""
    run, proc = h.start("kill9")
    try:
        after_first_checkpoint(run)
        state = json.load(open(os.path.join(run, "hosts.json")))
        pids = list(json.load(open(os.path.join(run, "pids.json"))).values())
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    left = []
    deadline = time.time() + 10
    while time.time() < deadline:
        left = leftovers(namespaces_of(state), pids)
        if not left:
            break
        time.sleep(0.1)
    if left:
        raise Failed(f"kill9: left behind after kill -9 of the harness: {left}")
    print(f"kill9: kill -9 of the harness left no namespace, link or process ({len(state['hosts'])} hosts, "
          f"{len(pids)} processes)", flush=True)


def scenario_scheduler(h):
    """The scheduler cut off from everyone for 6 s, then healed: no process restarts, the same model."""
    summary = h.run("scheduler", during=fault(h, ["isolate", "scheduler"], ["rejoin", "scheduler"], 6))
    if summary["restarts"] or summary.get("rollbacks"):
        raise Failed(f"scheduler: partitioning the scheduler restarted {summary['restarts']}, "
                     f"rollbacks {summary.get('rollbacks')}")
    if not grep(os.path.join(summary["run_dir"], "scheduler.log"), "heard no member"):
        raise Failed("scheduler: the scheduler never noticed it was cut off")
    h.expect_same("scheduler", summary)


def scenario_scheduler_replicated(h):
    """The same 6 s cut of the scheduler with replicated ranges: the primaries' leases lapse, so the job waits for
    the scheduler instead of running on, and then continues: no restart, no failover."""
    summary = h.run("scheduler_replicated", "--replicas=2",
                    during=fault(h, ["isolate", "scheduler"], ["rejoin", "scheduler"], 6))
    if summary["restarts"] or summary.get("rollbacks") or summary.get("failovers"):
        raise Failed(f"scheduler_replicated: restarts {summary['restarts']}, rollbacks {summary.get('rollbacks')}, "
                     f"failovers {summary.get('failovers')}")
    h.expect_same("scheduler_replicated", summary, replicas=2)


def scenario_worker(h):
    """A worker cut off from everyone past the failure timeout, then healed."""
    h.expect_same("worker", h.run("worker", during=fault(h, ["isolate", "worker1"], ["rejoin", "worker1"], 3)))


def scenario_server(h):
    """An unreplicated server cut off past the failure timeout, then healed: the job rolls back."""
    summary = h.run("server", during=fault(h, ["isolate", "server0"], ["rejoin", "server0"], 3))
    if not summary.get("rollbacks"):
        raise Failed(f"server: no rollback: {summary}")
    h.expect_same("server", summary)


MIN_FLAPS = 3  # cuts of the flap the job must live through (the link comes back up as fast as the job trains)


def scenario_flap(h):
    """A worker-server link down and up every 500 ms for 10 s, or until the job ends (after MIN_FLAPS cuts at least:
    the job goes on while the link is up, so on a fast machine it may end within the 10 s)."""
    run, proc = h.start("flap")
    try:
        after_first_checkpoint(run)
        printed = h.net_while_running("flap", run, proc, "flap", "worker0", "server1", "--period=0.5", "--seconds=10")
    except BaseException:
        proc.kill()
        raise
    cuts = len(re.findall(r" cut worker0 server1", printed))
    if cuts < MIN_FLAPS:
        raise Failed(f"flap: the job ended after {cuts} cuts of the link, fewer than {MIN_FLAPS}: nothing was tested")
    h.expect_same("flap", h.finish("flap", run, proc))


def scenario_chaos(h):
    """Seeded random partitions over the run (printed and replayable with `kestrel net chaos --seed`)."""
    for seed in h.args.seeds:
        name = f"chaos{seed}"
        print(f"chaos: seed {seed}", flush=True)
        run, proc = h.start(name, f"--max_restarts={MANY}")
        try:
            after_first_checkpoint(run)
            h.net_while_running(name, run, proc, "chaos", f"--seed={seed}", f"--seconds={h.args.chaos_seconds}")
        except BaseException:
            proc.kill()
            raise
        h.expect_same(name, h.finish(name, run, proc))


def scenario_replicated(h):
    """A replicated primary cut off from everyone past the timeout: failover, and healed it takes no writes."""
    summary = h.run("replicated", "--replicas=2", during=fault(h, ["isolate", "server0"], ["rejoin", "server0"], 3))
    if summary.get("failovers") != 1 or summary.get("rollbacks"):
        raise Failed(f"replicated: want one failover and no rollback: {summary}")
    if not grep(os.path.join(summary["run_dir"], "server0.log"), "the scheduler refused this server"):
        raise Failed("replicated: the healed old primary was not refused by the scheduler")
    h.expect_same("replicated", summary, replicas=2)


def split(h, name, *extra):
    run, proc = h.start(name, "--replicas=2", *extra)
    try:
        fault(h, ["cut", "server0", "scheduler"], ["heal", "server0", "scheduler"], 3)(run)
    except BaseException:
        proc.kill()
        raise
    proc.wait(300)
    path = os.path.join(run, "summary.json")
    return json.load(open(path)) if os.path.exists(path) else {"ok": False, "run_dir": run}


def scenario_split(h):
    """A replicated primary cut from the scheduler only, workers still reaching it: the lease fences it."""
    summary = split(h, "split")
    if not summary.get("ok"):
        raise Failed(f"split: the job failed; see {summary['run_dir']}")
    if summary.get("failovers") != 1 or summary.get("rollbacks"):
        raise Failed(f"split: want one failover and no rollback: {summary}")
    h.expect_same("split", summary, replicas=2)


def scenario_split_unfenced(h):
    """The same cut with the fence disabled (--unsafe_no_primary_fence): the split brain must show."""
    summary = split(h, "split_unfenced", "--server_args=--unsafe_no_primary_fence", "--max_restarts=2")
    if summary.get("ok") and summary.get("fingerprint") == h.fingerprint(2):
        raise Failed("split_unfenced: without the fence the job still ended as uninterrupted: the scenario does not "
                     "exercise the fence")
    logs = " ".join(open(os.path.join(summary["run_dir"], f), errors="replace").read()
                    for f in os.listdir(summary["run_dir"]) if f.startswith("worker") and f.endswith(".log"))
    seen = re.search(r"[^\n]*(already applied|differs from what was applied|incomplete)[^\n]*", logs)
    print(f"split_unfenced: without the fence the job {'failed' if not summary.get('ok') else 'diverged'}"
          f"{': ' + seen.group(0).strip()[:300] if seen else ''}", flush=True)


# Run only when named: whether the unfenced split brain shows as a failed or diverged job depends on timing (the
# job may recover from the damage it detects by a rollback); worker/replicated_ps_client_test's SplitBrainTest
# asserts the stale read itself, deterministically.
BY_HAND = ("split_unfenced",)
SCENARIOS = {"hosts": scenario_hosts, "kill9": scenario_kill9, "scheduler": scenario_scheduler,
             "scheduler_replicated": scenario_scheduler_replicated,
             "worker": scenario_worker, "server": scenario_server, "flap": scenario_flap, "chaos": scenario_chaos,
             "replicated": scenario_replicated, "split": scenario_split, "split_unfenced": scenario_split_unfenced}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin", required=True, help="a directory laid out like bazel-bin")
    parser.add_argument("--kestrel", required=True, help="scripts/kestrel")
    parser.add_argument("--scenarios", default=",".join(s for s in SCENARIOS if s not in BY_HAND),
                        help=f"comma list (default all but {', '.join(BY_HAND)}, which run only when named)")
    parser.add_argument("--seeds", default="1", help="chaos: comma list of seeds (default 1)")
    parser.add_argument("--chaos_seconds", type=float, default=10, help="chaos: length of the schedule (default 10)")
    parser.add_argument("--epochs", type=int, default=6, help="training epochs of each job (default 6)")
    parser.add_argument("--tmp", help="work directory (default a new one)")
    args = parser.parse_args()
    args.seeds = [int(s) for s in args.seeds.split(",") if s]
    sys.path.insert(0, os.path.dirname(os.path.abspath(args.kestrel)))
    import hostnet
    why = hostnet.available()
    if why:
        print(f"SKIP: {why}")
        return 77
    h = Harness(args)
    failed = []
    for name in args.scenarios.split(","):
        if name not in SCENARIOS:
            parser.error(f"unknown scenario {name}; known: {', '.join(SCENARIOS)}")
        print(f"== {name}: {SCENARIOS[name].__doc__}", flush=True)
        try:
            SCENARIOS[name](h)
        except Failed as e:
            print(f"FAILED {e}", flush=True)
            failed.append(name)
    print(f"{len(args.scenarios.split(',')) - len(failed)} scenarios passed, {len(failed)} failed"
          f"{': ' + ', '.join(failed) if failed else ''} (work directory {h.tmp})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
