"""kestrel.torch.fit: the training loop of a PyTorch model on Kestrel's tables, the same in one process and as a
worker of a cluster job; kestrel.torch.load: an exported model, scored as training evaluated it.

    class Model(torch.nn.Module):              # forward(batch) -> logits [B]; batch: a kestrel.Reader batch
        def __init__(self, client, schema): ...  # creates its tables on `client`, looks them up
                                                 # (EmbeddingBagCollection); schema: the job's fields (Schema)
    if __name__ == "__main__":
        kestrel.torch.fit(Model)           # the command line says where: see fit()

fit() reads the command line kestrel_worker takes. With a scheduler named (flags or the launcher's environment:
`kestrel local --worker_cmd "python3 model.py"`, deploy/), it joins the job and trains its share under the job's
consistency mode, recovering from rollbacks and rescales (kestrel.worker.train); otherwise it trains in this
process on in-process servers (--servers, default 1). Either way each iteration is one kestrel.torch.step: the
module's torch parameters are a dense table on the servers (ServerDense, keeping PyTorch's initialization; Adam
unless `dense_optimizer` says otherwise), the loss is the batch's summed logloss (sparse rows get the sum, the
dense tensor the mean, as the built-in models), and every table's push of the iteration is applied whole or not
at all. forward gets each batch with its dense inputs, labels and weights as tensors on the module's device
(--device: auto, cpu, cuda, cuda:N; the collections pull rows there through pinned memory). It writes the
launcher's records (proto/records.proto: train, eval) to --metrics_out, evaluates on the test files (rank 0),
and with --export_dir exports the model (in one process) for kestrel.torch.load.
"""
import argparse
import importlib
import json
import os
import sys
import time

import numpy as np
import torch

import kestrel
from kestrel import worker as kworker
from kestrel.torch import ServerDense, step

from kestrel._kestrel import PYTHON_MODULE_FILE as MODULE_FILE  # an export's PyTorch part (export/export_format.h)

STATE_FILE = "module.pt"  # beside it: the module's parameters (torch.save of its state_dict)


class Schema:
    """What a model is built for: the job's fields (the Reader batch's feature names), the table each looks up,
    the dense inputs per example, and the config's embedding_dim and hidden widths."""

    def __init__(self, fields, field_tables, dense_dim, embedding_dim, hidden):
        self.fields, self.field_tables, self.dense_dim = list(fields), list(field_tables), int(dense_dim)
        self.embedding_dim, self.hidden = int(embedding_dim), list(hidden)

    @staticmethod
    def of(source, config):
        """The Schema of a kestrel.Reader or kestrel.Worker of the job `config`."""
        settings = kestrel.job_settings(config)
        return Schema(source.fields, source.field_tables, source.dense_dim, settings["embedding_dim"],
                      settings["hidden"])


class Result:
    """What fit() returns: the test figures (rank 0 and in-process runs) and the iterations trained."""

    def __init__(self, auc, logloss, fingerprint, steps):
        self.auc, self.logloss, self.fingerprint, self.steps = auc, logloss, fingerprint, steps

    def __repr__(self):
        return f"Result(auc={self.auc:.5f}, logloss={self.logloss:.5f}, fingerprint={self.fingerprint}, steps={self.steps})"


def _parser():
    parser = argparse.ArgumentParser(description="Trains a PyTorch model on Kestrel (kestrel.torch.fit)")
    kworker.add_flags(parser, export_dir=False)
    parser.add_argument("--servers", type=int, default=1, help="in process: in-process servers (default 1)")
    parser.add_argument("--export_dir", default="",
                        help="export the trained model here: in one process all of it; in a cluster rank 0 writes "
                             "the module's part, and kestrel local --export the tables (default none)")
    return parser


def _seed(config):
    return int(kestrel.job_settings(config)["seed"])


def device_of(name):
    """The torch device --device names: "cpu", "cuda", "cuda:N", or "auto" (CUDA when PyTorch has a GPU, else the
    CPU; also the default). ValueError for a CUDA device this PyTorch cannot use."""
    name = name or "auto"
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device={name}: this PyTorch has no CUDA device (torch.cuda.is_available() is False)")
    return device


def _device_of_module(model):
    """Where `model`'s parameters (else its buffers) are: the CPU for a module with neither."""
    for tensor in list(model.parameters()) + list(model.buffers()):
        return tensor.device
    return torch.device("cpu")


def on_device(batch, device):
    """A Reader batch as fit() hands it to forward: its dense inputs, labels and weights as float32 tensors on
    `device` (copied through pinned memory to a GPU); its features as the reader gave them (the collections
    pull their rows to the module's device)."""
    out = dict(batch)
    for name in ("dense", "labels", "weights"):
        tensor = torch.from_numpy(batch[name])
        out[name] = tensor if device.type == "cpu" else tensor.pin_memory().to(device, non_blocking=True)
    return out


def _records(path, **record):
    if path:
        kestrel.write_record(path, json.dumps(record))


def evaluate(model, config, clock, client, files=()):
    """(AUC, logloss, fingerprint) of `model` on the job's test files (or `files`), reading the rows at `clock`:
    kestrel_worker's figures."""
    scores, labels = [], []
    reader = kestrel.Reader(config, files=list(files), test=True)
    device = _device_of_module(model)
    model.eval()
    with torch.no_grad(), step(client, clock):
        while (batch := reader.next(4096)) is not None:
            scores.append(torch.sigmoid(model(on_device(batch, device))).float().cpu().numpy())
            labels.append(batch["labels"])
    model.train()
    scores, labels = np.concatenate(scores).astype(np.float32), np.concatenate(labels).astype(np.float32)
    return kestrel.auc(labels, scores), kestrel.logloss(labels, scores), kestrel.fingerprint(scores)


class _Loop:
    """One iteration of fit(): a step at `clock` over `batch`, and the train records of its log windows."""

    def __init__(self, client, model, dense, metrics_out, every, total, rank):
        self.client, self.model, self.dense = client, model, dense
        self.metrics_out, self.every, self.total, self.rank = metrics_out, every, total, rank
        self.loss_fn = torch.nn.BCEWithLogitsLoss(reduction="sum")
        self.device = _device_of_module(model)
        self.loss, self.examples, self.start = 0.0, 0, time.monotonic()

    def __call__(self, clock, batch):
        n = len(batch["labels"])
        batch = on_device(batch, self.device)
        with step(self.client, clock):
            self.dense.pull()
            loss = self.loss_fn(self.model(batch).float(), batch["labels"])
            loss.backward()
            self.dense.push(grad_scale=1.0 / max(1, n))
        self.loss, self.examples = self.loss + float(loss), self.examples + n
        if (clock + 1) % self.every == 0 or clock + 1 == self.total:
            now = time.monotonic()
            _records(self.metrics_out, kind="train", worker=self.rank, step=clock + 1, steps=self.total,
                     logloss=self.loss / max(1, self.examples),
                     examples_per_second=self.examples / max(1e-9, now - self.start))
            self.loss, self.examples, self.start = 0.0, 0, now


def _build(build, client, config, schema, dense_optimizer, device):
    torch.manual_seed(_seed(config))  # every worker builds the same initial module
    model = build(client, schema).to(device)
    dense = ServerDense(client, "dense", list(model.parameters()), optimizer=dense_optimizer, initializer=None)
    return model, dense


def fit(build, argv=None, dense_optimizer="type: ADAM learning_rate: 0.001"):
    """Trains build(client) (a torch.nn.Module whose forward(batch) gives logits) as the command line `argv`
    (default sys.argv[1:]) says: see the module docstring. Returns the Result (None on ranks other than 0); a
    cluster worker that fails exits with kestrel_worker's exit code."""
    args = _parser().parse_args(argv)
    if not args.config:
        sys.exit("give --config (the job's config, protobuf text format)")
    with open(args.config) as f:
        config = f.read()
    if kworker.is_cluster_worker(args):
        try:
            return _fit_worker(build, args, dense_optimizer)
        except (kestrel.KestrelError, ValueError, OSError) as error:
            print(f"worker: {error}", file=sys.stderr, flush=True)
            sys.exit(kworker.exit_code(error))
    settings = kestrel.job_settings(config)
    split = lambda s: [x for x in s.split(",") if x]
    train_files, test_files = split(args.train_files), split(args.test_files)
    client = kestrel.Client.in_process(servers=args.servers, job_id=args.job_id)
    schema = Schema.of(kestrel.Reader(config, files=train_files), config)
    model, dense = _build(build, client, config, schema, dense_optimizer, device_of(args.device))
    loop = _Loop(client, model, dense, args.metrics_out, settings["log_every_steps"], 0, 0)
    clock = 0
    for epoch in range(settings["epochs"]):
        reader = kestrel.Reader(config, files=train_files, epoch=epoch)
        while (batch := reader.next(settings["batch_size"])) is not None:
            loop(clock, batch)
            clock += 1
    dense.pull(clock)
    auc, logloss, fingerprint = evaluate(model, config, clock, client, test_files)
    _records(args.metrics_out, kind="eval", worker=0, step=clock, auc=auc, logloss=logloss, fingerprint=fingerprint)
    if args.export_dir:
        export(client, model, build, config, schema, clock, args.export_dir)
    print(f"test AUC {auc:.5f} logloss {logloss:.5f} fingerprint {fingerprint} ({clock} steps)", flush=True)
    return Result(auc, logloss, fingerprint, clock)


def _fit_worker(build, args, dense_optimizer):
    worker = kworker.join(args)
    settings = kestrel.job_settings(worker.config)
    model, dense = _build(build, worker.client, worker.config, Schema.of(worker, worker.config), dense_optimizer,
                          device_of(args.device))
    loop = _Loop(worker.client, model, dense, args.metrics_out, settings["log_every_steps"], worker.total, worker.rank)
    if not kworker.train(worker, loop):
        print(f"worker {worker.id}: a rescale left this worker out", flush=True)
        return None
    result = None
    if worker.rank == 0:
        dense.pull(worker.total)
        auc, logloss, fingerprint = evaluate(model, worker.config, worker.total, worker.client)
        _records(args.metrics_out, kind="eval", worker=0, step=worker.total, auc=auc, logloss=logloss,
                 fingerprint=fingerprint)
        print(f"test AUC {auc:.5f} logloss {logloss:.5f} fingerprint {fingerprint}", flush=True)
        result = Result(auc, logloss, fingerprint, worker.total)
        if args.export_dir:  # the module's part; the tables come from the final checkpoint (kestrel local --export)
            export_module(model, build, worker.config, Schema.of(worker, worker.config), args.export_dir)
    worker.leave()
    return result


def export(client, model, build, config, schema, clock, out_dir):
    """Writes the model to `out_dir`: every table's rows (client.export, the format kestrel_export writes) and the
    module's part (export_module), what load() reads."""
    client.export(out_dir, config, clock)
    export_module(model, build, config, schema, out_dir)


def export_module(model, build, config, schema, out_dir):
    """Writes the module's part of an export to `out_dir`: its parameters (module.pt) and its builder's import path
    with the schema it was built for (module.json). A cluster's rank 0 writes it beside the tables the launcher
    exports from the job's final checkpoint (kestrel local --export)."""
    os.makedirs(out_dir, exist_ok=True)
    path = f"{build.__module__}:{build.__qualname__}"
    if build.__module__ == "__main__":  # the script itself: importable by its file's name from its directory
        main = sys.modules["__main__"].__file__
        path = f"{os.path.splitext(os.path.basename(main))[0]}:{build.__qualname__}"
        directory = os.path.dirname(os.path.abspath(main))
    else:
        directory = None
    torch.save({k: v.cpu() for k, v in model.state_dict().items()}, os.path.join(out_dir, STATE_FILE))
    with open(os.path.join(out_dir, MODULE_FILE), "w") as f:
        json.dump({"build": path, "path": directory, "seed": _seed(config), "schema": vars(schema)}, f)


class LoadedModel:
    """An exported model, loaded for scoring: its tables in this process and its module (kestrel.torch.load)."""

    def __init__(self, client, model):
        self.client, self.model = client, model

    def predict(self, batch):
        """Probabilities of a kestrel.Reader batch, float32 [B]: bit for bit what training's evaluation gave."""
        with torch.no_grad(), step(self.client, 0):
            device = _device_of_module(self.model)
            return torch.sigmoid(self.model(on_device(batch, device))).float().cpu().numpy()

    def score(self, config, files):
        """(AUC, logloss, fingerprint) on `files`, read by the job `config`'s schema (kestrel_predict's figures)."""
        return evaluate(self.model, config, 0, self.client, files)


def load(export_dir):
    """The model exported to `export_dir` by fit(--export_dir) or export(): its tables loaded into this process
    (kestrel.Client.from_export), its module built by the same function and given the trained parameters. It
    imports the builder module.json names: load only exports you trust as code."""
    with open(os.path.join(export_dir, MODULE_FILE)) as f:
        spec = json.load(f)
    if spec.get("path") and spec["path"] not in sys.path:
        sys.path.insert(0, spec["path"])
    module_name, _, name = spec["build"].partition(":")
    build = importlib.import_module(module_name)
    for part in name.split("."):
        build = getattr(build, part)
    client = kestrel.Client.from_export(export_dir)
    torch.manual_seed(int(spec.get("seed", 0)))
    model = build(client, Schema(**spec["schema"]))
    state_path = os.path.join(export_dir, STATE_FILE)
    try:  # tensors only: no pickled code runs (PyTorch 1.13 and later)
        state = torch.load(state_path, map_location="cpu", weights_only=True)
    except TypeError:  # an older PyTorch without weights_only
        state = torch.load(state_path, map_location="cpu")
    model.load_state_dict(state)
    model.eval()
    return LoadedModel(client, model)
