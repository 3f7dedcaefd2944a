"""Errors the SDK raises: a daemon's or the job file checker's, with its status code."""
import grpc


class TesseraError(Exception):
    """A failed call. `code` is gRPC's status code name ("INVALID_ARGUMENT", "UNAVAILABLE",
    ...), `message` what the daemon or the checker said, naming the field, node, file or peer."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code, self.message = code, message


def from_rpc_error(error, where=""):
    """A TesseraError from a grpc.RpcError; `where` ("worker 1 (host:port)") goes in front."""
    code = error.code().name if isinstance(error, grpc.Call) else "UNKNOWN"
    details = error.details() if isinstance(error, grpc.Call) else str(error)
    return TesseraError(code, f"{where}: {details}" if where else details)
