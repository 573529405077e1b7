"""The best validation's model of a cluster job (`kestrel local`): which validation was best, by the rule of
worker/early_stopping.h, and the checkpoint cut at its clock (kestrel_scheduler --checkpoint_at_clocks keeps one
at every validation clock), exported and scored on the test files.

A cluster trains every epoch; in BSP the checkpoint cut at a validation's clock is the model worker 0 validated
there, so the job's result is that of the same job stopped at that epoch by hand, bit for bit."""
import json
import os
import re
import subprocess


def best_step(validations):
    """The step of the validation whose logloss beat every earlier one last (EarlyStopping::Validated's rule:
    a tie keeps the earlier). A step validated twice (a rollback redid it) counts once, its last record.
    None without validations."""
    by_step = {}
    for v in validations:
        if "step" in v and "logloss" in v:
            by_step[int(v["step"])] = float(v["logloss"])
    best = None
    for step in sorted(by_step):
        if best is None or by_step[step] < by_step[best]:
            best = step
    return best


def checkpoint_at(ckpt_dir, clock):
    """The newest committed checkpoint (common/checkpoint_layout.h) cut at `clock`: its name, or None."""
    found = None
    for name in sorted(os.listdir(ckpt_dir)) if os.path.isdir(ckpt_dir) else []:
        manifest = os.path.join(ckpt_dir, name, "MANIFEST")
        if not re.fullmatch(r"ckpt-\d{8}", name) or not os.path.isfile(manifest):
            continue
        with open(manifest, errors="replace") as f:
            match = re.search(r"^clock: (\d+)$", f.read(), re.MULTILINE)
        if match and int(match.group(1)) == clock:
            found = name
    return found


def validation_clocks(worker, config, workers, extra_flags):
    """kestrel_worker --validation_clocks_for: the clocks to cut checkpoints at (a list; empty without a
    validation split). Raises RuntimeError with the worker's message when the config or data is bad."""
    done = subprocess.run([worker, f"--config={config}", f"--validation_clocks_for={workers}"] + extra_flags,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise RuntimeError(lines[-1] if lines else f"kestrel_worker exited with {done.returncode}")
    return [int(c) for c in done.stdout.strip().split(",") if c]


def export_and_score(export, predict, ckpt_dir, name, config, out, test_files, compute_threads):
    """Exports checkpoint `name` to `out` and scores `test_files` with it: the predict record (a dict with
    examples, logloss, auc, fingerprint). Raises RuntimeError naming the step that failed."""
    done = subprocess.run([export, f"--checkpoint_dir={ckpt_dir}", f"--checkpoint={name}", f"--config={config}",
                           f"--out={out}"])
    if done.returncode != 0:
        raise RuntimeError(f"exporting checkpoint {name} to {out} failed")
    done = subprocess.run([predict, f"--model={out}", "--input=" + ",".join(test_files),
                           f"--compute_threads={compute_threads}"], stdout=subprocess.PIPE, text=True)
    if done.returncode != 0 or not done.stdout.strip():
        raise RuntimeError(f"scoring the test files with {out} failed")
    return json.loads(done.stdout.strip().splitlines()[-1])
