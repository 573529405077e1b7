"""kestrel.worker: a Python process as a training worker of a Kestrel cluster job.

A Python worker takes the command line kestrel_worker takes (what `kestrel local --worker_cmd`, deploy/k8s, Slurm and
MPI launchers pass: --config, --scheduler, --rank, --job_id, --tls_ca/--tls_cert/--tls_key/--tls_crl, --train_files,
--test_files, --metrics_out...; the launcher's environment fills in what they leave out, as for the C++ worker),
joins the job through the C++ session (kestrel.Worker: registration, heartbeats, generations, rollbacks, leaving)
and trains its rank's batches, in the job's data order, under the job's consistency mode:

    parser = argparse.ArgumentParser(); kestrel.worker.add_flags(parser); args = parser.parse_args()
    worker = kestrel.worker.join(args)
    ...build the model on worker.client...
    kestrel.worker.train(worker, step, on_pass=load_state)   # step(clock, batch) pulls, computes, pushes
    if worker.rank == 0: ...evaluate...
    worker.leave()

train() waits for each iteration's turn, runs step, and reports it done; when the job rolls back (a server died) or
is rescaled, it recovers: the next pass starts from the checkpoint's clock with the reader where the job left it,
and on_pass(worker) runs first (dense state to reload, a collective group to form again).
"""
import argparse
import os
import sys

import kestrel


def seconds(text):
    """A duration flag's value in seconds: a plain number of seconds, or kestrel_worker's form ("90s", "10m",
    "1h30m", "250ms": absl::ParseDuration, through kestrel.duration_seconds), what the launchers pass."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return kestrel.duration_seconds(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def add_flags(parser, export_dir=True):
    """Adds kestrel_worker's cluster flags to an argparse parser (each defaults to "not given"). `export_dir`: also
    accept --export_dir (which `kestrel local --export` passes a Python worker) and ignore it."""
    parser.add_argument("--config", help="job config (protobuf text format, proto/job.proto)")
    parser.add_argument("--scheduler", default="", help="the scheduler's host:port (else the environment's)")
    parser.add_argument("--rank", type=int, default=-1, help="worker rank (else the environment's, else any free)")
    parser.add_argument("--job_id", default="kestrel", help="the job's id (default kestrel)")
    parser.add_argument("--tls_ca", default="", help="CA bundle for mutual TLS")
    parser.add_argument("--tls_cert", default="", help="this worker's certificate")
    parser.add_argument("--tls_key", default="", help="this worker's key")
    parser.add_argument("--tls_crl", default="", help="a revocation list (PEM CRL) peers are checked against")
    parser.add_argument("--insecure", action="store_true", help="plaintext even off loopback")
    parser.add_argument("--train_files", default="", help="comma-separated training files (override the config's)")
    parser.add_argument("--test_files", default="", help="comma-separated test files (override the config's)")
    parser.add_argument("--metrics_out", default="", help="append JSON-lines records (proto/records.proto) here")
    parser.add_argument("--metrics_append", action="store_true", help="(kestrel_worker's; records always append)")
    parser.add_argument("--recovery_timeout", type=seconds, default=600.0,
                        help="how long to wait for a rollback after training stopped (seconds or 10m; default 600)")
    parser.add_argument("--scheduler_timeout", type=seconds, default=60.0,
                        help="how long to retry registering and wait for the job to form (seconds or 1m; default 60)")
    # Accepted for command-line compatibility with kestrel_worker; a Python worker computes with PyTorch.
    for name in ("--device", "--compute_threads", "--tensorboard_dir", "--metrics_port", "--metrics_port_file",
                 "--metrics_host", "--rank_offset"):
        parser.add_argument(name, default=None, help=argparse.SUPPRESS)
    if export_dir:
        parser.add_argument("--export_dir", default="", help=argparse.SUPPRESS)


def is_cluster_worker(args):
    """True when the command line or the environment names a scheduler (else a script runs in process)."""
    return bool(getattr(args, "scheduler", "") or os.environ.get("KESTREL_SCHEDULER") or os.environ.get("TF_CONFIG")
                or os.environ.get("DMLC_PS_ROOT_URI"))


def join(args, address=""):
    """Joins the job as kestrel_worker would with these flags (add_flags); `address`: what to register as this
    worker's address (e.g. a rendezvous it hosts)."""
    if not args.config:
        raise ValueError("give --config (the job's config, protobuf text format)")
    with open(args.config) as f:
        config = f.read()
    split = lambda s: [x for x in s.split(",") if x]
    return kestrel.Worker(config, scheduler=args.scheduler, rank=args.rank, job_id=args.job_id,
                          tls_ca=args.tls_ca, tls_cert=args.tls_cert, tls_key=args.tls_key, insecure=args.insecure,
                          address=address, train_files=split(args.train_files), test_files=split(args.test_files),
                          scheduler_timeout=args.scheduler_timeout, recovery_timeout=args.recovery_timeout,
                          tls_crl=args.tls_crl)


def exit_code(error):
    """The exit code kestrel_worker would end with for `error` (a launcher restarts on 1 and 3, not on 2): 2 bad
    flags, config or data; 3 the scheduler refused this worker; 0 a rescale left it out; 1 anything else."""
    code = getattr(error, "code", None)
    if isinstance(error, (ValueError, OSError)) or code in ("INVALID_ARGUMENT", "NOT_FOUND"):
        return 2
    if code == "FAILED_PRECONDITION":
        return 3
    if code == "OUT_OF_RANGE":
        return 0
    return 1


class RollbackNeeded(RuntimeError):
    """Raised by a step (or on_pass) whose failure only a rollback of the whole job repairs (e.g. a broken
    allreduce group: a peer died holding dense state nobody else can rebuild). train() asks the scheduler for
    the rollback and recovers."""


def train(worker, step, on_pass=None):
    """Runs this worker's iterations: for each batch of its share, waits for the consistency mode's permission,
    calls step(clock, batch) (which pulls and pushes at `clock` through worker.client), and advances. Recovers
    after a rollback or rescale; on_pass(worker) runs at the start of every pass. Returns True when every
    iteration is done and every worker finished them, False when a rescale left this worker out. A failure that
    is this worker's own is raised."""
    while True:
        try:
            if on_pass is not None:
                on_pass(worker)
            while (item := worker.next_batch()) is not None:
                clock, batch = item
                worker.wait_to_start(clock)
                step(clock, batch)
                worker.advance(clock + 1)
            worker.wait_all_finished()
            return True
        except RuntimeError as error:  # KestrelError, RollbackNeeded, a collective's error
            if isinstance(error, RollbackNeeded):
                print(f"kestrel: worker {worker.id}: {error}; asking the job to roll back", file=sys.stderr, flush=True)
                # The scheduler takes a reason of at most 1024 bytes.
                worker.request_rollback(str(error).encode()[:1000].decode(errors="ignore"))
            try:
                if not worker.recover(str(error)):
                    return False
            except kestrel.KestrelError as recovering:
                if recovering.code == "ABORTED":  # no rollback came: the failure was this worker's own
                    raise error
                raise
            print(f"kestrel: worker {worker.id} continues from clock {worker.start_clock} (rank {worker.rank}, "
                  f"generation {worker.generation})", file=sys.stderr, flush=True)
