"""Client: submits jobs to a cluster of worker daemons over the wire of proto/jobs.proto, as
`tessera submit` does: the first worker's coordinator gives every worker its share of the job
(its rank, its part of the data, the parameter servers) and merges their event streams.

    client = tessera.Client(workers=["127.0.0.1:7000", "127.0.0.1:7001"],
                            servers=["127.0.0.1:9000"])
    run = client.submit(tessera.Job("examples/mnist/mlp.yaml"))
    for event in run.events():
        print(event)
    print(run.wait().eval)
    client.jobs(); client.attach(run.id).wait(); client.cancel(run.id)

The cluster owns a submitted job (its first worker coordinates it, docs/jobs.md): it runs
to its end whether or not this process follows it.
Security as the C++ client's (rpc/channel.h): TLS with a --tls_dir folder (ca.pem, and
cert.pem / key.pem for mutual TLS), the cluster token on every call, plaintext only to
loopback addresses unless `insecure`.
"""
import dataclasses

import grpc
import numpy as np

from tessera._channel import load_token, new_channel
from tessera.errors import TesseraError, from_rpc_error
from tessera.progress import History, ProgressBar
from tessera._wire.proto import jobs_pb2, jobs_pb2_grpc, tensor_pb2, worker_pb2, worker_pb2_grpc

_MAX_MESSAGE = 1 << 30  # parameters of large networks come in one GetParams reply

# absl::StatusCode numbers, as a job record carries its outcome.
_STATUS_NAMES = {1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED",
                 5: "NOT_FOUND", 6: "ALREADY_EXISTS", 7: "PERMISSION_DENIED",
                 8: "RESOURCE_EXHAUSTED", 9: "FAILED_PRECONDITION", 10: "ABORTED",
                 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED", 13: "INTERNAL", 14: "UNAVAILABLE",
                 15: "DATA_LOSS", 16: "UNAUTHENTICATED"}

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
class Restarted:
    """The job lost a process and runs again (resumed: from its newest checkpoint)."""
    rank: int
    attempt: int
    reason: str
    resumed: bool


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
    if kind == "restarted":
        e = event.restarted
        return Restarted(rank, e.attempt, e.reason, e.resumed)
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
        self._coordinator = jobs_pb2_grpc.JobsStub(self._channels[0])

    def name(self, rank):
        return f"worker {rank} ({self.workers[rank]})"

    def coordinator_name(self):
        return f"the coordinator, {self.name(0)}"

    def _call(self, method, request):
        try:
            return method(request, timeout=60)
        except grpc.RpcError as e:
            raise from_rpc_error(e, self.coordinator_name()) from None

    def submit(self, job, wait=False, progress=None):
        """Hands `job` (a Job) to the cluster, which runs it to its end (queued behind a
        running one); returns its Run at once (also job.last_run, which job.plot() draws),
        or with `wait` after following it to its end (its error raised)."""
        request = jobs_pb2.SubmitJobRequest(workers=self.workers, servers=self.servers)
        request.spec.CopyFrom(job.spec)
        if not request.spec.batch_event_every:
            request.spec.batch_event_every = 5
        record = self._call(self._coordinator.Submit, request)
        run = Run(self, record, job.spec.num_epochs, job.spec.name)
        job.last_run = run
        if wait:
            run.wait(progress)
        return run

    def jobs(self):
        """This token's jobs on the cluster (queued, running and recently finished), oldest
        first, as JobRecord messages (id, name, state, epoch, batch, samples_per_second...)."""
        return list(self._call(self._coordinator.List, jobs_pb2.ListJobsRequest()).jobs)

    def attach(self, job_id):
        """The Run of a job submitted before (by this process or another): events() and
        wait() follow it from its start."""
        for record in self.jobs():
            if record.id == job_id:
                return Run(self, record)
        raise TesseraError("NOT_FOUND", f"{self.coordinator_name()}: no job '{job_id}'")

    def status(self):
        """Every worker's WorkerStatus message, rank order."""
        statuses = []
        for rank, stub in enumerate(self._stubs):
            try:
                statuses.append(stub.GetStatus(worker_pb2.GetStatusRequest(), timeout=10))
            except grpc.RpcError as e:
                raise from_rpc_error(e, self.name(rank)) from None
        return statuses

    def cancel(self, job_id=None):
        """With `job_id`: cancels that job of the cluster's (queued or running) and returns
        its record. Without: stops whatever job each worker runs, and returns whether any
        was running."""
        if job_id is not None:
            return self._call(self._coordinator.Cancel, jobs_pb2.CancelJobRequest(id=job_id))
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
    """A job the cluster owns: submitted once to the cluster's coordinator (the first worker),
    which runs it to its end whether or not this process follows it. events() and wait()
    follow it (a Run may be dropped or the process killed, and the job goes on; attach(id)
    follows it again), cancel() stops it. The job's failure is raised as a TesseraError
    naming the worker. `job_id` is the id its workers and parameter servers know it by (a
    tessera.kv rank joins with it); `history` holds worker 0's metrics per epoch so far, and
    plot() draws them."""

    def __init__(self, client, record, num_epochs=0, name=None):
        self._client = client
        self.record = record
        self.job_id = self.id = record.id
        self._num_epochs = num_epochs or record.num_epochs
        self.history = History(name or record.name)
        self._result = None
        self._cancelled = False
        self._stream = None  # the Attach call, opened by the first events()
        self._ended = False

    def events(self, progress=None):
        """Started, Batch, Epoch, Restarted and Finished events of every worker as they come
        (the job's past ones first; each once: a second call goes on where the first
        stopped); raises the job's error (a TesseraError) once it has ended. Worker 0's
        progress shows as a tqdm bar when tqdm is importable, unless `progress` is False."""
        bar = ProgressBar(self._num_epochs, self.history.name, progress)
        try:
            if self._stream is None:
                self._stream = self._client._coordinator.Attach(
                    jobs_pb2.AttachRequest(id=self.job_id))
            for update in self._stream:
                if update.WhichOneof("update") == "record":
                    self.record, self._ended = update.record, True
                    break
                event = _event(update.event.rank, update.event.event)
                if event is None:
                    continue
                if event.rank == 0 and isinstance(event, Finished):
                    self._result = Result(event.eval, event.seconds)
                if event.rank == 0 and isinstance(event, Epoch):
                    self.history.add(event)
                bar.update(event)
                yield event
        except grpc.RpcError as e:
            raise from_rpc_error(e, self._client.coordinator_name()) from None
        finally:
            bar.close()
        if self._ended and self.record.state != jobs_pb2.JobRecord.SUCCEEDED:
            code = "CANCELLED" if self.record.state == jobs_pb2.JobRecord.CANCELLED else \
                _STATUS_NAMES.get(self.record.code, "UNKNOWN")
            raise TesseraError(code, self.record.message)

    def wait(self, progress=None):
        """Blocks until the job ends; its Result, or its error raised. `progress` as for
        events()."""
        for _ in self.events(progress):
            pass
        if self._result is None:
            self._result = Result(dict(self.record.eval),
                                  (self.record.end_unix_ms - self.record.start_unix_ms) / 1000)
        return self._result

    def plot(self):
        """Worker 0's metrics by epoch as a matplotlib Figure (History.plot)."""
        return self.history.plot()

    def cancel(self):
        """Stops the job (queued: at once; running: at its next batch); the run then raises
        CANCELLED. Whether it had not ended yet."""
        self._cancelled = True
        record = self._client.cancel(self.job_id)
        return record.state == jobs_pb2.JobRecord.CANCELLED
