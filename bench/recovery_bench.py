#!/usr/bin/env python3
"""recovery_bench: what surviving faults costs a training job (issue 37's figures).

1. Checkpoint cost: the job of examples/mnist/chaos-mlp.yaml (the MNIST MLP, dist_sync, 2
   workers, 1 server) without checkpoints, with the default policy (a complete checkpoint at
   every epoch's end) and with one after every batch, the three alternating for --rounds
   rounds; worker 0's training seconds from `tessera train --json`. The cost of a policy is
   its median seconds over the median without checkpoints, minus 1 (goal: at most 3% for
   the default, as CheckFreq reports 3.5%).
2. Recovery: tools/chaos.py on the same job, longer, with --kills SIGKILLs of each of a
   worker, the parameter server and the client, in turn: recovery time p50/p99 per kind
   (from the kill to the rerun's first checkpoint, i.e. its first batch; tools/chaos.py says
   exactly), and the work redone per fault, which checkpointing after every batch bounds by
   one batch.

The machine (CPU model, ISA) is named in the JSON object printed last.
usage: bench/recovery_bench.py [--rounds N] [--kills K] [--tessera PATH]
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "bench"))
import chaos  # noqa: E402
from machine import machine  # noqa: E402

JOB = ROOT / "examples/mnist/chaos-mlp.yaml"


def job_with(out, name, checkpoint, epochs):
    job = yaml.safe_load(JOB.read_text())
    job["checkpoint"] = checkpoint
    job["epochs"] = epochs
    job["run_dir"] = str(out / name)
    path = JOB.with_name(f".chaos-mlp.bench-{name}.yaml")
    path.write_text(yaml.safe_dump(job))
    return path


def train_seconds(tessera, path):
    done = subprocess.run([tessera, "train", str(path), "--json"], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"recovery_bench: {path} failed:\n{done.stdout}\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])["seconds"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--tessera", default=os.environ.get("TESSERA_BIN", "tessera"))
    args = parser.parse_args()
    out = (ROOT / "runs/recovery-bench").resolve()
    policies = {"none": False, "per_epoch": True, "per_batch": {"every_batches": 1, "keep": 3}}
    paths = {name: job_with(out, name, checkpoint, 3) for name, checkpoint in policies.items()}
    seconds = {name: [] for name in policies}
    try:
        for _ in range(args.rounds):
            for name, path in paths.items():
                seconds[name].append(train_seconds(args.tessera, path))
        long_job = job_with(out, "faulted", policies["per_batch"], 12)
        report = chaos.run_chaos(long_job, ["worker", "ps", "client"], 3 * args.kills, 1,
                                 args.tessera, out / "chaos", balanced=True)
    finally:
        for path in list(paths.values()) + [JOB.with_name(".chaos-mlp.bench-faulted.yaml")]:
            path.unlink(missing_ok=True)
    median = {name: statistics.median(s) for name, s in seconds.items()}
    result = {
        "bench": "recovery_bench",
        "machine": machine(),
        "job": "MNIST MLP, dist_sync, 2 workers + 1 server, batch 64, 3 epochs",
        "train_seconds": {name: [round(s, 3) for s in v] for name, v in seconds.items()},
        "checkpoint_cost_per_epoch": round(median["per_epoch"] / median["none"] - 1, 4),
        "checkpoint_cost_per_batch": round(median["per_batch"] / median["none"] - 1, 4),
        "kills": len(report["kills"]),
        "batches_redone_per_fault_at_most": 1,
        "passed_chaos": report["passed"],
    }
    for kind in ("worker", "ps", "client"):
        result[f"{kind}_kills"] = sum(k["kind"] == kind for k in report["kills"])
        for figure in ("p50", "p99"):  # chaos.run_chaos's percentiles
            key = f"{kind}_recovery_{figure}_s"
            if key in report:
                result[key] = report[key]
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
