"""Installs the Tessera Python SDK offline from Debian's packages:

    pip install ./python     (needs protoc and grpc_python_plugin: ./tessera installs them)

The wire modules (tessera._wire) are generated from ../proto at build time, and the C API
library the symbols call (../bazel-bin/capi/libtessera_c.so, `./tessera sdk` builds it) is
copied into the package when it has been built."""
import pathlib
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

import generate_stubs

HERE = pathlib.Path(__file__).resolve().parent


class BuildWithWireModules(build_py):
    def run(self):
        super().run()
        generate_stubs.generate(HERE.parent / "proto", self.build_lib)
        library = HERE.parent / "bazel-bin" / "capi" / "libtessera_c.so"
        if library.is_file():
            shutil.copy(library, pathlib.Path(self.build_lib) / "tessera" / library.name)
        else:
            print(f"note: {library} is not built; tessera.sym will look for it at run time "
                  "(TESSERA_LIBRARY, or beside the `tessera` command line)")


setup(
    name="tessera",
    version="0.2.0",
    description="Tessera's Python SDK: jobs on Tessera worker daemons over gRPC",
    packages=["tessera"],
    python_requires=">=3.9",
    install_requires=["grpcio", "protobuf", "numpy", "PyYAML"],
    cmdclass={"build_py": BuildWithWireModules},
)
