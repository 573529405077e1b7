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


class DeepFM(torch.nn.Module):
    def __init__(self, client, fields, dense_dim, dim, hidden):
        super().__init__()
        self.fields, self.dim = fields, dim
        self.emb = ktorch.EmbeddingBagCollection(client, {"emb": dim}, {f: ("emb", "sum") for f in fields})
        self.wide = ktorch.EmbeddingBagCollection(client, {"wide": 1}, {f: ("wide", "sum") for f in fields})
        self.bias = torch.nn.Parameter(torch.zeros(1))
        widths = [len(fields) * dim + dense_dim] + hidden + [1]
        self.mlp = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))

    def dense_parameters(self):
        # The built-in layout: [bias, each layer's W (inputs x outputs, row-major), b].
        yield self.bias
        for layer in self.mlp:
            yield layer.weight  # [outputs, inputs]: a different order, the same count (the servers only add)
            yield layer.bias

    def forward(self, batch, clock):
        feats = {f: batch["features"][f] for f in self.fields}
        x = self.emb(feats, clock)
        w = self.wide(feats, clock)
        stacked = torch.stack([x[f] for f in self.fields], 1)  # [B, F, D]
        wide = sum(w[f][:, 0] for f in self.fields)
        s = stacked.sum(1)
        fm = 0.5 * (s * s - (stacked * stacked).sum(1)).sum(1)
        h = torch.cat([stacked.reshape(len(stacked), -1), torch.from_numpy(batch["dense"])], 1)
        for i, layer in enumerate(self.mlp):
            h = layer(h)
            if i + 1 < len(self.mlp):
                h = torch.relu(h)
        return self.bias + wide + fm + h[:, 0]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True)
    parser.add_argument("--train", required=True)
    parser.add_argument("--test", required=True)
    parser.add_argument("--servers", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=None)
    args = parser.parse_args()
    config = open(args.config).read()
    torch.manual_seed(1)
    torch.set_num_threads(2)

    client = kestrel.Client.in_process(servers=args.servers, job_id="torch-deepfm")
    # The built-in DeepFM's tables and defaults (proto/job.proto, worker/model.cc).
    settings = kestrel.job_settings(config)
    dim, hidden, batch_size = settings["embedding_dim"], settings["hidden"], settings["batch_size"]
    epochs = args.epochs or settings["epochs"]
    client.create_table('name: "wide" dim: 1 seed: 1 initializer { type: ZEROS } '
                        'optimizer { type: FTRL learning_rate: 0.1 ftrl_beta: 1 }')
    client.create_table(f'name: "emb" dim: {dim} seed: 2 initializer {{ type: NORMAL stddev: 0.01 }} '
                        'optimizer { type: ADAGRAD learning_rate: 0.005 initial_accumulator: 0.1 }')

    probe = kestrel.Reader(config, files=[args.train])
    model = DeepFM(client, probe.fields, probe.dense_dim, dim, hidden)
    dense = ktorch.ServerDense(client, "dense", list(model.dense_parameters()))
    loss_fn = torch.nn.BCEWithLogitsLoss(reduction="sum")
    clock = 0
    for epoch in range(epochs):
        reader = kestrel.Reader(config, files=[args.train], epoch=epoch)
        while (batch := reader.next(batch_size)) is not None:
            clock += 1
            dense.pull(clock)
            logits = model(batch, clock)
            loss = loss_fn(logits, torch.from_numpy(batch["labels"]))
            loss.backward()  # pushes the sparse rows' gradient sums
            dense.push(clock, grad_scale=1.0 / len(batch["labels"]))
        print(f"epoch {epoch + 1}: {clock} steps")
    dense.pull(clock)
    scores, labels = [], []
    reader = kestrel.Reader(config, files=[args.test], test=True)
    with torch.no_grad():
        while (batch := reader.next(4096)) is not None:
            scores.append(torch.sigmoid(model(batch, clock)).numpy())
            labels.append(batch["labels"])
    print(f"test AUC {auc(np.concatenate(labels), np.concatenate(scores)):.5f}")


if __name__ == "__main__":
    main()
