"""DeepFM written in PyTorch on Kestrel's tables: the built-in DeepFM (worker/model.h) as a PyTorch module.

The embedding and wide tables live on the servers (kestrel.torch.EmbeddingBagCollection: Adagrad and FTRL run
there); the bias and MLP are a dense table on the servers (kestrel.torch.ServerDense, Adam). Data comes from the
job's own reader (kestrel.Reader), so keys, fields and dense inputs are the C++ worker's.

    python3 examples/torch/deepfm.py --config deploy/jobs/deepfm.pbtxt --train FILE --test FILE [--servers 2]
    scripts/kestrel local --config deploy/jobs/deepfm.pbtxt --data DIR --worker_cmd "python3 examples/torch/deepfm.py"

Prints the test AUC. With in-process servers it is one process. As a cluster worker (a scheduler named by
--scheduler or the launcher's environment, as for kestrel_worker) it trains its share of the job under the job's
consistency mode, recovers from rollbacks, and rank 0 evaluates; --device puts the model on a GPU (auto: CUDA when
PyTorch has one; the tables' rows come through pinned memory); --dense allreduce keeps the bias and MLP on the
workers, averaged by a gloo allreduce each step (kestrel.torch.AllreduceDense). The gradients follow the built-in
model: sparse rows get the sum over the batch, the dense tensor the mean.
"""
import argparse
import json
import sys
import time

import numpy as np
import torch

import kestrel
from kestrel import torch as ktorch
from kestrel import worker as kworker


def create_tables(client, field_tables, dim, seed=1):
    """The built-in model's sparse tables: "wide" (FTRL) and every embedding table the fields look up (Adagrad),
    with the built-in defaults (a schema's own tables take the model's, as worker/data/schema.h says)."""
    client.create_table(f'name: "wide" dim: 1 seed: {seed} initializer {{ type: ZEROS }} '
                        'optimizer { type: FTRL learning_rate: 0.1 ftrl_beta: 1 }')
    for i, table in enumerate(sorted(set(field_tables), key=lambda t: (t != "emb", t))):
        table_seed = seed + 1 if table == "emb" else seed + 2 + i
        client.create_table(f'name: "{table}" dim: {dim} seed: {table_seed} initializer {{ type: NORMAL stddev: 0.01 }} '
                            'optimizer { type: ADAGRAD learning_rate: 0.005 initial_accumulator: 0.1 }')


class DeepFM(torch.nn.Module):
    """logit = bias + wide + FM + MLP over the fields' pooled embeddings (and dense inputs), plus `extra_vectors`
    more embedding-sized vectors per example that a subclass's embed() adds to the FM and the MLP."""

    def __init__(self, client, fields, field_tables, dense_dim, dim, hidden, extra_vectors=0):
        super().__init__()
        self.fields, self.dim = fields, dim
        self.emb = ktorch.EmbeddingBagCollection(client, {t: dim for t in field_tables},
                                                 {f: (t, "sum") for f, t in zip(fields, field_tables)})
        self.wide = ktorch.EmbeddingBagCollection(client, {"wide": 1}, {f: ("wide", "sum") for f in fields})
        self.bias = torch.nn.Parameter(torch.zeros(1))
        widths = [(len(fields) + extra_vectors) * dim + dense_dim] + hidden + [1]
        self.mlp = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        # The MLP's matrix products in bfloat16 (torch.autocast; the weights, their updates and everything else
        # stay float32): oneDNN's AVX512-BF16 kernels where the CPU has them. Default: off (float32 throughout).
        self.mlp_bf16 = False

    def dense_parameters(self):
        # The built-in layout: [bias, each layer's W (inputs x outputs, row-major), b].
        yield self.bias
        for layer in self.mlp:
            yield layer.weight  # [outputs, inputs]: a different order, the same count (the servers only add)
            yield layer.bias

    def embed(self, feats, clock):
        """The fields' pooled embeddings and the extra vectors: [B, F + extra, D]."""
        return self.emb.stack(feats, clock, self.fields)

    def forward(self, batch, clock):
        feats = {f: batch["features"][f] for f in self.fields}
        stacked = self.embed(feats, clock)  # [B, F + extra, D]
        wide = self.wide.stack(feats, clock, self.fields).sum((1, 2))
        s = stacked.sum(1)
        fm = 0.5 * (s * s - (stacked * stacked).sum(1)).sum(1)
        h = torch.cat([stacked.reshape(len(stacked), -1), batch["dense"]], 1)  # a tensor on the model's device
        with torch.autocast(h.device.type, dtype=torch.bfloat16, enabled=self.mlp_bf16):
            for i, layer in enumerate(self.mlp):
                h = layer(h)
                if i + 1 < len(self.mlp):
                    h = torch.relu(h)
        return self.bias + wide + fm + h[:, 0].float()


def evaluate(model, config, clock, files=None):
    """The model's test AUC, logloss and prediction fingerprint on the job's test files (or `files`), reading the
    servers' rows at `clock`."""
    scores, labels = [], []
    reader = kestrel.Reader(config, files=files or [], test=True)
    device = model.bias.device
    with torch.no_grad():
        while (batch := reader.next(4096)) is not None:
            scores.append(torch.sigmoid(model(ktorch.on_device(batch, device), clock)).float().cpu().numpy())
            labels.append(batch["labels"])
    scores, labels = np.concatenate(scores).astype(np.float32), np.concatenate(labels).astype(np.float32)
    return kestrel.auc(labels, scores), kestrel.logloss(labels, scores), kestrel.fingerprint(scores)


def train_and_evaluate(client, model, config, train, test, epochs, batch_size):
    """Trains `model` (its dense part on the servers) on `train` in this process and returns its test AUC on
    `test`."""
    dense = ktorch.ServerDense(client, "dense", list(model.dense_parameters()))
    loss_fn = torch.nn.BCEWithLogitsLoss(reduction="sum")
    clock, examples, start = 0, 0, time.monotonic()
    for epoch in range(epochs):
        reader = kestrel.Reader(config, files=[train], epoch=epoch)
        while (batch := reader.next(batch_size)) is not None:
            batch = ktorch.on_device(batch, model.bias.device)
            clock += 1
            with ktorch.step(client, clock):  # every table's push of the step, together
                dense.pull()
                logits = model(batch, clock)
                loss = loss_fn(logits, batch["labels"])
                loss.backward()  # the sparse rows' gradient sums
                dense.push(grad_scale=1.0 / len(batch["labels"]))  # the dense tensor takes the batch mean
            examples += len(batch["labels"])
        print(f"epoch {epoch + 1}: {clock} steps", flush=True)
    seconds = time.monotonic() - start
    print(f"trained {examples} examples in {seconds:.2f} s: {examples / max(seconds, 1e-9):.0f} examples/s", flush=True)
    dense.pull(clock)
    return evaluate(model, config, clock, [test])[0]


class Progress:
    """The worker's "train" records (proto/records.proto) every log_every_steps iterations, as kestrel_worker
    writes them to --metrics_out (kestrel local shows them)."""

    def __init__(self, worker, path, every):
        self.worker, self.path, self.every = worker, path, every
        self.loss, self.examples, self.start = 0.0, 0, time.monotonic()
        self.steps, self.trained = 0, 0  # in all (steps redone after a rollback included)

    def add(self, clock, loss, examples):
        self.steps += 1
        self.trained += examples
        self.loss += loss
        self.examples += examples
        if (clock + 1) % self.every and clock + 1 != self.worker.total:
            return
        now = time.monotonic()
        record = {"kind": "train", "worker": self.worker.rank, "step": clock + 1, "steps": self.worker.total,
                  "logloss": self.loss / max(1, self.examples),
                  "examples_per_second": self.examples / max(1e-9, now - self.start)}
        if self.path:
            kestrel.write_record(self.path, json.dumps(record))
        self.loss, self.examples, self.start = 0.0, 0, now


def run_worker(model_class, args):
    """A worker of a cluster job: joins it (kestrel.worker), trains its share under the job's consistency mode
    with the dense part on the servers or allreduced among the workers (--dense), and, as rank 0, evaluates."""
    torch.manual_seed(1)
    torch.set_num_threads(int(args.compute_threads or 1))
    rendezvous = ktorch.Rendezvous(scheduler=args.scheduler) if args.dense == "allreduce" else None
    worker = kworker.join(args, address=rendezvous.address if rendezvous else "")
    settings = kestrel.job_settings(worker.config)
    dim = settings["embedding_dim"]
    client = worker.client
    create_tables(client, worker.field_tables, dim)
    model = model_class(client, worker.fields, worker.field_tables, worker.dense_dim, dim, settings["hidden"])
    model.to(ktorch.device_of(args.device))  # --device: auto (CUDA when PyTorch has one), cpu, cuda, cuda:N
    model.mlp_bf16 = args.mlp_bf16
    loss_fn = torch.nn.BCEWithLogitsLoss(reduction="sum")
    progress = Progress(worker, args.metrics_out, settings["log_every_steps"])
    if args.dense == "servers":
        dense = ktorch.ServerDense(client, "dense", list(model.dense_parameters()))
        on_pass = None
    else:
        dense = ktorch.AllreduceDense(worker, rendezvous, "dense_state", list(model.dense_parameters()))
        on_pass = dense.start_pass

    def step(clock, batch):
        n = len(batch["labels"])
        if args.dense == "servers":
            dense.pull(clock)
        batch = ktorch.on_device(batch, model.bias.device)
        loss = loss_fn(model(batch, clock), batch["labels"])
        loss.backward()  # pushes the sparse rows' gradient sums at `clock`
        if args.dense == "servers":
            dense.push(clock, grad_scale=1.0 / max(1, n))
        else:
            dense.step(clock, grad_scale=1.0 / max(1, n))
        if args.clock_log:
            with open(args.clock_log, "a") as f:
                f.write(f"{worker.id} {clock} {worker.generation}\n")
        progress.add(clock, float(loss), n)

    started = time.monotonic()
    if not kworker.train(worker, step, on_pass):
        print(f"worker {worker.id}: a rescale left this worker out", flush=True)
        return
    seconds = time.monotonic() - started
    if args.metrics_out:  # as kestrel_worker's "done" record: training time, evaluation excluded
        kestrel.write_record(args.metrics_out, json.dumps(
            {"kind": "done", "worker": worker.rank, "steps": progress.steps, "examples": progress.trained,
             "seconds": seconds, "examples_per_second": progress.trained / max(1e-9, seconds)}))
    if worker.rank == 0:
        if args.dense == "servers":
            dense.pull(worker.total)
        auc, logloss, fingerprint = evaluate(model, worker.config, worker.total)
        print(f"test AUC {auc:.5f} logloss {logloss:.5f} fingerprint {fingerprint}", flush=True)
        if args.metrics_out:
            kestrel.write_record(args.metrics_out, json.dumps(
                {"kind": "eval", "worker": 0, "step": worker.total, "auc": auc, "logloss": logloss,
                 "fingerprint": fingerprint}))
    worker.leave()


def run(model_class, doc, job_id):
    """The example's command line: a worker of a cluster job when a scheduler is named (flags or the launcher's
    environment, as kestrel_worker); else `model_class` (DeepFM's constructor arguments) trained on in-process
    servers, printing its test AUC."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    kworker.add_flags(parser)
    parser.add_argument("--train", help="in process: the training file")
    parser.add_argument("--test", help="in process: the test file")
    parser.add_argument("--servers", type=int, default=1, help="in process: in-process servers (default 1)")
    parser.add_argument("--epochs", type=int, default=None, help="in process: epochs (default the config's)")
    parser.add_argument("--dense", choices=["servers", "allreduce"], default="servers",
                        help="a cluster's dense weights: on the servers (default) or allreduced among the workers")
    parser.add_argument("--mlp_bf16", action="store_true",
                        help="the MLP's matrix products in bfloat16 (torch.autocast; weights stay float32)")
    parser.add_argument("--clock_log", default="", help="append '<worker id> <clock> <generation>' per step here")
    args = parser.parse_args()
    if kworker.is_cluster_worker(args):
        try:
            return run_worker(model_class, args)
        except (kestrel.KestrelError, ValueError, OSError) as error:
            print(f"worker: {error}", file=sys.stderr, flush=True)
            sys.exit(kworker.exit_code(error))
    if not (args.config and args.train and args.test):
        parser.error("in process, give --config, --train and --test (or --scheduler to join a cluster job)")
    with open(args.config) as f:
        config = f.read()
    torch.manual_seed(1)
    torch.set_num_threads(2)
    client = kestrel.Client.in_process(servers=args.servers, job_id=job_id)
    settings = kestrel.job_settings(config)
    probe = kestrel.Reader(config, files=[args.train])
    create_tables(client, probe.field_tables, settings["embedding_dim"])
    model = model_class(client, probe.fields, probe.field_tables, probe.dense_dim, settings["embedding_dim"],
                        settings["hidden"]).to(ktorch.device_of(args.device))
    model.mlp_bf16 = args.mlp_bf16
    result = train_and_evaluate(client, model, config, args.train, args.test, args.epochs or settings["epochs"],
                                settings["batch_size"])
    print(f"test AUC {result:.5f}")


if __name__ == "__main__":
    run(DeepFM, __doc__, "torch-deepfm")
