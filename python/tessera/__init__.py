"""Tessera's Python SDK: jobs on worker daemons over the same gRPC wire as the C++ client.

    import tessera
    with tessera.Client(workers=["127.0.0.1:7000"], servers=[]) as client:
        result = client.submit(tessera.Job("examples/mnist/mlp.yaml")).wait()
"""
# The generated wire modules (tessera._wire) may lie in another folder on sys.path than this
# package (a build's output beside the sources): let the package span both.
__path__ = __import__("pkgutil").extend_path(__path__, __name__)

from tessera.client import Batch, Client, Epoch, Finished, Result, Run, Started  # noqa: E402
from tessera.errors import TesseraError  # noqa: E402
from tessera.job import Job  # noqa: E402

__all__ = ["Batch", "Client", "Epoch", "Finished", "Job", "Result", "Run", "Started",
           "TesseraError"]
