"""Progress and plots from a run on a LocalCluster (MNIST from TESSERA_MNIST_DIR; skipped
without it): the tqdm bar events() feeds, the per-epoch history, Job.plot() with matplotlib,
and examples/python/mnist_lenet.py run as a user would."""
import contextlib
import io
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest

import tessera

MNIST = os.environ.get("TESSERA_MNIST_DIR")
EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python"


@unittest.skipUnless(MNIST, "needs MNIST: TESSERA_MNIST_DIR (./tessera data mnist)")
class ProgressTest(unittest.TestCase):
    def test_events_feed_a_progress_bar_and_the_history_plots(self):
        job = tessera.Job(name="mlp-progress", network={"model": "mlp"}, batch_size=64,
                          epochs=2, data={"kind": "mnist", "dir": MNIST, "flat": True},
                          kvstore="dist_sync", eval_metric=["acc", "ce"], seed=1,
                          optimizer={"name": "sgd", "params": {"learning_rate": 0.1}})
        shown = io.StringIO()
        with tessera.LocalCluster(workers=2, servers=1) as cluster, cluster.client() as client:
            run = client.submit(job)
            with contextlib.redirect_stderr(shown):
                events = [e for e in run.events(progress=True) if e.rank == 0]
        epochs = [e for e in events if isinstance(e, tessera.Epoch)]
        self.assertEqual(events[0].batches_per_epoch, 4000 // 64)  # its half of 8,000 digits
        batches = 2 * events[0].batches_per_epoch
        self.assertIn("mlp-progress", shown.getvalue())
        self.assertIn(f"{batches}/{batches}", shown.getvalue())
        self.assertIn("test_accuracy", shown.getvalue())
        self.assertEqual(run.history.eval["accuracy"], [e.eval["accuracy"] for e in epochs])
        self.assertEqual(len(run.history.train["cross-entropy"]), 2)

        figure = job.plot()
        panels = {axes.get_title(): axes for axes in figure.axes}
        self.assertEqual(set(panels), {"accuracy", "cross-entropy"})
        test_line = [l for l in panels["accuracy"].get_lines() if l.get_label() == "test"][0]
        self.assertEqual(list(test_line.get_ydata()), run.history.eval["accuracy"])
        with tempfile.TemporaryDirectory() as tmp:
            figure.savefig(pathlib.Path(tmp) / "plot.png")
            self.assertEqual((pathlib.Path(tmp) / "plot.png").read_bytes()[:4], b"\x89PNG")

    def test_without_tqdm_or_a_run_there_is_no_bar_and_no_plot(self):
        quiet = io.StringIO()
        with contextlib.redirect_stderr(quiet):
            bar = tessera.progress.ProgressBar(1, "quiet", enabled=False)
            bar.update(tessera.Started(0, 10, 5))
            bar.close()
        self.assertEqual(quiet.getvalue(), "")
        with self.assertRaises(ValueError):
            tessera.Job(name="never-run", network={"model": "mlp"}, batch_size=8, epochs=1,
                        data={"kind": "mnist", "dir": MNIST}).plot()

    def test_the_lenet_example_trains(self):
        with tempfile.TemporaryDirectory() as tmp:
            plot = pathlib.Path(tmp) / "lenet.png"
            example = subprocess.run(
                [sys.executable, str(EXAMPLES / "mnist_lenet.py"), "--epochs", "1",
                 "--plot", str(plot)],
                capture_output=True, text=True, timeout=300,
                env=dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p)))
            self.assertEqual(example.returncode, 0, example.stderr)
            self.assertTrue(plot.is_file())
        accuracy = float(example.stdout.split("final test accuracy")[1])
        self.assertGreater(accuracy, 0.9, example.stdout)


if __name__ == "__main__":
    unittest.main()
