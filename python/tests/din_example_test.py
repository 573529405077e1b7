"""examples/torch/din.py, DeepFM plus target attention over the history (a model the built-in ones cannot
express), beats examples/torch/deepfm.py's DeepFM on kestrel_datagen's planted-history data."""
import os
import re
import subprocess
import sys
import tempfile
import unittest

from runfiles import child_env, path



class DinExampleTest(unittest.TestCase):
    def test_attention_over_the_history_beats_deepfm(self):
        work = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        subprocess.run([path("worker/data/kestrel_datagen"), "--format=schema", "--train_rows=40000",
                        "--test_rows=8000", f"--out_dir={work}"], check=True, capture_output=True)
        env = child_env()
        aucs = {}
        for example in ("deepfm", "din"):
            run = subprocess.run([sys.executable, path(f"examples/torch/{example}.py"),
                                  f"--config={work}/job.pbtxt", f"--train={work}/train.tsv",
                                  f"--test={work}/test.tsv"], capture_output=True, text=True, env=env)
            self.assertEqual(run.returncode, 0, run.stderr[-2000:])
            aucs[example] = float(re.search(r"test AUC ([0-9.]+)", run.stdout).group(1))
        print(f"test AUC: DeepFM {aucs['deepfm']:.5f}, DeepFM + target attention {aucs['din']:.5f}")
        self.assertGreater(aucs["din"], aucs["deepfm"] + 0.01)


if __name__ == "__main__":
    unittest.main()
