"""Client: runs jobs on worker daemons over the wire of proto/worker.proto, as `tessera submit`
does: every worker gets its share of the job (its rank, its part of the data, the parameter
servers), and their event streams are merged.

    client = tessera.Client(workers=["127.0.0.1:7000", "127.0.0.1:7001"],
                            servers=["127.0.0.1:9000"])
    run = client.submit(tessera.Job("examples/mnist/mlp.yaml"))
    for event in run.events():
        print(event)
    print(run.wait().eval)

Security as the C++ client's (rpc/channel.h): TLS with a --tls_dir folder (ca.pem, and
cert.pem / key.pem for mutual TLS), the cluster token on every call, plaintext only to
loopback addresses unless `insecure`.
"""
import dataclasses
import os
import queue
import threading
import time

import grpc
import numpy as np

from tessera._channel import load_token, new_channel
from tessera.errors import TesseraError, from_rpc_error
from tessera.progress import History, ProgressBar
from tessera._wire.proto import tensor_pb2, worker_pb2, worker_pb2_grpc

_MAX_MESSAGE = 1 << 30  # parameters of large networks come in one GetParams reply

_DTYPES = {
    tensor_pb2.DT_FLOAT32: np.float32, tensor_pb2.DT_FLOAT64: np.float64,
    tensor_pb2.DT_FLOAT16: np.float16, tensor_pb2.DT_UINT8: np.uint8,
    tensor_pb2.DT_INT32: np.int32, tensor_pb2.DT_INT8: np.int8, tensor_pb2.DT_INT64: np.int64,
}


@dataclasses.dataclass
class Started:
    rank: int
    parameters: int
    batches_per_epoch: int


@dataclasses.dataclass
class Batch:
    rank: int
    epoch: int
    batch: int
    samples_per_second: float
    metrics: dict


@dataclasses.dataclass
class Epoch:
    rank: int
    epoch: int
    train: dict
    eval: dict
    seconds: float
    samples_per_second: float


@dataclasses.dataclass
class Finished:
    rank: int
    eval: dict
    seconds: float


@dataclasses.dataclass
class Result:
    eval: dict  # worker 0's final evaluation
    seconds: float  # worker 0's training time


def _event(rank, event):
    kind = event.WhichOneof("event")
    if kind == "started":
        e = event.started
        return Started(rank, e.parameters, e.batches_per_epoch)
    if kind == "batch":
        e = event.batch
        return Batch(rank, e.epoch, e.batch, e.samples_per_second, dict(e.metrics))
    if kind == "epoch":
        e = event.epoch
        return Epoch(rank, e.epoch, dict(e.train), dict(e.eval), e.seconds, e.samples_per_second)
    if kind == "finished":
        return Finished(rank, dict(event.finished.eval), event.finished.seconds)
    return None  # a kind newer than this SDK


def to_numpy(tensor, name):
    """A wire Tensor as a NumPy array (a copy)."""
    if tensor.dtype not in _DTYPES:
        raise TesseraError("UNIMPLEMENTED", f"parameter {name}: dtype "
                           f"{tensor_pb2.DataType.Name(tensor.dtype)} has no NumPy type")
    array = np.frombuffer(tensor.data, dtype=np.dtype(_DTYPES[tensor.dtype]).newbyteorder("<"))
    return array.reshape(tuple(tensor.shape)).copy()


class Client:
    """Worker daemons (host:port, rank order) and the parameter servers their dist jobs use.
    `token` is the cluster token (or `token_file`); `tls_dir` a folder from `tessera certs`."""

    def __init__(self, workers, servers=(), token=None, token_file=None, tls_dir=None,
                 insecure=False):
        if not workers:
            raise TesseraError("INVALID_ARGUMENT", "workers: at least one host:port")
        token = load_token(token, token_file)
        self.workers, self.servers = list(workers), list(servers)
        self._channels = [new_channel(w, tls_dir, token, insecure, _MAX_MESSAGE)
                          for w in self.workers]
        self._stubs = [worker_pb2_grpc.WorkerStub(c) for c in self._channels]

    def name(self, rank):
        return f"worker {rank} ({self.workers[rank]})"

    def submit(self, job):
        """Starts `job` (a Job) on every worker; returns its Run at once (also job.last_run,
        which job.plot() draws)."""
        run = Run(self, job.spec)
        job.last_run = run
        return run

    def status(self):
        """Every worker's WorkerStatus message, rank order."""
        statuses = []
        for rank, stub in enumerate(self._stubs):
            try:
                statuses.append(stub.GetStatus(worker_pb2.GetStatusRequest(), timeout=10))
            except grpc.RpcError as e:
                raise from_rpc_error(e, self.name(rank)) from None
        return statuses

    def cancel(self):
        """Stops the running job on every worker; whether any was running."""
        cancelled = False
        for rank, stub in enumerate(self._stubs):
            try:
                cancelled |= stub.Cancel(worker_pb2.CancelRequest(), timeout=10).cancelled
            except grpc.RpcError as e:
                raise from_rpc_error(e, self.name(rank)) from None
        return cancelled

    def params(self, rank=0):
        """The running or last job's parameters on worker `rank`: {name: NumPy array},
        arguments and auxiliary states."""
        try:
            reply = self._stubs[rank].GetParams(worker_pb2.GetParamsRequest(), timeout=60)
        except grpc.RpcError as e:
            raise from_rpc_error(e, self.name(rank)) from None
        params = {n: to_numpy(t, n) for n, t in reply.arg_params.items()}
        params.update({n: to_numpy(t, n) for n, t in reply.aux_params.items()})
        return params

    def close(self):
        for channel in self._channels:
            channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.close()


class Run:
    """One job running on a client's workers. The first worker whose stream fails cancels
    the others, and events() / wait() raise its error, naming the worker. `job_id` is the
    id its workers and parameter servers know it by (a tessera.kv rank joins with it);
    `history` holds worker 0's metrics per epoch so far, and plot() draws them."""

    _DONE = object()

    def __init__(self, client, spec):
        self._client = client
        self._events = queue.Queue()
        self._calls = []
        self._error = None
        self._lock = threading.Lock()
        self._result = None
        self._cancelled = False
        self._spec = spec
        self.history = History(spec.name)
        self.job_id = job_id = f"{spec.name}-{int(time.time() * 1e6)}-{os.getpid()}"
        n = len(client.workers)
        self._threads = []
        self._streams_open = n  # streams whose end events() has not seen yet
        for rank in range(n):
            mine = worker_pb2.JobSpec()
            mine.CopyFrom(spec)
            mine.job_id, mine.rank, mine.num_workers = job_id, rank, n
            mine.data.part_index, mine.data.num_parts = rank, n
            del mine.ps_hosts[:]
            mine.ps_hosts.extend(client.servers)
            if not mine.batch_event_every:
                mine.batch_event_every = 5
            call = client._stubs[rank].RunJob(mine)
            self._calls.append(call)
            thread = threading.Thread(target=self._read, args=(rank, call), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _read(self, rank, call):
        try:
            for event in call:
                converted = _event(rank, event)
                if converted is not None:
                    self._events.put(converted)
        except grpc.RpcError as e:
            with self._lock:
                first = self._error is None
                if first:
                    self._error = from_rpc_error(e, self._client.name(rank))
            if first:
                for other in self._calls:
                    other.cancel()
        finally:
            self._events.put(self._DONE)

    def events(self, progress=None):
        """Started, Batch, Epoch and Finished events of every worker as they come (each
        once: a second call goes on where the first stopped); raises the run's error (a
        TesseraError) once every stream has ended. Worker 0's progress shows as a tqdm bar
        when tqdm is importable, unless `progress` is False (True: tqdm is required)."""
        bar = ProgressBar(self._spec.num_epochs, self._spec.name, progress)
        try:
            while self._streams_open:
                event = self._events.get()
                if event is self._DONE:
                    self._streams_open -= 1
                    continue
                if event.rank == 0 and isinstance(event, Finished):
                    self._result = Result(event.eval, event.seconds)
                if event.rank == 0 and isinstance(event, Epoch):
                    self.history.add(event)
                bar.update(event)
                yield event
        finally:
            bar.close()
        if self._error is not None:
            self._wait_until_idle()
            if self._cancelled and self._error.code == "UNAVAILABLE":
                # After a cancel the workers stop at different batches; one whose round
                # failed because another stopped first may report first: it was cancelled.
                raise TesseraError("CANCELLED", f"cancelled; then {self._error}")
            raise self._error

    def _wait_until_idle(self, seconds=10):
        """After a failure, as the C++ client: waits (up to `seconds`) until every worker has
        stopped its share of the job, so that the next run is not refused as a second job."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                if all(s.state == worker_pb2.WorkerStatus.IDLE for s in self._client.status()):
                    return
            except TesseraError:
                return  # a worker that does not answer holds no job we could wait for
            time.sleep(0.05)

    def wait(self, progress=None):
        """Blocks until the run ends; its Result, or its error raised. `progress` as for
        events()."""
        for _ in self.events(progress):
            pass
        if self._result is None:
            raise TesseraError("INTERNAL", "the run ended without worker 0's finished event")
        return self._result

    def plot(self):
        """Worker 0's metrics by epoch as a matplotlib Figure (History.plot)."""
        return self.history.plot()

    def cancel(self):
        """Asks every worker to stop the job at its next batch (the run then raises
        CANCELLED)."""
        self._cancelled = True
        return self._client.cancel()
