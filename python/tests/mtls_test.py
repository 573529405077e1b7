"""The Python client against real kestrel_server processes over mutual TLS (certificates from `kestrel certs`):
a worker's certificate trains; plaintext cannot connect; a server's certificate may not push."""
import os
import subprocess
import tempfile
import time
import unittest

import numpy as np

import kestrel
from runfiles import path

SERVERS = 2


def read(file_name):
    with open(file_name) as f:
        return f.read()


class MtlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.certs = os.path.join(cls.work, "certs")
        subprocess.run([path("scripts/kestrel"), "certs", "--job", "py", "--out", cls.certs, "--servers",
                        str(SERVERS), "--workers", "1"], check=True, capture_output=True)
        cls.servers, cls.logs = [], []
        for s in range(SERVERS):
            cls.logs.append(open(f"{cls.work}/server{s}.log", "w"))
            cls.servers.append(subprocess.Popen(
                [path("server/kestrel_server"), "--job_id=py", f"--rank={s}", f"--num_servers={SERVERS}",
                 "--host=127.0.0.1", "--port=0", f"--port_file={cls.work}/port{s}",
                 f"--tls_ca={cls.certs}/ca.pem", f"--tls_cert={cls.certs}/server-{s}.pem",
                 f"--tls_key={cls.certs}/server-{s}.key"],
                stdout=subprocess.DEVNULL, stderr=cls.logs[-1]))
        cls.addresses = []
        for s in range(SERVERS):
            port_file = f"{cls.work}/port{s}"
            deadline = time.monotonic() + 30
            while not (os.path.exists(port_file) and read(port_file).strip()):
                if time.monotonic() > deadline or cls.servers[s].poll() is not None:
                    raise RuntimeError(f"server {s} did not start: {read(f'{cls.work}/server{s}.log')[-2000:]}")
                time.sleep(0.05)
            cls.addresses.append("127.0.0.1:" + read(port_file).strip())

    @classmethod
    def tearDownClass(cls):
        for server in cls.servers:
            server.terminate()
            server.wait(timeout=30)
        for log in cls.logs:
            log.close()

    def client(self, who):
        return kestrel.Client.connect(self.addresses, job_id="py", tls_ca=f"{self.certs}/ca.pem",
                                      tls_cert=f"{self.certs}/{who}.pem", tls_key=f"{self.certs}/{who}.key", rank=0)

    def test_a_worker_trains_over_mutual_tls(self):
        client = self.client("worker-0")
        client.create_table('name: "emb" dim: 4 initializer { type: ZEROS } optimizer { type: SGD learning_rate: 1 }')
        keys = kestrel.feature_keys(np.arange(10, dtype=np.uint64))  # spread over both servers
        client.push("emb", keys, np.ones((10, 4), np.float32), clock=1)
        np.testing.assert_array_equal(client.pull("emb", keys, 4), -np.ones((10, 4), np.float32))

    def test_a_server_certificate_may_not_push(self):
        client = self.client("server-1")
        with self.assertRaises(kestrel.KestrelError) as caught:
            client.push("emb", np.array([1], np.uint64), np.ones((1, 4), np.float32), clock=2)
        self.assertEqual(caught.exception.code, "PERMISSION_DENIED")

    def test_plaintext_cannot_connect(self):
        client = kestrel.Client.connect(self.addresses, job_id="py", rank=0)
        with self.assertRaises(kestrel.KestrelError) as caught:
            client.pull("emb", np.array([1], np.uint64), 4)
        self.assertEqual(caught.exception.code, "UNAVAILABLE")


if __name__ == "__main__":
    unittest.main()
