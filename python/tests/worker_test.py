"""kestrel.Worker against a real kestrel_scheduler and kestrel_server (plaintext on loopback, one worker, BSP):
it joins, takes its batches in the job's order, passes the gate, pushes; after the job rolled back, a pull or push
of the old pass raises naming the generation and nothing is applied; recover() continues from the rollback's clock
with the same batches."""
import os
import subprocess
import tempfile
import time
import unittest

import numpy as np

import kestrel
from runfiles import path


def read(file_name):
    with open(file_name) as f:
        return f.read()


def wait_for_port(port_file, process, log):
    deadline = time.monotonic() + 30
    while not (os.path.exists(port_file) and read(port_file).strip()):
        if time.monotonic() > deadline or process.poll() is not None:
            raise RuntimeError(f"{port_file}: did not start: {read(log)[-2000:]}")
        time.sleep(0.05)
    return "127.0.0.1:" + read(port_file).strip()


class WorkerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        subprocess.run([path("worker/data/kestrel_datagen"), "--small", f"--out_dir={cls.work}/data"], check=True,
                       capture_output=True)
        cls.config = ('model { type: LOGISTIC_REGRESSION } train { batch_size: 1000 epochs: 1 } data { format: CRITEO '
                      f'train_files: "{cls.work}/data/train.tsv" test_files: "{cls.work}/data/test.tsv" }}')
        cls.processes, cls.logs = [], []
        common = ["--job_id=wt", "--host=127.0.0.1", "--port=0"]
        cls.start("scheduler", [path("scheduler/kestrel_scheduler")] + common + [
            "--num_servers=1", "--num_workers=1", "--consistency=bsp", "--heartbeat_interval=300ms",
            f"--checkpoint_dir={cls.work}/ckpt", f"--port_file={cls.work}/scheduler.port"])
        cls.scheduler = wait_for_port(f"{cls.work}/scheduler.port", cls.processes[-1], cls.logs[-1])
        cls.start("server", [path("server/kestrel_server")] + common + [
            "--num_servers=1", "--rank=0", "--bsp_workers=1", f"--scheduler={cls.scheduler}",
            f"--checkpoint_dir={cls.work}/ckpt"])

    @classmethod
    def start(cls, name, argv):
        log = f"{cls.work}/{name}.log"
        cls.logs.append(log)
        with open(log, "w") as out:
            cls.processes.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=out))

    @classmethod
    def tearDownClass(cls):
        for p in cls.processes:
            p.terminate()
            p.wait(timeout=30)

    def test_join_train_roll_back_recover(self):
        worker = kestrel.Worker(self.config, scheduler=self.scheduler, job_id="wt", scheduler_timeout=30)
        self.assertEqual((worker.rank, worker.num_workers, worker.num_servers, worker.consistency), (0, 1, 1, "bsp"))
        self.assertEqual((worker.start_clock, worker.total), (0, 80))  # 80000 lines in batches of 1000
        client = worker.client
        client.create_table('name: "t" dim: 2 initializer { type: ZEROS } optimizer { type: SGD learning_rate: 1 }')
        keys = np.array([7, 9], np.uint64)
        first = []
        for clock in range(3):
            got, batch = worker.next_batch()
            self.assertEqual(got, clock)
            self.assertEqual(len(batch["labels"]), 1000)
            first.append(batch["labels"].copy())
            worker.wait_to_start(clock)
            client.push("t", keys, np.ones((2, 2), np.float32), clock)
            worker.advance(clock + 1)
        with self.assertRaises(ValueError):
            worker.advance(7)  # not the next clock
        np.testing.assert_array_equal(client.pull("t", keys, 2, 3), -3 * np.ones((2, 2), np.float32))

        # The job rolls back (no checkpoint committed: to clock 0, empty tables).
        worker.request_rollback("worker_test")
        deadline = time.monotonic() + 30
        while not worker.superseded:
            self.assertLess(time.monotonic(), deadline, "the rollback was never announced")
            time.sleep(0.05)
        for call in (lambda: client.pull("t", keys, 2, 3),
                     lambda: client.push("t", keys, np.ones((2, 2), np.float32), 3)):
            with self.assertRaises(kestrel.KestrelError) as caught:
                call()
            self.assertIn("generation", caught.exception.message)

        self.assertTrue(worker.recover("the job rolled back"))
        self.assertEqual((worker.start_clock, worker.rollbacks), (0, 1))
        client.create_table('name: "t" dim: 2 initializer { type: ZEROS } optimizer { type: SGD learning_rate: 1 }')
        # Nothing of the refused push, nor of the rolled-back clocks, is applied.
        np.testing.assert_array_equal(client.pull("t", keys, 2, 0), np.zeros((2, 2), np.float32))
        for clock in range(3):  # the same batches again
            got, batch = worker.next_batch()
            self.assertEqual(got, clock)
            np.testing.assert_array_equal(batch["labels"], first[clock])


if __name__ == "__main__":
    unittest.main()
