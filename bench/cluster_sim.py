#!/usr/bin/env python3
"""cluster_sim: parameter-server communication on simulated hosts with real links (issue 41).

W worker and S server processes, each on a host of its own (a network namespace with its own
address, tools/sim_network.py), every host's link shaped by tc to a profile: a bandwidth
each way (tbf), and where the kernel has netem a one-way latency and random loss. The workers (bench/cluster_sim_worker)
push and pull the parameters of a real network - ResNet-50, VGG-16 or an embedding-heavy MLP,
their shapes listed from the symbols of examples/models.h - through Tessera's dist KVStore
over TCP, with TLS and the cluster token as on a real cluster, after a configurable compute
time per round (a sleep: the links are measured, not the CPU). The servers are tessera-ps
daemons with the job's replication (--replicas).

Scale-down. Two cores cannot move 10 Gbps through a dozen processes' TLS and gRPC stacks, so
each link's bandwidth and each parameter's size are divided by one factor (--scale_down, 100
by default), and the big-array bound (which keys are split across the servers) with them. A
transfer then takes the time it takes at full size on the full-size link; latency and compute
are the real ones. So the ratios of compute to communication, of latency to transfer time and
of one link's load to another's are the full-size cluster's, while the CPUs move
1/scale_down of the bytes. Not preserved: per-message costs (headers, an RPC per key part)
weigh scale_down times more against the payload than at full size, and a parameter whose
scaled size falls under one element keeps one.

Each row (model, bandwidth, compression, replicas) reports:
- rounds_per_s: the timed rounds over the slowest worker's time for them;
- bound_round_s: the analytical bound of the topology, compute + max(M, W*M/S) / B, M the
  model's bytes and B a link's bandwidth each way (both scaled): each worker sends and
  receives its model once per round, a server's link carries W/S of it with an ideal
  placement; ratio_to_bound = bound_round_s / the measured round (1: only the links limit);
- every link's bytes per timed round, sent and received, as the kernel counts them (TCP/IP
  and TLS overhead included), and the busiest server link's against W*M/S;
- cpu_busy: the machine's busy share of its CPUs over the timed rounds (near 1: the figure is
  the CPU's, not the links').
Last line: one JSON object naming the machine.

Needs root (namespaces, tc). Every namespace, and with it every link and queueing discipline,
is deleted when a row ends, failed or not; traffic stays between the simulation's namespaces.
usage: ./tessera bench cluster_sim [--workers 4] [--servers 2] [--models resnet50,...]
           [--gbps 1,10,25] [--scale_down 100] [--latency_us 0] [--loss 0] [--compute_ms 0]
           [--rounds 3] [--warmup 1] [--compression none,2bit,fp16] [--replicas 1]
           [--mode dist_sync]
"""
import argparse
import json
import os
import pathlib
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(os.path.abspath(__file__)).parent.parent  # runfiles or source tree
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "bench"))
from machine import machine  # noqa: E402
from sim_network import Failure, Network  # noqa: E402

SUBNET = "10.215.0"  # apart from tests/deploy's 10.214.0, so both can run at once
PORT = 9000
BIGARRAY_BOUND = 1000000  # kvstore/dist_kvstore.h kDefaultBigArrayBound
START_SECONDS = 60  # servers listening, workers through their warm-up


class BenchError(Exception):
    pass


def cpu_times():
    """(total, idle) jiffies of all CPUs so far."""
    values = [int(v) for v in pathlib.Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    return sum(values), values[3] + values[4]


def wait_for(predicate, seconds, what, processes):
    deadline = time.monotonic() + seconds
    while not predicate():
        for name, proc, log in processes:
            if proc.poll() is not None:
                raise BenchError(f"{name} exited with {proc.returncode} while waiting for {what}:"
                                 f"\n{pathlib.Path(log).read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise BenchError(f"no {what} within {seconds} s")
        time.sleep(0.02)


def run_row(args, work, certs, token, model, gbps, compression, replicas):
    """One cluster on fresh hosts; the row's figures."""
    workers, servers = args.workers, args.servers
    rate_bits = gbps * 1e9 / args.scale_down
    row_dir = pathlib.Path(tempfile.mkdtemp(dir=work, prefix=f"{model}-{gbps}g-"))
    ready = row_dir / "ready"
    ready.mkdir()
    processes = []  # (name, Popen, log path)
    with Network(SUBNET, prefix="tcs") as net:
        hosts = [net.add_host(i) for i in range(servers + workers)]
        for ns in hosts:
            net.shape(ns, rate_bits, args.latency_us, args.loss)
        ps_hosts = ",".join(f"{net.address(i)}:{PORT}" for i in range(servers))
        security = {"TESSERA_TLS_DIR": str(certs), "TESSERA_TOKEN_FILE": str(token)}
        try:
            def start(name, ns, argv, env=None):
                log = row_dir / f"{name}.log"
                with open(log, "w") as out:
                    proc = subprocess.Popen(["ip", "netns", "exec", ns, *argv], stdout=out,
                                            stderr=subprocess.STDOUT,
                                            env={**os.environ, **security, **(env or {})})
                processes.append((name, proc, log))

            for i in range(servers):
                start(f"ps-{i}", hosts[i], [
                    args.bin_dir / "server/tessera-ps", f"--address={net.address(i)}:{PORT}",
                    f"--ps_hosts={ps_hosts}", f"--index={i}", f"--num_workers={workers}",
                    f"--replicas={replicas}", f"--port_file={row_dir}/ps-{i}.port"])
            wait_for(lambda: all((row_dir / f"ps-{i}.port").exists() for i in range(servers)),
                     START_SECONDS, "servers listening", processes)
            for w in range(workers):
                start(f"worker-{w}", hosts[servers + w], [
                    args.bin_dir / "bench/cluster_sim_worker", f"--model={model}",
                    f"--scale_down={args.scale_down}", f"--compute_ms={args.compute_ms}",
                    f"--rounds={args.rounds}", f"--warmup={args.warmup}",
                    f"--mode={args.mode}", f"--ready_dir={ready}",
                    f"--compression={'' if compression == 'none' else compression}"], {
                        "TESSERA_INDEX": str(w), "TESSERA_PS_HOSTS": ps_hosts,
                        "TESSERA_NUM_WORKERS": str(workers),
                        "TESSERA_KVSTORE_BIGARRAY_BOUND": str(
                            max(1, BIGARRAY_BOUND // args.scale_down))})
            wait_for(lambda: all((ready / f"ready-{w}").exists() for w in range(workers)),
                     START_SECONDS + 20 * bound_round_seconds(args, None, rate_bits),
                     "workers through their warm-up", processes)
            before = [net.link_bytes(ns) for ns in hosts]
            cpu_before = cpu_times()
            (ready / "go").touch()
            worker_procs = processes[servers:]
            wait_for(lambda: all(p.poll() is not None for _, p, _ in worker_procs),
                     START_SECONDS + 20 * args.rounds * bound_round_seconds(args, None, rate_bits),
                     "workers' timed rounds", processes[:servers])
            cpu_after = cpu_times()
            after = [net.link_bytes(ns) for ns in hosts]
            reports = []
            for name, proc, log in worker_procs:
                text = pathlib.Path(log).read_text()
                if proc.returncode != 0:
                    raise BenchError(f"{name} failed ({proc.returncode}):\n{text[-3000:]}")
                reports.append(json.loads(text.strip().splitlines()[-1]))
        finally:
            for _, proc, _ in processes:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for _, proc, _ in processes:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    shutil.rmtree(row_dir, ignore_errors=True)

    model_bytes = reports[0]["model_bytes"]
    round_seconds = max(r["seconds"] for r in reports) / args.rounds
    bound = bound_round_seconds(args, model_bytes, rate_bits)
    per_round = [((a[0] - b[0]) / args.rounds, (a[1] - b[1]) / args.rounds)
                 for a, b in zip(after, before)]
    server_links = per_round[:servers]
    worker_links = per_round[servers:]
    ideal_server = workers * model_bytes / servers
    total, idle = (cpu_after[0] - cpu_before[0]), (cpu_after[1] - cpu_before[1])
    return {
        "model": model, "gbps": gbps, "link_mbit_simulated": rate_bits / 1e6,
        "compression": compression, "replicas": replicas, "keys": reports[0]["keys"],
        "model_bytes_scaled": model_bytes, "model_bytes_full": model_bytes * args.scale_down,
        "rounds_per_s": 1 / round_seconds,
        "round_s_p50": statistics.median(s for r in reports for s in r["round_seconds"]),
        "bound_round_s": bound, "ratio_to_bound": bound / round_seconds,
        "server_link_bytes_per_round": [{"sent": s, "received": r} for s, r in server_links],
        "worker_link_bytes_per_round": [{"sent": s, "received": r} for s, r in worker_links],
        "busiest_server_link_vs_ideal": max(max(s, r) for s, r in server_links) / ideal_server,
        "worker_sent_vs_model": statistics.mean(s for s, _ in worker_links) / model_bytes,
        "cpu_busy": 1 - idle / total if total else 0.0,
    }


def bound_round_seconds(args, model_bytes, rate_bits):
    """compute + max(M, W*M/S) / B; with model_bytes None, a generous guess for time-outs
    (the biggest model, VGG-16's 553 MB, scaled)."""
    m = model_bytes if model_bytes is not None else 553e6 / args.scale_down
    busiest = max(m, args.workers * m / args.servers)
    return args.compute_ms / 1000 + busiest * 8 / rate_bits


def main():
    # A SIGTERM (a time-out, ^C's cousin) unwinds like an error, deleting the hosts.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tessera", required=True, help="the tessera binary (./tessera bench)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--models", default="resnet50,vgg16,embedding_mlp")
    parser.add_argument("--gbps", default="1,10,25", help="link bandwidths each way, full size")
    parser.add_argument("--scale_down", type=int, default=100)
    parser.add_argument("--latency_us", type=int, default=0,
                        help="one-way, per link (needs the kernel's netem)")
    parser.add_argument("--loss", type=float, default=0.0, help="percent, per link")
    parser.add_argument("--compute_ms", type=float, default=0.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--compression", default="none", help="none, 2bit, fp16; comma list")
    parser.add_argument("--replicas", default="1", help="1 or 2; comma list")
    parser.add_argument("--mode", default="dist_sync")
    parser.add_argument("--work_dir", default=None)
    args = parser.parse_args()
    args.bin_dir = pathlib.Path(args.tessera).resolve().parent.parent
    if os.geteuid() != 0:
        sys.exit("cluster_sim: needs root (network namespaces and tc)")
    if args.workers < 1 or args.servers < 1 or args.workers + args.servers > 253:
        sys.exit("cluster_sim: --workers and --servers must be at least 1, together at most 253")

    work = pathlib.Path(args.work_dir or tempfile.mkdtemp(prefix="tessera-cluster-sim-"))
    work.mkdir(parents=True, exist_ok=True)
    addresses = "+".join(f"{SUBNET}.{i + 1}" for i in range(args.servers + args.workers))
    subprocess.run([args.tessera, "certs", str(work / "certs"), "--hosts", addresses],
                   check=True, capture_output=True)
    certs = work / "certs" / f"{SUBNET}.1"
    token = work / "token"
    token.write_text(secrets.token_hex(24) + "\n")
    token.chmod(0o600)

    rows = []
    for model in args.models.split(","):
        for gbps in [float(g) for g in args.gbps.split(",")]:
            for compression in args.compression.split(","):
                for replicas in [int(r) for r in args.replicas.split(",")]:
                    try:
                        row = run_row(args, work, certs, token, model, gbps, compression,
                                      replicas)
                    except (BenchError, Failure) as e:
                        sys.exit(f"cluster_sim: {model} at {gbps} Gbps, {compression}, "
                                 f"replicas {replicas}: {e}")
                    rows.append(row)
                    print(f"{model:>13} {gbps:5g} Gbps {compression:>4} r{replicas}: "
                          f"{row['rounds_per_s']:.2f} rounds/s, bound "
                          f"{1 / row['bound_round_s']:.2f} (ratio {row['ratio_to_bound']:.2f}), "
                          f"busiest server link {row['busiest_server_link_vs_ideal']:.2f}x "
                          f"ideal, cpu {row['cpu_busy']:.0%}", file=sys.stderr, flush=True)
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({
        "bench": "cluster_sim", "machine": machine(), "workers": args.workers,
        "servers": args.servers, "scale_down": args.scale_down, "latency_us": args.latency_us,
        "loss_percent": args.loss, "compute_ms": args.compute_ms, "mode": args.mode,
        "rounds": args.rounds, "rows": rows}))


if __name__ == "__main__":
    main()
