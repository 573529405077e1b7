#!/usr/bin/env python3
"""Compact checkpoints: what restoring from 8-bit embedding rows (ModelConfig.embedding_checkpoint_codec:
CHECKPOINT_Q8) costs the realistic DeepFM job in test AUC, and how many bytes a checkpoint writes per row.

Four `kestrel local` runs of one job (DeepFM dim 16, MLP 256-128, embedding Adagrad, 2 servers + 2 workers, 2048
examples per worker and step, BSP, 1M training rows, one epoch, a checkpoint every --checkpoint_every_clocks
clocks), on the same data with the same seeds:
  (a) fp32 checkpoints, uninterrupted: test AUC A and the prediction fingerprint;
  (b) fp32 checkpoints, server 1 killed (SIGKILL) --kill_delay s after the checkpoint of clock --kill_after_clock
      is committed; the supervisor restarts it, every server restores that checkpoint and the job redoes the
      clocks since: BSP recovery is exact, so (b) must end bitwise identical to (a);
  (c) Q8 embedding checkpoints, the same kill: the restore reads 8-bit rows back (values within half a step, the step
      1/255 of each row's range; Adagrad's accumulators within a relative error of the log-domain step), so the
      job continues from a slightly different model: test AUC B, |B - A|, and a different fingerprint;
  (d) Q8 embedding checkpoints, uninterrupted: the codec only touches the checkpoint files, so AUC and
      fingerprint must equal (a)'s.
Bytes written per row come from the checkpoint manifests (ShardCheckpoint.rows_written / bytes_written of every
committed checkpoint, every table: a row's key and record) and, per table, from a read-only scan of the final
checkpoint's RocksDB stores (librocksdb's C API through ctypes: each record's key and value bytes).
BSP is deterministic, so each run is done once: a second run of the same configuration gives the same figures.
"""
import argparse
import collections
import ctypes
import ctypes.util
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

JOB = """model {{ type: DEEPFM embedding_dim: 16 hidden: [256, 128]{codec} }}
data {{ format: CRITEO }}
train {{ batch_size: {batch} epochs: 1 log_every_steps: 100 }}
"""
BINARIES = ["scheduler/kestrel_scheduler", "server/kestrel_server", "cmd/kestrel_worker",
            "worker/data/kestrel_datagen"]
# name, codec, kill
RUNS = [("a", "fp32", False), ("b", "fp32", True), ("c", "q8", True), ("d", "q8", False)]
DESCRIBE = {"a": "fp32 checkpoints, uninterrupted", "b": "fp32 checkpoints, server 1 killed",
            "c": "Q8 embedding checkpoints, server 1 killed", "d": "Q8 embedding checkpoints, uninterrupted"}


def copy_binaries(src, dst):
    """The binaries, copied once: every run uses the same ones even if the Bazel outputs are rebuilt meanwhile."""
    for rel in BINARIES:
        os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
        shutil.copy2(os.path.join(src, rel), os.path.join(dst, rel))
    return dst


def run_job(args, bin_dir, data, name, codec, kill):
    config = os.path.join(args.work_dir, f"job-{codec}.pbtxt")
    with open(config, "w") as f:
        f.write(JOB.format(codec=" embedding_checkpoint_codec: CHECKPOINT_Q8" if codec == "q8" else "",
                           batch=args.batch_size))
    run = os.path.join(args.work_dir, f"run-{name}")
    shutil.rmtree(run, ignore_errors=True)
    argv = [args.kestrel, "local", "--no_build", f"--config={config}", f"--data={data}", f"--run_dir={run}",
            "--servers=2", "--workers=2", "--consistency=bsp", "--device=cpu",
            f"--checkpoint_every_clocks={args.checkpoint_every_clocks}", "--keep_checkpoints=1000"]
    out = open(run + ".out", "w")
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ, KESTREL_BIN=bin_dir))
    killed = None
    if kill:
        killed = kill_server(args, run, proc)
    code = proc.wait()
    out.close()
    if code != 0:
        sys.exit(f"compact_checkpoint_bench: run {name} failed (exit {code}); see {run}.out and {run}/*.log")
    summary = json.load(open(os.path.join(run, "summary.json")))
    result = {"name": name, "codec": codec, "kill": kill, "run_dir": run, "auc": summary.get("auc"),
              "logloss": summary.get("logloss"), "fingerprint": summary.get("fingerprint"),
              "wall_seconds": summary["wall_seconds"], "rollbacks": summary.get("rollbacks", 0),
              "restarts": summary.get("restarts", {}), "checkpoints_committed": summary["checkpoints_committed"]}
    if killed:
        result.update(killed)
        result.update(restored_from(run, killed["killed_at"]))
    result["manifests"] = read_manifests(os.path.join(run, "ckpt"))
    result["final"] = scan_final_checkpoint(args, os.path.join(run, "ckpt"))
    return result


def kill_server(args, run, proc):
    """SIGKILL server 1 --kill_delay s after the checkpoint of clock --kill_after_clock is committed."""
    pids, sched = os.path.join(run, "pids.json"), os.path.join(run, "scheduler.log")
    needle = f"committed at clock {args.kill_after_clock} "
    deadline = time.time() + 600
    pid = None
    while pid is None and time.time() < deadline and proc.poll() is None:
        try:
            pid = json.load(open(pids))["server 1"]
        except (OSError, ValueError, KeyError):
            time.sleep(0.05)
    while time.time() < deadline and proc.poll() is None:
        if os.path.exists(sched) and needle in open(sched, errors="replace").read():
            break
        time.sleep(0.02)
    else:
        sys.exit(f"compact_checkpoint_bench: no checkpoint committed at clock {args.kill_after_clock} in {sched}")
    time.sleep(args.kill_delay)
    os.kill(pid, signal.SIGKILL)
    print(f"  killed server 1 (pid {pid}) {args.kill_delay} s after the checkpoint of clock "
          f"{args.kill_after_clock} was committed", flush=True)
    return {"killed_pid": pid, "killed_at": time.time()}


def restored_from(run, killed_at):
    """The checkpoint every server restored after the kill, the clock the job continued from, and what each server
    loaded (its log's "loaded checkpoint" line: rows and seconds)."""
    out = {"restored": None, "restored_clock": None, "loads": []}
    for line in open(os.path.join(run, "scheduler.log"), errors="replace"):
        m = re.search(r"every server restored (\S+): the job continues from clock (\d+)", line)
        if m:
            out.update(restored=m.group(1), restored_clock=int(m.group(2)))
            break
    for s in range(2):
        for line in open(os.path.join(run, f"server{s}.log"), errors="replace"):
            m = re.search(r"shard (\d+): loaded checkpoint (\S+) \(clock (\d+)\): (\d+) rows .* in ([0-9.]+) s", line)
            if m:
                out["loads"].append({"shard": int(m.group(1)), "checkpoint": m.group(2), "rows": int(m.group(4)),
                                     "seconds": float(m.group(5))})
    return out


def parse_manifest(text):
    """The figures this benchmark needs from a MANIFEST (CheckpointManifest in text format + a checksum line):
    its clock and, per shard, rows, rows_written, bytes_written and the snapshot files' total size."""
    clock = re.search(r"^clock: (\d+)", text, re.M)
    shards = []
    depth, current = 0, None
    for line in text.splitlines():
        s = line.strip()
        if depth == 0 and s.startswith("shards {"):
            current, depth = {"rows": 0, "rows_written": 0, "bytes_written": 0, "file_bytes": 0}, 1
            continue
        if current is None:
            continue
        if s.endswith("{"):
            depth += 1
        elif s == "}":
            depth -= 1
            if depth == 0:
                shards.append(current)
                current = None
            continue
        m = re.match(r"(\w+): (\d+)$", s)
        if m and depth == 1 and m.group(1) in ("rows", "rows_written", "bytes_written"):
            current[m.group(1)] = int(m.group(2))
        elif m and depth == 2 and m.group(1) == "size":
            current["file_bytes"] += int(m.group(2))
    return {"clock": int(clock.group(1)) if clock else None, "shards": shards}


def read_manifests(ckpt):
    out = []
    for name in sorted(os.listdir(ckpt)):
        path = os.path.join(ckpt, name, "MANIFEST")
        if name.startswith("ckpt-") and os.path.exists(path):
            m = parse_manifest(open(path, errors="replace").read())
            m["name"] = name
            out.append(m)
    return out


class RocksReader:
    """Read-only iteration over a RocksDB directory through librocksdb's C API (no Python binding needed). The info
    log goes to a scratch directory, so nothing is written into the checkpoint."""

    def __init__(self):
        path = ctypes.util.find_library("rocksdb") or "librocksdb.so.7.8"
        lib = ctypes.CDLL(path)
        vp, cp, sz = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
        for fn, res, argt in [
                ("rocksdb_options_create", vp, []), ("rocksdb_options_destroy", None, [vp]),
                ("rocksdb_options_set_db_log_dir", None, [vp, cp]),
                ("rocksdb_open_for_read_only", vp, [vp, cp, ctypes.c_ubyte, ctypes.POINTER(cp)]),
                ("rocksdb_close", None, [vp]), ("rocksdb_readoptions_create", vp, []),
                ("rocksdb_readoptions_destroy", None, [vp]),
                ("rocksdb_readoptions_set_verify_checksums", None, [vp, ctypes.c_ubyte]),
                ("rocksdb_readoptions_set_fill_cache", None, [vp, ctypes.c_ubyte]),
                ("rocksdb_create_iterator", vp, [vp, vp]), ("rocksdb_iter_destroy", None, [vp]),
                ("rocksdb_iter_seek_to_first", None, [vp]), ("rocksdb_iter_valid", ctypes.c_ubyte, [vp]),
                ("rocksdb_iter_next", None, [vp]),
                ("rocksdb_iter_key", ctypes.POINTER(ctypes.c_char), [vp, ctypes.POINTER(sz)]),
                ("rocksdb_iter_value", ctypes.POINTER(ctypes.c_char), [vp, ctypes.POINTER(sz)])]:
            f = getattr(lib, fn)
            f.restype, f.argtypes = res, argt
        self.lib = lib

    def records(self, directory, log_dir):
        lib = self.lib
        options = lib.rocksdb_options_create()
        lib.rocksdb_options_set_db_log_dir(options, log_dir.encode())
        err = ctypes.c_char_p()
        db = lib.rocksdb_open_for_read_only(options, directory.encode(), 0, ctypes.byref(err))
        if err.value:
            raise RuntimeError(f"cannot open {directory}: {err.value.decode(errors='replace')}")
        read = lib.rocksdb_readoptions_create()
        lib.rocksdb_readoptions_set_verify_checksums(read, 1)
        lib.rocksdb_readoptions_set_fill_cache(read, 0)
        it = lib.rocksdb_create_iterator(db, read)
        try:
            lib.rocksdb_iter_seek_to_first(it)
            klen, vlen = ctypes.c_size_t(), ctypes.c_size_t()
            while lib.rocksdb_iter_valid(it):
                k = lib.rocksdb_iter_key(it, ctypes.byref(klen))
                v = lib.rocksdb_iter_value(it, ctypes.byref(vlen))
                yield ctypes.string_at(k, klen.value), ctypes.string_at(v, vlen.value)
                lib.rocksdb_iter_next(it)
        finally:
            lib.rocksdb_iter_destroy(it)
            lib.rocksdb_readoptions_destroy(read)
            lib.rocksdb_close(db)
            lib.rocksdb_options_destroy(options)


def scan_final_checkpoint(args, ckpt):
    """Per table of the latest checkpoint (every shard): rows, key bytes, record bytes, records not Q8-coded
    (a Q8 record's length is never a multiple of 4), and a hash of every record (the stored parameters)."""
    if args.no_scan:
        return None
    latest = open(os.path.join(ckpt, "LATEST")).read().split()[0]
    try:
        reader = RocksReader()
    except (OSError, AttributeError) as e:
        print(f"  no per-table scan: librocksdb's C API is not loadable ({e})", file=sys.stderr)
        return None
    tables = collections.defaultdict(lambda: {"rows": 0, "key_bytes": 0, "value_bytes": 0, "raw_records": 0})
    digest = hashlib.blake2b(digest_size=8)
    log_dir = tempfile.mkdtemp(prefix="rocks-log-", dir=args.work_dir)
    shard_dirs = sorted(d for d in os.listdir(os.path.join(ckpt, latest)) if d.startswith("shard-"))
    for shard in shard_dirs:
        for key, value in reader.records(os.path.join(ckpt, latest, shard), log_dir):
            if len(key) < 10 or key[-9] != 0 or key[0] < 2:
                table = "(metadata)"
            else:
                table = key[:-9].decode(errors="replace")
            t = tables[table]
            t["rows"] += 1
            t["key_bytes"] += len(key)
            t["value_bytes"] += len(value)
            t["raw_records"] += len(value) % 4 == 0
            digest.update(len(key).to_bytes(4, "little") + key + len(value).to_bytes(4, "little") + value)
    shutil.rmtree(log_dir, ignore_errors=True)
    return {"checkpoint": latest, "tables": dict(tables), "hash": digest.hexdigest()}


def totals(manifests):
    rows = sum(s["rows_written"] for m in manifests for s in m["shards"])
    written = sum(s["bytes_written"] for m in manifests for s in m["shards"])
    return rows, written


def machine():
    cpu = "unknown"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = 0
    for line in open("/proc/meminfo"):
        if line.startswith("MemTotal:"):
            mem = int(line.split()[1]) / (1 << 20)
    return f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB, {platform.system()} {platform.release()}"


def report(args, results, load_start, started):
    a, b, c, d = (results[n] for n in "abcd")
    lines = [
        "# Compact checkpoints: restoring realistic DeepFM from 8-bit embedding rows", "",
        f"`{args.invocation}` at {args.commit}, {time.strftime('%Y-%m-%d', time.gmtime())}, {machine()}.",
        f"Load average at start / end: {' '.join(load_start)} / {' '.join(open('/proc/loadavg').read().split()[:3])}; "
        f"bench runtime {time.time() - started:.0f} s.", "",
        "## Setup", "",
        f"- Data: `kestrel_datagen --train_rows {args.train_rows} --test_rows {args.test_rows} --max_vocab "
        f"{args.max_vocab}` (Criteo format, planted model).",
        f"- Job: DeepFM, embedding dim 16 (table `emb`, Adagrad: 16 values + 16 accumulators a row), MLP 256-128, "
        f"the wide weights (table `wide`, FTRL: a weight + z + n a row) and the dense tensor (table `dense`, in "
        f"blocks); {args.batch_size} examples per worker and "
        "step, one epoch, default seeds. `kestrel local --servers 2 --workers 2 --consistency bsp --device cpu` "
        f"(mutual TLS, 1 scheduler + 2 servers + 2 workers on this machine), `--checkpoint_every_clocks "
        f"{args.checkpoint_every_clocks}` plus the final checkpoint.",
        "- Q8 runs add `embedding_checkpoint_codec: CHECKPOINT_Q8` to the model config: the `emb` table's rows are "
        "written to checkpoints as 8-bit codes; `wide` and the dense tensor stay exact.",
        f"- Killed runs: server 1 gets SIGKILL {args.kill_delay} s after the checkpoint of clock "
        f"{args.kill_after_clock} is committed; `kestrel local` restarts it, every server restores that checkpoint "
        "and the workers redo the clocks since.",
        "- Test AUC, logloss and the prediction fingerprint (a hash of every test prediction: equal models give "
        "equal fingerprints) are worker 0's evaluation after the last step (`summary.json`). BSP with a fixed data "
        "order is deterministic (runs (a), (b) and (d) below are three separate jobs that end with one "
        "fingerprint), so each configuration ran once: no medians are needed for AUC.", "",
        "## Model quality", "",
        "| run | checkpoints | server killed | restored from (clock) | rollbacks | test AUC | AUC - A | test logloss | "
        "prediction fingerprint | final checkpoint hash | wall s |",
        "|---|---|---|---|---:|---:|---:|---:|---|---|---:|"]
    for r in (a, b, c, d):
        restored = f"{r.get('restored')} ({r.get('restored_clock')})" if r["kill"] else ""
        fh = r["final"]["hash"] if r["final"] else "n/a"
        lines.append(f"| ({r['name']}) {DESCRIBE[r['name']]} | {r['codec']} | {'yes' if r['kill'] else 'no'} | "
                     f"{restored} | {r['rollbacks']} | {r['auc']:.7f} | {r['auc'] - a['auc']:+.7f} | "
                     f"{r['logloss']:.7f} | {r['fingerprint']} | {fh} | {r['wall_seconds']:.1f} |")
    diff = abs(c["auc"] - a["auc"])
    lines += [
        "",
        f"- A = {a['auc']:.7f} (a). (b) fp32 through the kill: AUC {b['auc']:.7f}, fingerprint {b['fingerprint']}: "
        f"{'bitwise identical to (a) (same AUC, same fingerprint, same final checkpoint)' if same(a, b) else 'DIFFERS from (a)'}.",
        f"- B = {c['auc']:.7f} (c), Q8 through the kill: |B - A| = {diff:.7f} ({diff:.1e}) "
        f"({'within' if diff <= 0.001 else 'NOT within'} the 0.001 goal); fingerprint {c['fingerprint']} "
        f"{'differs from (a)' if c['fingerprint'] != a['fingerprint'] else 'EQUALS (a)'}: the restore is lossy, and "
        "the job continued from the decoded rows.",
        f"- (d) Q8 uninterrupted: AUC {d['auc']:.7f}, fingerprint {d['fingerprint']}: "
        f"{'identical to (a)' if d['auc'] == a['auc'] and d['fingerprint'] == a['fingerprint'] else 'DIFFERS from (a)'}"
        " (the codec only changes the checkpoint files; nothing read them back).",
        "- The restores after the kill (each server's log): "
        + "; ".join(f"({r['name']}) " + ", ".join(f"shard {x['shard']} loaded {x['checkpoint']}: {x['rows']} rows in "
                                                  f"{x['seconds']:.2f} s" for x in r["loads"]) for r in (b, c)) + ".",
        "- Final checkpoint hash: a hash of every record (key and stored bytes) of the last checkpoint, all shards: "
        "the stored parameters. Comparable between runs of the same codec only (a Q8 record is the code of the "
        "row, not the row).", ""]
    lines += ["## Bytes written per row", "",
              "From the manifests of every committed checkpoint of the uninterrupted runs (sum over checkpoints and "
              "shards of `ShardCheckpoint.bytes_written` / `rows_written`: every table's changed rows, a record's "
              "key and value; the `emb` and `wide` tables hold one row per feature key each, and every checkpoint also "
              "writes the dense tensor's blocks of about 12 KB each, which raise the average), the final "
              "checkpoint's snapshot files (`CheckpointFile.size`, all shards), and per table a read-only scan of "
              "the final checkpoint's RocksDB stores (every record's key and value bytes).", "",
              "| | fp32 (a) | Q8 (d) | Q8 / fp32 | fp32 / Q8 |", "|---|---:|---:|---:|---:|"]
    ra, wa = totals(a["manifests"])
    rd, wd = totals(d["manifests"])
    lines.append(f"| checkpoints committed | {len(a['manifests'])} | {len(d['manifests'])} | | |")
    lines.append(f"| rows written, all checkpoints | {ra} | {rd} | | |")
    lines.append(f"| bytes written, all checkpoints | {wa} | {wd} | {wd / wa:.3f} | {wa / wd:.2f} |")
    lines.append(f"| bytes written per row (every table) | {wa / ra:.1f} | {wd / rd:.1f} | "
                 f"{(wd / rd) / (wa / ra):.3f} | {(wa / ra) / (wd / rd):.2f} |")
    fa = sum(s["file_bytes"] for s in a["manifests"][-1]["shards"])
    fd = sum(s["file_bytes"] for s in d["manifests"][-1]["shards"])
    lines.append(f"| final checkpoint's files (MB) | {fa / 1e6:.1f} | {fd / 1e6:.1f} | {fd / fa:.3f} | {fa / fd:.2f} |")
    if a["final"] and d["final"]:
        ta, td = a["final"]["tables"], d["final"]["tables"]
        for table in sorted(set(ta) & set(td)):
            x, y = ta[table], td[table]
            if not x["rows"] or not y["rows"]:
                continue
            rec_a, rec_d = (x["key_bytes"] + x["value_bytes"]) / x["rows"], (y["key_bytes"] + y["value_bytes"]) / y["rows"]
            val_a, val_d = x["value_bytes"] / x["rows"], y["value_bytes"] / y["rows"]
            lines.append(f"| `{table}`: bytes per row, key + record ({x['rows']} / {y['rows']} rows in the final "
                         f"checkpoint) | {rec_a:.1f} | {rec_d:.1f} | {rec_d / rec_a:.3f} | {rec_a / rec_d:.2f} |")
            lines.append(f"| `{table}`: record bytes per row (value only) | {val_a:.1f} | {val_d:.1f} | "
                         f"{val_d / val_a:.3f} | {val_a / val_d:.2f} |")
        emb = td.get("emb")
        if emb:
            lines += ["", f"In (d)'s final checkpoint {emb['raw_records']} of {emb['rows']} `emb` records are not "
                      "Q8-coded (written exactly: a row the codec cannot code)."]
    lines += ["", "Per checkpoint (rows written, bytes written per row; both shards):", "",
              "| checkpoint (clock) | fp32 rows | fp32 B/row | Q8 rows | Q8 B/row |", "|---|---:|---:|---:|---:|"]
    for ma, md in zip(a["manifests"], d["manifests"]):
        r1, w1 = totals([ma])
        r2, w2 = totals([md])
        lines.append(f"| {ma['name']} ({ma['clock']}) | {r1} | {w1 / max(r1, 1):.1f} | {r2} | {w2 / max(r2, 1):.1f} |")
    lines += ["", "Raw results (JSON) are in the run's work directory, `results.json`.", ""]
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {args.output}")


def same(x, y):
    return (x["auc"] == y["auc"] and x["fingerprint"] == y["fingerprint"]
            and (x["final"] or {}).get("hash") == (y["final"] or {}).get("hash"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin", required=True, help="the Bazel outputs (bazel info -c opt bazel-bin)")
    parser.add_argument("--kestrel", required=True, help="scripts/kestrel")
    parser.add_argument("--train_rows", type=int, default=1000000)
    parser.add_argument("--test_rows", type=int, default=100000)
    parser.add_argument("--max_vocab", type=int, default=100000)
    parser.add_argument("--batch_size", type=int, default=2048, help="examples per worker and step (default 2048)")
    parser.add_argument("--checkpoint_every_clocks", type=int, default=50)
    parser.add_argument("--kill_after_clock", type=int, default=100,
                        help="kill server 1 after the checkpoint of this clock is committed (default 100)")
    parser.add_argument("--kill_delay", type=float, default=0.5, help="seconds after that commit (default 0.5)")
    parser.add_argument("--runs", default="abcd", help="which of the runs a, b, c, d (default all; the report needs all)")
    parser.add_argument("--no_scan", action="store_true", help="skip the per-table scan of the final checkpoints")
    parser.add_argument("--work_dir", default="/tmp/kestrel_compact_checkpoint_bench")
    parser.add_argument("--output", default="bench/results/compact_checkpoint.md")
    parser.add_argument("--commit", default="unknown")
    parser.add_argument("--invocation", default="bench/run_compact_checkpoint_bench.sh")
    args = parser.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    load_start = open("/proc/loadavg").read().split()[:3]
    started = time.time()
    bin_dir = copy_binaries(args.bin, os.path.join(args.work_dir, "bin"))
    data = os.path.join(args.work_dir, f"data-{args.train_rows}-{args.test_rows}-{args.max_vocab}")
    if not os.path.exists(os.path.join(data, "test.tsv")):
        subprocess.run([os.path.join(bin_dir, "worker/data/kestrel_datagen"), f"--train_rows={args.train_rows}",
                        f"--test_rows={args.test_rows}", f"--max_vocab={args.max_vocab}", f"--out_dir={data}"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = {}
    for name, codec, kill in RUNS:
        if name not in args.runs:
            continue
        print(f"run ({name}): {DESCRIBE[name]}", flush=True)
        r = run_job(args, bin_dir, data, name, codec, kill)
        results[name] = r
        rows, written = totals(r["manifests"])
        print(f"  AUC {r['auc']:.6f} logloss {r['logloss']:.6f} fingerprint {r['fingerprint']} rollbacks "
              f"{r['rollbacks']} restored {r.get('restored')} ({r.get('restored_clock')}); "
              f"{len(r['manifests'])} checkpoints, {written / max(rows, 1):.1f} bytes per row written; "
              f"final {r['final'] and r['final']['hash']} {r['final'] and r['final']['tables']}", flush=True)
    with open(os.path.join(args.work_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    if all(n in results for n in "abcd"):
        report(args, results, load_start, started)
        a, b, c, d = (results[n] for n in "abcd")
        ok = same(a, b) and d["auc"] == a["auc"] and d["fingerprint"] == a["fingerprint"] \
            and c["restored_clock"] == args.kill_after_clock and b["restored_clock"] == args.kill_after_clock
        if not ok:
            print("compact_checkpoint_bench: an expectation failed (see the report)", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
