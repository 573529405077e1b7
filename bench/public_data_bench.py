#!/usr/bin/env python3
"""Kestrel's two default commands against what a user would run instead, on public data that Debian ships.

For each data set and split, in one run: `kestrel init` + `kestrel train` (the config guessed from the
training file, trained in one process: validation split, early stopping, the size rule of docs/tuning.md),
scikit-learn's LogisticRegression (one-hot categories, standardized numbers, binary bag of words; C chosen on a
validation split, then refit on the whole training split) and a PyTorch factorization machine (the same
inputs; the epoch chosen on the validation split). Each one's test AUC, logloss and wall time.

The data sets (the Debian package, the file, how it is split; the md5 of each file goes in the report):
  credit-g      weka: /usr/share/doc/weka/examples/credit-g.arff. German credit: 1000 applicants, 13
                categorical and 7 numeric columns, "bad" is the positive. Five splits: test = rows i with
                i % 5 == k, train = the rest.
  reuters-grain weka: ReutersGrain-train.arff / ReutersGrain-test.arff. Reuters-21578 news texts, "grain" or
                not: 1554 / 604 documents, the package's own split; the text becomes a space-separated column of
                lower-cased words.
  fair          python3-statsmodels: statsmodels/datasets/fair/fair.csv. Fair's affairs survey: 6366 women,
                8 columns (ratings and codes), positive = any affairs. Five splits as credit-g's.

The packages are fetched with `apt-get download` and unpacked with `dpkg-deb -x` into --work (nothing is
installed: weka's Java is not needed for its example files). Needs python3-sklearn and python3-torch (Debian).

  bench/public_data_bench.py [--work /tmp/kestrel_public_data] [--out bench/results/public_data_bench.md]

KESTREL_BIN: the directory of the built binaries (default: scripts/kestrel builds them with bazel -c opt).
"""
import argparse
import csv
import hashlib
import io
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KESTREL = os.path.join(REPO, "scripts", "kestrel")
WEKA_EXAMPLES = "usr/share/doc/weka/examples"
FAIR = "usr/lib/python3/dist-packages/statsmodels/datasets/fair/fair.csv"


# ---- the data -------------------------------------------------------------------------------------------------

def fetch(work):
    """Downloads and unpacks weka and python3-statsmodels into work/pkg (once); returns the unpacked root."""
    root = os.path.join(work, "pkg")
    if os.path.exists(os.path.join(root, FAIR)) and os.path.exists(os.path.join(root, WEKA_EXAMPLES)):
        return root
    os.makedirs(root, exist_ok=True)
    subprocess.run(["apt-get", "download", "weka", "python3-statsmodels"], cwd=work, check=True)
    for deb in sorted(f for f in os.listdir(work) if f.endswith(".deb")):
        subprocess.run(["dpkg-deb", "-x", os.path.join(work, deb), root], check=True)
    return root


def md5(path):
    with open(path, "rb") as f:
        return hashlib.md5(f.read()).hexdigest()


def read_arff(path):
    """(attribute names, their kinds: 'numeric', 'string' or a list of nominal values, rows of strings)."""
    names, kinds, rows, data = [], [], [], False
    with open(path, encoding="latin-1") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("%"):
                continue
            if data:
                rows.append(next(csv.reader(io.StringIO(line), quotechar="'", escapechar="\\",
                                            skipinitialspace=True)))
                continue
            low = line.lower()
            if low.startswith("@attribute"):
                m = re.match(r"@attribute\s+('[^']*'|\S+)\s+(.*)", line, re.I)
                names.append(m.group(1).strip("'"))
                kind = m.group(2).strip()
                kinds.append(kind.lower() if not kind.startswith("{") else
                             [v.strip().strip("'") for v in kind.strip("{}").split(",")])
            elif low.startswith("@data"):
                data = True
    return names, kinds, rows


def words(text):
    return " ".join(re.findall(r"[a-z][a-z0-9]+", text.lower()))


class DataSet:
    """Columns (name, kind: 'cat', 'num' or 'text'), rows as lists of strings, labels 0/1, and its splits."""

    def __init__(self, name, source, columns, rows, labels, splits):
        self.name, self.source, self.columns, self.rows, self.labels, self.splits = (
            name, source, columns, rows, labels, splits)


def five_splits(n):
    return [([i for i in range(n) if i % 5 != k], [i for i in range(n) if i % 5 == k]) for k in range(5)]


def credit_g(root):
    path = os.path.join(root, WEKA_EXAMPLES, "credit-g.arff")
    names, kinds, rows = read_arff(path)
    columns = [(n, "num" if k == "numeric" else "cat") for n, k in zip(names[:-1], kinds[:-1])]
    labels = [1 if r[-1] == "bad" else 0 for r in rows]
    return DataSet("credit-g", [("weka", path)], columns, [r[:-1] for r in rows], labels, five_splits(len(rows)))


def reuters_grain(root):
    paths = [os.path.join(root, WEKA_EXAMPLES, f"ReutersGrain-{s}.arff") for s in ("train", "test")]
    rows, labels, parts = [], [], []
    for path in paths:
        _, _, part = read_arff(path)
        parts.append(list(range(len(rows), len(rows) + len(part))))
        rows += [[words(r[0])] for r in part]
        labels += [int(r[1]) for r in part]
    return DataSet("reuters-grain", [("weka", p) for p in paths], [("text", "text")], rows, labels,
                   [(parts[0], parts[1])])


def fair(root):
    path = os.path.join(root, FAIR)
    with open(path) as f:
        table = list(csv.reader(f))
    header, body = table[0], table[1:]
    columns = [(h, "cat") for h in header[:-1]]  # ratings and codes: a few levels each
    rows = [[str(int(float(v))) if float(v).is_integer() else v for v in r[:-1]] for r in body]
    labels = [1 if float(r[-1]) > 0 else 0 for r in body]
    return DataSet("fair", [("python3-statsmodels", path)], columns, rows, labels, five_splits(len(rows)))


# ---- Kestrel's two commands -----------------------------------------------------------------------------------

def write_csv(path, data, idx):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["label"] + [c for c, _ in data.columns])
        for i in idx:
            w.writerow([data.labels[i]] + data.rows[i])


def run_kestrel(data, train, test, work, init_flags=()):
    os.makedirs(work, exist_ok=True)
    train_csv, test_csv = os.path.join(work, "train.csv"), os.path.join(work, "test.csv")
    write_csv(train_csv, data, train)
    write_csv(test_csv, data, test)
    config = os.path.join(work, "job.pbtxt")
    start = time.monotonic()
    with open(config, "w") as f:
        subprocess.run([KESTREL, "init", "--no_build", "--train", train_csv, "--test", test_csv] + list(init_flags),
                       stdout=f,
                       stderr=subprocess.DEVNULL, check=True)
    done = subprocess.run([KESTREL, "train", "--no_build", "--config", config], capture_output=True, text=True)
    seconds = time.monotonic() - start
    found = re.findall(r"test logloss ([0-9.]+) AUC ([0-9.]+)", done.stderr)
    if done.returncode != 0 or not found:
        sys.exit(f"kestrel train failed on {data.name}:\n{done.stderr[-3000:]}")
    return float(found[-1][1]), float(found[-1][0]), seconds


# ---- the peers ------------------------------------------------------------------------------------------------

def encode(data, train, test):
    """Sparse matrices of the splits: one-hot categories (values unseen in training dropped), numbers standardized
    by the training split, words binary (scaled 1/sqrt(count) per row)."""
    from scipy.sparse import csr_matrix
    index = {}
    stats = {}
    for j, (name, kind) in enumerate(data.columns):
        if kind == "num":
            xs = [float(data.rows[i][j]) for i in train]
            stats[j] = (statistics.mean(xs), statistics.pstdev(xs) or 1.0)
            index[(j, None)] = len(index)
        else:
            for i in train:
                for v in (data.rows[i][j].split() if kind == "text" else [data.rows[i][j]]):
                    index.setdefault((j, v), len(index))

    def matrix(idx):
        r, c, v = [], [], []
        for n, i in enumerate(idx):
            for j, (name, kind) in enumerate(data.columns):
                if kind == "num":
                    mean, sd = stats[j]
                    r.append(n), c.append(index[(j, None)]), v.append((float(data.rows[i][j]) - mean) / sd)
                    continue
                values = set(data.rows[i][j].split()) if kind == "text" else {data.rows[i][j]}
                known = [index[(j, x)] for x in values if (j, x) in index]
                for k in known:
                    r.append(n), c.append(k), v.append(1.0 / math.sqrt(len(known)) if kind == "text" else 1.0)
        return csr_matrix((v, (r, c)), shape=(len(idx), len(index)), dtype=np.float32)

    return matrix(train), matrix(test)


def validation_part(n, every=10):
    """The positions (of a training split of n rows) held out for choosing C or the epoch: one in `every`."""
    val = [p for p in range(n) if p % every == every - 1]
    fit = [p for p in range(n) if p % every != every - 1]
    return fit, val


def logloss(y, p):
    p = np.clip(p, 1e-7, 1 - 1e-7)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def run_sklearn(x_train, y_train, x_test, y_test):
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    start = time.monotonic()
    fit, val = validation_part(x_train.shape[0])
    best = None
    for c in (0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100):
        model = LogisticRegression(C=c, max_iter=5000).fit(x_train[fit], y_train[fit])
        loss = logloss(y_train[val], model.predict_proba(x_train[val])[:, 1])
        if best is None or loss < best[0]:
            best = (loss, c)
    model = LogisticRegression(C=best[1], max_iter=5000).fit(x_train, y_train)
    p = model.predict_proba(x_test)[:, 1]
    return roc_auc_score(y_test, p), logloss(y_test, p), time.monotonic() - start, f"C={best[1]}"


def run_torch_fm(x_train, y_train, x_test, y_test, dim=8, epochs=30, seed=1):
    import torch
    from sklearn.metrics import roc_auc_score
    torch.manual_seed(seed)
    start = time.monotonic()

    def tensor(m):
        m = m.tocoo()
        return torch.sparse_coo_tensor(np.vstack([m.row, m.col]), m.data, m.shape).coalesce()

    n_features = x_train.shape[1]
    w = torch.nn.Parameter(torch.zeros(n_features, 1))
    v = torch.nn.Parameter(torch.randn(n_features, dim) * 0.01)
    b = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.Adam([w, v, b], lr=0.01)

    def forward(x):
        linear = torch.sparse.mm(x, w).squeeze(1)
        xv = torch.sparse.mm(x, v)
        x2 = torch.sparse_coo_tensor(x.indices(), x.values() ** 2, x.shape)
        pairwise = 0.5 * (xv.pow(2) - torch.sparse.mm(x2, v.pow(2))).sum(1)
        return linear + pairwise + b

    fit, val = validation_part(x_train.shape[0])
    x_fit, y_fit = x_train[fit], torch.tensor(y_train[fit], dtype=torch.float32)
    x_val = tensor(x_train[val])
    x_te = tensor(x_test)
    best = None
    rng = np.random.default_rng(seed)
    for epoch in range(1, epochs + 1):
        order = rng.permutation(len(fit))
        for s in range(0, len(order), 128):
            batch = order[s:s + 128]
            loss = torch.nn.functional.binary_cross_entropy_with_logits(forward(tensor(x_fit[batch])), y_fit[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            val_loss = logloss(y_train[val], torch.sigmoid(forward(x_val)).numpy())
            if best is None or val_loss < best[0]:
                best = (val_loss, epoch, torch.sigmoid(forward(x_te)).numpy())
    p = best[2]
    return roc_auc_score(y_test, p), logloss(y_test, p), time.monotonic() - start, f"epoch {best[1]}"


# ---- the report -----------------------------------------------------------------------------------------------

def machine():
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB, {platform.platform()}"


def commit():
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", default="/tmp/kestrel_public_data")
    parser.add_argument("--out", default=os.path.join(REPO, "bench", "results", "public_data_bench.md"))
    parser.add_argument("--sets", default="credit-g,reuters-grain,fair")
    parser.add_argument("--init_flags", default="",
                        help="extra `kestrel init` flags, for experiments (default none: the two default commands)")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    root = fetch(args.work)
    makers = {"credit-g": credit_g, "reuters-grain": reuters_grain, "fair": fair}
    lines = []
    summary = []
    for name in args.sets.split(","):
        data = makers[name](root)
        per = {"kestrel": [], "sklearn LR": [], "PyTorch FM": []}
        for k, (train, test) in enumerate(data.splits):
            y_train = np.array([data.labels[i] for i in train], dtype=np.float32)
            y_test = np.array([data.labels[i] for i in test], dtype=np.float32)
            x_train, x_test = encode(data, train, test)
            per["kestrel"].append(run_kestrel(data, train, test, os.path.join(args.work, name, f"split{k}"),
                                              args.init_flags.split()) + ("",))
            per["sklearn LR"].append(run_sklearn(x_train, y_train, x_test, y_test))
            per["PyTorch FM"].append(run_torch_fm(x_train, y_train, x_test, y_test))
            print(f"{name} split {k}: " + ", ".join(f"{tool} AUC {r[-1][0]:.4f}" for tool, r in per.items()),
                  flush=True)
        mean = {tool: statistics.mean(r[0] for r in rs) for tool, rs in per.items()}
        best_peer = max(mean["sklearn LR"], mean["PyTorch FM"])
        summary.append((name, mean["kestrel"], mean["sklearn LR"], mean["PyTorch FM"], mean["kestrel"] - best_peer,
                        {tool: statistics.median(r[2] for r in rs) for tool, rs in per.items()}))
        sources = "; ".join(f"{pkg}: `{os.path.relpath(p, root)}` (md5 {md5(p)})" for pkg, p in data.source)
        lines.append(f"\n### {name}\n\n{sources}. {len(data.rows)} rows, {sum(data.labels)} positive; "
                     f"{len(data.splits)} split(s).\n\n| Split | Kestrel AUC | LR AUC | FM AUC | Kestrel logloss | "
                     f"LR logloss | FM logloss | Kestrel s | LR s | FM s | LR's C, FM's epoch |\n"
                     "|---|---|---|---|---|---|---|---|---|---|---|")
        for k in range(len(data.splits)):
            kk, lr, fm = per["kestrel"][k], per["sklearn LR"][k], per["PyTorch FM"][k]
            lines.append(f"| {k} | {kk[0]:.4f} | {lr[0]:.4f} | {fm[0]:.4f} | {kk[1]:.4f} | {lr[1]:.4f} | "
                         f"{fm[1]:.4f} | {kk[2]:.1f} | {lr[2]:.1f} | {fm[2]:.1f} | {lr[3]}, {fm[3]} |")
    head = ["# Public data: Kestrel's two default commands against scikit-learn LR and a PyTorch FM", "",
            f"Machine: {machine()}. Commit {commit()}. Command: `bench/public_data_bench.py --sets {args.sets}` (one run; every "
            "figure of a row from the same split). AUC and logloss on each split's test rows; times are wall "
            "seconds of the whole tool on the split (Kestrel: `kestrel init` + `kestrel train`, two processes).", "",
            "| Data set | Kestrel AUC (mean over splits) | sklearn LR | PyTorch FM | Kestrel - the better peer | "
            "median seconds: Kestrel / LR / FM |", "|---|---|---|---|---|---|"]
    for name, kk, lr, fm, gap, secs in summary:
        head.append(f"| {name} | {kk:.4f} | {lr:.4f} | {fm:.4f} | {gap:+.4f} | "
                    f"{secs['kestrel']:.1f} / {secs['sklearn LR']:.1f} / {secs['PyTorch FM']:.1f} |")
    with open(args.out, "w") as f:
        f.write("\n".join(head + lines) + "\n")
    print("\n".join(head))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
