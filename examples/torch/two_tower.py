"""A two-tower model on Kestrel's tables: a user tower and an item tower, scored by their dot product (what
retrieval models use; the built-in models cannot express it). One file trains in one process and as the workers
of a cluster job (kestrel.torch.fit), and exports a model kestrel.torch.load scores. On the generated history data
(kestrel_datagen --format=schema --out_dir=DIR, 50000 rows):

    python3 examples/torch/two_tower.py --config DIR/job.pbtxt [--export_dir model/]
    scripts/kestrel local --config DIR/job.pbtxt --worker_cmd "python3 examples/torch/two_tower.py"
"""
import torch

from kestrel import torch as kt

USER = ["user_id", "hist_items", "hist_categories", "device", "hour"]
ITEM = ["item_id", "item_category"]


def tower(inputs, dim):
    return torch.nn.Sequential(torch.nn.Linear(inputs, 64), torch.nn.ReLU(), torch.nn.Linear(64, dim))


class TwoTower(torch.nn.Module):
    def __init__(self, client, schema):
        super().__init__()
        dim = schema.embedding_dim
        tables = dict(zip(schema.fields, schema.field_tables))
        for table in sorted(set(tables.values())):
            client.create_table(f'name: "{table}" dim: {dim} seed: 7 initializer {{ type: NORMAL stddev: 0.01 }} '
                                'optimizer { type: ADAGRAD learning_rate: 0.05 }')
        self.ebc = kt.EmbeddingBagCollection(client, {t: dim for t in tables.values()},
                                             {f: (t, "sum") for f, t in tables.items()})  # the reader's pooling
        self.user = tower(len(USER) * dim, dim)
        self.item = tower(len(ITEM) * dim + schema.dense_dim, dim)  # + the price
        self.bias = torch.nn.Parameter(torch.zeros(1))

    def forward(self, batch):
        f = self.ebc({name: batch["features"][name] for name in USER + ITEM})
        user = self.user(torch.cat([f[n] for n in USER], 1))
        item = self.item(torch.cat([f[n] for n in ITEM] + [batch["dense"]], 1))
        return (user * item).sum(1) + self.bias


if __name__ == "__main__":
    kt.fit(TwoTower)
