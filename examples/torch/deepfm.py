"""DeepFM written in PyTorch on Kestrel's tables: the built-in DeepFM (worker/model.h) as a PyTorch module.

The embedding and wide tables live on the servers (kestrel.torch.EmbeddingBagCollection: Adagrad and FTRL run
there); the bias and MLP are a dense table on the servers (kestrel.torch.ServerDense, Adam). Data comes from the
job's own reader (kestrel.Reader), so keys, fields and dense inputs are the C++ worker's.

    python3 examples/torch/deepfm.py --config deploy/jobs/deepfm.pbtxt --train FILE --test FILE [--servers 2]

Prints the test AUC. With in-process servers (this script) it is one process; the gradients follow the
built-in model: sparse rows get the sum over the batch, the dense tensor the mean.
"""
import argparse

import numpy as np
import torch

import kestrel
from kestrel import torch as ktorch


def auc(labels, scores):
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    # Ties share their mean rank.
    sorted_scores = scores[order]
    start = 0
    for i in range(1, len(scores) + 1):
        if i == len(scores) or sorted_scores[i] != sorted_scores[start]:
            ranks[order[start:i]] = (start + 1 + i) / 2
            start = i
    positives = labels > 0.5
    n_pos, n_neg = positives.sum(), (~positives).sum()
    return (ranks[positives].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


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
    more embedding-sized vectors per example that a subclass's extra() adds to the FM and the MLP."""

    def __init__(self, client, fields, field_tables, dense_dim, dim, hidden, extra_vectors=0):
        super().__init__()
        self.fields, self.dim = fields, dim
        self.emb = ktorch.EmbeddingBagCollection(client, {t: dim for t in field_tables},
                                                 {f: (t, "sum") for f, t in zip(fields, field_tables)})
        self.wide = ktorch.EmbeddingBagCollection(client, {"wide": 1}, {f: ("wide", "sum") for f in fields})
        self.bias = torch.nn.Parameter(torch.zeros(1))
        widths = [(len(fields) + extra_vectors) * dim + dense_dim] + hidden + [1]
        self.mlp = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))

    def dense_parameters(self):
        # The built-in layout: [bias, each layer's W (inputs x outputs, row-major), b].
        yield self.bias
        for layer in self.mlp:
            yield layer.weight  # [outputs, inputs]: a different order, the same count (the servers only add)
            yield layer.bias

    def embed(self, feats, clock):
        """The fields' pooled embeddings (name -> [B, D]) and the extra vectors (a list of [B, D])."""
        return self.emb(feats, clock), []

    def forward(self, batch, clock):
        feats = {f: batch["features"][f] for f in self.fields}
        x, extra = self.embed(feats, clock)
        w = self.wide(feats, clock)
        stacked = torch.stack([x[f] for f in self.fields] + extra, 1)  # [B, F + extra, D]
        wide = sum(w[f][:, 0] for f in self.fields)
        s = stacked.sum(1)
        fm = 0.5 * (s * s - (stacked * stacked).sum(1)).sum(1)
        h = torch.cat([stacked.reshape(len(stacked), -1), torch.from_numpy(batch["dense"])], 1)
        for i, layer in enumerate(self.mlp):
            h = layer(h)
            if i + 1 < len(self.mlp):
                h = torch.relu(h)
        return self.bias + wide + fm + h[:, 0]


def train_and_evaluate(client, model, config, train, test, epochs, batch_size):
    """Trains `model` (its dense part on the servers) on `train` and returns its test AUC on `test`."""
    dense = ktorch.ServerDense(client, "dense", list(model.dense_parameters()))
    loss_fn = torch.nn.BCEWithLogitsLoss(reduction="sum")
    clock = 0
    for epoch in range(epochs):
        reader = kestrel.Reader(config, files=[train], epoch=epoch)
        while (batch := reader.next(batch_size)) is not None:
            clock += 1
            dense.pull(clock)
            logits = model(batch, clock)
            loss = loss_fn(logits, torch.from_numpy(batch["labels"]))
            loss.backward()  # pushes the sparse rows' gradient sums
            dense.push(clock, grad_scale=1.0 / len(batch["labels"]))  # the dense tensor takes the batch mean
        print(f"epoch {epoch + 1}: {clock} steps", flush=True)
    dense.pull(clock)
    scores, labels = [], []
    reader = kestrel.Reader(config, files=[test], test=True)
    with torch.no_grad():
        while (batch := reader.next(4096)) is not None:
            scores.append(torch.sigmoid(model(batch, clock)).numpy())
            labels.append(batch["labels"])
    return auc(np.concatenate(labels), np.concatenate(scores))


def run(model_class, doc, job_id):
    """The example's command line: builds `model_class` (DeepFM's constructor arguments) for the job's data on
    in-process servers, trains it and prints its test AUC."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True)
    parser.add_argument("--train", required=True)
    parser.add_argument("--test", required=True)
    parser.add_argument("--servers", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=None)
    args = parser.parse_args()
    with open(args.config) as f:
        config = f.read()
    torch.manual_seed(1)
    torch.set_num_threads(2)
    client = kestrel.Client.in_process(servers=args.servers, job_id=job_id)
    settings = kestrel.job_settings(config)
    probe = kestrel.Reader(config, files=[args.train])
    create_tables(client, probe.field_tables, settings["embedding_dim"])
    model = model_class(client, probe.fields, probe.field_tables, probe.dense_dim, settings["embedding_dim"],
                        settings["hidden"])
    result = train_and_evaluate(client, model, config, args.train, args.test, args.epochs or settings["epochs"],
                                settings["batch_size"])
    print(f"test AUC {result:.5f}")


if __name__ == "__main__":
    run(DeepFM, __doc__, "torch-deepfm")
