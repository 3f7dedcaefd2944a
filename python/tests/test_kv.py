"""tessera.kv against real parameter servers: two tessera-ps daemons (TESSERA_PS_BIN) on
loopback with a cluster token; a Python rank beside a C++ one (TESSERA_KV_PEER_BIN, kv_peer.cc:
the C++ workers' dist KVStore client), two Python ranks, and the errors."""
import concurrent.futures
import json
import os
import pathlib
import subprocess
import tempfile
import unittest

import numpy as np

import tessera
from daemons import start_daemon

# Arrays of this many elements or more are split across both servers; kv_peer gets it too.
BIGARRAY_BOUND = 1000


def initial(size):
    """kv_peer's initial value of a key of `size` elements."""
    return (np.arange(size) % 10).astype(np.float32)


def gradient(rank, round_, size):
    """What kv_peer's formula has rank `rank` push in round `round_` (from 1)."""
    return ((rank + 1) * round_ * (np.arange(size) % 7 - 3)).astype(np.float32)


def sgd_momentum(weight, mom, grad, lr, momentum, wd, rescale_grad):
    """kvstore/internal/update_kernels.h's SgdMomUpdate in float32; the new (weight, mom)."""
    f = np.float32
    mom = f(momentum) * mom - f(lr) * f(wd) * weight - f(lr) * f(rescale_grad) * grad
    return weight + mom, mom


class KVStoreTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = pathlib.Path(tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR")))
        cls.token_file = cls.dir / "token"
        cls.token_file.write_text("python-kv-test-token\n")
        cls.processes, cls.servers = [], []
        for index in range(2):
            ps, address = start_daemon(
                [os.environ["TESSERA_PS_BIN"], f"--index={index}", "--num_servers=2",
                 "--num_workers=2"], cls.dir, f"ps-{index}", cls.token_file)
            cls.processes.append(ps)
            cls.servers.append(address)

    @classmethod
    def tearDownClass(cls):
        for p in cls.processes:
            p.terminate()
            p.wait(timeout=30)

    def store(self, rank, kvstore="dist_sync", **kwargs):
        """Worker `rank` of this test's job (one job per test: the servers start it afresh)."""
        options = dict(servers=self.servers, rank=rank, num_workers=2, job_id=self.id(),
                       token_file=self.token_file, bigarray_bound=BIGARRAY_BOUND)
        options.update(kwargs)
        store = tessera.kv.create(kvstore, **options)
        self.addCleanup(store.close)
        return store

    def start_peer(self, kvstore, keys, rounds, barrier=False):
        """kv_peer as rank 0 of this test's job, on keys {key: elements}."""
        peer = subprocess.Popen(
            [os.environ["TESSERA_KV_PEER_BIN"], f"--servers={','.join(self.servers)}",
             "--rank=0", "--num_workers=2", f"--job_id={self.id()}",
             f"--token_file={self.token_file}", f"--type={kvstore}",
             "--keys=" + ",".join(f"{k}:{n}" for k, n in keys.items()), f"--rounds={rounds}",
             f"--bigarray_bound={BIGARRAY_BOUND}", f"--barrier={str(barrier).lower()}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(peer.kill)
        return peer

    def peer_pulls(self, peer):
        out, err = peer.communicate(timeout=120)
        self.assertEqual(peer.returncode, 0, err)
        return {int(k): np.array(v, np.float32) for k, v in json.loads(out).items()}

    def test_a_python_rank_and_a_cpp_rank_see_the_same_sums(self):
        # Key 3 lives on server 1; key 4 is split across both servers, 1.2 MB a part: two
        # chunks each way.
        keys = {3: 5, 4: 600000}
        peer = self.start_peer("dist_sync", keys, rounds=2)
        store = self.store(rank=1)
        self.assertEqual((store.type, store.rank, store.num_workers), ("dist_sync", 1, 2))
        store.init(list(keys), [initial(n) for n in keys.values()])
        store.barrier()
        store.push(list(keys), [gradient(1, 1, n) for n in keys.values()])
        store.pull(list(keys))
        # Round 2 in one request per key and server, answered with the value.
        pulled = store.pushpull(list(keys), [gradient(1, 2, n) for n in keys.values()])
        self.assertTrue(all(s.serves_push_pull for s in store._servers))
        cpp = self.peer_pulls(peer)
        for (key, size), mine in zip(keys.items(), pulled):
            # No optimizer: the value is the last round's sum.
            expected = gradient(0, 2, size) + gradient(1, 2, size)
            np.testing.assert_array_equal(mine, expected, err_msg=f"key {key}, Python")
            np.testing.assert_array_equal(cpp[key], expected, err_msg=f"key {key}, C++")

    def test_dist_async_applies_both_ranks_pushes_with_the_optimizer_python_set(self):
        keys = {0: 7, 1: 3000}
        peer = self.start_peer("dist_async", keys, rounds=2, barrier=True)
        store = self.store(rank=1, kvstore="dist_async")
        store.init(list(keys), [initial(n) for n in keys.values()])
        store.set_optimizer("sgd", learning_rate=0.25)
        store.barrier()  # the peer pushes after it: every push meets the optimizer
        for round_ in (1, 2):
            store.push(list(keys), [gradient(1, round_, n) for n in keys.values()])
            store.barrier()
            out = [np.zeros(n, np.float32) for n in keys.values()]
            self.assertIs(store.pull(list(keys), out=out), out)
        cpp = self.peer_pulls(peer)
        for (key, size), mine in zip(keys.items(), out):
            # Each push applied on arrival: w - 0.25 * (every push of both rounds), exact.
            pushed = sum(gradient(r, t, size) for r in (0, 1) for t in (1, 2))
            expected = initial(size) - np.float32(0.25) * pushed
            np.testing.assert_array_equal(mine, expected, err_msg=f"key {key}, Python")
            np.testing.assert_array_equal(cpp[key], expected, err_msg=f"key {key}, C++")

    def test_two_python_ranks_train_with_the_servers_sgd(self):
        shapes = {"weight": (3, 4), "bias": (4,)}
        rng = np.random.default_rng(7)
        start = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
        # Rank 1 pushes each gradient as two devices' arrays, which the store sums.
        grads = [[{k: [rng.standard_normal(s).astype(np.float32) for _ in range(rank + 1)]
                   for k, s in shapes.items()} for _ in range(3)] for rank in (0, 1)]
        sgd = dict(learning_rate=0.1, momentum=0.9, wd=0.01, rescale_grad=0.5)

        def train(rank):
            store = self.store(rank)
            store.init(list(shapes), [start[k] for k in shapes])
            store.set_optimizer("sgd", lr_mult={"bias": 2.0}, **sgd)  # the same from both
            pulls = []
            for round_grads in grads[rank]:
                if rank == 0:
                    store.push(list(shapes), [round_grads[k] for k in shapes])
                    pulls.append(dict(zip(shapes, store.pull(list(shapes)))))
                else:  # the same in one request per key, into arrays of its own
                    out = [np.zeros(s, np.float32) for s in shapes.values()]
                    self.assertIs(store.pushpull(list(shapes), [round_grads[k] for k in shapes],
                                                 out=out), out)
                    pulls.append(dict(zip(shapes, out)))
            return pulls

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            pulls = list(pool.map(train, (0, 1)))
        weight, mom = dict(start), {k: np.zeros(s, np.float32) for k, s in shapes.items()}
        for round_ in range(3):
            for k in shapes:
                device_sum = np.add(*grads[1][round_][k])
                merged = grads[0][round_][k][0] + device_sum
                lr = 0.1 * (2.0 if k == "bias" else 1.0)
                weight[k], mom[k] = sgd_momentum(weight[k], mom[k], merged, lr, sgd["momentum"],
                                                 sgd["wd"], sgd["rescale_grad"])
                for rank in (0, 1):
                    np.testing.assert_allclose(pulls[rank][round_][k], weight[k], rtol=1e-6,
                                               atol=1e-7, err_msg=f"{k}, rank {rank}")

    def test_an_uninitialized_key_or_a_wrong_shape_is_refused_before_sending(self):
        store = self.store(rank=0)
        store.init(2, [1.0, 2.0, 3.0])
        with self.assertRaises(tessera.TesseraError) as caught:
            store.pull(9)
        self.assertEqual(caught.exception.code, "INVALID_ARGUMENT")
        self.assertEqual(caught.exception.message, "pull of key 9: the key is not initialized")
        with self.assertRaises(tessera.TesseraError) as caught:
            store.push(2, np.ones(4, np.float32))
        self.assertEqual(caught.exception.code, "INVALID_ARGUMENT")
        self.assertEqual(caught.exception.message, "push of key 2: array of shape (4,) does "
                         "not match the key's shape (3,)")
        with self.assertRaises(tessera.TesseraError) as caught:
            store.pushpull(2, np.ones(3, np.float32), out=np.zeros(4, np.float32))
        self.assertEqual(caught.exception.message, "pushpull of key 2: out of shape (4,) does "
                         "not match the key's shape (3,)")
        # Nothing was sent: no round is open, the value is the initial one.
        np.testing.assert_array_equal(store.pull(2), [1, 2, 3])

    def test_a_servers_refusal_names_the_server_and_the_key(self):
        self.store(rank=0).init(5, np.zeros(3, np.float32))
        with self.assertRaises(tessera.TesseraError) as caught:
            self.store(rank=1).init(5, np.zeros(4, np.float32))
        self.assertEqual(caught.exception.code, "INVALID_ARGUMENT")
        # A store's first key goes to the server holding the fewest elements: server 0.
        self.assertRegex(caught.exception.message,
                         rf"^parameter server {self.servers[0]}: Init of key 5: got float32 "
                         r"\S*4\S* but the key holds float32 \S*3")

    def test_a_round_that_a_departed_worker_blocks_fails_every_later_call(self):
        leaving, staying = self.store(rank=0), self.store(rank=1)
        for store in (leaving, staying):
            store.init(1, np.zeros(2, np.float32))
        staying.push(1, np.ones(2, np.float32))
        leaving.close()
        for _ in range(2):
            with self.assertRaises(tessera.TesseraError) as caught:
                staying.pull(1)
            self.assertEqual(caught.exception.code, "UNAVAILABLE")
            self.assertRegex(caught.exception.message,
                             rf"^parameter server {self.servers[0]}: dist_sync round 1 of key 1 "
                             "cannot complete: worker 0 left")

    def test_a_wrong_token_is_turned_away_naming_the_server(self):
        with self.assertRaises(tessera.TesseraError) as caught:
            self.store(rank=0, token="not-the-token", token_file=None)
        self.assertEqual(caught.exception.code, "UNAUTHENTICATED")
        self.assertIn(f"parameter server {self.servers[0]}", caught.exception.message)

    def test_hello_is_refused_when_the_worker_counts_differ(self):
        with self.assertRaises(tessera.TesseraError) as caught:
            self.store(rank=0, num_workers=3)
        self.assertEqual(caught.exception.code, "FAILED_PRECONDITION")
        self.assertEqual(caught.exception.message, f"parameter server {self.servers[0]}: "
                         "worker 0 counts 3 workers but server 0 serves 2")

    def test_local_types_and_plaintext_beyond_loopback_are_refused_before_dialing(self):
        with self.assertRaises(tessera.TesseraError) as caught:
            tessera.kv.create("local", servers=self.servers)
        self.assertEqual(caught.exception.code, "INVALID_ARGUMENT")
        with self.assertRaises(tessera.TesseraError) as caught:
            tessera.kv.create("dist_sync", servers=["10.1.2.3:9000"])
        self.assertEqual(caught.exception.code, "PERMISSION_DENIED")


if __name__ == "__main__":
    unittest.main()
