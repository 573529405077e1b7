"""examples/torch/two_tower.py, a model the built-in ones cannot express, through kestrel.torch.fit: at most 60
lines for one process and a cluster together, trains on the generated history data to about the built-in
DeepFM's test AUC, and its export scores the test file bit for bit as the training's own evaluation did
(kestrel.torch.load); kestrel_predict refuses the export by name."""
import os
import re
import subprocess
import sys
import tempfile
import unittest

from runfiles import child_env, path


class TwoTowerExampleTest(unittest.TestCase):
    def test_trains_exports_and_scores_bit_for_bit(self):
        example = path("examples/torch/two_tower.py")
        with open(example) as f:
            self.assertLessEqual(len(f.read().splitlines()), 60, "the example's whole file")
        work = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        subprocess.run([path("worker/data/kestrel_datagen"), "--format=schema", "--train_rows=20000",
                        "--test_rows=4000", f"--out_dir={work}"], check=True, capture_output=True)
        config, test = os.path.join(work, "job.pbtxt"), os.path.join(work, "test.tsv")
        built_in = subprocess.run([path("cmd/kestrel_worker"), "--local", "--device=cpu", f"--config={config}"],
                                  capture_output=True, text=True, check=True, cwd=work)
        built_in_auc = float(re.search(r"test logloss \S+ AUC ([0-9.]+)", built_in.stderr).group(1))
        model = os.path.join(work, "model")
        env = child_env()
        trained = subprocess.run([sys.executable, example, f"--config={config}", f"--export_dir={model}"],
                                 capture_output=True, text=True, env=env, cwd=work)
        self.assertEqual(trained.returncode, 0, trained.stderr[-3000:])
        found = re.search(r"test AUC ([0-9.]+) logloss ([0-9.]+) fingerprint ([0-9a-f]{16})", trained.stdout)
        self.assertIsNotNone(found, trained.stdout)
        auc, fingerprint = float(found.group(1)), found.group(3)
        print(f"two-tower AUC {auc:.5f}, built-in DeepFM AUC {built_in_auc:.5f}")
        self.assertGreater(auc, built_in_auc - 0.02)
        # The export, loaded in another process, scores the test file as the training's evaluation did.
        scored = subprocess.run([sys.executable, "-c", (
            "import sys; from kestrel import torch as kt; "
            "print(kt.load(sys.argv[1]).score(open(sys.argv[2]).read(), [sys.argv[3]]))"),
            model, config, test], capture_output=True, text=True, env=env, cwd=work)
        self.assertEqual(scored.returncode, 0, scored.stderr[-3000:])
        self.assertIn(f"'{fingerprint}'", scored.stdout)
        refused = subprocess.run([path("export/kestrel_predict"), f"--model={model}", f"--input={test}"],
                                 capture_output=True, text=True)
        self.assertEqual(refused.returncode, 2)
        self.assertIn("holds a PyTorch model (module.json)", refused.stderr)


if __name__ == "__main__":
    unittest.main()
