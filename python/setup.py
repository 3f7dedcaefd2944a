"""Installs the Tessera Python SDK offline from Debian's packages:

    pip install ./python     (needs protoc and grpc_python_plugin: ./tessera installs them)

The wire modules (tessera._wire) are generated from ../proto at build time."""
import pathlib

from setuptools import setup
from setuptools.command.build_py import build_py

import generate_stubs

HERE = pathlib.Path(__file__).resolve().parent


class BuildWithWireModules(build_py):
    def run(self):
        super().run()
        generate_stubs.generate(HERE.parent / "proto", self.build_lib)


setup(
    name="tessera",
    version="0.2.0",
    description="Tessera's Python SDK: jobs on Tessera worker daemons over gRPC",
    packages=["tessera"],
    python_requires=">=3.9",
    install_requires=["grpcio", "protobuf", "numpy", "PyYAML"],
    cmdclass={"build_py": BuildWithWireModules},
)
