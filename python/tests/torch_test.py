"""kestrel.torch.EmbeddingBagCollection over in-process servers: its pooled outputs and the rows' gradients equal
a plain PyTorch computation over a local copy of the rows, and backward's push moves the server's rows by them."""
import unittest

import numpy as np
import torch

import kestrel
from kestrel import torch as ktorch

DIM = 4


class EmbeddingBagCollectionTest(unittest.TestCase):
    def setUp(self):
        self.client = kestrel.Client.in_process(servers=2, job_id="torch")
        self.client.create_table(f"""
            name: "items" dim: {DIM} seed: 3
            initializer {{ type: NORMAL stddev: 0.5 }}
            optimizer {{ type: SGD learning_rate: 1 }}""")
        self.ebc = ktorch.EmbeddingBagCollection(
            self.client, {"items": DIM},
            {"history": ("items", "mean"), "target": ("items", "sum"), "tags": ("items", "sqrt_n")})
        # Three examples; the history's second bag is empty; id 7 appears in every feature.
        self.inputs = {
            "history": (torch.tensor([7, 8, 9, 7], dtype=torch.int64), torch.tensor([0, 3, 3])),
            "target": (torch.tensor([7, 1 << 40, -5], dtype=torch.int64), torch.tensor([0, 1, 2])),
            "tags": (torch.tensor([2, 7, 3, 4, 5], dtype=torch.int64), torch.tensor([0, 2, 4])),
        }

    def rows_of(self, ids):
        keys = kestrel.feature_keys(np.asarray(ids, dtype=np.int64).view(np.uint64))
        return torch.from_numpy(self.client.pull("items", keys, DIM))

    def reference(self, rows_by_id):
        """Pooled outputs from a dict id -> row tensor, as plain PyTorch."""
        out = {}
        for name, (ids, offsets) in self.inputs.items():
            pooling = self.ebc.features[name][1]
            bounds = offsets.tolist() + [len(ids)]
            bags = []
            for a, b in zip(bounds[:-1], bounds[1:]):
                members = [rows_by_id[int(i)] for i in ids[a:b]]
                total = torch.stack(members).sum(0) if members else torch.zeros(DIM)
                n = b - a
                scale = {"sum": 1.0, "mean": 1.0 / n if n else 0.0, "sqrt_n": n ** -0.5 if n else 0.0}[pooling]
                bags.append(total * scale)
            out[name] = torch.stack(bags)
        return out

    def test_forward_and_backward_match_pytorch(self):
        all_ids = sorted({int(i) for ids, _ in self.inputs.values() for i in ids})
        before = self.rows_of(all_ids)
        local = {i: before[k].clone().requires_grad_(True) for k, i in enumerate(all_ids)}
        expected = self.reference(local)
        weights = {name: torch.randn(t.shape, generator=torch.Generator().manual_seed(k))
                   for k, (name, t) in enumerate(sorted(expected.items()))}
        sum(float_sum for float_sum in ((expected[n] * weights[n]).sum() for n in expected)).backward()

        pooled = self.ebc(self.inputs, clock=1)
        for name in expected:
            torch.testing.assert_close(pooled[name], expected[name].detach(), rtol=1e-6, atol=1e-6)
        sum((pooled[n] * weights[n]).sum() for n in pooled).backward()  # pushes the rows' gradients

        after = self.rows_of(all_ids)
        for k, i in enumerate(all_ids):  # SGD at rate 1: each row moved by minus its gradient
            torch.testing.assert_close(after[k], before[k] - local[i].grad, rtol=1e-5, atol=1e-6)

    def test_bags_of_any_length_as_many_entries_as_bags(self):
        # Three entries in three bags, but not one each: an empty bag, then one, then two.
        self.inputs = {"target": (torch.tensor([7, 8, 9], dtype=torch.int64), torch.tensor([0, 0, 1]))}
        rows = self.rows_of([7, 8, 9])
        expected = self.reference({7: rows[0], 8: rows[1], 9: rows[2]})["target"]
        torch.testing.assert_close(self.ebc(self.inputs, clock=1)["target"], expected, rtol=1e-6, atol=1e-6)

    def test_sequences_give_each_entrys_row(self):
        all_ids = [7, 8, 9]
        before = self.rows_of(all_ids)
        out = self.ebc({"history": self.inputs["history"]}, clock=1, sequences=("history",))
        rows, offsets = out["history"]
        torch.testing.assert_close(rows, torch.stack([before[0], before[1], before[2], before[0]]))
        self.assertEqual(offsets.tolist(), [0, 3, 3])
        rows.sum().backward()  # every entry's row gets gradient 1 per element: id 7 twice
        after = self.rows_of(all_ids)
        torch.testing.assert_close(after, before - torch.tensor([[2.0], [1.0], [1.0]]))

    def test_unknown_names_are_value_errors(self):
        with self.assertRaises(ValueError):
            ktorch.EmbeddingBagCollection(self.client, {"items": DIM}, {"f": ("nope", "sum")})
        with self.assertRaises(ValueError):
            ktorch.EmbeddingBagCollection(self.client, {"items": DIM}, {"f": ("items", "max")})
        with self.assertRaises(ValueError):
            self.ebc({"other": (torch.tensor([1]), torch.tensor([0]))}, clock=0)

    def test_a_table_the_servers_lack_raises_kestrel_error(self):
        ebc = ktorch.EmbeddingBagCollection(self.client, {"missing": DIM}, {"f": ("missing", "sum")})
        with self.assertRaises(kestrel.KestrelError) as caught:
            ebc({"f": (torch.tensor([1]), torch.tensor([0]))}, clock=0)
        self.assertEqual(caught.exception.code, "NOT_FOUND")

class StepTest(unittest.TestCase):
    """A step's pushes to every table go together: all applied, or, one gradient refused, none."""

    def setUp(self):
        self.client = kestrel.Client.in_process(servers=2, job_id="step")
        for table in ("users", "items"):
            self.client.create_table(f'name: "{table}" dim: {DIM} seed: 3 initializer {{ type: NORMAL stddev: 0.5 }} '
                                     'optimizer { type: SGD learning_rate: 1 }')
        self.ebc = ktorch.EmbeddingBagCollection(self.client, {"users": DIM, "items": DIM},
                                                 {"user": ("users", "sum"), "item": ("items", "sum")})
        self.mlp = torch.nn.Linear(2 * DIM, 1)
        self.dense = ktorch.ServerDense(self.client, "dense", self.mlp.parameters(),
                                        optimizer="type: SGD learning_rate: 1")
        ids = torch.arange(6, dtype=torch.int64)
        self.inputs = {"user": (ids, torch.arange(6)), "item": (ids + 100, torch.arange(6))}

    def tables(self):
        keys = {"user": kestrel.feature_keys(np.arange(6, dtype=np.int64).view(np.uint64)),
                "item": kestrel.feature_keys(np.arange(100, 106, dtype=np.int64).view(np.uint64))}
        return (self.client.pull("users", keys["user"], DIM).copy(), self.client.pull("items", keys["item"], DIM).copy(),
                self.client.pull_dense("dense", self.dense.size).copy())

    def run_step(self, poison=None):
        with ktorch.step(self.client, 1):
            self.dense.pull()
            pooled = self.ebc(self.inputs)
            if poison == "items":  # a NaN reaches only the items table's gradient
                pooled["item"] = pooled["item"] * torch.tensor([float("nan")] + [1.0] * 5)[:, None]
            self.mlp(torch.cat([pooled["user"], pooled["item"]], 1)).sum().backward()
            self.dense.push()
            if poison == "raise":
                raise RuntimeError("the loss was bad")

    def test_a_refused_gradient_leaves_every_table_unchanged(self):
        before = self.tables()
        with self.assertRaises(kestrel.KestrelError) as caught:
            self.run_step(poison="items")
        self.assertEqual(caught.exception.code, "INVALID_ARGUMENT")
        self.assertIn("items", caught.exception.message)
        for was, now in zip(before, self.tables()):
            np.testing.assert_array_equal(was, now)
        # An exception inside the step pushes nothing either.
        with self.assertRaises(RuntimeError):
            self.run_step(poison="raise")
        for was, now in zip(before, self.tables()):
            np.testing.assert_array_equal(was, now)
        # A good step moves every table, once.
        self.run_step()
        for was, now in zip(before, self.tables()):
            self.assertFalse(np.array_equal(was, now))

    def test_a_module_call_needs_a_clock(self):
        with self.assertRaises(ValueError) as caught:
            self.ebc(self.inputs)
        self.assertIn("kestrel.torch.step", str(caught.exception))
        with ktorch.step(self.client, 4) as current:
            self.assertIs(ktorch.current_step(), current)
            self.assertEqual(current.clock, 4)
        self.assertIsNone(ktorch.current_step())

if __name__ == "__main__":
    unittest.main()
