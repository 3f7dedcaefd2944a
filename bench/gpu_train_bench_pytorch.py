#!/usr/bin/env python3
"""PyTorch peer of bench/gpu_train_bench: training samples/s of the same networks on the same
GPU, in two modes per row:

  eager  forward + cross-entropy + backward + optimizer.step, one batch after another;
  graph  the whole step captured once with torch.cuda.graph (static input tensors, captured
         after a warm-up on a side stream, as PyTorch's CUDA-graph docs show) and replayed,
         each batch copied into the static inputs first.

Networks (the symbols of examples/models.h): mlp 784-128-64-10 with ReLU on (B, 784); lenet
conv5x5/20-relu-maxpool-conv5x5/50-relu-maxpool-fc500-relu-fc10 on (B, 1, 28, 28);
resnet18_cifar, the v1 CIFAR ResNet-18 (3x3 stem, basic blocks, 1x1 + BatchNorm projection
shortcuts, BatchNorm eps 2e-5 and MXNet momentum 0.9 = PyTorch momentum 0.1) on (B, 3, 32, 32).
SGD lr 0.05 momentum 0.9, cudnn.benchmark on, TF32 off unless --tf32, seeded uniform [0, 1)
data and integer labels already on the device, a warm-up of --warmup batches, then the best of
--passes passes over --batches distinct batches (torch.cuda.synchronize at both ends of a pass).

Prints progress to stderr and one JSON object as the last line of stdout: the Python, torch,
CUDA and cuDNN versions, the device, and per row {model, batch, params, eager_samples_per_s,
graph_samples_per_s} (an *_error string instead of a figure that could not be measured).
After each row it also prints the rows so far with "partial": true, so that a caller that has
to kill it (a hung row) keeps what was measured.
Exit status 0; 3 when torch or a CUDA device is not available (the JSON then has "error"
and no rows); 2 for bad arguments.

Standalone: python3 bench/gpu_train_bench_pytorch.py [--rows mlp:64,resnet18_cifar:128 ...].
--device cpu runs the eager mode on the CPU (graph mode needs CUDA): a check of the networks
and the loop on a machine without a GPU, not a figure to compare.
"""
import argparse
import json
import platform
import sys
import time

MODELS = ("mlp", "lenet", "resnet18_cifar")
DEFAULT_ROWS = "mlp:64,mlp:256,lenet:64,lenet:256,resnet18_cifar:128"
EXIT_UNAVAILABLE = 3


def log(message):
    print("gpu_train_bench_pytorch: " + message, file=sys.stderr, flush=True)


def parse_rows(text):
    rows = []
    for item in text.split(","):
        model, _, batch = item.strip().partition(":")
        if model not in MODELS or not batch.isdigit() or int(batch) < 1:
            raise argparse.ArgumentTypeError(
                "bad row %r: want MODEL:BATCH with MODEL one of %s" % (item, ", ".join(MODELS)))
        rows.append((model, int(batch)))
    return rows


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=parse_rows, default=parse_rows(DEFAULT_ROWS),
                   help="comma-separated MODEL:BATCH (default %s)" % DEFAULT_ROWS)
    p.add_argument("--batches", type=int, default=100, help="distinct batches per timed pass")
    p.add_argument("--warmup", type=int, default=10, help="batches trained before timing")
    p.add_argument("--passes", type=int, default=3, help="timed passes; the fastest counts")
    p.add_argument("--modes", default="eager,graph", help="eager, graph or both (comma-separated)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tf32", action="store_true",
                   help="let float32 convolutions and matmuls use TF32 (default: plain float32)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                   help="cpu: eager only, to check the script without a GPU")
    a = p.parse_args()
    if a.batches < 1 or a.warmup < 0 or a.passes < 1:
        p.error("--batches and --passes must be >= 1, --warmup >= 0")
    a.modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    if not a.modes or any(m not in ("eager", "graph") for m in a.modes):
        p.error("--modes takes eager and/or graph")
    return a


def environment():
    return {"peer": "pytorch", "python": sys.executable,
            "python_version": platform.python_version()}


def build_networks(nn, F):
    """The three networks, defined once torch is imported."""

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(784, 128)
            self.fc2 = nn.Linear(128, 64)
            self.fc3 = nn.Linear(64, 10)

        def forward(self, x):
            return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x.flatten(1))))))

    class LeNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = nn.Conv2d(1, 20, 5), nn.Conv2d(20, 50, 5)
            self.fc1, self.fc2 = nn.Linear(800, 500), nn.Linear(500, 10)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.conv1(x)), 2, 2)
            x = F.max_pool2d(F.relu(self.conv2(x)), 2, 2)
            return self.fc2(F.relu(self.fc1(x.flatten(1))))

    def bn(channels):
        # MXNet's momentum 0.9 keeps 90% of the old moving value: PyTorch's momentum 0.1.
        return nn.BatchNorm2d(channels, eps=2e-5, momentum=0.1)

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = bn(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = bn(cout)
            self.shortcut = nn.Sequential()
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), bn(cout))

        def forward(self, x):
            y = F.relu(self.bn1(self.conv1(x)))
            return F.relu(self.bn2(self.conv2(y)) + self.shortcut(x))

    class ResNet18Cifar(nn.Module):
        def __init__(self, num_classes=10):
            super().__init__()
            self.conv0, self.bn0 = nn.Conv2d(3, 64, 3, 1, 1, bias=False), bn(64)
            blocks, cin = [], 64
            for stage, cout in enumerate((64, 128, 256, 512)):
                for unit in range(2):
                    stride = 2 if stage > 0 and unit == 0 else 1
                    blocks.append(BasicBlock(cin, cout, stride))
                    cin = cout
            self.blocks = nn.Sequential(*blocks)
            self.fc1 = nn.Linear(512, num_classes)

        def forward(self, x):
            x = self.blocks(F.relu(self.bn0(self.conv0(x))))
            return self.fc1(F.adaptive_avg_pool2d(x, 1).flatten(1))

    return {"mlp": (Mlp, (784,)), "lenet": (LeNet, (1, 28, 28)),
            "resnet18_cifar": (ResNet18Cifar, (3, 32, 32))}


def measure(torch, F, net_class, sample_shape, batch, mode, a, device):
    """Samples/s of one mode, and the network's parameter count."""
    torch.manual_seed(a.seed)
    model = net_class().to(device)
    model.train()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator(device=device)
    gen.manual_seed(a.seed)
    xs = [torch.rand((batch,) + sample_shape, device=device, generator=gen)
          for _ in range(a.batches)]
    ys = [torch.randint(0, 10, (batch,), device=device, generator=gen) for _ in range(a.batches)]

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def eager_step(x, y):
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    if mode == "eager":
        step = eager_step
    else:
        static_x, static_y = xs[0].clone(), ys[0].clone()
        # Warm up on a side stream before capture (cudnn.benchmark's search, the optimizer's
        # momentum buffers, autograd's lazy state), as torch.cuda.graph's documentation does.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for i in range(max(3, a.warmup)):
                eager_step(static_x, static_y)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # Gradients set to None before capture: backward then allocates them from the graph's
        # private pool, and every replay writes them afresh.
        opt.zero_grad(set_to_none=True)
        # Captured on the warm-up stream: libraries' per-stream handles and workspaces (cuBLAS,
        # cuBLASLt) then exist already and are not created mid-capture.
        with torch.cuda.graph(graph, stream=side):
            F.cross_entropy(model(static_x), static_y).backward()
            opt.step()

        def step(x, y):
            static_x.copy_(x)
            static_y.copy_(y)
            graph.replay()

    for i in range(a.warmup):
        step(xs[i % a.batches], ys[i % a.batches])
    sync()
    best = float("inf")
    for _ in range(a.passes):
        start = time.perf_counter()
        for x, y in zip(xs, ys):
            step(x, y)
        sync()
        best = min(best, time.perf_counter() - start)
    finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    if not finite:
        raise RuntimeError("parameters are not finite after training")
    return a.batches * batch / best, params


def main():
    a = parse_args()
    out = environment()
    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except Exception as e:  # ImportError, or a torch whose CUDA libraries do not load
        out["error"] = "cannot import torch with %s: %s: %s" % (sys.executable, type(e).__name__, e)
        print(json.dumps(out))
        return EXIT_UNAVAILABLE
    out["torch"] = torch.__version__
    out["torch_cuda"] = torch.version.cuda
    if a.device == "cuda":
        if not torch.cuda.is_available():
            out["error"] = ("torch %s: torch.cuda.is_available() is False (torch.version.cuda %s)"
                            % (torch.__version__, torch.version.cuda))
            print(json.dumps(out))
            return EXIT_UNAVAILABLE
        out["cudnn"] = torch.backends.cudnn.version()
        out["device"] = torch.cuda.get_device_name(0)
        out["capability"] = "%d.%d" % torch.cuda.get_device_capability(0)
        torch.backends.cudnn.benchmark = True
        # PyTorch's own defaults differ (TF32 convolutions, float32 matmuls): set both, so
        # that the two sides compute in the same precision.
        torch.backends.cudnn.allow_tf32 = a.tf32
        torch.backends.cuda.matmul.allow_tf32 = a.tf32
        out["tf32"] = a.tf32
    else:
        out["device"] = "cpu"
    device = torch.device(a.device, 0) if a.device == "cuda" else torch.device("cpu")
    log("%s (Python %s), torch %s, CUDA %s, cuDNN %s, %s" % (
        sys.executable, out["python_version"], torch.__version__, torch.version.cuda,
        out.get("cudnn"), out["device"]))
    networks = build_networks(nn, F)
    out["rows"] = []
    for model_name, batch in a.rows:
        net_class, sample_shape = networks[model_name]
        row = {"model": model_name, "batch": batch}
        for mode in a.modes:
            if mode == "graph" and device.type != "cuda":
                row["graph_error"] = "CUDA graphs need a CUDA device"
                continue
            try:
                samples, row["params"] = measure(torch, F, net_class, sample_shape, batch, mode, a,
                                                 device)
                row[mode + "_samples_per_s"] = round(samples, 1)
                log("%s b%d %s: %.0f samples/s" % (model_name, batch, mode, samples))
            except Exception as e:  # one failed mode must not lose the other rows
                message = str(e).splitlines()[0] if str(e) else ""
                row[mode + "_error"] = "%s: %s" % (type(e).__name__, message)
                log("%s b%d %s failed: %s" % (model_name, batch, mode, row[mode + "_error"]))
            if device.type == "cuda":
                torch.cuda.empty_cache()
        out["rows"].append(row)
        # The rows so far, in case a later row hangs and the bench kills this process.
        print(json.dumps(dict(out, partial=True)), flush=True)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
