"""kestrel.torch: Kestrel's embedding tables inside a PyTorch model.

EmbeddingBagCollection looks up pooled features in server-side tables: its forward pulls the rows of the batch's
unique ids from the servers (through the C++ client) and pools each example's ids per feature (sum, mean or
sqrt-n, torch.nn.functional.embedding_bag); its backward pushes each unique row's summed gradient to the
servers, whose optimizer applies it. The rows live on the servers, not in the module: an optimizer over
module.parameters() sees none of them.

    ebc = EmbeddingBagCollection(client, {"items": 16}, {"hist_items": ("items", "mean"), "item_id": ("items", "sum")})
    pooled = ebc({"hist_items": (ids, offsets), "item_id": (ids, offsets)}, clock=step)   # name -> [B, 16]
    loss(model(pooled)).backward()                                                       # pushes at `clock`

Ids are int64 tensors or arrays (any 64-bit value; reinterpreted as uint64) with torch-style offsets (each
example's first position, B of them). A feature may also come as (keys, offsets, values) — what kestrel.Reader
yields: parameter-server keys (uint64) used as they are, and per-entry values that already carry the schema's
pooling, summed as value * row. Features naming one table share its rows.
"""
import numpy as np
import torch

from kestrel._kestrel import feature_keys

_MODES = {"sum": "sum", "mean": "mean", "sqrt_n": "sum"}


class _Rows(torch.autograd.Function):
    """The rows of `keys` in `table`, pulled in forward; their gradient pushed in backward."""

    @staticmethod
    def forward(ctx, anchor, client, table, keys, dim, clock):
        ctx.client, ctx.table, ctx.keys, ctx.clock = client, table, keys, clock
        return torch.from_numpy(client.pull(table, keys, dim, clock))

    @staticmethod
    def backward(ctx, grad):
        ctx.client.push(ctx.table, ctx.keys, np.ascontiguousarray(grad.detach().numpy(), dtype=np.float32), ctx.clock)
        return None, None, None, None, None, None


def _as_ids(ids):
    array = ids.detach().cpu().numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids)
    return np.ascontiguousarray(array.astype(np.int64, copy=False)).view(np.uint64)


class EmbeddingBagCollection(torch.nn.Module):
    """Pooled lookups of named features in Kestrel tables (see the module docstring).

    client: a kestrel.Client. tables: table name -> dim (created by the caller, e.g. client.create_table).
    features: feature name -> (table name, pooling: "sum", "mean" or "sqrt_n").
    """

    def __init__(self, client, tables, features):
        super().__init__()
        for name, (table, pooling) in features.items():
            if table not in tables:
                raise ValueError(f"feature '{name}' names table '{table}', which is not among {sorted(tables)}")
            if pooling not in _MODES:
                raise ValueError(f"feature '{name}': pooling '{pooling}' is not one of {sorted(_MODES)}")
        self.client = client
        self.tables = dict(tables)
        self.features = dict(features)
        # Carries the graph from the inputs to the pulled rows, so backward reaches _Rows without a parameter.
        self.register_buffer("_anchor", torch.zeros((), requires_grad=False))

    def forward(self, inputs, clock=0, sequences=()):
        """inputs: feature name -> (ids, offsets) or (keys, offsets, values). Returns name -> float32 [B, dim];
        for the features named in `sequences`, instead of a pooled vector, (rows [n, dim], offsets [B]): each
        entry's row, unpooled (e.g. for attention over a history)."""
        unknown = sorted(set(inputs) - set(self.features))
        if unknown:
            raise ValueError(f"unknown features {unknown}; this collection has {sorted(self.features)}")
        # Each feature's keys (and per-entry values), then one pull per table over the unique keys of every
        # feature looking it up.
        keys_of, values_of = {}, {}
        for name, given in inputs.items():
            if len(given) == 3:
                keys_of[name] = np.ascontiguousarray(given[0], dtype=np.uint64)
                values_of[name] = torch.as_tensor(np.asarray(given[2], dtype=np.float32))
            else:
                keys_of[name] = feature_keys(_as_ids(given[0]))
        per_table = {}
        for name in inputs:
            per_table.setdefault(self.features[name][0], []).append(keys_of[name])
        rows, inverse = {}, {}
        for table, id_lists in per_table.items():
            all_ids = np.concatenate(id_lists)
            unique, where = np.unique(all_ids, return_inverse=True)
            anchor = self._anchor.detach().requires_grad_(True)
            rows[table] = _Rows.apply(anchor, self.client, table, unique, self.tables[table], clock)
            starts = np.cumsum([0] + [len(x) for x in id_lists])
            inverse[table] = [torch.from_numpy(where[a:b].astype(np.int64)) for a, b in zip(starts[:-1], starts[1:])]
        out = {}
        for name, given in inputs.items():
            table, pooling = self.features[name]
            index = inverse[table].pop(0)
            offsets = torch.as_tensor(np.asarray(given[1]), dtype=torch.int64)
            if name in sequences:
                out[name] = (rows[table].index_select(0, index), offsets)
                continue
            weights = values_of.get(name)
            if weights is not None:  # the reader's values carry the pooling
                pooling = "sum"
            elif pooling == "sqrt_n":
                lengths = torch.diff(offsets, append=torch.tensor([len(index)]))
                per_bag = torch.where(lengths > 0, lengths.double().rsqrt(), torch.zeros_like(lengths, dtype=torch.double))
                weights = torch.repeat_interleave(per_bag, lengths).float()
            out[name] = torch.nn.functional.embedding_bag(index, rows[table], offsets, mode=_MODES[pooling],
                                                          per_sample_weights=weights)
        return out


class ServerDense:
    """A PyTorch module's parameters kept on the servers as one dense table, updated there by its optimizer.

    pull(clock) copies the servers' values into the parameters; push(clock) sends their gradients (scaled by
    `grad_scale`, e.g. 1 / batch size for a summed loss). Every worker pulling the same table starts from the
    same values (the table's initializer, on the servers), and in BSP the servers combine the workers' pushes
    in rank order, so training stays bitwise repeatable.

    client: a kestrel.Client; table: the dense table's name; parameters: the module's parameters, in a fixed
    order; optimizer, initializer: OptimizerConfig / InitializerConfig text (proto/table.proto).
    """

    def __init__(self, client, table, parameters, optimizer='type: ADAM learning_rate: 0.001',
                 initializer='type: UNIFORM min: -0.05 max: 0.05', seed=3):
        self.client, self.table = client, table
        self.parameters = list(parameters)
        self.size = sum(p.numel() for p in self.parameters)
        client.create_table(f'name: "{table}" kind: DENSE dim: {min(self.size, 1024)} dense_size: {self.size} '
                            f'seed: {seed} initializer {{ {initializer} }} optimizer {{ {optimizer} }}')

    def pull(self, clock=0):
        values = torch.from_numpy(self.client.pull_dense(self.table, self.size, clock))
        with torch.no_grad():
            at = 0
            for p in self.parameters:
                p.copy_(values[at:at + p.numel()].view_as(p))
                at += p.numel()

    def push(self, clock=0, grad_scale=1.0):
        grads = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                           for p in self.parameters]) * grad_scale
        self.client.push_dense(self.table, np.ascontiguousarray(grads.detach().numpy(), dtype=np.float32), clock)
        for p in self.parameters:
            p.grad = None
