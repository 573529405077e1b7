"""`kestrel init --search SECONDS`: a few models and learning rates tried on the validation split of the guessed
config, within a time budget; the winner is written, with the table of what was tried in its comment block.

Every candidate is kestrel_schema_guess's config for its model (LOGISTIC_REGRESSION and FM bucketize the numbers
DEEPFM feeds its MLP) and learning rates (--wide_learning_rate, --embedding_learning_rate; none: the guess's,
docs/tuning.md), trained in one process (kestrel_worker --local). Only the validation split, held out of the
training files, ranks them, by the best validation logloss of the run (the model early stopping keeps): the test
files are never read, a file of the training file's header and first line stands in for them (kestrel_worker
--test_files; a local job evaluates one). Candidates run in a fixed order, the guess first, until the budget is
spent; a started one runs to its end.
"""
import os
import re
import subprocess
import time

# Validation lines of kestrel_worker's log (worker/trainer.cc).
VALIDATION = re.compile(r"validation at step (\d+): \d+ examples\s+logloss ([0-9.]+)\s+AUC ([0-9.]+)")

# (`kestrel init --model` name, the wide weights' FTRL alpha, the embeddings' Adagrad rate; None: the guess's),
# in the order they are tried.
CANDIDATES = [
    ("deepfm", None, None), ("fm", None, None), ("lr", None, None),
    ("deepfm", 0.025, None), ("deepfm", 0.2, None), ("deepfm", None, 0.02),
    ("fm", 0.025, None), ("fm", 0.2, None), ("fm", None, 0.02),
    ("lr", 0.025, None), ("lr", 0.2, None),
]


def guess_flags(wide, embedding):
    """kestrel_schema_guess's flags for a candidate's learning rates."""
    flags = []
    if wide is not None:
        flags.append(f"--wide_learning_rate={wide}")
    if embedding is not None:
        flags.append(f"--embedding_learning_rate={embedding}")
    return flags


def search(guess, budget_seconds, worker, work_dir, train_file):
    """Runs candidates until the budget is spent. `guess(model, flags)` is the guessed config's text; `worker` the
    kestrel_worker binary; `train_file` the first training file. Returns (the winner's row or None, the rows:
    dicts, one per candidate)."""
    start = time.monotonic()
    rows = []
    stand_in = os.path.join(work_dir, "stand_in_test" + os.path.splitext(train_file)[1])
    with open(train_file, errors="replace") as src, open(stand_in, "w") as dst:
        dst.write(src.readline() + src.readline())
    for n, (model, wide, embedding) in enumerate(CANDIDATES):
        if rows and time.monotonic() - start >= budget_seconds:
            break
        row = {"model": model, "wide": wide, "embedding": embedding}
        path = os.path.join(work_dir, f"candidate{n}.pbtxt")
        with open(path, "w") as f:
            f.write(guess(model, guess_flags(wide, embedding)))
        began = time.monotonic()
        done = subprocess.run([worker, "--local", f"--config={path}", f"--test_files={stand_in}"],
                              capture_output=True, text=True)
        row["seconds"] = time.monotonic() - began
        validations = [(float(loss), float(auc), int(step)) for step, loss, auc in VALIDATION.findall(done.stderr)]
        if done.returncode != 0 or not validations:
            errors = [line for line in done.stderr.splitlines() if line.startswith("E")]
            row["failed"] = errors[-1] if errors else f"exit {done.returncode} without a validation"
        else:
            row["logloss"], row["auc"], row["step"] = min(validations)
        rows.append(row)
    finished = [r for r in rows if "logloss" in r]
    return (min(finished, key=lambda r: r["logloss"]) if finished else None), rows


def table(rows, winner, budget_seconds):
    """The comment block's table of the candidates tried."""
    out = [f"# kestrel init --search {budget_seconds:g}: {len(rows)} candidates, each trained without the validation "
           "split and",
           "# ranked by its best validation logloss (the test files unread); this config is the winner's.",
           "#   model    wide lr  emb lr   val logloss  val AUC  step    seconds"]
    for r in rows:
        wide = "guess" if r["wide"] is None else f"{r['wide']:g}"
        emb = "-" if r["model"] == "lr" else "guess" if r["embedding"] is None else f"{r['embedding']:g}"
        if "logloss" in r:
            mark = "  <- the winner" if r is winner else ""
            out.append(f"#   {r['model']:<8} {wide:<8} {emb:<8} {r['logloss']:<12.5f} {r['auc']:<8.4f} "
                       f"{r['step']:<7} {r['seconds']:.1f}{mark}")
        else:
            out.append(f"#   {r['model']:<8} {wide:<8} {emb:<8} failed: {r['failed'][:80]}")
    return "\n".join(out) + "\n"
