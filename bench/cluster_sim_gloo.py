#!/usr/bin/env python3
"""One worker of bench/cluster_sim.py's allreduce peer: PyTorch's gloo allreduce of the same
parameters the parameter-server workers push (their sizes from `cluster_sim_worker
--list_parameters`), as DistributedDataParallel sends them in its fastest honest form:
gradients packed in the order backward makes them (last layer first) into buckets of at most
--bucket_bytes (DDP's bucket_cap_mb, scaled as the sizes are), each bucket allreduced as soon
as it is full (async_op), with --compute_ms of simulated compute per round (sleeps), as
--schedule says: serial (all of it before the allreduces) or layered (DDP's overlap: the
forward third, then the backward layer by layer in the parameters' FLOPs shares, each bucket
allreduced as soon as backward has filled it, and the next forward only after every
allreduce, as DDP's optimizer step waits for them). The rounds are timed as
cluster_sim_worker times them (--ready_dir, barrier, rounds); the last line is one JSON
object.
"""
import argparse
import datetime
import json
import os
import pathlib
import time

import torch
import torch.distributed as dist


def buckets(sizes, cap_bytes):
    """Flat float32 buffers of the parameters in backward order, each at most cap_bytes (a
    bigger parameter alone), and per bucket the parameters (indices) it holds."""
    out, members, current = [], [], []
    for k in reversed(range(len(sizes))):
        n = sizes[k]
        if current and (sum(sizes[i] for i in current) + n) * 4 > cap_bytes:
            out.append(sum(sizes[i] for i in current))
            members.append(current)
            current = []
        current.append(k)
    if current:
        out.append(sum(sizes[i] for i in current))
        members.append(current)
    return [torch.full((n,), 0.001) for n in out], members


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--master", required=True, help="host:port of rank 0's store")
    parser.add_argument("--sizes", required=True, help="cluster_sim_worker --list_parameters")
    parser.add_argument("--bucket_bytes", type=int, required=True)
    parser.add_argument("--compute_ms", type=float, default=0.0)
    parser.add_argument("--schedule", default="serial", choices=["serial", "layered"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--ready_dir", required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    listed = json.loads(pathlib.Path(args.sizes).read_text())
    sizes, flops = listed["sizes"], listed["flops"]
    total_flops = sum(flops)
    dist.init_process_group("gloo", init_method=f"tcp://{args.master}", rank=args.rank,
                            world_size=args.world, timeout=datetime.timedelta(seconds=600))
    grads, members = buckets(sizes, max(4, args.bucket_bytes))

    def one_round():
        if args.schedule == "serial":
            if args.compute_ms > 0:
                time.sleep(args.compute_ms / 1000)
            for work in [dist.all_reduce(g, async_op=True) for g in grads]:
                work.wait()
            return
        time.sleep(args.compute_ms / 3 / 1000)
        works = []
        for g, layers in zip(grads, members):
            time.sleep(2 * args.compute_ms / 3 / 1000 * sum(flops[k] for k in layers) / total_flops)
            works.append(dist.all_reduce(g, async_op=True))
        for work in works:
            work.wait()

    for _ in range(args.warmup):
        one_round()
    ready = pathlib.Path(args.ready_dir)
    (ready / f"ready-{args.rank}").touch()
    while not (ready / "go").exists():
        time.sleep(0.005)
    dist.barrier()
    # As cluster_sim_worker: a layered run times the exchange alone first.
    exchange_seconds = 0.0
    if args.schedule == "layered":
        begin = time.monotonic()
        for _ in range(args.rounds):
            for work in [dist.all_reduce(g, async_op=True) for g in grads]:
                work.wait()
        exchange_seconds = time.monotonic() - begin
        dist.barrier()
    seconds = []
    start = last = time.monotonic()
    for _ in range(args.rounds):
        one_round()
        now = time.monotonic()
        seconds.append(now - last)
        last = now
    total = last - start
    (ready / f"done-{args.rank}").touch()  # the driver reads the counters of the timed rounds
    dist.barrier()
    dist.destroy_process_group()
    print(json.dumps({"rank": args.rank, "peer": f"PyTorch {torch.__version__} gloo allreduce",
                      "buckets": len(grads), "model_bytes": 4 * sum(sizes),
                      "rounds": len(seconds), "seconds": total, "round_seconds": seconds,
                      "exchange_seconds": exchange_seconds}))


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
