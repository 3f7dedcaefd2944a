"""The SDK over TLS: a parameter server and two workers with certificates from `tessera certs`
(TESSERA_BIN) and a cluster token; a job trained through tessera.Client and a KVStore rank on
a TLS parameter server, and the refusals: no TLS, another CA (a KVStore rank's at once, not
after its connect_timeout), a wrong token. MNIST from TESSERA_MNIST_DIR (skipped without it)."""
import os
import pathlib
import subprocess
import tempfile
import time
import unittest

import numpy as np

import tessera
from daemons import start_daemon
from test_client import mlp_job

MNIST = os.environ.get("TESSERA_MNIST_DIR")
HOST = "127.0.0.1"


def make_certs(folder):
    subprocess.run([os.environ["TESSERA_BIN"], "certs", str(folder), "--hosts", HOST],
                   check=True, capture_output=True)
    return folder / HOST


@unittest.skipUnless(MNIST, "needs MNIST: TESSERA_MNIST_DIR (./tessera data mnist)")
class TlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = pathlib.Path(tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR")))
        cls.tls_dir = make_certs(cls.dir / "certs")
        cls.token_file = cls.dir / "token"
        cls.token_file.write_text("python-tls-test-token\n")
        tls = [f"--tls_dir={cls.tls_dir}"]
        cls.processes = []

        def start(argv, name):
            process, address = start_daemon(argv + tls, cls.dir, name, cls.token_file)
            cls.processes.append(process)
            return address

        cls.servers = [start([os.environ["TESSERA_PS_BIN"], "--index=0", "--num_servers=1",
                              "--num_workers=2"], "ps-0")]
        cls.workers = [start([os.environ["TESSERA_WORKER_BIN"], f"--seed={rank}",
                              f"--data_root={MNIST}", f"--run_root={cls.dir}"], f"worker-{rank}")
                       for rank in range(2)]
        cls.kv_server = start([os.environ["TESSERA_PS_BIN"], "--index=0", "--num_servers=1",
                               "--num_workers=1"], "ps-kv")

    @classmethod
    def tearDownClass(cls):
        for p in cls.processes:
            p.terminate()
            p.wait(timeout=30)

    def client(self, **kwargs):
        kwargs.setdefault("tls_dir", self.tls_dir)
        kwargs.setdefault("token_file", self.token_file)
        return tessera.Client(workers=self.workers, servers=self.servers, **kwargs)

    def test_a_job_trains_over_tls(self):
        with self.client() as client:
            result = client.submit(tessera.Job(mlp_job())).wait(progress=False)
        self.assertGreater(result.eval["accuracy"], 0.85)

    def test_a_kvstore_rank_works_over_tls(self):
        with tessera.kv.create("dist_sync", servers=[self.kv_server], rank=0, num_workers=1,
                               job_id="tls-kv", tls_dir=self.tls_dir,
                               token_file=self.token_file) as store:
            store.init("w", np.ones((2, 3), np.float32))
            store.push("w", np.full((2, 3), 4, np.float32))
            np.testing.assert_array_equal(store.pull("w"), np.full((2, 3), 4, np.float32))

    def test_a_kvstore_rank_without_tls_or_with_another_ca_fails_at_once(self):
        other_ca = make_certs(self.dir / "other-certs-kv")
        for tls_dir, why in ((other_ca, "TLS handshake failed"), (None, "closes every connection")):
            with self.subTest(tls_dir=tls_dir):
                start = time.monotonic()
                with self.assertRaises(tessera.TesseraError) as raised:
                    tessera.kv.create("dist_sync", servers=[self.kv_server], rank=0,
                                      num_workers=1, job_id="tls-kv-refused", tls_dir=tls_dir,
                                      token_file=self.token_file, connect_timeout=60)
                self.assertEqual(raised.exception.code, "UNAVAILABLE")
                self.assertIn(f"parameter server {self.kv_server}", raised.exception.message)
                self.assertIn(why, raised.exception.message)
                self.assertLess(time.monotonic() - start, 30, "it waited for connect_timeout")

    def test_a_client_without_tls_or_with_another_ca_cannot_connect(self):
        other_ca = make_certs(self.dir / "other-certs")
        for kwargs in ({"tls_dir": None}, {"tls_dir": other_ca}):
            with self.subTest(**kwargs), self.client(**kwargs) as client:
                with self.assertRaises(tessera.TesseraError) as raised:
                    client.status()
                self.assertEqual(raised.exception.code, "UNAVAILABLE")
                self.assertIn(f"worker 0 ({self.workers[0]})", raised.exception.message)

    def test_the_right_certificate_with_a_wrong_token_is_refused(self):
        with self.client(token_file=None, token="not-the-token") as client:
            with self.assertRaises(tessera.TesseraError) as raised:
                client.status()
        self.assertEqual(raised.exception.code, "UNAUTHENTICATED")


if __name__ == "__main__":
    unittest.main()
