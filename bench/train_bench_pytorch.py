#!/usr/bin/python3
"""PyTorch peer of bench/train_bench: trains the same MLP (784-128-64-10) or LeNet with SGD
(lr 0.1, momentum 0.9) and cross-entropy at the given batch size on the given data, and
prints one JSON line {"model", "samples_per_s", "threads", "torch", "blas", "blas_library"}.
With --amp bfloat16 the step runs under torch.autocast (bfloat16 products, float32 weights).

"blas" is the BLAS this process really runs (openblas, mkl, blis, or "reference" for Debian's
reference libblas, a peer too slow to compare with): the library its sgemm_ resolves to.
Debian's torch calls the libblas.so.3 alternative, so its own torch.__config__ says
BLAS_INFO=generic whatever is installed.

Data: --images is an IDX file of 28x28 uint8 images (as ./tessera data mnist writes) and
--labels its labels; without them, seeded random data of the same shape.
"""
import argparse
import ctypes
import json
import os
import struct
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    with open(path, "rb") as f:
        magic = struct.unpack(">I", f.read(4))[0]
        dims = struct.unpack(">" + "I" * (magic & 0xFF), f.read(4 * (magic & 0xFF)))
        return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).reshape(dims)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 128), nn.Linear(128, 64), nn.Linear(64, 10)

    def forward(self, x):
        x = x.flatten(1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 20, 5), nn.Conv2d(20, 50, 5)
        self.fc1, self.fc2 = nn.Linear(800, 500), nn.Linear(500, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2, 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2, 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def blas_in_use():
    """(kind, path) of the file whose sgemm_ torch calls: that of libblas.so.3, the first BLAS
    that libtorch needs (with the reference libblas.so.3 selected, OpenBLAS is mapped too,
    through the liblapack.so.3 alternative, but not called)."""
    torch.mm(torch.rand(64, 64), torch.rand(64, 64))  # make sure it is loaded
    try:
        # The object already loaded under that soname, not a second copy.
        address = ctypes.cast(ctypes.CDLL("libblas.so.3").sgemm_, ctypes.c_void_p).value
    except (OSError, AttributeError) as e:
        return "unknown", "no libblas.so.3 sgemm_ (%s)" % e
    path = None
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            low, high = (int(x, 16) for x in fields[0].split("-"))
            if low <= address < high and len(fields) >= 6:
                path = os.path.realpath(fields[5])
                break
    if path is None:
        return "unknown", hex(address)
    for kind in ("openblas", "mkl", "blis", "atlas"):
        if kind in path.lower():
            return kind, path
    if os.path.basename(path).startswith("libblas"):
        return "reference", path
    return "unknown", path


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "lenet"], required=True)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads; 0 keeps the default")
    p.add_argument("--images")
    p.add_argument("--labels")
    p.add_argument("--amp", choices=["bfloat16"], help="mixed precision through torch.autocast")
    a = p.parse_args()
    torch.manual_seed(0)
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    n = a.batch * a.batches
    if a.images:
        x = read_idx(a.images)[:n].float().div_(255).reshape(-1, 1, 28, 28)
        y = read_idx(a.labels)[:n].long()
    else:
        x, y = torch.rand(n, 1, 28, 28), torch.randint(0, 10, (n,))
    model = Mlp() if a.model == "mlp" else LeNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    batches = [(x[i:i + a.batch], y[i:i + a.batch]) for i in range(0, x.shape[0] - a.batch + 1, a.batch)]

    def epoch():
        for xb, yb in batches:
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp is not None):
                loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()

    epoch()  # warm-up
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        epoch()
        best = min(best, time.perf_counter() - start)
    blas, blas_library = blas_in_use()
    print(json.dumps({"model": a.model, "samples_per_s": len(batches) * a.batch / best,
                      "threads": torch.get_num_threads(), "torch": torch.__version__,
                      "blas": blas, "blas_library": blas_library}))


if __name__ == "__main__":
    main()
