"""The Python client over in-process servers: rows travel both ways through numpy arrays, and refused calls raise
KestrelError with the status code and message, applying nothing."""
import unittest

import numpy as np

import kestrel

SGD_TABLE = """
name: "emb" kind: SPARSE dim: 4
initializer { type: ZEROS }
optimizer { type: SGD learning_rate: 1 }
"""


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.client = kestrel.Client.in_process(servers=2, job_id="py")
        self.client.create_table(SGD_TABLE)

    def test_push_then_pull(self):
        keys = np.array([5, 1 << 40, 5, 77], dtype=np.uint64)
        grads = np.arange(16, dtype=np.float32).reshape(4, 4)
        self.client.push("emb", keys, grads, clock=1)
        rows = self.client.pull("emb", np.array([5, 77, 1 << 40, 9], dtype=np.uint64), 4)
        self.assertEqual(rows.shape, (4, 4))
        self.assertEqual(rows.dtype, np.float32)
        # SGD at rate 1 from zeros: minus the summed gradient (key 5 twice), an untouched key zeros.
        np.testing.assert_array_equal(rows[0], -(grads[0] + grads[2]))
        np.testing.assert_array_equal(rows[1], -grads[3])
        np.testing.assert_array_equal(rows[2], -grads[1])
        np.testing.assert_array_equal(rows[3], np.zeros(4, dtype=np.float32))
        self.assertEqual(self.client.num_servers, 2)

    def test_unknown_table_names_it(self):
        with self.assertRaises(kestrel.KestrelError) as caught:
            self.client.pull("nope", np.array([1], dtype=np.uint64), 4)
        self.assertEqual(caught.exception.code, "NOT_FOUND")
        self.assertIn("nope", caught.exception.message)
        # Each code has its subclass, to catch what the caller can act on.
        self.assertIsInstance(caught.exception, kestrel.NotFoundError)
        self.assertNotIsInstance(caught.exception, kestrel.UnavailableError)
        self.assertTrue(issubclass(kestrel.InvalidArgumentError, kestrel.KestrelError))
        self.assertTrue(issubclass(kestrel.KestrelError, RuntimeError))
        self.assertEqual(kestrel.FailedPreconditionError.__name__, "FailedPreconditionError")
        self.assertEqual(len(kestrel.ERRORS), 16)

    def test_dimension_mismatch_is_refused_and_nothing_applied(self):
        keys = np.array([3], dtype=np.uint64)
        with self.assertRaises(kestrel.KestrelError) as caught:
            self.client.push("emb", keys, np.ones((1, 8), dtype=np.float32))
        self.assertEqual(caught.exception.code, "INVALID_ARGUMENT")
        self.assertIsInstance(caught.exception, kestrel.InvalidArgumentError)
        np.testing.assert_array_equal(self.client.pull("emb", keys, 4), np.zeros((1, 4), dtype=np.float32))

    def test_non_finite_gradient_is_refused_and_nothing_applied(self):
        keys = np.array([3, 4], dtype=np.uint64)
        grads = np.ones((2, 4), dtype=np.float32)
        grads[1, 2] = np.nan
        with self.assertRaises(kestrel.KestrelError) as caught:
            self.client.push("emb", keys, grads)
        self.assertEqual(caught.exception.code, "INVALID_ARGUMENT")
        self.assertIn("finite", caught.exception.message)
        np.testing.assert_array_equal(self.client.pull("emb", keys, 4), np.zeros((2, 4), dtype=np.float32))

    def test_arrays_of_the_wrong_type_or_shape_are_value_errors(self):
        with self.assertRaises(ValueError):
            self.client.pull("emb", np.array([1, 2], dtype=np.int64), 4)
        with self.assertRaises(ValueError):
            self.client.push("emb", np.array([1], dtype=np.uint64), np.ones((2, 4), dtype=np.float32))
        with self.assertRaises(ValueError):
            self.client.push("emb", np.array([1], dtype=np.uint64), np.ones((1, 4), dtype=np.float64))
        with self.assertRaises(ValueError):
            self.client.create_table("this is not a table config")
        with self.assertRaises(ValueError):  # refused before the answer's array is allocated
            self.client.pull("emb", np.array([1], dtype=np.uint64), 1 << 30)
        with self.assertRaises(ValueError):
            self.client.pull_dense("dense", 1 << 40)

    def test_dense_tensor(self):
        self.client.create_table("""
            name: "dense" kind: DENSE dim: 3 dense_size: 7
            initializer { type: ZEROS } optimizer { type: SGD learning_rate: 0.5 }""")
        self.client.push_dense("dense", np.full(7, 2.0, dtype=np.float32), clock=1)
        np.testing.assert_array_equal(self.client.pull_dense("dense", 7), np.full(7, -1.0, dtype=np.float32))


class WorkerFlagsTest(unittest.TestCase):
    def test_durations_are_kestrel_workers(self):
        import argparse
        from kestrel import worker
        self.assertEqual(kestrel.duration_seconds("1h30m"), 5400.0)
        self.assertEqual(kestrel.duration_seconds("250ms"), 0.25)
        self.assertEqual(worker.seconds("10m"), 600.0)
        self.assertEqual(worker.seconds("45"), 45.0)
        for bad in ("10 minutes", "", "m"):
            with self.assertRaises(argparse.ArgumentTypeError):
                worker.seconds(bad)


if __name__ == "__main__":
    unittest.main()
