#!/usr/bin/env python3
"""Slow links: the realistic DeepFM job (dim 16, MLP 256-128, 2 servers + 2 workers, 2048 examples per worker and
step, BSP, 1M training rows) with every process on a host of its own (`kestrel local --hosts`) and every link
unlimited and limited to 10 Gbit/s, 1 Gbit/s and 100 Mbit/s (tbf, both directions), each with fp32 and bf16 values on the wire
(JobConfig.model.wire_type). Reports examples/s (median of --runs), the ratio to the unlimited fp32 run of the
same round, bytes on the wire per training example (every link's sent bytes, with TCP/IP and TLS overhead,
including the scheduler's calls, checkpoints and the evaluation's reads), CPU-seconds per 1000 examples of the
whole job (every process, startup and evaluation included) and the test AUC, into a Markdown table.

  bench/run_netlink_bench.sh [--runs 3] [--output bench/results/netlink_bench.md]
"""
import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

WIRES = ["VALUE_TYPE_FLOAT32", "VALUE_TYPE_BFLOAT16"]
JOB = """model {{ type: DEEPFM embedding_dim: 16 hidden: [256, 128] wire_type: {wire} }}
data {{ format: CRITEO }}
train {{ batch_size: 2048 epochs: 1 log_every_steps: 100 }}
"""


def run_job(args, data, rate, wire, tag):
    config = os.path.join(args.work_dir, f"job-{wire}.pbtxt")
    with open(config, "w") as f:
        f.write(JOB.format(wire=wire))
    run = os.path.join(args.work_dir, tag)
    subprocess.run(["rm", "-rf", run], check=True)
    argv = [args.kestrel, "local", "--no_build", "--hosts", f"--config={config}", f"--data={data}",
            f"--run_dir={run}", "--device=cpu", "--checkpoint_every_clocks=0"]
    if rate:
        argv.append(f"--link_rate={rate}")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(run + ".out", "w") as out:
        done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ, KESTREL_BIN=args.bin))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"netlink_bench: {tag} failed; see {run}.out")
    summary = json.load(open(os.path.join(run, "summary.json")))
    finished = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl")) if '"kind":"done"' in line]
    examples = sum(r["examples"] for r in finished)
    seconds = max(r["seconds"] for r in finished)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"examples_per_second": examples / seconds, "wire_bytes_per_example": summary["wire_bytes"] / examples,
            "cpu_ms_per_example": 1000 * cpu / examples, "auc": summary["auc"], "examples": examples}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin", required=True)
    parser.add_argument("--kestrel", required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rates", default="unlimited,10gbit,1gbit,100mbit",
                        help="link rates to measure, the first the reference (default unlimited,10gbit,1gbit,100mbit)")
    parser.add_argument("--work_dir", default="/tmp/kestrel_netlink_bench")
    parser.add_argument("--output", default="bench/results/netlink_bench.md")
    parser.add_argument("--command_line", default="", help="the wrapper's arguments, for the report")
    args = parser.parse_args()
    rates = [None if r == "unlimited" else r for r in args.rates.split(",")]
    os.makedirs(args.work_dir, exist_ok=True)
    data = os.path.join(args.work_dir, "data-1000000-100000-100000")
    if not os.path.exists(os.path.join(data, "test.tsv")):
        subprocess.run([os.path.join(args.bin, "worker/data/kestrel_datagen"), "--train_rows=1000000",
                        "--test_rows=100000", "--max_vocab=100000", f"--out_dir={data}"], check=True)
    load_start = open("/proc/loadavg").read().split()[:3]
    started = time.time()
    results = {}
    for r in range(args.runs):
        for rate in rates:
            for wire in WIRES:
                tag = f"{rate or 'unlimited'}-{wire.split('_')[-1].lower()}-run{r}"
                results.setdefault((rate, wire), []).append(run_job(args, data, rate, wire, tag))
                last = results[(rate, wire)][-1]
                print(f"{tag}: {last['examples_per_second']:.0f} examples/s, "
                      f"{last['wire_bytes_per_example']:.0f} wire bytes/example, AUC {last['auc']:.5f}", flush=True)
    base = results[(rates[0], WIRES[0])]
    lines = [
        "# Slow links: realistic DeepFM on hosts of their own, links limited to "
        f"{', '.join(r for r in rates if r)} vs unlimited", "",
        "## Machine", "", "| | |", "|---|---|",
        f"| nproc | {os.cpu_count()} |",
        f"| Kernel | {platform.system()} {platform.release()} {platform.machine()} |",
        f"| Date | {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} |",
        f"| Git commit | {subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()} |",
        f"| Load average at start / end | {' '.join(load_start)} / {' '.join(open('/proc/loadavg').read().split()[:3])} |",
        f"| Bench runtime | {time.time() - started:.0f} s |", "",
        "Command:", "", "```", f"bench/run_netlink_bench.sh {args.command_line}".strip(), "```", "",
        "## Setup", "",
        "- `kestrel local --hosts`: the scheduler, 2 servers and 2 workers each in a network namespace of its own, "
        "every pair joined by a veth link; `--link_rate` puts a tbf rate limiter (burst 10 ms at the rate) on both "
        "ends of every link. Mutual TLS, BSP, 1 thread per worker, no checkpoints.",
        "- Data: `kestrel_datagen --train_rows 1000000 --test_rows 100000 --max_vocab 100000`; 1 epoch; DeepFM dim "
        "16, MLP 256-128, 2048 examples per worker and step (4096 per step).",
        "- examples/s: the workers' training examples over the slower worker's training time (the `done` records). "
        "Wire bytes: every link's sent bytes over the whole job (startup, the scheduler, evaluation included) per "
        "training example. CPU: every process of the job (user + system, startup and evaluation included) per "
        "1000 training examples. All 5 processes share this machine's 2 cores.",
        f"- Medians of {args.runs} runs; each run measures every configuration in turn; ratios are within a run "
        f"(to that run's {rates[0] or 'unlimited'} fp32), median over runs.", "",
        "## Results", "",
        f"| Links | Values on the wire | examples/s (median) | vs {rates[0] or 'unlimited'} fp32 | wire bytes / example | "
        "CPU ms / 1000 examples | test AUC | examples/s per run |",
        "|---|---|---:|---:|---:|---:|---:|---|"]
    for rate in rates:
        for wire in WIRES:
            rs = results[(rate, wire)]
            ratio = statistics.median(x["examples_per_second"] / b["examples_per_second"] for x, b in zip(rs, base))
            lines.append(
                f"| {rate or 'unlimited'} | {'fp32' if wire.endswith('32') else 'bf16'} | "
                f"{statistics.median(x['examples_per_second'] for x in rs):.0f} | {ratio:.2f} | "
                f"{statistics.median(x['wire_bytes_per_example'] for x in rs):.0f} | "
                f"{1000 * statistics.median(x['cpu_ms_per_example'] for x in rs):.0f} | "
                f"{statistics.median(x['auc'] for x in rs):.5f} | "
                f"{', '.join(str(round(x['examples_per_second'])) for x in rs)} |")
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
