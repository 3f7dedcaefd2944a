"""tessera.Client and tessera.Job against real daemons on loopback: a parameter server and two
workers started from the built binaries (TESSERA_PS_BIN, TESSERA_WORKER_BIN; TESSERA_BIN is
the command line Job calls), with a cluster token, training on MNIST (TESSERA_MNIST_DIR;
skipped without it)."""
import os
import pathlib
import tempfile
import unittest

import tessera
from daemons import start_daemon

MNIST = os.environ.get("TESSERA_MNIST_DIR")


def mlp_job(**overrides):
    job = {"name": "mlp-python", "network": {"model": "mlp"},
           "data": {"kind": "mnist", "dir": MNIST, "flat": True, "shuffle": True},
           "batch_size": 64, "epochs": 1, "kvstore": "dist_sync",
           "optimizer": {"name": "sgd", "params": {"learning_rate": 0.1, "momentum": 0.9}},
           "eval_metric": ["acc"], "seed": 1}
    job.update(overrides)
    return job


@unittest.skipUnless(MNIST, "needs MNIST: TESSERA_MNIST_DIR (./tessera data mnist)")
class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = pathlib.Path(tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR")))
        cls.token_file = cls.dir / "token"
        cls.token_file.write_text("python-sdk-test-token\n")
        cls.processes = []
        ps, server = start_daemon([os.environ["TESSERA_PS_BIN"], "--index=0", "--num_servers=1",
                                   "--num_workers=2"], cls.dir, "ps-0", cls.token_file)
        cls.processes.append(ps)
        cls.workers = []
        for rank in range(2):
            worker, address = start_daemon(
                [os.environ["TESSERA_WORKER_BIN"], f"--seed={rank}", f"--data_root={MNIST}",
                 f"--run_root={cls.dir}"], cls.dir, f"worker-{rank}", cls.token_file)
            cls.processes.append(worker)
            cls.workers.append(address)
        cls.servers = [server]

    @classmethod
    def tearDownClass(cls):
        for p in cls.processes:
            p.terminate()
            p.wait(timeout=30)

    def client(self, **kwargs):
        return tessera.Client(workers=self.workers, servers=self.servers,
                              token_file=self.token_file, **kwargs)

    def test_a_job_from_python_trains_and_its_parameters_come_back(self):
        with self.client() as client:
            run = client.submit(tessera.Job(mlp_job()))
            events = list(run.events())
            result = run.wait()
            params = client.params()
        started = sorted(e.rank for e in events if isinstance(e, tessera.Started))
        self.assertEqual(started, [0, 1])
        self.assertTrue(any(isinstance(e, tessera.Batch) and e.samples_per_second > 0
                            for e in events))
        finished = [e for e in events if isinstance(e, tessera.Finished)]
        self.assertEqual(sorted(e.rank for e in finished), [0, 1])
        self.assertGreater(result.eval["accuracy"], 0.9)
        self.assertEqual(params["fc1_weight"].shape, (128, 784))
        self.assertEqual(params["fc1_weight"].dtype.name, "float32")

    def test_a_job_field_the_checker_does_not_know_is_refused_by_name(self):
        with self.assertRaises(tessera.TesseraError) as caught:
            tessera.Job(mlp_job(epoch=3))
        self.assertEqual(caught.exception.code, "INVALID_ARGUMENT")
        self.assertIn("epoch: unknown key", caught.exception.message)

    def test_mixed_precision_is_a_job_field_checked_by_name(self):
        job = tessera.Job(mlp_job(amp={"dtype": "float16", "loss_scale": "1024"}))
        self.assertEqual((job.spec.amp.dtype, job.spec.amp.loss_scale), ("float16", "1024"))
        self.assertEqual(job.spec.version, 5)
        with self.assertRaises(tessera.TesseraError) as caught:
            tessera.Job(mlp_job(amp={"dtype": "float8"}))
        self.assertEqual(caught.exception.code, "INVALID_ARGUMENT")
        self.assertIn("amp.dtype", caught.exception.message)

    def test_gradient_compression_is_a_job_field_checked_by_name(self):
        job = tessera.Job(mlp_job(compression_params={"type": "2bit", "threshold": 0.25}))
        self.assertEqual((job.spec.compression.type, job.spec.compression.threshold), ("2bit", 0.25))
        self.assertEqual(job.spec.version, 6)
        with self.assertRaises(tessera.TesseraError) as caught:
            tessera.Job(mlp_job(compression_params={"type": "1bit"}))
        self.assertEqual(caught.exception.code, "INVALID_ARGUMENT")
        self.assertIn("compression_params.type", caught.exception.message)
        job = tessera.Job(mlp_job(compression_params={"type": "2bit", "pull_type": "bf16"}))
        self.assertEqual(job.spec.compression.pull_type, "bf16")
        with self.assertRaises(tessera.TesseraError) as caught:
            tessera.Job(mlp_job(compression_params={"pull_type": "int8"}))
        self.assertIn("compression_params.pull_type", caught.exception.message)

    def test_a_bad_job_is_answered_with_the_daemons_message(self):
        with self.client() as client:
            run = client.submit(tessera.Job(mlp_job(data={"kind": "mnist", "dir": "/etc"})))
            with self.assertRaises(tessera.TesseraError) as caught:
                run.wait()
        self.assertEqual(caught.exception.code, "NOT_FOUND")
        self.assertRegex(caught.exception.message,
                         r"^worker \d \(127\.0\.0\.1:\d+\): data\.train_images: cannot open "
                         r"'/etc/train-images-idx3-ubyte'")

    def test_cancel_stops_the_run_on_every_worker(self):
        with self.client() as client:
            run = client.submit(tessera.Job(mlp_job(epochs=100)))
            events = run.events()
            for event in events:
                if isinstance(event, tessera.Batch):
                    break
            run.cancel()
            with self.assertRaises(tessera.TesseraError) as caught:
                for _ in events:
                    pass
            self.assertEqual(caught.exception.code, "CANCELLED")
            self.assertTrue(all(s.state == s.IDLE for s in client.status()))

    def test_the_cluster_owns_a_job_listed_attached_and_cancelled_by_id(self):
        with self.client() as client:
            # No end of its own: it runs until cancelled, whatever the machine's speed.
            endless = client.submit(tessera.Job(mlp_job(name="endless", epochs=1000000)))
            queued = client.submit(tessera.Job(mlp_job(name="queued")))
            self.assertEqual(queued.record.state, queued.record.QUEUED)
            listed = [r.id for r in client.jobs()]
            self.assertLess(listed.index(endless.id), listed.index(queued.id))
            # The Run that submitted it may be dropped: another follows the job by id.
            follower = client.attach(endless.id)
            for event in follower.events(progress=False):
                if isinstance(event, tessera.Batch):
                    break
            client.cancel(endless.id)
            with self.assertRaises(tessera.TesseraError) as caught:
                follower.wait(progress=False)
            self.assertEqual(caught.exception.code, "CANCELLED")
            result = client.attach(queued.id).wait(progress=False)
            self.assertGreater(result.eval["accuracy"], 0.9)
            with self.assertRaises(tessera.TesseraError) as caught:
                client.attach("no-such-job")
            self.assertEqual(caught.exception.code, "NOT_FOUND")

    def test_a_client_without_the_token_is_turned_away(self):
        with tessera.Client(workers=self.workers) as client:
            with self.assertRaises(tessera.TesseraError) as caught:
                client.status()
        self.assertEqual(caught.exception.code, "UNAUTHENTICATED")
        self.assertIn("worker 0", caught.exception.message)

    def test_plaintext_beyond_loopback_is_refused_before_dialing(self):
        with self.assertRaises(tessera.TesseraError) as caught:
            tessera.Client(workers=["10.1.2.3:7000"])
        self.assertEqual(caught.exception.code, "PERMISSION_DENIED")


if __name__ == "__main__":
    unittest.main()
