"""LocalCluster: parameter servers and worker daemons on this machine, for notebooks and tests.

    with tessera.LocalCluster(workers=2, servers=1) as cluster:
        result = cluster.client().submit(tessera.Job("examples/mnist/mlp.yaml")).wait()

The daemons are started by the command line's `tessera cluster` (the launcher `tessera train`
uses: Unix sockets in a folder only this user may open, a token of the cluster's own, logs
under run_dir/logs), which this object keeps as a child process. They stop on close(), when this object is collected, when Python
exits, and when this process dies: `tessera cluster` stops them when its standard input, a
pipe from here, ends."""
import json
import shutil
import subprocess
import tempfile
import weakref

from tessera.client import Client
from tessera.errors import TesseraError
from tessera.job import tessera_binary

_STOP_SECONDS = 30


class LocalCluster:
    def __init__(self, workers=2, servers=1, run_dir=None):
        """Starts `workers` worker daemons and `servers` parameter servers (0: for jobs with
        kvstore local) and returns once each serves. run_dir: where logs go (default: a
        temporary folder, removed on close)."""
        temporary = run_dir is None
        run_dir = tempfile.mkdtemp(prefix="tessera-cluster-") if temporary else str(run_dir)
        process = subprocess.Popen(
            [tessera_binary(), "cluster", "-n", str(workers), "-s", str(servers),
             "--run_dir", run_dir],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._stop = weakref.finalize(self, _stop, process, run_dir if temporary else None)
        line = process.stdout.readline()
        if not line:
            process.wait()
            message = process.stderr.read().strip().removeprefix("tessera cluster: ")
            self._stop()
            code = "INVALID_ARGUMENT" if process.returncode == 2 else "UNAVAILABLE"
            raise TesseraError(code, message or f"tessera cluster exited "
                               f"({process.returncode}) before its daemons were up")
        ready = json.loads(line)
        self._process = process
        self.workers, self.servers = ready["workers"], ready["servers"]
        self.token_file, self.run_dir, self.pids = ready["token_file"], run_dir, ready["pids"]

    def client(self, **kwargs):
        """A Client for this cluster's daemons, with its token."""
        return Client(self.workers, self.servers, token_file=self.token_file, **kwargs)

    def alive(self):
        """Whether every daemon still runs (`tessera cluster` exits when one does not)."""
        return self._process.poll() is None

    def close(self):
        """Stops every daemon and waits for them."""
        self._stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"LocalCluster(workers={self.workers}, servers={self.servers}, "
                f"run_dir={self.run_dir!r})")


def _stop(process, temporary_dir):
    """Ends `tessera cluster` (closing its input makes it stop the daemons), then removes a
    temporary run folder."""
    try:
        process.stdin.close()
        process.wait(timeout=_STOP_SECONDS)
    except subprocess.TimeoutExpired:
        process.terminate()
        try:
            process.wait(timeout=_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    finally:
        process.stdout.close()
        process.stderr.close()
    if temporary_dir:
        shutil.rmtree(temporary_dir, ignore_errors=True)
