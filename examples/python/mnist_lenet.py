"""LeNet on MNIST from Python: the network built with tessera.sym, trained with dist_sync on a
local cluster of 2 workers and 1 parameter server (./tessera data mnist fetches the digits).

    ./tessera python examples/python/mnist_lenet.py [--epochs N] [--plot lenet.png]
"""
import argparse
import os
import pathlib

import tessera
from tessera import sym

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--plot", help="write the metrics' plot here (needs matplotlib)")
parser.add_argument("--data", default=os.environ.get("TESSERA_MNIST_DIR") or
                    pathlib.Path(__file__).resolve().parents[2] / ".cache" / "mnist")
args = parser.parse_args()

net = sym.Variable("data")
for i, filters in ((1, 20), (2, 50)):
    net = sym.Convolution(net, kernel=(5, 5), num_filter=filters, name=f"conv{i}")
    net = sym.Activation(net, act_type="relu")
    net = sym.Pooling(net, pool_type="max", kernel=(2, 2), stride=(2, 2))
net = sym.Activation(sym.FullyConnected(sym.Flatten(net), num_hidden=500), act_type="relu")
net = sym.SoftmaxOutput(sym.FullyConnected(net, num_hidden=10), name="softmax")

job = tessera.Job(name="lenet-python", network=net, batch_size=32, epochs=args.epochs,
                  data={"kind": "mnist", "dir": str(args.data), "flat": False, "shuffle": True},
                  optimizer={"name": "sgd", "params": {"learning_rate": 0.05, "momentum": 0.9}},
                  kvstore="dist_sync", eval_metric=["acc", "ce"], seed=1)
with tessera.LocalCluster(workers=2, servers=1) as cluster, cluster.client() as client:
    run = client.submit(job)
    for event in run.events():  # a progress bar when tqdm is installed
        if isinstance(event, tessera.Epoch) and event.rank == 0:
            print(f"epoch {event.epoch + 1}: test accuracy {event.eval['accuracy']:.4f}")
    print(f"final test accuracy {run.wait().eval['accuracy']:.4f}")
if args.plot:
    job.plot().savefig(args.plot)
