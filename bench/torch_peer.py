#!/usr/bin/python3
"""PyTorch peer of Kestrel's training benchmarks (bench/train_bench.cc on the CPU, bench/run_gpu_bench.sh on a GPU).

Trains the same LR / FM / DeepFM / Wide&Deep / DLRM as Kestrel (worker/model.h) on the same kestrel_datagen
Criteo TSV files, with the same batch, per-table optimizers and initial distributions, and prints one JSON
line on stdout:

  {"model": "deepfm", "processes": 1, "threads": 2, "examples": 999424, "seconds": 20.1,
   "examples_per_second": 49722.3, "auc": 0.78, "logloss": 0.45, ...}

examples/s counts training time only: the files are parsed (and cached) before the clock starts, and the
evaluation after it stops.

How Kestrel's model is reproduced:
- Features (worker/data/feature_map.h, worker/data/preset_examples.cc): 39 slots per example, the 13 integer fields first
  (log2 buckets: 0 for x <= 0, else 1 + floor(log2 x); a missing value is its own bucket), then the 26
  categorical hex tokens (missing: token 2^32). Each (slot, token) pair is one row of one table, as Kestrel
  hashes (field, value) into one key space. Rows are numbered over train and test together, so a token seen
  only in the test split reads a row that training never touched: its initial value, as Kestrel's servers
  answer a pull of an absent key. Dense inputs (MLP models unless --no_dense_inputs): log1p(max(x, 0)), 0 when
  missing.
- Model: logit = bias + wide + fm + deep; wide is a dim-1 table (zeros), the field embeddings one table of
  embedding_dim (Normal(0, --emb_init_stddev)), bias and MLP weights/biases Uniform(-0.05, 0.05). MLP layers
  are y = x W + b with ReLU after every hidden layer; DLRM's bottom MLP (ReLU after every layer, the last
  included) maps the dense inputs to one embedding-sized vector b, the top MLP sees [b, <u_i, u_j> for i < j]
  over u = (b, e_1 .. e_39), pairs in row order.
- Gradients: the loss is the batch's SUM of logloss, so the sparse rows get Kestrel's summed gradients; the
  dense parameters' gradients are then divided by the batch size (Kestrel pushes the batch mean).
- Optimizers, per table, with Kestrel's formulas (common/optimizer.cc) and defaults:
  Adagrad: acc += g^2; w -= lr g / (sqrt(acc) + eps)  -> torch.optim.Adagrad(initial_accumulator_value, eps)
  Adam: bias-corrected, eps outside the sqrt         -> torch.optim.Adam (dense) / torch.optim.SparseAdam
        (sparse tables: its bias correction counts steps per table, Kestrel's per row: a known difference)
  SGD                                                -> torch.optim.SGD
  FTRL: PyTorch has none; refused (exit 2).
- Data order: worker r of N reads the lines whose index is r mod N, every process runs
  epochs * floor(smallest shard / batch_size) steps (capped by --max_steps), each epoch from the start of
  its shard, in file order (worker/trainer.h).
- --ddp N: N processes (torch.multiprocessing spawn) under DistributedDataParallel with the gloo backend on
  127.0.0.1 (a free port). DDP averages every gradient over the processes, sparse ones included (gloo
  allreduces sparse tensors), which is exactly Kestrel's BSP update (1/N) * sum of the workers' pushes.
  Rank 0 evaluates. examples/s = all processes' examples over the training wall time (between barriers).
- BLAS and threads: Debian's torch calls whatever libblas.so.3 resolves to, and the alternative prefers the
  pthread OpenBLAS build over the OpenMP one, whose pool would then compete with torch's own OpenMP threads
  (DeepFM at dim 16, MLP 256-128, batch 4096 on 2 cores: ~25k examples/s instead of ~40k). With --blas=openmp
  (the default) the script re-executes itself with libopenblas0-openmp's directory first on LD_LIBRARY_PATH
  when it is installed (DDP processes inherit it). Then OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and
  MKL_NUM_THREADS are set to --threads before torch is imported, torch.set_num_threads(--threads) is called,
  and the BLAS torch loaded is looked up in /proc/self/maps: with OpenBLAS (either build) its thread count is
  set and read back through openblas_set_num_threads / openblas_get_num_threads; the netlib reference BLAS
  (about 10x slower) is reported on stderr. The JSON line names the BLAS, its threads and a measured matmul
  GFLOP/s.

On a GPU (--device cuda; one process, no --ddp): the model is built and initialized on the CPU exactly as above
(same seed, same draws), then moved to the device, and the tables are nn.EmbeddingBag (mode sum: the wide table
sums each example's 39 rows in one bag, the embedding table looks up one row per bag) instead of nn.Embedding
(--tables embedding|bag chooses either on either device).
This process's whole training and test arrays are copied to the device once, before the clock starts; a step's
batch is a slice of them on the device (no host-to-device copy per step). TF32 matmuls are off (fp32, as Kestrel's
cuBLAS GEMMs) unless --allow_tf32; torch.cuda.synchronize() runs before each timer read, so examples/s still
counts the training steps only. --sparse_grad picks the tables' gradients: true (sparse, as on the CPU), false
(dense gradients over the whole table: torch.optim.Adam instead of SparseAdam, so with an Adam table every row
moves every step; Adagrad and SGD make the same updates either way), or both: the two are trained one after the
other from the same initial values, the faster one is the result and "variants" holds both. The test AUC and
logloss are computed as on the CPU (exact_auc over every test example's probability).

Parsed arrays (row ids, dense inputs, labels, line indices) are cached as .npy files in
<train dir>/.torch_peer_cache/<key>/ (or --cache_dir), key = both files' paths, sizes and mtimes; parsing
1M lines takes about 45 s once.

Usage:
  /usr/bin/python3 bench/torch_peer.py --train /tmp/d/train.tsv --test /tmp/d/test.tsv --model deepfm \
      --embedding_dim 16 --hidden 256,128 --batch_size 4096 --threads 2
  /usr/bin/python3 bench/torch_peer.py ... --ddp 2 --threads 1
  python3 bench/torch_peer.py ... --device cuda --sparse_grad both
"""
import argparse
import ctypes
import hashlib
import json
import math
import os
import shutil
import socket
import sys
import time

import numpy as np

INTEGER_FIELDS = 13
CATEGORICAL_FIELDS = 26
FIELDS = INTEGER_FIELDS + CATEGORICAL_FIELDS
COLUMNS = 1 + FIELDS
MISSING_TOKEN = 1 << 32  # worker/data/feature_map.h kMissingValue
MISSING_BUCKET = -1      # a missing integer: its own row (Kestrel: FieldFeatureKey(field, kMissingValue))
CACHE_VERSION = 1
MODELS = ("lr", "fm", "deepfm", "wd", "dlrm")
MODEL_ALIASES = {"logistic_regression": "lr", "wide_and_deep": "wd"}

torch = None  # imported by import_torch() once the thread environment is set


def log(message):
    sys.stderr.write("torch_peer: %s\n" % message)
    sys.stderr.flush()


def fail(message, code=2):
    log(message)
    sys.exit(code)


# ---------------------------------------------------------------------------------------------------------
# Flags.

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train", required=True, help="Criteo TSV training file (kestrel_datagen train.tsv)")
    p.add_argument("--test", required=True, help="Criteo TSV test file")
    p.add_argument("--model", default="deepfm", help="lr|fm|deepfm|wd|dlrm (or Kestrel's enum names)")
    p.add_argument("--embedding_dim", type=int, default=8)
    p.add_argument("--hidden", default="64,32", help="top MLP widths")
    p.add_argument("--bottom_hidden", default="32", help="DLRM bottom MLP widths")
    p.add_argument("--no_dense_inputs", action="store_true", help="do not feed log1p(integers) to the MLP")
    p.add_argument("--batch_size", type=int, default=512, help="examples per process per step")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max_steps", type=int, default=0, help="stop after this many steps (0: the epochs)")
    p.add_argument("--threads", type=int, default=0, help="threads per process (0: the CPUs / processes)")
    p.add_argument("--ddp", type=int, default=1, help="processes (DDP, gloo) when > 1")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--emb_init_stddev", type=float, default=0.01, help="embedding initializer Normal(0, s)")
    p.add_argument("--eval_max_examples", type=int, default=0, help="evaluate on the first N test lines (0: all)")
    p.add_argument("--log_every", type=int, default=0, help="train logloss to stderr every N steps (0: none)")
    p.add_argument("--cache_dir", default="", help="where the parsed .npy arrays go (default: next to --train)")
    p.add_argument("--device", default="cpu", help="cpu, or cuda / cuda:N (one process; see above)")
    p.add_argument("--sparse_grad", default="true", choices=("true", "false", "both"),
                   help="the tables' gradients: sparse (true), dense (false), or train both ways and keep the faster")
    p.add_argument("--tables", default="auto", choices=("auto", "embedding", "bag"),
                   help="nn.Embedding or nn.EmbeddingBag tables (auto: EmbeddingBag on a GPU, Embedding on the CPU)")
    p.add_argument("--allow_tf32", action="store_true", help="--device cuda: let matmuls use TF32 (default fp32)")
    p.add_argument("--blas", default="openmp", choices=("openmp", "system"),
                   help="openmp: run torch on Debian's OpenMP OpenBLAS (libopenblas0-openmp) when it is installed, "
                        "whatever the libblas.so.3 alternative points at; system: the alternative's BLAS")
    # Per-table optimizers, as in the job config (proto/table.proto OptimizerConfig). A 0 takes Kestrel's
    # server-side default (common/optimizer.cc): lr 0.01, initial_accumulator 0.1, epsilon 1e-8, beta1 0.9,
    # beta2 0.999. The flags' defaults are the job defaults (worker/model.h WithDefaults: embeddings Adagrad
    # 0.005, DLRM 0.1; dense Adam 0.001), except the wide table's: Kestrel's default is FTRL, which PyTorch lacks.
    for table, opt, lr in (("wide", "adagrad", 0.05), ("emb", "adagrad", None), ("dense", "adam", 0.001)):
        p.add_argument("--%s_opt" % table, default=opt, help="sgd|adagrad|adam|ftrl (ftrl is refused)")
        p.add_argument("--%s_lr" % table, type=float, default=lr)
        p.add_argument("--%s_initial_accumulator" % table, type=float, default=0.1)
        p.add_argument("--%s_epsilon" % table, type=float, default=1e-8)
        p.add_argument("--%s_beta1" % table, type=float, default=0.9)
        p.add_argument("--%s_beta2" % table, type=float, default=0.999)
    args = p.parse_args(argv)
    args.model = MODEL_ALIASES.get(args.model.lower(), args.model.lower())
    if args.model not in MODELS:
        fail("unknown --model %r (one of %s)" % (args.model, ", ".join(MODELS)))
    if args.emb_lr is None:
        args.emb_lr = 0.1 if args.model == "dlrm" else 0.005
    for name in ("hidden", "bottom_hidden"):
        try:
            widths = [int(w) for w in getattr(args, name).replace(" ", "").split(",") if w]
        except ValueError:
            fail("--%s must be a comma list of widths, got %r" % (name, getattr(args, name)))
        if not widths or min(widths) < 1:
            fail("--%s must list widths >= 1" % name)
        setattr(args, name, widths)
    for table in ("wide", "emb", "dense"):
        opt = getattr(args, table + "_opt").lower()
        setattr(args, table + "_opt", opt)
        if opt == "ftrl":
            fail("--%s_opt ftrl: PyTorch has no FTRL optimizer, so this peer cannot match Kestrel's FTRL table; "
                 "configure Kestrel's %s table with ADAGRAD, SGD or ADAM and pass the same here" % (table, table))
        if opt not in ("sgd", "adagrad", "adam"):
            fail("--%s_opt must be sgd, adagrad or adam, got %r" % (table, opt))
        if getattr(args, table + "_lr") == 0:  # Kestrel: learning_rate 0 means the default 0.01
            setattr(args, table + "_lr", 0.01)
    if args.batch_size < 1 or args.epochs < 1 or args.ddp < 1 or args.embedding_dim < 1:
        fail("--batch_size, --epochs, --ddp and --embedding_dim must be >= 1")
    if args.threads <= 0:
        args.threads = max(1, len(os.sched_getaffinity(0)) // args.ddp)
    args.cuda = args.device.startswith("cuda")
    if not args.cuda and args.device != "cpu":
        fail("--device must be cpu, cuda or cuda:N, got %r" % args.device)
    if args.cuda and args.ddp > 1:
        fail("--device cuda runs one process: --ddp is for the CPU")
    args.bag = args.tables == "bag" or (args.tables == "auto" and args.cuda)
    return args


# ---------------------------------------------------------------------------------------------------------
# Threads and BLAS.

def set_thread_environment(threads):
    """Before torch is imported: every thread pool torch may use gets `threads`."""
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)


def use_openmp_blas():
    """Re-executes this script with Debian's OpenMP OpenBLAS first on the library path when it is installed and
    libblas.so.3 resolves elsewhere (Debian's alternative prefers the pthread build, whose threads would compete
    with torch's OpenMP pool). Its threads then follow torch.set_num_threads. Children inherit the path."""
    import sysconfig
    directory = "/usr/lib/%s/openblas-openmp" % (sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu")
    if not os.path.exists(os.path.join(directory, "libblas.so.3")):
        log("note: libopenblas0-openmp is not installed; torch uses the system libblas.so.3")
        return
    current = os.path.realpath("/usr/lib/%s/libblas.so.3" % (sysconfig.get_config_var("MULTIARCH") or ""))
    paths = os.environ.get("LD_LIBRARY_PATH", "").split(":")
    if current.startswith(directory + "/") or directory in paths:
        return
    os.environ["LD_LIBRARY_PATH"] = ":".join([directory] + [p for p in paths if p])
    os.execv(sys.executable, [sys.executable] + sys.argv)


def import_torch(threads):
    global torch
    import torch as t  # noqa: E402 (after set_thread_environment)
    torch = t
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already set in this process
    return blas_setup(threads)


def blas_setup(threads):
    """Finds the BLAS torch loaded, forces its thread count, and returns a description for the report."""
    paths = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split()
            if len(parts) >= 6 and ("blas" in parts[5] or "mkl" in parts[5]):
                paths.add(parts[5])
    info = {"blas": "unknown", "blas_threads": 0}
    openblas = sorted(p for p in paths if "libopenblas" in p)
    if openblas:
        lib = ctypes.CDLL(openblas[0])
        parallel = {0: "sequential", 1: "pthread", 2: "openmp"}.get(lib.openblas_get_parallel(), "?")
        lib.openblas_set_num_threads(ctypes.c_int(threads))
        got = lib.openblas_get_num_threads()
        info = {"blas": "openblas-%s" % parallel, "blas_threads": got}
        if parallel != "sequential" and got != threads:
            log("warning: OpenBLAS (%s) runs %d threads, not the %d asked for" % (parallel, got, threads))
    elif any("mkl" in p for p in paths):
        info = {"blas": "mkl", "blas_threads": threads}
    elif any("/blas/libblas.so" in p for p in paths):
        info = {"blas": "reference", "blas_threads": 1}
        log("warning: torch uses the netlib reference BLAS (libblas.so.3 -> %s), about 10x slower than OpenBLAS: "
            "apt-get install libopenblas0-openmp" % sorted(paths)[0])
    return info


def matmul_gflops(seconds=0.2, device=None):
    a = torch.randn(4096, 512, device=device)
    b = torch.randn(512, 256, device=device)
    a @ b
    sync(device)
    count, start = 0, time.perf_counter()
    while True:
        a @ b
        count += 1
        sync(device)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return 2.0 * 4096 * 512 * 256 * count / elapsed / 1e9


def sync(device):
    """Waits for the device's queued work (a no-op on the CPU): before every timer read on a GPU."""
    if device is not None:
        torch.cuda.synchronize(device)


def on(tensor, device):
    """`tensor` on `device` (None: where it is)."""
    return tensor if device is None else tensor.to(device)


def cuda_setup(args):
    """--device cuda: the device (failing when torch has none), fp32 matmuls unless --allow_tf32; its description."""
    if not torch.cuda.is_available():
        fail("--device %s: torch %s sees no CUDA device" % (args.device, torch.__version__), code=1)
    device = torch.device(args.device)
    torch.cuda.set_device(device)
    torch.backends.cuda.matmul.allow_tf32 = args.allow_tf32
    torch.backends.cudnn.allow_tf32 = args.allow_tf32
    return device, {"device": args.device, "gpu": torch.cuda.get_device_name(device), "tf32": args.allow_tf32}


# ---------------------------------------------------------------------------------------------------------
# Data: Criteo TSV -> row ids, dense inputs, labels (cached as .npy).

HEX_VALUE = np.full(256, 255, dtype=np.uint64)
for _c in range(10):
    HEX_VALUE[ord("0") + _c] = _c
for _c in range(6):
    HEX_VALUE[ord("a") + _c] = 10 + _c
    HEX_VALUE[ord("A") + _c] = 10 + _c


def bad_line(path, line_number, problem):
    fail("%s:%d: %s" % (path, line_number, problem), code=1)


def parse_integers(column, numbers, path):
    """Decimal integer column (bytes) -> (int64 values, missing mask)."""
    arr = np.array(column)
    missing = arr == b""
    arr[missing] = b"0"
    try:
        return arr.astype(np.int64), missing
    except ValueError:
        for i, v in enumerate(column):
            try:
                if v:
                    int(v)
            except ValueError:
                bad_line(path, numbers[i], "integer feature %r is not an integer" % v[:20].decode(errors="replace"))
        raise


def parse_hex(column, numbers, path):
    """Hex token column (bytes, <= 16 digits) -> uint64 tokens, MISSING_TOKEN when empty."""
    def bad_token(i):
        token = column[i][:20].decode(errors="replace")
        bad_line(path, numbers[i], "categorical feature %r is not a hex token" % token)

    arr = np.array(column)
    if arr.dtype.itemsize > 16:
        bad_token(int(np.argmax(np.char.str_len(arr) > 16)))
    lengths = np.char.str_len(arr)
    chars = np.zeros((len(arr), 16), dtype=np.uint8)
    raw = arr.view(np.uint8).reshape(len(arr), arr.dtype.itemsize)
    chars[:, :raw.shape[1]] = raw
    value = np.zeros(len(arr), dtype=np.uint64)
    for position in range(16):
        inside = position < lengths
        digit = HEX_VALUE[chars[:, position]]
        if np.any(inside & (digit == 255)):
            bad_token(int(np.argmax(inside & (digit == 255))))
        value = np.where(inside, (value << np.uint64(4)) | digit, value)
    value[lengths == 0] = MISSING_TOKEN
    return value


def integer_buckets(values, missing):
    """worker/data/feature_map.h IntegerBucket: 0 for x <= 0, else 1 + floor(log2 x) (the bit length)."""
    bucket = np.zeros(len(values), dtype=np.int64)
    v = np.where(values > 0, values, 0)
    while np.any(v > 0):
        bucket += v > 0
        v >>= 1
    bucket[missing] = MISSING_BUCKET
    return bucket


def parse_file(path, chunk_lines=200000):
    """Returns (tokens [N, 39] int64/uint64 as uint64, dense [N, 13] float32, labels [N] float32, lines [N])."""
    tokens, dense, labels, line_index = [], [], [], []
    rows, numbers = [], []

    def flush():
        if not rows:
            return
        cols = list(zip(*rows))
        label = np.array(cols[0])
        bad = (label != b"0") & (label != b"1")
        if np.any(bad):
            i = int(np.argmax(bad))
            bad_line(path, numbers[i], "label %r is not 0 or 1" % cols[0][i][:20].decode(errors="replace"))
        labels.append((label == b"1").astype(np.float32))
        t = np.empty((len(rows), FIELDS), dtype=np.uint64)
        d = np.empty((len(rows), INTEGER_FIELDS), dtype=np.float32)
        for j in range(INTEGER_FIELDS):
            values, missing = parse_integers(cols[1 + j], numbers, path)
            t[:, j] = integer_buckets(values, missing).astype(np.uint64)  # -1 wraps: still a distinct token
            d[:, j] = np.where(missing | (values <= 0), 0.0, np.log1p(np.maximum(values, 0).astype(np.float64)))
        for f in range(CATEGORICAL_FIELDS):
            t[:, INTEGER_FIELDS + f] = parse_hex(cols[1 + INTEGER_FIELDS + f], numbers, path)
        tokens.append(t)
        dense.append(d)
        line_index.append(np.array(numbers, dtype=np.int64) - 1)
        rows.clear()
        numbers.clear()

    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            line = line.rstrip(b"\n")
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                continue  # blank lines are skipped but keep their index (worker/data/record_reader.cc)
            cols = line.split(b"\t")
            if len(cols) != COLUMNS:
                bad_line(path, number, "expected %d tab-separated columns, found %d" % (COLUMNS, len(cols)))
            rows.append(cols)
            numbers.append(number)
            if len(rows) >= chunk_lines:
                flush()
    flush()
    if not labels:
        fail("%s holds no examples" % path, code=1)
    return np.concatenate(tokens), np.concatenate(dense), np.concatenate(labels), np.concatenate(line_index)


def file_key(path):
    st = os.stat(path)
    return "%s:%d:%d" % (os.path.abspath(path), st.st_size, st.st_mtime_ns)


def remove_stale_caches(base, key, train):
    """Deletes the caches of earlier versions of the same training file (they would never be read again)."""
    for entry in os.listdir(base):
        meta = os.path.join(base, entry, "meta.json")
        if entry == key or not os.path.exists(meta):
            continue
        try:
            with open(meta) as f:
                cached_train = json.load(f)["train"].rsplit(":", 2)[0]
        except (OSError, ValueError, KeyError):
            continue
        if cached_train == os.path.abspath(train):
            shutil.rmtree(os.path.join(base, entry), ignore_errors=True)


ARRAYS = ("train_ids", "train_dense", "train_labels", "train_lines", "test_ids", "test_dense", "test_labels")


def load_data(args):
    """The parsed, id-mapped arrays of --train and --test (from the cache when it is current)."""
    stamp = "v%d|%s|%s" % (CACHE_VERSION, file_key(args.train), file_key(args.test))
    key = hashlib.sha1(stamp.encode()).hexdigest()[:16]
    base = args.cache_dir or os.path.join(os.path.dirname(os.path.abspath(args.train)), ".torch_peer_cache")
    cache = os.path.join(base, key)
    if os.path.exists(os.path.join(cache, "meta.json")):
        with open(os.path.join(cache, "meta.json")) as f:
            meta = json.load(f)
        data = {name: np.load(os.path.join(cache, name + ".npy"), mmap_mode="r") for name in ARRAYS}
        data["rows"] = meta["rows"]
        return data, cache, True
    start = time.perf_counter()
    train_tokens, train_dense, train_labels, train_lines = parse_file(args.train)
    test_tokens, test_dense, test_labels, _ = parse_file(args.test)
    # One row per (slot, token) over both splits: slot s's tokens get rows offset[s] ...
    n_train = len(train_tokens)
    train_ids = np.empty(train_tokens.shape, dtype=np.int64)
    test_ids = np.empty(test_tokens.shape, dtype=np.int64)
    offset = 0
    for s in range(FIELDS):
        uniq, inverse = np.unique(np.concatenate([train_tokens[:, s], test_tokens[:, s]]), return_inverse=True)
        train_ids[:, s] = inverse[:n_train] + offset
        test_ids[:, s] = inverse[n_train:] + offset
        offset += len(uniq)
    data = {"train_ids": train_ids, "train_dense": train_dense, "train_labels": train_labels,
            "train_lines": train_lines, "test_ids": test_ids, "test_dense": test_dense, "test_labels": test_labels,
            "rows": int(offset)}
    log("parsed %d train + %d test examples, %d rows, in %.1f s" % (n_train, len(test_ids), offset,
                                                                     time.perf_counter() - start))
    try:
        tmp = cache + ".tmp%d" % os.getpid()
        os.makedirs(tmp, exist_ok=True)
        for name in ARRAYS:
            np.save(os.path.join(tmp, name + ".npy"), data[name])
        with open(os.path.join(tmp, "meta.json"), "w") as f:
            json.dump({"rows": int(offset), "train": file_key(args.train), "test": file_key(args.test)}, f)
        try:
            os.rename(tmp, cache)
        except OSError:  # another process cached it first
            shutil.rmtree(tmp, ignore_errors=True)
        remove_stale_caches(base, key, args.train)
    except OSError as e:
        log("warning: cannot cache the parsed arrays in %s: %s" % (base, e))
    return data, cache, False


# ---------------------------------------------------------------------------------------------------------
# The model (worker/model.h).

def make_model(args, rows, dense_dim, sparse=True):
    """The model, built and initialized on the CPU. `sparse`: the tables' gradients. With --device cuda the tables
    are nn.EmbeddingBag (sum) rather than nn.Embedding: same shapes, same initial draws."""
    nn = torch.nn

    class Mlp(nn.Module):
        """Layers y = x W + b (W: inputs x outputs, as Kestrel's row-major layout), ReLU between layers and after
        the last with relu_last; weights and biases Uniform(-0.05, 0.05) (model.cc Tables())."""

        def __init__(self, inputs, widths, relu_last):
            super().__init__()
            self.relu_last = relu_last
            self.weights = nn.ParameterList()
            self.biases = nn.ParameterList()
            for outputs in widths:
                self.weights.append(nn.Parameter(torch.empty(inputs, outputs).uniform_(-0.05, 0.05)))
                self.biases.append(nn.Parameter(torch.empty(outputs).uniform_(-0.05, 0.05)))
                inputs = outputs

        def forward(self, x):
            last = len(self.weights) - 1
            for i, (w, b) in enumerate(zip(self.weights, self.biases)):
                x = torch.addmm(b, x, w)
                if i < last or self.relu_last:
                    x = torch.relu(x)
            return x

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            kind = args.model
            self.fm = kind in ("fm", "deepfm")
            self.dlrm = kind == "dlrm"
            self.deep = kind in ("deepfm", "wd", "dlrm")
            self.dense_dim = dense_dim if self.deep else 0
            # Both constructors draw Normal(0, 1) for the whole table first, so either kind leaves the generator
            # (and every later initial value) the same.
            self.bag = args.bag
            table = (lambda n, d: nn.EmbeddingBag(n, d, mode="sum", sparse=sparse)) if self.bag else \
                (lambda n, d: nn.Embedding(n, d, sparse=sparse))
            self.wide = table(rows, 1)
            nn.init.zeros_(self.wide.weight)
            self.emb = None
            if self.fm or self.deep:
                self.emb = table(rows, args.embedding_dim)
                nn.init.normal_(self.emb.weight, 0.0, args.emb_init_stddev)
            self.bias = nn.Parameter(torch.empty(1).uniform_(-0.05, 0.05))
            dim = args.embedding_dim
            self.top = self.bottom = None
            if self.dlrm:
                vectors = FIELDS + (1 if self.dense_dim else 0)
                iu = torch.triu_indices(vectors, vectors, offset=1)  # (0,1), (0,2), ..., (1,2), ...: Kestrel's order
                self.vectors = vectors
                self.register_buffer("pairs", iu[0] * vectors + iu[1], persistent=False)
                self.top = Mlp((dim if self.dense_dim else 0) + iu.shape[1], args.hidden + [1], relu_last=False)
                if self.dense_dim:
                    self.bottom = Mlp(self.dense_dim, args.bottom_hidden + [dim], relu_last=True)
            elif self.deep:
                self.top = Mlp(FIELDS * dim + self.dense_dim, args.hidden + [1], relu_last=False)

        def dense_parameters(self):
            return [p for name, p in self.named_parameters() if not name.startswith(("wide.", "emb."))]

        def forward(self, ids, dense):
            n = ids.shape[0]
            if self.bag:  # one bag of the example's 39 rows; then one bag per row
                logit = self.bias + self.wide(ids).squeeze(1)
            else:
                logit = self.bias + self.wide(ids).sum(dim=(1, 2))
            if self.emb is None:
                return logit
            if self.bag:
                x = self.emb(ids.reshape(-1, 1)).view(n, ids.shape[1], -1)
            else:
                x = self.emb(ids)  # [n, 39, dim]; every Criteo slot's value is 1
            if self.fm:
                s = x.sum(dim=1)
                logit = logit + 0.5 * (s * s - (x * x).sum(dim=1)).sum(dim=1)
            if self.dlrm:
                if self.bottom is not None:
                    b = self.bottom(dense)
                    v = torch.cat([b.unsqueeze(1), x], dim=1)
                else:
                    v = x
                # All dots, then the pairs i < j (index_select: faster than z[:, i, j] both ways).
                z = torch.bmm(v, v.transpose(1, 2)).reshape(n, -1).index_select(1, self.pairs)
                top_in = torch.cat([b, z], dim=1) if self.bottom is not None else z
                logit = logit + self.top(top_in).squeeze(1)
            elif self.deep:
                top_in = x.reshape(n, -1)
                if self.dense_dim:
                    top_in = torch.cat([top_in, dense], dim=1)
                logit = logit + self.top(top_in).squeeze(1)
            return logit

    return Net()


def make_optimizer(args, table, params, sparse):
    opt = getattr(args, table + "_opt")
    lr = getattr(args, table + "_lr")
    eps = getattr(args, table + "_epsilon") or 1e-8
    if opt == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if opt == "adagrad":
        return torch.optim.Adagrad(params, lr=lr, eps=eps,
                                   initial_accumulator_value=getattr(args, table + "_initial_accumulator") or 0.1)
    betas = (getattr(args, table + "_beta1") or 0.9, getattr(args, table + "_beta2") or 0.999)
    if sparse:
        return torch.optim.SparseAdam(params, lr=lr, betas=betas, eps=eps)
    return torch.optim.Adam(params, lr=lr, betas=betas, eps=eps)


# ---------------------------------------------------------------------------------------------------------
# Metrics (common/evaluation.h): mean logloss, exact AUC with ties counted half.

def exact_auc(scores, labels):
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels) > 0.5
    positives = int(labels.sum())
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        return 0.5
    order = np.argsort(scores, kind="mergesort")
    sorted_scores = scores[order]
    # Average rank (1-based) of each group of equal scores.
    starts = np.flatnonzero(np.r_[True, sorted_scores[1:] != sorted_scores[:-1]])
    ends = np.r_[starts[1:], len(scores)]
    group_rank = (starts + 1 + ends) / 2.0
    ranks = np.empty(len(scores), dtype=np.float64)
    ranks[order] = np.repeat(group_rank, ends - starts)
    return float((ranks[labels].sum() - positives * (positives + 1) / 2.0) / (positives * negatives))


def evaluate(model, data, args, device=None):
    ids = data["test_ids"]
    dense = data["test_dense"]
    labels = data["test_labels"]
    n = len(labels) if args.eval_max_examples <= 0 else min(len(labels), args.eval_max_examples)
    probs = np.empty(n, dtype=np.float32)
    loss = 0.0
    step = 8192
    with torch.no_grad():
        for s in range(0, n, step):
            e = min(n, s + step)
            logit = model(on(torch.from_numpy(np.array(ids[s:e])), device),
                          on(torch.from_numpy(np.array(dense[s:e])), device))
            y = on(torch.from_numpy(np.array(labels[s:e])), device)
            loss += float(torch.nn.functional.binary_cross_entropy_with_logits(logit, y, reduction="none")
                          .double().sum())
            probs[s:e] = torch.sigmoid(logit).cpu().numpy()
    return n, exact_auc(probs, labels[:n]), loss / n


# ---------------------------------------------------------------------------------------------------------
# Training: one process, or rank `rank` of `world` under DDP.

def shard(data, rank, world):
    lines = np.asarray(data["train_lines"])
    mine = np.flatnonzero(lines % world == rank)
    counts = [int(np.count_nonzero(lines % world == r)) for r in range(world)]
    return mine, min(counts)


def train_variant(args, rows, ids, dense, labels, steps, per_epoch, sparse, device, world, rank, dist):
    """Trains a fresh model (seeded, so every variant starts from the same values) for `steps` steps on the
    tensors (on `device` when given); returns its timing and the model."""
    torch.manual_seed(args.seed)
    net = make_model(args, rows, 0 if args.no_dense_inputs else INTEGER_FIELDS, sparse=sparse)
    if device is not None:
        net = net.to(device)  # Module.to moves the parameters in place: the optimizers below see the device copies
    dense_params = net.dense_parameters()
    optimizers = [make_optimizer(args, "wide", [net.wide.weight], sparse=sparse),
                  make_optimizer(args, "dense", dense_params, sparse=False)]
    if net.emb is not None:
        optimizers.append(make_optimizer(args, "emb", [net.emb.weight], sparse=sparse))
    model = net
    if world > 1:
        # Rank 0's initial values are broadcast; gradients, sparse ones included, are averaged over the ranks.
        model = torch.nn.parallel.DistributedDataParallel(net, broadcast_buffers=False)
    batch = args.batch_size
    if dist is not None:
        dist.barrier()
    sync(device)
    start = time.perf_counter()
    window_loss, window_examples = 0.0, 0
    for step in range(steps):
        s = (step % per_epoch) * batch
        y = labels[s:s + batch]
        logit = model(ids[s:s + batch], dense[s:s + batch])
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, y, reduction="sum")
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        # The sparse tables keep the batch's sum; the dense tensor takes its mean (worker/model.h).
        for p in dense_params:
            p.grad.div_(batch)
        for opt in optimizers:
            opt.step()
        if args.log_every > 0:
            window_loss += float(loss)
            window_examples += batch
            if (step + 1) % args.log_every == 0 and rank == 0:
                log("step %d/%d: train logloss %.5f" % (step + 1, steps, window_loss / window_examples))
                window_loss, window_examples = 0.0, 0
    if dist is not None:
        dist.barrier()
    sync(device)
    seconds = time.perf_counter() - start
    return {"sparse_grad": "sparse" if sparse else "dense", "seconds": seconds,
            "examples_per_second": steps * batch * world / seconds if seconds > 0 else 0.0, "net": net}


def train(rank, world, args, port, results):
    if torch is None:
        import_torch(args.threads)
    dist = None
    if world > 1:
        import torch.distributed as dist
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group("gloo", rank=rank, world_size=world)
    blas = blas_setup(args.threads)
    data, _, _ = load_data(args)
    mine, smallest = shard(data, rank, world)
    per_epoch = smallest // args.batch_size
    if per_epoch == 0:
        fail("a process's share of the training data (%d lines of %d processes) is smaller than one batch of %d"
             % (smallest, world, args.batch_size), code=1)
    steps = per_epoch * args.epochs
    if args.max_steps > 0:
        steps = min(steps, args.max_steps)
    # Preprocessing, before the clock: this process's shard as contiguous tensors.
    ids = torch.from_numpy(np.ascontiguousarray(data["train_ids"][mine]))
    dense = torch.from_numpy(np.ascontiguousarray(data["train_dense"][mine]))
    labels = torch.from_numpy(np.ascontiguousarray(data["train_labels"][mine]))

    device, extra = cuda_setup(args) if args.cuda else (None, {})
    if args.model not in ("deepfm", "wd", "dlrm"):  # no MLP: no dense inputs
        dense = torch.zeros(len(mine), 0)
    if device is not None:  # the whole shard on the device once: a step's batch is a slice there
        ids, dense, labels = on(ids, device), on(dense, device), on(labels, device)
    gflops = matmul_gflops(device=device) if rank == 0 else 0.0
    variants = []
    for sparse in {"true": (True,), "false": (False,), "both": (True, False)}[args.sparse_grad]:
        variant = train_variant(args, data["rows"], ids, dense, labels, steps, per_epoch, sparse, device, world,
                                rank, dist)
        if rank == 0:
            n, auc, logloss = evaluate(variant.pop("net"), data, args, device)
            variant.update(auc=auc, logloss=logloss, eval_examples=n)
            variants.append(variant)
        if device is not None:
            torch.cuda.empty_cache()
    if rank == 0:
        best = max(variants, key=lambda v: v["examples_per_second"])
        batch = args.batch_size
        result = {
            "model": args.model, "processes": world, "threads": args.threads,
            "examples": steps * batch * world, "seconds": best["seconds"],
            "examples_per_second": best["examples_per_second"],
            "auc": best["auc"], "logloss": best["logloss"], "steps": steps, "batch_size": batch, "epochs": args.epochs,
            "eval_examples": best["eval_examples"], "rows": data["rows"], "blas": blas["blas"],
            "blas_threads": blas["blas_threads"], "matmul_gflops": gflops, "torch": torch.__version__,
        }
        if args.cuda or args.sparse_grad != "true" or args.tables != "auto":  # else the fields it always printed
            result.update(extra or {"device": "cpu"}, tables="bag" if args.bag else "embedding",
                          sparse_grad=best["sparse_grad"], variants=variants)
        if results is not None:
            results.put(result)
        else:
            emit(result)
    if dist is not None:
        dist.barrier()
        dist.destroy_process_group()


def emit(result):
    for k, v in result.items():
        if isinstance(v, float) and not math.isfinite(v):
            result[k] = "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")  # proto3 JSON
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    args = parse_args()
    if args.blas == "openmp" and not args.cuda:
        use_openmp_blas()
    set_thread_environment(args.threads)
    import_torch(args.threads)
    _, cache, cached = load_data(args)  # parse once, before any process starts its clock
    log("data: %s (%s)" % (cache, "cached" if cached else "parsed now"))
    if args.ddp == 1:
        train(0, 1, args, 0, None)
        return
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    mp.spawn(train, args=(args.ddp, args, free_port(), results), nprocs=args.ddp, join=True)
    emit(results.get())


if __name__ == "__main__":
    main()
