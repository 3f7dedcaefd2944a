"""The one place the SDK builds a gRPC channel, as rpc/channel.h does for the C++ side: TLS with
a tls_dir folder (ca.pem, and cert.pem / key.pem for mutual TLS), local credentials to a
loopback target or a Unix socket, plaintext elsewhere only with `insecure`; the cluster token
on every call ("authorization: Bearer ..."); keepalive; the service's message limit."""
import pathlib
import time

import grpc

from tessera.errors import TesseraError

# rpc/server.h's kKeepaliveTimeMs and kKeepaliveTimeoutMs: the daemons permit pings this often.
_KEEPALIVE_MS = 5000
_KEEPALIVE_TIMEOUT_MS = 10000


def load_token(token, token_file):
    """The cluster token: `token`, or the contents of `token_file` without surrounding
    whitespace (a Kubernetes Secret mounts as a file)."""
    return pathlib.Path(token_file).read_text().strip() if token_file else token


def _is_loopback(target):
    host = target.rsplit(":", 1)[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


def new_channel(target, tls_dir, token, insecure, max_message, own_connection=False):
    """A channel to `target` (host:port, or unix:PATH). `max_message`: the largest message
    either way, in bytes (rpc/message_limits.h's bound of the service). `own_connection`: a
    connection of its own even when the process already has one to `target`."""
    options = [("grpc.max_receive_message_length", max_message),
               ("grpc.max_send_message_length", max_message),
               ("grpc.keepalive_time_ms", _KEEPALIVE_MS),
               ("grpc.keepalive_timeout_ms", _KEEPALIVE_TIMEOUT_MS),
               ("grpc.keepalive_permit_without_calls", 1),
               # Keep pinging while a call waits long for its answer (a dist_sync round).
               ("grpc.http2.max_pings_without_data", 0)]
    if own_connection:
        options.append(("grpc.use_local_subchannel_pool", 1))
    if target.startswith("unix:"):  # as rpc/channel.cc: TLS adds nothing on a Unix socket
        credentials = grpc.local_channel_credentials(grpc.LocalConnectionType.UDS)
    elif tls_dir:
        folder = pathlib.Path(tls_dir)
        read = lambda name: (folder / name).read_bytes() if (folder / name).exists() else None
        if read("ca.pem") is None:
            raise TesseraError("INVALID_ARGUMENT", f"tls_dir {folder}: no ca.pem")
        credentials = grpc.ssl_channel_credentials(read("ca.pem"), read("key.pem"),
                                                   read("cert.pem"))
    elif _is_loopback(target):
        credentials = grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP)
    elif insecure:
        return grpc.insecure_channel(target, options)  # the token stays home: no call carries it
    else:
        raise TesseraError("PERMISSION_DENIED",
                           f"will not dial {target} in plaintext: it is beyond this machine; "
                           "give tls_dir (a folder from `tessera certs`) and token, or insecure")
    if token:
        credentials = grpc.composite_channel_credentials(
            credentials, grpc.access_token_call_credentials(token))
    return grpc.secure_channel(target, credentials, options)


def _last_connect_error(channel):
    """Why `channel`'s last connection attempt failed, as gRPC tells the next call that fails
    fast: a health check asks (every daemon serves it; no token needed)."""
    check = channel.unary_unary("/grpc.health.v1.Health/Check")
    try:
        check(b"", timeout=1, wait_for_ready=False)  # HealthCheckRequest{}: no bytes
        return ""
    except grpc.RpcError as e:
        return e.details() or ""


def wait_until_connected(channel, peer, timeout):
    """Waits up to `timeout` seconds for `channel` to connect, as rpc::WaitUntilConnected
    (rpc/channel.h): a peer that is not up yet refuses connections and is waited for; one
    whose TLS settings differ from ours fails every handshake, or closes every connection
    when one end speaks plaintext, which waiting cannot mend: UNAVAILABLE at once, naming
    `peer` and the reason."""
    deadline = time.monotonic() + timeout
    closed_in_a_row, why = 0, ""
    while True:
        try:
            grpc.channel_ready_future(channel).result(
                timeout=max(0.0, min(1.0, deadline - time.monotonic())))
            return
        except grpc.FutureTimeoutError:
            pass
        why = _last_connect_error(channel)
        if "andshake" in why or "certificate" in why:
            raise TesseraError("UNAVAILABLE", f"{peer}: TLS handshake failed ({why})")
        closed_in_a_row = closed_in_a_row + 1 if "Socket closed" in why else 0
        if closed_in_a_row >= 3:
            raise TesseraError("UNAVAILABLE", f"{peer}: closes every connection as it is set up "
                               f"- does one end use TLS (tls_dir) and the other not? ({why})")
        if time.monotonic() >= deadline:
            suffix = f" ({why})" if why else ""
            raise TesseraError("UNAVAILABLE", f"{peer}: not reachable within {timeout} s{suffix}")
