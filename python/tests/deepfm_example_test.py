"""examples/torch/deepfm.py, DeepFM written in PyTorch on Kestrel's tables, reaches the built-in DeepFM's test
AUC (kestrel_worker --local) on the same generated data and config, within 0.002."""
import os
import re
import subprocess
import sys
import tempfile
import unittest

from runfiles import child_env, path



class DeepFmExampleTest(unittest.TestCase):
    def test_matches_the_built_in_model(self):
        work = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        subprocess.run([path("worker/data/kestrel_datagen"), "--train_rows=20000", "--test_rows=4000",
                        "--max_vocab=2000", f"--out_dir={work}"], check=True, capture_output=True)
        config = os.path.join(work, "job.pbtxt")
        with open(config, "w") as f:
            f.write("model { type: DEEPFM embedding_dim: 8 hidden: [32, 16] }\n"
                    "data { format: CRITEO }\ntrain { batch_size: 256 epochs: 2 }\n")
        train, test = os.path.join(work, "train.tsv"), os.path.join(work, "test.tsv")
        built_in = subprocess.run([path("cmd/kestrel_worker"), "--local", "--device=cpu", f"--config={config}",
                                   f"--train_files={train}", f"--test_files={test}"],
                                  capture_output=True, text=True, check=True)
        built_in_auc = float(re.search(r"test logloss \S+ AUC ([0-9.]+)", built_in.stderr).group(1))
        env = child_env()
        torch_run = subprocess.run([sys.executable, path("examples/torch/deepfm.py"), f"--config={config}",
                                    f"--train={train}", f"--test={test}"],
                                   capture_output=True, text=True, env=env)
        self.assertEqual(torch_run.returncode, 0, torch_run.stderr[-2000:])
        torch_auc = float(re.search(r"test AUC ([0-9.]+)", torch_run.stdout).group(1))
        print(f"built-in DeepFM AUC {built_in_auc:.5f}, PyTorch DeepFM AUC {torch_auc:.5f}")
        self.assertGreater(built_in_auc, 0.6)
        self.assertLess(abs(built_in_auc - torch_auc), 0.002)


if __name__ == "__main__":
    unittest.main()
