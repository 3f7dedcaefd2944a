"""libtessera_c.so, Tessera's C API (capi/c_api.h), loaded with ctypes: symbols are built,
checked and converted by the same C++ code as the daemons', as MXNet's Python calls libmxnet.

The library is looked for in $TESSERA_LIBRARY, then in this package (where `pip install` puts
a built one), then in the build's output beside the `tessera` command line
(bazel-bin/capi/libtessera_c.so next to bazel-bin/client/tessera)."""
import ctypes
import functools
import json
import os
import pathlib
import shutil

from tessera.errors import TesseraError

LIBRARY_NAME = "libtessera_c.so"
SymbolHandle = ctypes.c_void_p


def _candidates():
    if os.environ.get("TESSERA_LIBRARY"):
        yield pathlib.Path(os.environ["TESSERA_LIBRARY"])
        return
    yield pathlib.Path(__file__).resolve().parent / LIBRARY_NAME
    cli = os.environ.get("TESSERA_BIN") or shutil.which("tessera")
    if cli:
        yield pathlib.Path(cli).resolve().parent.parent / "capi" / LIBRARY_NAME


@functools.lru_cache(maxsize=None)
def library():
    """The loaded library, its functions typed; FAILED_PRECONDITION when there is none."""
    tried = []
    for path in _candidates():
        if path.is_file():
            return _declare(ctypes.CDLL(str(path)))
        tried.append(str(path))
    raise TesseraError("FAILED_PRECONDITION",
                       f"no {LIBRARY_NAME} (tried {', '.join(tried) or 'nothing'}): build it "
                       "with `bazel build //capi:libtessera_c.so`, or name it in "
                       "TESSERA_LIBRARY")


def _declare(lib):
    c_str, c_str_p, handle_p = ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p), \
        ctypes.POINTER(SymbolHandle)
    signatures = {
        "TesseraListOperators": [c_str_p],
        "TesseraSymbolVariable": [c_str, c_str, handle_p],
        "TesseraSymbolCreate": [c_str, c_str, ctypes.c_int, ctypes.POINTER(c_str),
                                ctypes.POINTER(SymbolHandle), c_str, c_str, handle_p],
        "TesseraSymbolGroup": [ctypes.c_int, ctypes.POINTER(SymbolHandle), handle_p],
        "TesseraSymbolGetOutput": [SymbolHandle, ctypes.c_int, c_str, handle_p],
        "TesseraSymbolGetInternals": [SymbolHandle, handle_p],
        "TesseraSymbolDescribe": [SymbolHandle, c_str_p],
        "TesseraSymbolGetAttr": [SymbolHandle, c_str, c_str_p],
        "TesseraSymbolSetAttr": [SymbolHandle, c_str, c_str],
        "TesseraSymbolInferShape": [SymbolHandle, c_str, c_str_p],
        "TesseraSymbolInferType": [SymbolHandle, c_str, c_str_p],
        "TesseraSymbolToJson": [SymbolHandle, c_str_p],
        "TesseraSymbolFromJson": [c_str, handle_p],
        "TesseraSymbolToGraphDef": [SymbolHandle, ctypes.POINTER(ctypes.c_void_p),
                                    ctypes.POINTER(ctypes.c_size_t)],
        "TesseraSymbolFromGraphDef": [ctypes.c_char_p, ctypes.c_size_t, handle_p],
        "TesseraSymbolFree": [SymbolHandle],
    }
    for name, argtypes in signatures.items():
        function = getattr(lib, name)
        function.argtypes, function.restype = argtypes, ctypes.c_int
    lib.TesseraGetLastError.argtypes, lib.TesseraGetLastError.restype = [], ctypes.c_char_p
    return lib


def call(function, *args):
    """Calls library function `function`; its failure becomes a TesseraError."""
    lib = library()
    if getattr(lib, function)(*args) != 0:
        code, _, message = lib.TesseraGetLastError().decode().partition(": ")
        raise TesseraError(code, message)


def call_for_string(function, *args):
    """Calls a function whose last parameter receives a string; returns it (None for NULL)."""
    out = ctypes.c_char_p()
    call(function, *args, ctypes.byref(out))
    return None if out.value is None else out.value.decode()


def call_for_json(function, *args):
    return json.loads(call_for_string(function, *args))


def encode(text):
    """A C string argument: None stays NULL."""
    return None if text is None else str(text).encode()
