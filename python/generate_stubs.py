"""Generates the Python modules of Tessera's wire contracts (proto/*.proto) into
OUT/tessera/_wire/: the messages with Debian's protoc, the services with Debian's
grpc_python_plugin (protobuf-compiler-grpc). The modules are made at build time and never
committed.

The .proto files import each other as "proto/NAME.proto"; they are copied under
tessera/_wire/ with those imports rewritten, so the generated modules import each other as
tessera._wire.proto.NAME_pb2. Message names and the wire format are unchanged.

usage: generate_stubs.py PROTO_DIR OUT
"""
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

PACKAGE = "tessera/_wire"


def generate(proto_dir, out):
    proto_dir, out = pathlib.Path(proto_dir), pathlib.Path(out)
    protoc, plugin = shutil.which("protoc"), shutil.which("grpc_python_plugin")
    if protoc is None or plugin is None:
        raise RuntimeError("protoc and grpc_python_plugin are needed (Debian's protobuf-compiler "
                           "and protobuf-compiler-grpc; ./tessera installs them)")
    with tempfile.TemporaryDirectory() as tmp:
        sources = pathlib.Path(tmp) / PACKAGE / "proto"
        sources.mkdir(parents=True)
        for proto in sorted(proto_dir.glob("*.proto")):
            text = re.sub(r'^import "proto/', f'import "{PACKAGE}/proto/', proto.read_text(),
                          flags=re.M)
            (sources / proto.name).write_text(text)
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run([protoc, f"-I{tmp}", f"--python_out={out}", f"--grpc_python_out={out}",
                        f"--plugin=protoc-gen-grpc_python={plugin}",
                        *sorted(str(p.relative_to(tmp)) for p in sources.glob("*.proto"))],
                       check=True)
    for folder in (out / PACKAGE, out / PACKAGE / "proto"):
        (folder / "__init__.py").touch()


if __name__ == "__main__":
    generate(sys.argv[1], sys.argv[2])
