"""Tessera's Python SDK: symbols built by the C++ code (tessera.sym), and jobs on worker
daemons over the same gRPC wire as the C++ client.

    import tessera
    net = tessera.sym.FullyConnected(tessera.sym.Variable("data"), num_hidden=10)
    with tessera.Client(workers=["127.0.0.1:7000"], servers=[]) as client:
        result = client.submit(tessera.Job("examples/mnist/mlp.yaml")).wait()
"""
# The generated wire modules (tessera._wire) may lie in another folder on sys.path than this
# package (a build's output beside the sources): let the package span both.
__path__ = __import__("pkgutil").extend_path(__path__, __name__)

from tessera.client import Batch, Client, Epoch, Finished, Restarted, Result, Run, Started  # noqa: E402
from tessera.errors import TesseraError  # noqa: E402
from tessera.job import Job  # noqa: E402
from tessera import kv  # noqa: E402
from tessera.local_cluster import LocalCluster  # noqa: E402
from tessera import progress  # noqa: E402
from tessera import symbol  # noqa: E402
from tessera import symbol as sym  # noqa: E402

__all__ = ["Batch", "Client", "Epoch", "Finished", "Job", "LocalCluster", "Restarted", "Result", "Run",
           "Started", "TesseraError", "kv", "progress", "sym", "symbol"]
