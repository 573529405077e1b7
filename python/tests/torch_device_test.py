"""kestrel.torch on a module's device: EmbeddingBagCollection pulls its rows to the device of the module
(module.to(device)), pools there and pushes the gradients back; ServerDense copies its table into parameters on
that device; kestrel.torch.fit trains on --device. On the CPU device here; with CUDA, the same step on the GPU
equals the CPU's (skipped, saying so, where PyTorch has no CUDA device)."""
import unittest

import numpy as np
import torch

import kestrel
from kestrel import torch as kt

DIM = 4


def one_step(device):
    """A step of a two-table model on `device` from fresh servers: its pooled outputs (on the CPU) and the rows
    and dense weights after the step's push."""
    client = kestrel.Client.in_process(servers=2, job_id="device")
    for table in ("users", "items"):
        client.create_table(f'name: "{table}" dim: {DIM} seed: 3 initializer {{ type: NORMAL stddev: 0.5 }} '
                            'optimizer { type: SGD learning_rate: 1 }')
    torch.manual_seed(1)
    ebc = kt.EmbeddingBagCollection(client, {"users": DIM, "items": DIM},
                                    {"user": ("users", "sum"), "history": ("items", "mean")}).to(device)
    mlp = torch.nn.Linear(2 * DIM, 1).to(device)
    dense = kt.ServerDense(client, "dense", list(mlp.parameters()), optimizer="type: SGD learning_rate: 1",
                           initializer=None)
    inputs = {"user": (torch.arange(4), torch.arange(4)),
              "history": (torch.tensor([7, 8, 9, 7, 8]), torch.tensor([0, 2, 2, 4]))}
    with kt.step(client, 1):
        dense.pull()
        pooled = ebc(inputs)
        assert pooled["user"].device.type == torch.device(device).type, pooled["user"].device
        mlp(torch.cat([pooled["user"], pooled["history"]], 1)).sum().backward()
        dense.push()
    keys = kestrel.feature_keys(np.array([7, 8, 9], dtype=np.int64).view(np.uint64))
    return ({k: v.detach().cpu() for k, v in pooled.items()}, client.pull("items", keys, DIM),
            client.pull_dense("dense", dense.size))


class DeviceTest(unittest.TestCase):
    def test_the_cpu_device(self):
        pooled, rows, weights = one_step(torch.device("cpu"))
        again = one_step("cpu")
        for name in pooled:
            torch.testing.assert_close(pooled[name], again[0][name], rtol=0, atol=0)
        np.testing.assert_array_equal(rows, again[1])
        np.testing.assert_array_equal(weights, again[2])
        self.assertEqual(kt.device_of("cpu"), torch.device("cpu"))
        self.assertEqual(kt.device_of("auto").type, "cuda" if torch.cuda.is_available() else "cpu")
        batch = kt.on_device({"dense": np.ones((2, 3), np.float32), "labels": np.zeros(2, np.float32),
                              "weights": np.ones(2, np.float32), "features": {}}, torch.device("cpu"))
        self.assertIsInstance(batch["dense"], torch.Tensor)
        if not torch.cuda.is_available():
            with self.assertRaises(ValueError) as caught:
                kt.device_of("cuda")
            self.assertIn("no CUDA device", str(caught.exception))

    @unittest.skipUnless(torch.cuda.is_available(),
                         "no CUDA device in this PyTorch: the device path ran on the CPU device (test_the_cpu_device)")
    def test_cuda_matches_the_cpu(self):
        cpu, cuda = one_step("cpu"), one_step("cuda")
        for name in cpu[0]:
            torch.testing.assert_close(cuda[0][name], cpu[0][name], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(cuda[1], cpu[1], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(cuda[2], cpu[2], rtol=1e-5, atol=1e-6)


if __name__ == "__main__":
    unittest.main()
