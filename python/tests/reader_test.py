"""kestrel.Reader yields a job's data as the C++ worker reads it (the job's schema: keys, pooling values, dense
inputs, labels, weights), and kestrel.torch pools the reader's features with the schema's pooling."""
import math
import os
import tempfile
import unittest

import numpy as np
import torch

import kestrel
from kestrel import torch as ktorch

CSV = """label,user,item,hist,price,w
1,u1,a,a|b|c,3,2
0,u2,b,,0,1
1,u1,c,c,1,0.5
"""


def job(path):
    return f"""
model {{ type: DEEPFM embedding_dim: 4 }}
data {{
  format: DELIMITED
  train_files: "{path}"
  schema {{
    header: true
    weight: "w"
    features {{ name: "user" }}
    features {{ name: "item" vocabulary: "tok" table: "tok" }}
    features {{ name: "hist" separator: "|" pooling: POOLING_MEAN vocabulary: "tok" table: "tok" }}
    features {{ name: "price" kind: NUMERIC transform: LOG1P }}
    tables {{ name: "tok" }}
  }}
}}
"""


class ReaderTest(unittest.TestCase):
    def setUp(self):
        directory = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        self.path = os.path.join(directory, "train.csv")
        with open(self.path, "w") as f:
            f.write(CSV)
        self.config = job(self.path)

    def test_a_batch_as_the_schema_says(self):
        reader = kestrel.Reader(self.config)
        self.assertEqual(reader.fields, ["user", "item", "hist"])
        self.assertEqual(reader.field_tables, ["emb", "tok", "tok"])
        self.assertEqual(reader.dense_dim, 1)
        batch = reader.next(10)
        np.testing.assert_array_equal(batch["labels"], [1, 0, 1])
        np.testing.assert_array_equal(batch["weights"], np.array([2, 1, 0.5], dtype=np.float32))
        np.testing.assert_allclose(batch["dense"][:, 0], [math.log1p(3), 0, math.log1p(1)], rtol=1e-6)
        user_keys, user_offsets, _ = batch["features"]["user"]
        item_keys, _, _ = batch["features"]["item"]
        hist_keys, hist_offsets, hist_values = batch["features"]["hist"]
        np.testing.assert_array_equal(user_offsets, [0, 1, 2])
        self.assertEqual(user_keys[0], user_keys[2])  # u1 twice
        np.testing.assert_array_equal(hist_offsets, [0, 3, 3])  # the second history is empty
        np.testing.assert_allclose(hist_values, [1 / 3, 1 / 3, 1 / 3, 1], rtol=1e-6)  # MEAN folded in
        # item and hist share the vocabulary "tok": the same token is the same key.
        np.testing.assert_array_equal(hist_keys[:3], item_keys[[0, 1, 2]])
        self.assertEqual(hist_keys[3], item_keys[2])
        self.assertIsNone(reader.next(10))

    def test_parts_split_the_lines(self):
        labels = []
        for part in range(2):
            batch = kestrel.Reader(self.config, part=part, num_parts=2).next(10)
            labels.append(list(batch["labels"]))
        self.assertEqual(labels, [[1, 1], [0]])

    def test_a_bad_config_raises(self):
        with self.assertRaises(kestrel.KestrelError) as caught:
            kestrel.Reader(self.config.replace('features { name: "user" }', 'features { name: "nobody" }'))
        self.assertEqual(caught.exception.code, "INVALID_ARGUMENT")
        self.assertIn("nobody", caught.exception.message)

    def test_files_given_are_checked_as_the_configs(self):
        # A file whose header swaps two columns of the training files', passed any way: refused, naming both
        # headers. (Alone, its header names its columns, which are then read by name.)
        swapped = os.path.join(os.path.dirname(self.path), "swapped.csv")
        with open(swapped, "w") as f:
            f.write(CSV.replace("label,user,item", "label,item,user"))
        for kwargs in ({"files": [swapped], "test": True}, {"files": [self.path, swapped]}):
            with self.assertRaises(kestrel.KestrelError) as caught:
                kestrel.Reader(self.config, **kwargs)
            self.assertEqual(caught.exception.code, "INVALID_ARGUMENT", kwargs)
            self.assertIn("the header of " + swapped, caught.exception.message)
            self.assertIn("label, item, user", caught.exception.message)
        # The same columns in the same order pass.
        same = os.path.join(os.path.dirname(self.path), "same.csv")
        with open(same, "w") as f:
            f.write(CSV)
        self.assertEqual(len(kestrel.Reader(self.config, files=[same], test=True).next(10)["labels"]), 3)

    def test_pooling_the_readers_features(self):
        client = kestrel.Client.in_process(servers=2, job_id="reader")
        client.create_table('name: "tok" dim: 4 seed: 5 initializer { type: NORMAL stddev: 0.5 }')
        ebc = ktorch.EmbeddingBagCollection(client, {"tok": 4}, {"item": ("tok", "sum"), "hist": ("tok", "mean")})
        batch = kestrel.Reader(self.config).next(10)
        inputs = {name: batch["features"][name] for name in ("item", "hist")}
        pooled = ebc(inputs, clock=0)
        hist_keys, _, _ = batch["features"]["hist"]
        rows = torch.from_numpy(client.pull("tok", hist_keys, 4))
        torch.testing.assert_close(pooled["hist"][0], rows[:3].mean(0), rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(pooled["hist"][1], torch.zeros(4))
        torch.testing.assert_close(pooled["hist"][2], rows[3], rtol=1e-6, atol=1e-6)


if __name__ == "__main__":
    unittest.main()
