"""Jobs: what the workers train, from a job file, a dict or keyword arguments.

A job is checked and turned into the wire's JobSpec by the same code as `tessera submit`'s:
the `tessera` command line (`tessera job spec`), so an unknown field or a bad value is refused
with the same message, naming it.
"""
import os
import pathlib
import shutil
import subprocess
import tempfile

import yaml

from tessera.errors import TesseraError
from tessera.symbol import Symbol
from tessera._wire.proto import worker_pb2


def tessera_binary():
    """The `tessera` command line: $TESSERA_BIN, else the one on PATH."""
    path = os.environ.get("TESSERA_BIN") or shutil.which("tessera")
    if not path:
        raise TesseraError("FAILED_PRECONDITION",
                           "no `tessera` command line: put it on PATH or name it in TESSERA_BIN")
    return path


class Job:
    """A checked job. Job("examples/mnist/mlp.yaml"), Job({"name": ..., ...}) or
    Job(name=..., network={"model": "mlp"}, ...): a dict's or the arguments' relative paths are
    taken from `base_dir` (default: the working directory), a file's from its folder. A dict's
    or the arguments' `network` may be a tessera.sym Symbol: the job then carries its
    GraphDef."""

    def __init__(self, source=None, *, base_dir=None, **fields):
        network = None
        if source is not None and fields:
            raise TypeError("Job takes a file or a dict, or keyword arguments, not both")
        with tempfile.TemporaryDirectory(prefix="tessera-job-") as tmp:
            if isinstance(source, (str, os.PathLike)):
                path = pathlib.Path(source)
                name = str(path)
            else:
                fields = dict(source or fields)
                network = fields.get("network")
                if isinstance(network, Symbol):
                    symbol_file = pathlib.Path(tmp) / "network-symbol.json"
                    network.save(symbol_file)
                    fields["network"] = {"symbol_file": str(symbol_file)}
                path = pathlib.Path(tmp) / "job.yaml"
                path.write_text(yaml.safe_dump(fields))
                name = "job"
                base_dir = base_dir or os.getcwd()
            out = pathlib.Path(tmp) / "spec.pb"
            command = [tessera_binary(), "job", "spec", str(path), "--output", str(out)]
            if base_dir:
                command += ["--base_dir", str(base_dir)]
            result = subprocess.run(command, capture_output=True, text=True)
            if result.returncode != 0:
                text = result.stderr.strip().removeprefix("tessera job spec: ")
                code, _, message = text.partition(": ")
                if not code.isupper():
                    code, message = "INVALID_ARGUMENT", text
                raise TesseraError(code, message.replace(str(path), name))
            self.spec = worker_pb2.JobSpec.FromString(out.read_bytes())
            if isinstance(network, Symbol):
                self.spec.graph.CopyFrom(network.graphdef())

    last_run = None  # the latest Run of this job (Client.submit sets it)

    @property
    def name(self):
        return self.spec.name

    def plot(self):
        """The latest run's metrics by epoch as a matplotlib Figure (needs matplotlib)."""
        if self.last_run is None:
            raise ValueError(f"job '{self.name}' has not been submitted")
        return self.last_run.plot()
