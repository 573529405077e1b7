#!/usr/bin/env python3
"""Chooses Kestrel's default optimizer settings by a sweep on kestrel_datagen data.

Trains each model with `kestrel_worker --local` on the first 80% of a generated train.tsv and scores it on
the held-out last 20% of the same file (the test split is never looked at), at the size users run
(embedding dim 16, MLP 256-128, batch 4096, one epoch). The sweep is coordinate-wise (one table at a time, the others at their
current choice): the wide optimizer on LR (every model keeps it), then per model the embedding learning rate
and the dense (bias and MLP) learning rate; ties go to the previous default. Every model is then run with its
chosen and with the previous defaults. Writes a markdown table (bench/results/sweep_defaults.md by default).

    bench/sweep_defaults.py --bin "$(bazel info -c opt bazel-bin)" --data /tmp/kestrel_sweep
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

# Settings are text-format ModelConfig fields.
FTRL = "wide_optimizer { type: FTRL learning_rate: %g ftrl_beta: 1 }"
WIDE_ADAGRAD = "wide_optimizer { type: ADAGRAD learning_rate: %g initial_accumulator: 0.1 }"
EMB = "embedding_optimizer { type: ADAGRAD learning_rate: %g initial_accumulator: 0.1 }"
DENSE = "dense_optimizer { type: ADAM learning_rate: %g }"

OLD_DEFAULTS = {"wide": FTRL % 0.05, "emb": EMB % 0.05, "dense": DENSE % 0.001}


def run(args, name, model, settings):
    """Trains one configuration; returns the held-out AUC and logloss."""
    out = os.path.join(args.work, name)
    os.makedirs(out, exist_ok=True)
    config = os.path.join(out, "job.pbtxt")
    with open(config, "w") as f:
        f.write("model { type: %s embedding_dim: %d hidden: [%s] %s }\n" % (
            model, args.embedding_dim, args.hidden, " ".join(settings.values())))
        f.write("data { format: CRITEO train_files: '%s' test_files: '%s' }\n" % (
            args.train_part, args.holdout_part))
        f.write("train { batch_size: %d epochs: %d log_every_steps: 1000000 }\n" % (args.batch_size, args.epochs))
    records = os.path.join(out, "records.jsonl")
    if os.path.exists(records):
        os.remove(records)
    subprocess.run([os.path.join(args.bin, "cmd/kestrel_worker"), "--local", "--device=cpu",
                    "--config=" + config, "--metrics_out=" + records],
                   check=True, stdout=subprocess.DEVNULL, stderr=open(os.path.join(out, "log.txt"), "w"))
    evals = [json.loads(line) for line in open(records) if '"eval"' in line]
    return float(evals[-1]["auc"]), float(evals[-1]["logloss"])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", required=True, help="bazel-bin of a -c opt build")
    p.add_argument("--data", required=True, help="kestrel_datagen output directory (made when missing)")
    p.add_argument("--train_rows", type=int, default=1000000)
    p.add_argument("--max_vocab", type=int, default=100000)
    p.add_argument("--embedding_dim", type=int, default=16)
    p.add_argument("--hidden", default="256, 128")
    p.add_argument("--batch_size", type=int, default=4096)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--output", default="bench/results/sweep_defaults.md")
    args = p.parse_args()

    train = os.path.join(args.data, "train.tsv")
    if not os.path.exists(train):
        subprocess.run([os.path.join(args.bin, "worker/data/kestrel_datagen"), "--out_dir", args.data,
                        "--train_rows", str(args.train_rows), "--test_rows", "1000",
                        "--max_vocab", str(args.max_vocab)], check=True)
    args.work = os.path.join(args.data, "sweep")
    os.makedirs(args.work, exist_ok=True)
    args.train_part = os.path.join(args.work, "train_part.tsv")
    args.holdout_part = os.path.join(args.work, "holdout_part.tsv")
    lines = sum(1 for _ in open(train))
    cut = lines * 4 // 5
    with open(train) as src, open(args.train_part, "w") as a, open(args.holdout_part, "w") as b:
        for i, line in enumerate(src):
            (a if i < cut else b).write(line)

    rows = []  # (model, label, settings, auc, logloss)
    cache = {}

    def trial(model, label, settings):
        key = (model, tuple(sorted(settings.items())))
        if key not in cache:
            name = "%s_%d" % (model.lower(), len(cache))
            start = time.time()
            cache[key] = run(args, name, model, settings)
            print("%-20s %-45s AUC %.5f logloss %.5f (%.0f s)" % (model, label, cache[key][0], cache[key][1],
                                                                   time.time() - start), flush=True)
        rows.append((model, label, dict(settings), cache[key][0], cache[key][1]))
        return cache[key][0]

    def choose(model, base, candidates, field):
        """The best candidate for `model` (the first listed wins a tie: list the previous default first)."""
        scores = [(trial(model, label, dict(base, **{field: value})), -i, value)
                  for i, (label, value) in enumerate(candidates)]
        return max(scores)[2]

    emb_lrs = (0.05, 0.002, 0.005, 0.01, 0.02, 0.1)
    dense_lrs = (0.001, 0.0005, 0.002, 0.004, 0.008, 0.016)
    # 1. The wide table, on LR (the only table LR has); every model keeps LR's choice.
    wide = choose("LOGISTIC_REGRESSION", OLD_DEFAULTS,
                  [("wide FTRL %g" % lr, FTRL % lr) for lr in (0.05, 0.1, 0.2)] +
                  [("wide Adagrad %g" % lr, WIDE_ADAGRAD % lr) for lr in (0.05, 0.1, 0.2)], "wide")
    chosen = {"LOGISTIC_REGRESSION": dict(OLD_DEFAULTS, wide=wide)}
    # 2. Per model: the embedding learning rate, then the dense (bias and MLP) learning rate.
    for model in ("FM", "DEEPFM", "DLRM"):
        base = dict(OLD_DEFAULTS, wide=wide)
        base["emb"] = choose(model, base, [("emb Adagrad %g" % lr, EMB % lr) for lr in emb_lrs], "emb")
        base["dense"] = choose(model, base, [("dense Adam %g" % lr, DENSE % lr) for lr in dense_lrs], "dense")
        chosen[model] = base
    # 3. Every model with its chosen and with the previous defaults.
    for model, base in chosen.items():
        trial(model, "chosen defaults", base)
        trial(model, "previous defaults", OLD_DEFAULTS)

    best_auc = {}
    for model, _, _, auc, _ in rows:
        best_auc[model] = max(best_auc.get(model, 0), auc)
    with open(args.output, "w") as out:
        out.write("# Default optimizer settings: sweep\n\n")
        out.write("Machine: %s, %d CPUs, %s. Command: `bench/sweep_defaults.py --bin \"$(bazel info -c opt "
                  "bazel-bin)\" --data DIR`.\n\n" % (platform.processor() or platform.machine(), os.cpu_count(),
                                                      platform.platform()))
        out.write("Data: `kestrel_datagen --train_rows %d --max_vocab %d` (the generator's default interactions); "
                  "trained on the first %d lines of train.tsv, scored on the held-out last %d (the test split is "
                  "never used). Model: embedding dim %d, MLP [%s], batch %d, %d epoch(s), one process.\n\n" % (
                      args.train_rows, args.max_vocab, cut, lines - cut, args.embedding_dim, args.hidden,
                      args.batch_size, args.epochs))
        out.write("| model | setting | held-out AUC | logloss | AUC below the model's best |\n|---|---|---:|---:|---:|\n")
        for model, label, _, auc, logloss in rows:
            out.write("| %s | %s | %.5f | %.5f | %.5f |\n" % (model, label, auc, logloss, best_auc[model] - auc))
        out.write("\nChosen defaults:\n\n")
        for model, base in chosen.items():
            out.write("- %s: `%s`, `%s`, `%s` (held-out AUC %.5f; best of its sweep %.5f)\n" % (
                model, base["wide"], base["emb"], base["dense"], cache[(model, tuple(sorted(base.items())))][0],
                best_auc[model]))
    print("chosen:", chosen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
