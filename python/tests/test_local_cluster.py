"""tessera.LocalCluster: daemons started by the command line's `tessera cluster` (TESSERA_BIN),
a job whose network was built in Python trained on them (MNIST from TESSERA_MNIST_DIR;
skipped without it), and the daemons gone after close() and after the owner dies."""
import json
import os
import subprocess
import sys
import time
import unittest

import tessera
from tessera import sym

MNIST = os.environ.get("TESSERA_MNIST_DIR")


def running(pid):
    """Whether `pid` is a live process (a zombie has exited)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_until_gone(pids, seconds=30):
    deadline = time.monotonic() + seconds
    while any(running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [p for p in pids if running(p)]


class LocalClusterTest(unittest.TestCase):
    @unittest.skipUnless(MNIST, "needs MNIST: TESSERA_MNIST_DIR (./tessera data mnist)")
    def test_a_network_built_in_python_trains_on_a_local_cluster(self):
        net = sym.Variable("data")
        net = sym.FullyConnected(net, num_hidden=128, name="fc1")
        net = sym.Activation(net, act_type="relu")
        net = sym.SoftmaxOutput(sym.FullyConnected(net, num_hidden=10, name="fc2"),
                                name="softmax")
        job = tessera.Job(name="python-mlp", network=net,
                          data={"kind": "mnist", "dir": MNIST, "flat": True},
                          batch_size=64, epochs=1, kvstore="dist_sync", seed=1,
                          optimizer={"name": "sgd",
                                     "params": {"learning_rate": 0.1, "momentum": 0.9}})
        self.assertEqual(job.spec.WhichOneof("network"), "graph")
        with tessera.LocalCluster(workers=2, servers=1) as cluster:
            self.assertEqual((len(cluster.workers), len(cluster.servers)), (2, 1))
            self.assertTrue(all(running(p) for p in cluster.pids))
            with cluster.client() as client:
                result = client.submit(job).wait()
                params = client.params()
            self.assertTrue(cluster.alive())
        self.assertGreater(result.eval["accuracy"], 0.85)
        self.assertEqual(params["fc1_weight"].shape, (128, 784))
        self.assertEqual(wait_until_gone(cluster.pids), [])
        self.assertFalse(os.path.exists(cluster.run_dir))

    def test_the_daemons_stop_when_their_owner_dies(self):
        owner = subprocess.run(
            [sys.executable, "-c",
             "import json, os, tessera\n"
             "cluster = tessera.LocalCluster(workers=1, servers=1)\n"
             "print(json.dumps(cluster.pids), flush=True)\n"
             "os._exit(0)  # no finalizers: as if killed\n"],
            capture_output=True, text=True, timeout=120,
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p)))
        self.assertEqual(owner.returncode, 0, owner.stderr)
        pids = json.loads(owner.stdout)
        self.assertEqual(len(pids), 2)
        self.assertEqual(wait_until_gone(pids), [])

    def test_a_cluster_that_cannot_start_says_why(self):
        with self.assertRaises(tessera.TesseraError) as raised:
            tessera.LocalCluster(workers=0)
        self.assertEqual(raised.exception.message,
                         "-n: expected a number of workers >= 1, got '0'")


if __name__ == "__main__":
    unittest.main()
