"""kestrel.torch: Kestrel's embedding tables inside a PyTorch model.

EmbeddingBagCollection looks up pooled features in server-side tables: its forward pulls the rows of the batch's
unique ids from the servers (through the C++ client) and pools each example's ids per feature (sum, mean or
sqrt-n: each entry's row, weighted, summed per example); its backward pushes each unique row's summed gradient to
the servers, whose optimizer applies it. The rows live on the servers, not in the module: an optimizer over
module.parameters() sees none of them.

    ebc = EmbeddingBagCollection(client, {"items": 16}, {"hist_items": ("items", "mean"), "item_id": ("items", "sum")})
    pooled = ebc({"hist_items": (ids, offsets), "item_id": (ids, offsets)}, clock=step)   # name -> [B, 16]
    loss(model(pooled)).backward()                                                       # pushes at `clock`

A training step is one `with kestrel.torch.step(client, clock):` block. Its modules read the clock from it, and
their pushes wait for its end: one fused request per server carries every table's gradients (sparse and dense),
each checked before anything is sent, so a refused step (a NaN gradient in one table) changes no table, and an
exception inside the block pushes nothing.

    with ktorch.step(client, clock):
        loss = loss_fn(model(ebc(features)), labels)     # pulls at `clock`
        loss.backward()                                  # gradients gathered
        dense.push(grad_scale=1 / len(labels))           # gathered too
    # here: every table's push of `clock`, all or none

Outside a step, a module takes the clock as an argument and pushes as its backward runs (table by table).

Ids are int64 tensors or arrays (any 64-bit value; reinterpreted as uint64) with torch-style offsets (each
example's first position, B of them). A feature may also come as (keys, offsets, values) — what kestrel.Reader
yields: parameter-server keys (uint64) used as they are, and per-entry values that already carry the schema's
pooling, summed as value * row. Features naming one table share its rows.
"""
import contextlib
import contextvars
import os

import numpy as np
import torch

from kestrel._kestrel import feature_keys, unique_keys
from kestrel.worker import RollbackNeeded

_MODES = ("sum", "mean", "sqrt_n")


class Step:
    """One training step of `client` at `clock`: the modules' pushes, gathered and sent together by push()."""

    def __init__(self, client, clock):
        self.client, self.clock = client, int(clock)
        self._sparse, self._dense = [], []

    def add_sparse(self, table, keys, grads):
        self._sparse.append((table, keys, np.ascontiguousarray(grads, dtype=np.float32)))

    def add_dense(self, table, grads):
        self._dense.append((table, np.ascontiguousarray(grads, dtype=np.float32)))

    def push(self):
        """Every gathered push as one step (Client.step): all tables or none. A step with nothing gathered sends
        nothing."""
        if self._sparse or self._dense:
            self.client.step(self._sparse, self._dense, self.clock)
        self._sparse, self._dense = [], []


_current = contextvars.ContextVar("kestrel_step", default=None)


@contextlib.contextmanager
def step(client, clock):
    """The step context (see the module docstring): yields the Step; on a normal exit pushes what it gathered,
    on an exception nothing."""
    current = Step(client, clock)
    token = _current.set(current)
    try:
        yield current
    finally:
        _current.reset(token)
    current.push()


def current_step():
    """The Step of the enclosing `with step(...)`, or None."""
    return _current.get()


def _clock(clock):
    """The clock a module call reads at: its argument, else the enclosing step's. A call with neither is refused:
    a clock silently 0 would read and push at the job's first iteration."""
    if clock is not None:
        return int(clock)
    current = _current.get()
    if current is None:
        raise ValueError("no clock: call inside `with kestrel.torch.step(client, clock):`, or pass clock=")
    return current.clock


class _Rows(torch.autograd.Function):
    """The rows of `keys` in `table`, pulled in forward; their gradient pushed in backward."""

    @staticmethod
    def forward(ctx, anchor, client, table, keys, dim, clock):
        ctx.client, ctx.table, ctx.keys, ctx.clock = client, table, keys, clock
        return _to_device(torch.from_numpy(client.pull(table, keys, dim, clock)), anchor.device)

    @staticmethod
    def backward(ctx, grad):
        grads = np.ascontiguousarray(grad.detach().cpu().numpy(), dtype=np.float32)
        current = _current.get()
        if current is not None and current.client is ctx.client and current.clock == ctx.clock:
            current.add_sparse(ctx.table, ctx.keys, grads)  # sent with the step's other pushes
        else:
            ctx.client.push(ctx.table, ctx.keys, grads, ctx.clock)
        return None, None, None, None, None, None


def _to_device(tensor, device):
    """A CPU tensor on `device`: for a CUDA device through pinned memory, copied asynchronously (the copy is
    ordered before the kernels that use it on the current stream)."""
    if device.type == "cpu":
        return tensor
    return tensor.pin_memory().to(device, non_blocking=True)


def _as_ids(ids):
    array = ids.detach().cpu().numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids)
    return np.ascontiguousarray(array.astype(np.int64, copy=False)).view(np.uint64)


class EmbeddingBagCollection(torch.nn.Module):
    """Pooled lookups of named features in Kestrel tables (see the module docstring).

    client: a kestrel.Client. tables: table name -> dim (created by the caller, e.g. client.create_table).
    features: feature name -> (table name, pooling: "sum", "mean" or "sqrt_n").
    Its outputs are on the module's device (module.to(device), like any module's): the pulled rows are copied
    there through pinned memory, pooled there, and their gradients come back to be pushed.
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

    def forward(self, inputs, clock=None, sequences=()):
        """inputs: feature name -> (ids, offsets) or (keys, offsets, values). Returns name -> float32 [B, dim];
        for the features named in `sequences`, instead of a pooled vector, (rows [n, dim], offsets [B]): each
        entry's row, unpooled (e.g. for attention over a history)."""
        clock = _clock(clock)
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
            per_table.setdefault(self.features[name][0], []).append(name)
        out = {}
        for table, names in per_table.items():
            keys = [keys_of[n] for n in names]
            unique, where = unique_keys(np.concatenate(keys) if len(keys) > 1 else keys[0])
            anchor = self._anchor.detach().requires_grad_(True)
            rows = _Rows.apply(anchor, self.client, table, unique, self.tables[table], clock)
            device = rows.device
            where = _to_device(torch.from_numpy(where), device)
            # Every pooled feature of the table at once: each entry's row (torch.nn.functional.embedding, whose
            # backward is one dense scatter into the rows' gradient) times its weight — its value (the reader's,
            # which carries the schema's pooling), or 1 (sum), 1/n (mean), 1/sqrt(n) (sqrt_n) of its bag's n —
            # summed per bag. When every bag holds one entry of weight 1 (single-valued features), the entries'
            # rows are the bags.
            index, bag_of, weights, pooled = [], [], [], []
            start, bags, single = 0, 0, True
            for name, k in zip(names, keys):
                entries = where[start:start + len(k)]
                bag_starts = torch.as_tensor(np.asarray(inputs[name][1]), dtype=torch.int64)
                if name in sequences:
                    out[name] = (rows.index_select(0, entries), bag_starts)
                else:
                    index.append(entries)
                    if len(k) == len(bag_starts) and torch.equal(bag_starts, torch.arange(len(k))):  # one entry per bag
                        bag_of.append(torch.arange(bags, bags + len(k)))
                        lengths = torch.ones(len(k), dtype=torch.int64)
                    else:
                        single = False
                        lengths = torch.diff(bag_starts, append=torch.tensor([len(k)]))
                        bag_of.append(torch.repeat_interleave(torch.arange(bags, bags + len(bag_starts)), lengths))
                    weights.append(self._weights(name, lengths, values_of.get(name)))
                    pooled.append((name, len(bag_starts)))
                    bags += len(bag_starts)
                start += len(k)
            if pooled:
                index, bag_of, weights = torch.cat(index), torch.cat(bag_of), torch.cat(weights)
                entry_rows = torch.nn.functional.embedding(index, rows)
                if single and bool((weights == 1).all()):
                    result = entry_rows
                else:
                    bag_of, weights = _to_device(bag_of, device), _to_device(weights, device)
                    result = torch.zeros(bags, rows.shape[1], device=device).index_add(
                        0, bag_of, entry_rows * weights[:, None])
                # One split (its backward is one concatenation), not a slice per feature (each slice's backward
                # would be a zero-filled gradient of the whole result).
                for (name, _), part in zip(pooled, torch.split(result, [count for _, count in pooled])):
                    out[name] = part
        return {name: out[name] for name in inputs}

    def stack(self, inputs, clock=None, order=None):
        """The pooled features of `order` (default: the inputs' order) as one [B, len(order), dim] tensor, what
        torch.stack(forward(...) in order, 1) gives. When they all look up one table with one entry of weight 1
        per example (single-valued features), it is one pull of every entry's row in example-major order: the C++
        client deduplicates the keys and sums their gradients, no copy of the pooled vectors either way."""
        clock = _clock(clock)
        order = list(order or inputs)
        tables = {self.features[name][0] for name in order}
        batch = len(inputs[order[0]][1]) if order else 0
        single = len(tables) == 1 and set(order) == set(inputs) and all(
            len(inputs[n][0]) == batch and (len(inputs[n]) < 3 or bool((np.asarray(inputs[n][2]) == 1).all()))
            and torch.equal(torch.as_tensor(np.asarray(inputs[n][1]), dtype=torch.int64), torch.arange(batch))
            for n in order)
        if not single:
            pooled = self.forward(inputs, clock)
            return torch.stack([pooled[n] for n in order], 1)
        (table,) = tables
        # Example-major keys: example e's features in `order`, e = 0..B-1.
        keys = np.stack([np.ascontiguousarray(inputs[n][0], dtype=np.uint64) if len(inputs[n]) == 3
                         else feature_keys(_as_ids(inputs[n][0])) for n in order], axis=1).reshape(-1)
        anchor = self._anchor.detach().requires_grad_(True)
        # Every entry's row, by its key as it is: the C++ client pulls each distinct key once and copies its row to
        # every entry, and sums the entries' gradients per key before the push (KeyBatch), so no gather and no
        # scatter into the rows' gradient runs in PyTorch.
        rows = _Rows.apply(anchor, self.client, table, keys, self.tables[table], clock)
        return rows.view(batch, len(order), -1)

    def _weights(self, name, lengths, values):
        """Each entry's weight in its bag's sum (see forward); `lengths`: the entries of each bag."""
        if values is not None:
            return values
        pooling = self.features[name][1]
        if pooling == "sum":
            return torch.ones(int(lengths.sum()))
        if pooling == "mean" and bool((lengths == 1).all()):
            return torch.ones(len(lengths))
        n = lengths.double()
        per_bag = torch.where(lengths > 0, 1 / n if pooling == "mean" else n.rsqrt(), torch.zeros_like(n))
        return torch.repeat_interleave(per_bag, lengths).float()


def _flat_grads(parameters, scale):
    """The parameters' gradients (zeros where there is none) as one flat tensor, times `scale`."""
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in parameters]) * scale


def _copy_into(tensors, flat):
    """Copies consecutive runs of `flat` into `tensors`, in order (converting to each one's dtype)."""
    with torch.no_grad():
        at = 0
        for t in tensors:
            t.copy_(flat[at:at + t.numel()].view_as(t).to(t.dtype))
            at += t.numel()


class ServerDense:
    """A PyTorch module's parameters kept on the servers as one dense table, updated there by its optimizer.

    pull(clock) copies the servers' values into the parameters; push(clock) sends their gradients (scaled by
    `grad_scale`, e.g. 1 / batch size for a summed loss). Every worker pulling the same table starts from the
    same values (the table's initializer, on the servers), and in BSP the servers combine the workers' pushes
    in rank order, so training stays bitwise repeatable.

    client: a kestrel.Client; table: the dense table's name; parameters: the module's parameters, in a fixed
    order; optimizer, initializer: OptimizerConfig / InitializerConfig text (proto/table.proto).
    initializer None (kestrel.torch.fit's choice) keeps PyTorch's own initialization: the table starts at zero
    and holds what training added, and pull() adds it to the parameters' values at construction (build the
    module after the same torch.manual_seed on every worker, as fit does, and they all start alike).
    """

    def __init__(self, client, table, parameters, optimizer='type: ADAM learning_rate: 0.001',
                 initializer='type: UNIFORM min: -0.05 max: 0.05', seed=3):
        self.client, self.table = client, table
        self.parameters = list(parameters)
        self.size = sum(p.numel() for p in self.parameters)
        self._initial = None
        if initializer is None:
            self._initial = torch.cat([p.detach().reshape(-1).float().cpu() for p in self.parameters])
            initializer = "type: ZEROS"
        client.create_table(f'name: "{table}" kind: DENSE dim: {min(self.size, 1024)} dense_size: {self.size} '
                            f'seed: {seed} initializer {{ {initializer} }} optimizer {{ {optimizer} }}')

    def pull(self, clock=None):
        """Copies the servers' values at `clock` (default: the enclosing step's) into the parameters and clears
        their gradients (a step that failed before its push leaves some behind)."""
        clock = _clock(clock)
        values = torch.from_numpy(self.client.pull_dense(self.table, self.size, clock))
        _copy_into(self.parameters, values if self._initial is None else self._initial + values)
        for p in self.parameters:
            p.grad = None

    def push(self, clock=None, grad_scale=1.0):
        """Sends the parameters' gradients (times `grad_scale`): with the enclosing step's pushes when called in
        one (at its clock), else at once at `clock`."""
        grads = np.ascontiguousarray(_flat_grads(self.parameters, grad_scale).detach().cpu().numpy(),
                                     dtype=np.float32)
        current = _current.get()
        if current is not None and clock is None and current.client is self.client:
            current.add_dense(self.table, grads)
        else:
            self.client.push_dense(self.table, grads, _clock(clock))
        for p in self.parameters:
            p.grad = None


class Rendezvous:
    """A torch.distributed TCPStore this worker hosts, for the allreduce group's rendezvous. Create it before
    joining and register its address (kestrel.worker.join(args, address=rendezvous.address)); the workers of a
    pass meet in the store of the pass's rank 0, whose address they read from the scheduler's membership
    (ClusterView.worker_addresses) — no second launcher, no extra configuration.

    host: the address peers reach this worker at. Default: $KESTREL_HOST, else the local address that routes to
    `scheduler` (host:port), else 127.0.0.1.
    """

    def __init__(self, host=None, scheduler=None, timeout=60.0):
        import datetime
        import torch.distributed as dist
        self.host = host or os.environ.get("KESTREL_HOST") or _route_to(scheduler or os.environ.get("KESTREL_SCHEDULER"))
        self.timeout = datetime.timedelta(seconds=timeout)
        self._store = dist.TCPStore(self.host, 0, None, True, self.timeout, wait_for_workers=False)
        self.address = f"{self.host}:{self._store.port}"

    def group(self, worker, grace=None):
        """The gloo process group of `worker`'s current pass (every worker of the pass calls it at the pass's
        start). The workers meet under the pass's (rollbacks, rescale) in rank 0's store, each saying the clock
        it starts at. Raises RollbackNeeded when the group cannot be consistent: it formed without this worker
        (a replacement whose peers are mid-pass), the workers start at different clocks, the peers do not come
        within `grace` seconds (default: the timeout), or the job rolled back meanwhile."""
        import time
        import torch.distributed as dist
        wait = self.timeout.total_seconds() if grace is None else grace
        deadline = time.monotonic() + wait
        while True:
            addresses = worker.worker_addresses()
            if addresses and addresses[0]:
                break
            if time.monotonic() > deadline or worker.superseded:
                raise RollbackNeeded("the allreduce rendezvous found no address for rank 0")
            time.sleep(0.1)
        host, port = _host_port(addresses[0])
        prefix = f"kestrel/{worker.rollbacks}.{worker.layout_generation}"
        n = worker.num_workers
        try:
            store = dist.TCPStore(host, port, None, False, self.timeout)
            arrived = store.add(prefix + "/arrived", 1)
            if arrived > n:
                raise RollbackNeeded("the allreduce group of this pass formed without this worker")
            store.set(f"{prefix}/clock/{worker.rank}", str(worker.start_clock))
            while store.add(prefix + "/arrived", 0) < n:
                if worker.superseded:
                    raise RollbackNeeded("the job rolled back during the allreduce rendezvous")
                if time.monotonic() > deadline:
                    raise RollbackNeeded(f"the allreduce peers did not arrive within {wait:.0f} s")
                time.sleep(0.02)
            clocks = [int(store.get(f"{prefix}/clock/{r}")) for r in range(n)]
            if len(set(clocks)) != 1:
                raise RollbackNeeded(f"the workers start this pass at different clocks {clocks}")
            options = dist.ProcessGroupGloo._Options()
            options._timeout = self.timeout
            options._devices = [dist.ProcessGroupGloo.create_device(hostname=self.host)]
            return dist.ProcessGroupGloo(dist.PrefixStore(prefix + "/gloo", store), worker.rank, n, options)
        except RuntimeError as e:
            if isinstance(e, RollbackNeeded):
                raise
            raise RollbackNeeded(f"the allreduce rendezvous at {addresses[0]} failed: {e}") from e


def _host_port(address):
    """(host, port) of a worker's registered "host:port" (from the scheduler; checked before use)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RuntimeError(f"rank 0 registered '{address[:80]}', which is not host:port: no allreduce rendezvous")
    return host.strip("[]"), int(port)


def _route_to(address):
    if not address:
        return "127.0.0.1"
    import socket
    host = address.rsplit(":", 1)[0].strip("[]")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, 9))  # chooses the interface; sends nothing
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def _materialize(optimizer):
    """Gives every parameter its optimizer state now (one step with zero gradients, step counters reset), so the
    state's layout is fixed from the start."""
    saved = [(p, p.grad) for group in optimizer.param_groups for p in group["params"]]
    for p, _ in saved:
        p.grad = torch.zeros_like(p)
    before = [p.detach().clone() for p, _ in saved]
    optimizer.step()
    with torch.no_grad():
        for (p, grad), value in zip(saved, before):
            p.copy_(value)
            p.grad = grad
    for state in optimizer.state.values():
        for key, value in state.items():
            if key == "step":
                state[key] = torch.zeros_like(value) if isinstance(value, torch.Tensor) else 0


class AllreduceDense:
    """A PyTorch module's dense parameters kept by every worker and synchronized by allreduce (torch.distributed,
    gloo), stepped by a torch optimizer on each worker; the sparse tables stay on the servers. The hybrid design
    of Persia, Monolith and HugeCTR.

    Every step, step() averages the workers' gradients (each scaled by `grad_scale`, e.g. 1 / batch size) with
    one allreduce and applies the optimizer, so every worker holds the same weights. Rank 0 also writes the
    whole dense state (weights and optimizer state) to an ASSIGN table on the servers, at the step's clock, so
    the job's global checkpoint holds it consistently with the sparse tables: at the start of every pass
    (start_pass, as train()'s on_pass) the workers form a new group and load the state of the pass's clock. A
    worker that dies breaks the group; its peers, and its replacement, ask the job to roll back to the last
    checkpoint (kestrel.worker.RollbackNeeded).

    worker: the kestrel.Worker; rendezvous: its Rendezvous; table: the state table's name; parameters: the
    module's parameters in a fixed order; optimizer: a function of the parameters returning a torch optimizer.
    """

    def __init__(self, worker, rendezvous, table, parameters, optimizer=lambda ps: torch.optim.Adam(ps, lr=0.001)):
        self.worker, self.rendezvous, self.table = worker, rendezvous, table
        self.parameters = list(parameters)
        self.optimizer = optimizer(self.parameters)
        _materialize(self.optimizer)
        self._initial = [t.detach().clone() for t in self._state()]  # what a job with no state written starts from
        self.size = 1 + sum(t.numel() for t in self._state())  # a written flag, then the state
        worker.client.create_table(f'name: "{table}" kind: DENSE dim: {min(self.size, 1024)} '
                                   f'dense_size: {self.size} initializer {{ type: ZEROS }} optimizer {{ type: ASSIGN }}')
        self.group = None
        self._formed = False  # a group formed once in this process
        # Seconds a worker that starts mid-job waits for its peers at the rendezvous before asking for a rollback.
        self.replacement_grace = 10.0

    def _state(self):
        tensors = list(self.parameters)
        for p in self.parameters:
            state = self.optimizer.state.get(p, {})
            for key in sorted(state):
                value = state[key]
                tensors.append(value if isinstance(value, torch.Tensor) else torch.tensor(float(value)))
        return tensors

    def start_pass(self, worker):
        """At the start of a pass: the pass's group is formed (Rendezvous.group) and the state of its clock loaded
        from the servers (or, before any was written, rank 0's initial weights broadcast). A replacement whose
        peers are not starting a pass at its clock gets a rollback (RollbackNeeded): their dense state is only in
        their memory and the last checkpoint."""
        # A worker that starts mid-job (a replacement) gives its peers a short grace: if they are not at the start
        # of a pass at its clock too (they run on, or wait for it at a barrier), only a rollback makes the dense
        # state consistent.
        replacement = not self._formed and worker.start_clock > 0
        for p in self.parameters:  # a step that failed before its allreduce leaves gradients behind
            p.grad = None
        self.group = None  # the previous pass's group is done with, whatever the rendezvous gives
        self.group = self.rendezvous.group(worker, grace=self.replacement_grace if replacement else None)
        self._formed = True
        values = torch.from_numpy(worker.client.pull_dense(self.table, self.size, worker.start_clock))
        if values[0] != 0:  # the written flag: the state of the pass's clock
            _copy_into(self._state(), values[1:])
            return
        # Nothing written yet: everyone starts from rank 0's initial weights.
        with torch.no_grad():
            for t, initial in zip(self._state(), self._initial):
                t.copy_(initial)
        flat = torch.cat([p.detach().reshape(-1).cpu() for p in self.parameters])  # gloo collectives: CPU tensors
        self._collective(lambda: self.group.broadcast(flat, 0).wait())
        _copy_into(self.parameters, flat)

    def _collective(self, run):
        try:
            run()
        except RuntimeError as e:
            raise RollbackNeeded(f"the allreduce group broke ({e})") from e

    def step(self, clock, grad_scale=1.0):
        """Averages the gradients over the workers, steps the optimizer, and writes the state at `clock`."""
        flat = _flat_grads(self.parameters, grad_scale).cpu()  # gloo collectives: CPU tensors
        self._collective(lambda: self.group.allreduce([flat]).wait())
        flat /= self.worker.num_workers
        at = 0
        for p in self.parameters:
            p.grad = flat[at:at + p.numel()].view_as(p).to(p.device)
            at += p.numel()
        self.optimizer.step()
        for p in self.parameters:
            p.grad = None
        client = self.worker.client
        if self.worker.rank == 0:
            state = torch.cat([torch.ones(1)] + [t.detach().reshape(-1).float().cpu() for t in self._state()])
            client.push_dense(self.table, state.numpy(), clock)
        elif self.worker.consistency == "bsp":  # BSP servers wait for every worker's part of the clock
            client.push_dense(self.table, np.zeros(0, dtype=np.float32), clock)


# The training loop and the exported model's loader (kestrel/training.py), as kestrel.torch.fit and .load.
from kestrel.training import Result, Schema, device_of, evaluate, export, fit, load, on_device  # noqa: E402,F401  (after the modules it uses)
