"""tessera.kv: a worker's side of the parameter servers, as MXNet's mx.kv. It speaks the
KVStoreService protocol of proto/kvstore.proto exactly as the C++ workers' dist store does
(kvstore/dist_kvstore.h), so a Python process can be one rank of a job's parameter exchange.

    store = tessera.kv.create("dist_sync", servers=["127.0.0.1:9000"], rank=1, num_workers=2,
                              job_id="mlp", token_file="token")
    store.init(3, np.zeros((4, 5), np.float32))
    store.set_optimizer("sgd", learning_rate=0.1)
    store.push(3, grad)        # a list of arrays (one per device) is summed here first
    weight = store.pull(3)     # dist_sync: once every worker's push of the round is in
    weight = store.pushpull(3, grad)  # both, in one request per key and server

As the C++ client, so that the servers see no difference:
  - Keys travel as int32. A str key gets the next number at its init, as MXNet numbers them,
    so every worker must init its str keys in the same order; a store takes one kind of key.
  - Placement balances bytes (kvstore/dist_kvstore.h): an array of fewer than
    `bigarray_bound` elements lives whole on one server, the one holding the fewest elements
    when it is placed (an init call places its largest keys first); a larger one is cut into
    equal slices of at most the bound, the same number on every server, each stored 1-D there
    under key + (j // servers) * 2**20 for slice j (kvstore/key_slices.h). So keys lie in
    [0, 2**20), and every worker must use the same bound (tessera workers: 1,000,000, MXNet's
    default) and make the same init calls.
  - The servers hold float32: values are converted, as mx.nd.array converts NumPy input.
    They travel in chunks of at most 1 MiB (less if a server's Hello reply says so).
  - Every worker sends Init; the first value of a key wins. set_optimizer sends the optimizer
    to every server; identical copies from the other workers change nothing.
Unlike MXNet's, init, push, pull, pushpull and barrier wait for the servers' replies, so an error is
raised by the call that caused it. In dist_sync a second push of a key before the others have
pushed theirs waits for them (the server parks it until the round completes).

Errors are TesseraError: the C++ client's argument checks (INVALID_ARGUMENT naming the key
and shapes) before anything is sent; then the servers' answers, prefixed "parameter server
HOST:PORT: ". A stream that ends (server gone, keepalive timeout), or a dist_sync round that
cannot complete because a worker left, fails that call and every later one: UNAVAILABLE, or
UNAUTHENTICATED / PERMISSION_DENIED for a refused token or certificate.

Thread safety: a store's calls run one at a time; give each rank a store of its own.
"""
import dataclasses
import functools
import queue
import threading

import grpc
import numpy as np

from tessera._channel import load_token, new_channel, wait_until_connected
from tessera.errors import TesseraError, from_rpc_error
from tessera._wire.proto import kvstore_pb2, kvstore_pb2_grpc, tensor_pb2

PROTOCOL_VERSION = 1  # kvstore/transport.h's kKVStoreProtocolVersion
DEFAULT_BIGARRAY_BOUND = 1000000  # kvstore/dist_kvstore.h's kDefaultBigArrayBound
_CHUNK_BYTES = 1 << 20  # kvstore/transport.h's kChunkBytes
_SLICE_KEY_STRIDE = 1 << 20  # kvstore/key_slices.h's kSliceKeyStride
_MAX_MESSAGE = 4 << 20  # rpc/message_limits.h's kKVStoreLimits
_COMMAND_TIMEOUT_S = 60
_CLOSE_TIMEOUT_S = 5  # as the C++ client: a server that does not finish the stream is cut
_MODES = {"dist_sync": kvstore_pb2.SYNC_MODE_SYNC, "dist_async": kvstore_pb2.SYNC_MODE_ASYNC}
_CODE_NAMES = {code.value[0]: code.name for code in grpc.StatusCode}
_FLOAT32 = np.dtype("<f4")  # the wire's element: little-endian float32


def create(name="dist_sync", servers=(), rank=0, num_workers=1, job_id="", token=None,
           token_file=None, tls_dir=None, insecure=False, bigarray_bound=DEFAULT_BIGARRAY_BOUND,
           connect_timeout=60):
    """A store of type `name` ("dist_sync" or "dist_async") connected to every parameter server
    (host:port, index order) as worker `rank` of `num_workers`, waiting up to
    `connect_timeout` seconds for the servers to come up. `job_id` is the job's, the same on
    every worker (a tessera worker sends its JobSpec's job_id, else the job's name). Security
    as tessera.Client's: `token` or `token_file`, `tls_dir`, `insecure`."""
    if name not in _MODES:
        raise TesseraError("INVALID_ARGUMENT", f"kvstore '{name}': this client speaks to "
                           "parameter servers only: dist_sync or dist_async")
    if not servers:
        raise TesseraError("INVALID_ARGUMENT", f"kvstore '{name}': no parameter servers")
    return KVStore(name, list(servers), rank, num_workers, job_id,
                   load_token(token, token_file), tls_dir, insecure, bigarray_bound,
                   connect_timeout)


@dataclasses.dataclass
class _Key:
    shape: tuple
    parts: list  # (server index, first element, elements, the server's key) of each part


class _Server:
    """One Session stream to a parameter server. Requests are written in call order; their
    replies, which may interleave, are read on the calling thread and gathered by id."""

    def __init__(self, address, channel, connect_timeout):
        self.name = f"parameter server {address}"
        self.max_chunk_bytes = _CHUNK_BYTES  # until the Hello reply
        self.serves_push_pull = False
        self._channel = channel
        try:
            wait_until_connected(channel, self.name, connect_timeout)
        except TesseraError:
            channel.close()
            raise
        self.stub = kvstore_pb2_grpc.KVStoreServiceStub(channel)
        self._outbox = queue.SimpleQueue()
        self._replies = self.stub.Session(iter(self._outbox.get, None))
        self._next_id = 1

    def send(self, messages):
        """Queues one request's messages (WorkerMessages, their id set here); its id."""
        request_id, self._next_id = self._next_id, self._next_id + 1
        for message in messages:
            message.id = request_id
            self._outbox.put(message)
        return request_id

    def wait(self, ids):
        """Reads until each request of `ids` has its final reply (an error, a reply without a
        pull chunk, or a pull's last chunk); {id: its replies in order}. A stream that ends is
        TesseraError: UNAVAILABLE, unless the server refused the token or certificate."""
        replies = {i: [] for i in ids}
        pending = set(ids)
        while pending:
            try:
                reply = next(self._replies)
            except StopIteration:
                raise TesseraError("UNAVAILABLE", f"{self.name}: stream ended (closed)") from None
            except grpc.RpcError as e:
                code = e.code().name
                if code not in ("UNAUTHENTICATED", "PERMISSION_DENIED"):
                    code = "UNAVAILABLE"
                raise TesseraError(code, f"{self.name}: stream ended ({e.details()})") from None
            if reply.id not in replies:  # request 0: a message the server could not decode
                raise self.error(reply) if reply.code else TesseraError(
                    "INTERNAL", f"{self.name}: a reply to request {reply.id}, which is not open")
            replies[reply.id].append(reply)
            if reply.code or not reply.HasField("pull") or reply.pull.last:
                pending.discard(reply.id)
        return replies

    def error(self, reply):
        return TesseraError(_CODE_NAMES.get(reply.code, "UNKNOWN"), f"{self.name}: {reply.message}")

    def close(self):
        """Ends the stream, so the server forgets this worker before close returns."""
        self._outbox.put(None)
        cut = threading.Timer(_CLOSE_TIMEOUT_S, self._replies.cancel)
        cut.start()
        try:
            for _ in self._replies:
                pass
        except grpc.RpcError:
            pass  # already ended, or cut
        finally:
            cut.cancel()
            self._channel.close()


class KVStore:
    """A worker's connections to the parameter servers; made by create()."""

    def __init__(self, name, servers, rank, num_workers, job_id, token, tls_dir, insecure,
                 bigarray_bound, connect_timeout):
        self.type, self.rank, self.num_workers = name, rank, num_workers
        self.servers = servers
        self._job_id = job_id
        self._bigarray_bound = bigarray_bound
        self._placed_elements = [0] * len(servers)  # per server, as _place left them
        self._lock = threading.Lock()
        self._broken = None  # the error that ended a stream or a dist_sync round
        self._keys = {}  # wire key -> _Key
        self._str_keys = {}  # MXNet's str keys -> their wire keys, numbered in init order
        self._key_type = None  # str or int: the first init's
        self._servers = []
        try:
            for address in servers:
                channel = new_channel(address, tls_dir, token, insecure, _MAX_MESSAGE,
                                      own_connection=True)
                self._servers.append(_Server(address, channel, connect_timeout))
            hello = kvstore_pb2.Hello(protocol_version=PROTOCOL_VERSION, rank=rank,
                                      num_workers=num_workers, mode=_MODES[name], job_id=job_id)
            replies = self._exchange([(s, [kvstore_pb2.WorkerMessage(hello=hello)])
                                      for s in range(len(servers))])
            for index, (server, (reply,)) in enumerate(zip(self._servers, replies)):
                self._check_hello(index, server, reply.hello)
        except TesseraError:
            self.close()
            raise

    def _check_hello(self, index, server, hello):
        # The server does not check where keys are placed: a list in the wrong order would
        # silently mix keys up.
        if (hello.server_index, hello.num_servers) != (index, len(self._servers)):
            raise TesseraError("FAILED_PRECONDITION", f"{server.name} is server "
                               f"{hello.server_index} of {hello.num_servers}, but entry {index} "
                               f"of the {len(self._servers)} servers given")
        # 0: a server that sets no bound of its own.
        server.max_chunk_bytes = min(_CHUNK_BYTES, hello.max_chunk_bytes) or _CHUNK_BYTES
        server.serves_push_pull = hello.serves_push_pull

    # ---- the MXNet API

    def init(self, key, value):
        """Initializes `key` (a str or an int) with `value`, or each of a list of keys with the
        array at the same place in a list of values. The servers keep the first value any
        worker sends."""
        with self._lock:
            self._check_usable()
            pairs = _per_key(key, value, "init")
            kind = self._key_type or _kind(pairs[0][0])
            wire_keys, new_str_keys = [], {}
            for k, arrays in pairs:
                wire = self._init_number(k, kind, new_str_keys)
                if wire in self._keys or wire in wire_keys:
                    raise TesseraError("INVALID_ARGUMENT", f"init: key {k!r} initialized twice")
                if len(arrays) != 1:
                    raise TesseraError("INVALID_ARGUMENT",
                                       f"init of key {k!r}: one array, not {len(arrays)}")
                wire_keys.append(wire)
            values = [_as_float32(arrays[0], f"init of key {k!r}") for k, arrays in pairs]
            placed = self._place(wire_keys, [v.size for v in values])
            keys = {w: _Key(v.shape, parts) for w, v, parts in zip(wire_keys, values, placed)}
            self._exchange([(part[0], self._chunks("init", w, keys[w], part, v))
                            for w, v in zip(wire_keys, values) for part in keys[w].parts])
            self._keys.update(keys)
            self._str_keys.update(new_str_keys)
            self._key_type = kind

    def push(self, key, value):
        """Pushes `value` to `key`: an array, or a list of arrays (one per device) summed here
        first; or lists of keys and values. A key repeated in one call is pushed once, its
        arrays summed together."""
        with self._lock:
            self._check_usable()
            self._exchange(self._push_requests("push", self._grouped(key, value, "push")))

    def pull(self, key, out=None):
        """The value of `key` (a new float32 array), or of each of a list of keys (a list).
        With `out` (an array of the key's shape, or a list of them; a list of those for a
        list of keys) the value is also written into every array of `out`, which is returned.
        In dist_sync the value includes every round this worker has pushed into."""
        with self._lock:
            self._check_usable()
            targets, wires = self._pull_targets(key, out, "pull")
            replies = self._exchange(self._pull_requests(wires))
            return self._deliver(key, out, targets, wires, replies)

    def pushpull(self, key, value, out=None):
        """push(key, value), then pull(key, out), as MXNet's pushpull: the same arguments and
        result. Sent as one request per key and server, answered with the value, where every
        server serves those and no key repeats; as a push and a pull otherwise."""
        with self._lock:
            self._check_usable()
            grouped = self._grouped(key, value, "pushpull")
            targets, wires = self._pull_targets(key, out, "pushpull")
            combined = (len(set(wires)) == len(wires) and
                        all(s.serves_push_pull for s in self._servers))
            if combined:
                replies = self._exchange(self._push_requests("push_pull", grouped))
                return self._deliver(key, out, targets, wires, replies)
            self._exchange(self._push_requests("push", grouped))
            replies = self._exchange(self._pull_requests(wires))
            return self._deliver(key, out, targets, wires, replies)

    def set_optimizer(self, name, lr_mult=None, wd_mult=None, lr_scheduler=None,
                      lr_scheduler_params=None, **params):
        """Runs optimizer `name` ("sgd", "adam", ...; kvstore::Optimizer::Create's) with
        `params` (learning_rate=0.1, momentum=0.9, ...) on the servers: pushes are then
        gradients the servers apply (update_on_kvstore). `lr_mult` / `wd_mult` map keys to
        multipliers; `lr_scheduler` names a learning-rate schedule with its params."""
        with self._lock:
            self._check_usable()
            spec = kvstore_pb2.OptimizerSpec(
                name=name, params={k: _param(v) for k, v in params.items()},
                lr_mult={self._number(k, "lr_mult"): m for k, m in (lr_mult or {}).items()},
                wd_mult={self._number(k, "wd_mult"): m for k, m in (wd_mult or {}).items()},
                lr_scheduler=lr_scheduler or "",
                lr_scheduler_params={k: _param(v)
                                     for k, v in (lr_scheduler_params or {}).items()})
            request = kvstore_pb2.CommandRequest(job_id=self._job_id, set_optimizer=spec)
            for server in self._servers:
                try:
                    server.stub.Command(request, timeout=_COMMAND_TIMEOUT_S)
                except grpc.RpcError as e:
                    raise from_rpc_error(e, server.name) from None

    def barrier(self):
        """Waits until every worker has called barrier. In dist_sync a worker waiting here
        counts as having pushed zeros for the rounds the others complete meanwhile."""
        with self._lock:
            self._check_usable()
            self._exchange([(s, [kvstore_pb2.WorkerMessage(barrier=kvstore_pb2.BarrierRequest())])
                            for s in range(len(self._servers))])

    def close(self):
        """Ends the streams (the servers forget this worker) and closes the channels."""
        with self._lock:
            for server in self._servers:
                server.close()
            self._servers = []
            self._broken = TesseraError("FAILED_PRECONDITION", "the store is closed")

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.close()

    # ---- keys and arrays

    def _init_number(self, key, kind, new_str_keys):
        """The wire key a key being initialized gets, all of one `kind`; str keys new to this
        call are numbered into `new_str_keys`."""
        self._check_key_type(key, kind)
        if not isinstance(key, str):
            return self._number(key, "init")
        if key in self._str_keys:
            return self._str_keys[key]
        return new_str_keys.setdefault(key, len(self._str_keys) + len(new_str_keys))

    def _number(self, key, what):
        """The wire key of `key`; INVALID_ARGUMENT for a key this store cannot have."""
        self._check_key_type(key)
        if isinstance(key, str):
            if key not in self._str_keys:
                raise TesseraError("INVALID_ARGUMENT",
                                   f"{what} of key {key!r}: the key is not initialized")
            return self._str_keys[key]
        if isinstance(key, bool) or not isinstance(key, (int, np.integer)):
            raise TesseraError("INVALID_ARGUMENT", f"{what}: key {key!r} is neither str nor int")
        if not 0 <= key < _SLICE_KEY_STRIDE:
            raise TesseraError("INVALID_ARGUMENT", f"{what}: key {key} is outside [0, 2**20) "
                               "(the numbers above it name big keys' slices on the servers)")
        return int(key)

    def _check_key_type(self, key, kind=None):
        kind = kind or self._key_type
        if kind not in (None, _kind(key)):
            raise TesseraError("INVALID_ARGUMENT", f"key {key!r}: this store's keys are "
                               f"{kind.__name__}s (one kind per store, as in MXNet)")

    def _initialized(self, key, what):
        """(wire key, shape) of a key this store has initialized."""
        wire = self._number(key, what)
        if wire not in self._keys:
            raise TesseraError("INVALID_ARGUMENT",
                               f"{what} of key {key!r}: the key is not initialized")
        return wire, self._keys[wire].shape

    def _grouped(self, key, value, what):
        """{wire key: [float32 arrays]} of a push's arguments, checked, in call order."""
        grouped = {}
        for k, arrays in _per_key(key, value, what):
            wire, shape = self._initialized(k, what)
            for array in arrays:
                array = _as_float32(array, f"{what} of key {k!r}")
                if array.shape != shape:
                    raise TesseraError("INVALID_ARGUMENT", f"{what} of key {k!r}: array of "
                                       f"shape {array.shape} does not match the key's "
                                       f"shape {shape}")
                grouped.setdefault(wire, []).append(array)
        return grouped

    def _push_requests(self, kind, grouped):
        """The Push (or PushPull: `kind`) requests of `grouped`, each key's arrays summed: one
        per key and part, in key order."""
        requests = []
        for wire, arrays in grouped.items():
            total = functools.reduce(np.add, arrays)
            requests += [(part[0], self._chunks(kind, wire, self._keys[wire], part, total))
                         for part in self._keys[wire].parts]
        return requests

    def _pull_targets(self, key, out, what):
        """A pull's [(key, [out arrays])], checked, and the wire key of each."""
        if out is None:
            keys = key if isinstance(key, (list, tuple)) else [key]
            targets = [(k, []) for k in keys]
        else:
            targets = _per_key(key, out, what)
        wires = []
        for k, outs in targets:
            wire, shape = self._initialized(k, what)
            for o in outs:
                if not isinstance(o, np.ndarray) or o.shape != shape:
                    raise TesseraError("INVALID_ARGUMENT", f"{what} of key {k!r}: out "
                                       f"{_describe(o)} does not match the key's shape {shape}")
            wires.append(wire)
        return targets, wires

    def _pull_requests(self, wires):
        """One Pull request per distinct key of `wires` and part."""
        return [(part[0], [kvstore_pb2.WorkerMessage(pull=kvstore_pb2.PullRequest(key=part[3]))])
                for wire in dict.fromkeys(wires) for part in self._keys[wire].parts]

    def _deliver(self, key, out, targets, wires, replies):
        """pull's result from `replies`, one request per distinct key of `wires` and part."""
        replies = iter(replies)
        values = {}
        for wire in dict.fromkeys(wires):
            key_info = self._keys[wire]
            flat = np.empty(int(np.prod(key_info.shape)), _FLOAT32)
            for part in key_info.parts:
                self._assemble(wire, part, next(replies), flat)
            values[wire] = flat.reshape(key_info.shape)
        for (_, outs), wire in zip(targets, wires):
            for o in outs:
                o[...] = values[wire]
        if out is not None:
            return out
        pulled, handed_out = [], set()
        for wire in wires:  # a key repeated gets an array of its own each time
            pulled.append(values[wire].copy() if wire in handed_out else values[wire])
            handed_out.add(wire)
        return pulled if isinstance(key, (list, tuple)) else pulled[0]

    def _place(self, wires, sizes):
        """kvstore/dist_kvstore.h's placement of one init call's keys: per key, its parts
        [(server, first element, elements, the server's key)]. The servers' loads are kept
        only when every key could be placed."""
        n = len(self._servers)
        load = list(self._placed_elements)
        placed = [[] for _ in wires]
        small = []
        for i, (wire, size) in enumerate(zip(wires, sizes)):
            if size < self._bigarray_bound:
                small.append(i)
                continue
            per_server = -(-size // (n * self._bigarray_bound))
            if (per_server - 1) > ((1 << 31) - 1 - wire) // _SLICE_KEY_STRIDE:
                raise TesseraError(
                    "INVALID_ARGUMENT", f"init of key {wire}: its {size} elements make "
                    f"{per_server} slices per server of at most {self._bigarray_bound} elements, "
                    "more than the servers' key numbers hold (raise the big-array bound)")
            slices = n * per_server
            for j in range(slices):
                first, end = size * j // slices, size * (j + 1) // slices
                if end > first:
                    placed[i].append((j % n, first, end - first,
                                      wire + (j // n) * _SLICE_KEY_STRIDE))
                    load[j % n] += end - first
        for i in sorted(small, key=lambda i: (-sizes[i], wires[i])):
            server = load.index(min(load))
            placed[i].append((server, 0, sizes[i], wires[i]))
            load[server] += sizes[i]
        self._placed_elements = load
        return placed

    def _chunks(self, kind, wire, key, part, array):
        """One Init, Push or PushPull request (`kind`): `part` of float32 `array` in chunks."""
        server, first, size, server_key = part
        shape = key.shape if size == array.size else (size,)  # a big array's part is 1-D
        data = memoryview(array).cast("B")[first * 4:(first + size) * 4]
        step = self._servers[server].max_chunk_bytes
        messages, offset = [], 0
        while True:  # an empty part still sends one chunk, for the server to judge
            piece = bytes(data[offset:offset + step])
            chunk = kvstore_pb2.ArrayChunk(key=server_key, dtype=tensor_pb2.DT_FLOAT32, shape=shape,
                                           offset=offset, data=piece,
                                           last=offset + len(piece) == len(data))
            messages.append(kvstore_pb2.WorkerMessage(**{kind: chunk}))
            offset += len(piece)
            if offset >= len(data):
                return messages

    def _assemble(self, wire, part, replies, flat):
        """Writes a pull's reply chunks for `part` into the key's `flat` value."""
        server, first, size, _ = part
        out = flat[first:first + size].view(np.uint8)
        for n, reply in enumerate(replies):
            chunk = reply.pull
            end = chunk.offset + len(chunk.data)
            if end > out.size or (n == len(replies) - 1 and end != out.size):
                raise TesseraError("DATA_LOSS", f"{self._servers[server].name}: pull of key "
                                   f"{wire}: bytes [{chunk.offset}, {end}) of a "
                                   f"{out.size}-byte part")
            out[chunk.offset:end] = np.frombuffer(chunk.data, np.uint8)

    # ---- the wire

    def _check_usable(self):
        if self._broken is not None:
            raise self._broken

    def _exchange(self, requests):
        """Sends `requests` ((server index, [WorkerMessage]) each) and waits for all their
        replies; each request's replies, in the order of `requests`. A failed reply raises its
        error once every reply is in (the first failure in request order)."""
        sent = [(server, self._servers[server].send(messages)) for server, messages in requests]
        try:
            replies = {}
            for server in dict.fromkeys(s for s, _ in sent):
                replies[server] = self._servers[server].wait([i for s, i in sent if s == server])
        except TesseraError as e:
            self._broken = e  # a stream ended: nothing more can go through it
            raise
        answers = [replies[server][i] for server, i in sent]
        for (server, _), answer in zip(sent, answers):
            if answer[-1].code:
                error = self._servers[server].error(answer[-1])
                if error.code == "UNAVAILABLE":  # a dist_sync round a departed worker blocks
                    self._broken = error
                raise error
        return answers


def _per_key(keys, values, what):
    """[(key, [arrays])] from MXNet's forms: a key with an array or a list of arrays (one per
    device), or a list of keys with a list of those."""
    if not isinstance(keys, (list, tuple)):
        return [(keys, _arrays(values))]
    if not keys:
        raise TesseraError("INVALID_ARGUMENT", f"{what}: no keys")
    if not isinstance(values, (list, tuple)) or len(values) != len(keys):
        raise TesseraError("INVALID_ARGUMENT", f"{what}: {len(keys)} keys need a list of as "
                           "many values")
    return [(k, _arrays(v)) for k, v in zip(keys, values)]


def _arrays(value):
    """A list of NumPy arrays stays a list; anything else is one array."""
    if isinstance(value, (list, tuple)) and value and all(
            isinstance(v, np.ndarray) for v in value):
        return list(value)
    return [value]


def _kind(key):
    return str if isinstance(key, str) else int


def _as_float32(value, what):
    try:
        return np.ascontiguousarray(value, dtype=_FLOAT32)
    except (TypeError, ValueError) as e:
        raise TesseraError("INVALID_ARGUMENT", f"{what}: not an array of numbers ({e})") from None


def _describe(value):
    return f"of shape {value.shape}" if isinstance(value, np.ndarray) else type(value).__name__


def _param(value):
    """An optimizer parameter as the C++ parser reads it (ops/param.h)."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)
