#!/usr/bin/env python3
"""cluster_sim: parameter-server communication on simulated hosts with real links (issue 41).

W worker and S server processes, each on a host of its own (a network namespace with its own
address, tools/sim_network.py), every host's link shaped by tc to a profile: a bandwidth
each way (tbf), random loss (--loss: a BPF classifier drops each packet with that
probability) and a latency (--latency_us each way on every link, so a path between two hosts
has twice that one way: a delay line in user space, tools/sim_delay_line, which needs no
netem). The workers (bench/cluster_sim_worker)
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
weigh scale_down times more against the payload than at full size; the CPU's time per byte
(TLS, the compression codecs) weighs scale_down times less against the links' time; and a
parameter whose scaled size falls under one element keeps one.

The peer (--peer gloo, the default) is allreduce on the same links: the W workers' hosts run
PyTorch's gloo allreduce of the same parameters (bench/cluster_sim_gloo.py: DDP's buckets,
25 MB scaled as the sizes are, allreduced as backward fills them), once per model and
bandwidth; its bound is a ring's, compute + 2 (W - 1) / W * M / B + 2 (W - 1) * 2 L (a ring's
2 (W - 1) steps, each a send across two links). Each parameter-server row
gives vs_gloo, its rounds/s over the peer's: with --servers as a list (e.g. 1,2,4) the rows
say where the servers win and where they lose as S/W grows.

Each row (model, bandwidth, latency, servers, compression, replicas) reports:
- rounds_per_s: the timed rounds over the slowest worker's time for them;
- bound_round_s: the analytical bound of the topology, compute + max(M, W*M/S) / B + 4 L, M
  the model's bytes, B a link's bandwidth each way (both scaled) and L a link's latency:
  each worker sends and receives its model once per round, a server's link carries W/S of
  it with an ideal placement, and a round is at least one request and its answer across two
  links each way; ratio_to_bound = bound_round_s / the measured round (1: only the links limit);
- every link's bytes per timed round, sent and received, as the kernel counts them (TCP/IP
  and TLS overhead included), and the busiest server link's against W*M/S;
- retransmitted_segments_per_round: TCP segments the hosts sent again (losses, queue drops);
- with compression, full_size_codec_s: one thread's time per round for the codecs at full
  size, a worker's (quantize its push, widen its pulls) and a server's (W/S pushes back to
  float32, W/S answers rounded), timed on this machine (cluster_sim_worker --time_codec);
  the scaled-down rounds spend 1/scale_down of it, and
  rounds_per_s_full_size_codec_worst adds the rest of both to the round, as if none of it
  overlapped the transfers: the measured and the worst bracket a full-size cluster's rate
  on CPUs like these;
- cpu_busy: the machine's busy share of its CPUs over the timed rounds (near 1: the figure is
  the CPU's, not the links').

--schedule layered runs the compute as a training step does (cluster_sim_worker's header):
forward layer by layer, each waiting only for its own parameters' new values, backward in
reverse with each parameter's push issued as its gradient is made, the compute split across
the layers by their FLOPs; --priority forward,backward compares the order on the wire (the
first layer's parameters most urgent - MXNet's and ByteScheduler's - or the last layer's).
The workers first time the exchange alone (exchange_s), and a layered row adds
hidden_fraction = (compute + exchange_s - round) / exchange_s, the share of the communication
the compute hid (clipped to [0, 1]), and overlap_bound_round_s = max(compute, the links'
time). gloo's layered peer overlaps as DDP does: buckets allreduced during backward, the next
forward after all of them.
Last line: one JSON object naming the machine.

Needs root (namespaces, tc). Every namespace, and with it every link and queueing discipline,
is deleted when a row ends, failed or not; traffic stays between the simulation's namespaces.
usage: ./tessera bench cluster_sim [--workers 4] [--servers 2[,4...]] [--models resnet50,...]
           [--gbps 1,10,25] [--latency_us 0[,250...]] [--scale_down 100] [--loss 0]
           [--compute_ms 0]
           [--rounds 3] [--warmup 1] [--compression none,2bit,fp16,2bit/bf16] [--replicas 1]
           [--mode dist_sync] [--peer gloo|none] [--schedule serial|layered]
           [--priority forward[,backward]] [--colocate]
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
DDP_BUCKET_BYTES = 25 * 1024 * 1024  # PyTorch DDP's bucket_cap_mb default
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


class Hosts:
    """One measurement's hosts, shaped, and its processes: started in their namespaces, told
    to start their timed rounds together once all are through their warm-up (the links'
    counters and the CPUs' times read in between), and stopped however the run ends."""

    def __init__(self, args, work, count, rate_bits, latency_us, env):
        self.args = args
        self.rate_bits = rate_bits
        self.latency_us = latency_us
        self.dir = pathlib.Path(tempfile.mkdtemp(dir=work, prefix="run-"))
        self.ready = self.dir / "ready"
        self.ready.mkdir()
        self.env = env
        self.net = Network(SUBNET, prefix="tcs", delay_line=args.bin_dir / "tools/sim_delay_line")
        self.processes = []  # (name, Popen, log path)
        try:
            self.hosts = [self.net.add_host(i) for i in range(count)]
            for ns in self.hosts:
                self.net.shape(ns, rate_bits, latency_us, args.loss, args.queue_ms,
                               args.socket_buffer_mb * 1024 * 1024 / args.scale_down)
        except BaseException:
            self.net.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for _, proc, _ in self.processes:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for _, proc, _ in self.processes:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.net.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def start(self, name, host, argv, env=None):
        log = self.dir / f"{name}.log"
        with open(log, "w") as out:
            proc = subprocess.Popen(["ip", "netns", "exec", self.hosts[host], *map(str, argv)],
                                    stdout=out, stderr=subprocess.STDOUT,
                                    env={**os.environ, **self.env, **(env or {})})
        self.processes.append((name, proc, log))

    def measure(self, workers):
        """Starts the timed rounds of `workers` (names of started processes, each writing
        ready/ready-RANK after its warm-up and waiting for ready/go, and ready/done-RANK after
        its timed rounds); their JSON reports, the links' (sent, received) bytes per timed
        round, the CPUs' busy share over the rounds and the TCP segments the hosts sent again
        per round, all counted from go to the last done (not the processes' ends: their
        shutdown would count as rounds)."""
        seconds = 20 * guess_round_seconds(self.args, self.rate_bits, self.latency_us)
        named = {name: (proc, log) for name, proc, log in self.processes}
        wait_for(lambda: all((self.ready / f"ready-{w}").exists() for w in range(len(workers))),
                 START_SECONDS + (self.args.warmup + 1) * seconds,
                 "workers through their warm-up", self.processes)
        before = [self.net.link_bytes(ns) for ns in self.hosts]
        retransmitted_before = sum(self.net.retransmitted(ns) for ns in self.hosts)
        cpu_before = cpu_times()
        (self.ready / "go").touch()
        others = [p for p in self.processes if p[0] not in workers]
        # (A worker that failed has ended without its done file; reading its report says so.)
        wait_for(lambda: all((self.ready / f"done-{w}").exists() or named[name][0].poll() is
                             not None for w, name in enumerate(workers)),
                 START_SECONDS + self.args.rounds * seconds, "workers' timed rounds", others)
        cpu_after = cpu_times()
        after = [self.net.link_bytes(ns) for ns in self.hosts]
        retransmitted = sum(self.net.retransmitted(ns) for ns in self.hosts) - retransmitted_before
        wait_for(lambda: all(named[w][0].poll() is not None for w in workers), seconds,
                 "workers' ends", others)
        reports = []
        for name in workers:
            proc, log = named[name]
            text = pathlib.Path(log).read_text()
            if proc.returncode != 0:
                raise BenchError(f"{name} failed ({proc.returncode}):\n{text[-3000:]}")
            reports.append(json.loads(text.strip().splitlines()[-1]))
        # A layered run's workers exchange alone for as many rounds first.
        rounds = self.args.rounds * (2 if self.args.schedule == "layered" else 1)
        links = [((a[0] - b[0]) / rounds, (a[1] - b[1]) / rounds) for a, b in zip(after, before)]
        total, idle = cpu_after[0] - cpu_before[0], cpu_after[1] - cpu_before[1]
        return reports, links, (1 - idle / total if total else 0.0), retransmitted / rounds


def round_figures(args, reports, bound, comm_bound):
    round_seconds = max(r["seconds"] for r in reports) / args.rounds
    figures = {"rounds_per_s": 1 / round_seconds,
               "round_s_p50": statistics.median(s for r in reports for s in r["round_seconds"]),
               "bound_round_s": bound, "ratio_to_bound": bound / round_seconds}
    if args.schedule == "layered":
        compute = args.compute_ms / 1000
        figures["overlap_bound_round_s"] = max(compute, comm_bound)
        exchange = max(r.get("exchange_seconds", 0) for r in reports) / args.rounds
        for wait in ["first_layer_wait", "forward_wait", "backward_wait"]:
            if f"{wait}_seconds" in reports[0]:
                figures[f"{wait}_s"] = statistics.mean(r[f"{wait}_seconds"] for r in reports)
        if exchange > 0:
            figures["exchange_s"] = exchange
            figures["hidden_fraction"] = min(1.0, max(0.0, (compute + exchange - round_seconds)
                                                      / exchange))
    return figures


def guess_round_seconds(args, rate_bits, latency_us):
    """A generous round time for time-outs: the biggest model (VGG-16's 553 MB, scaled) through
    one link, once per worker, twice over, and 25 round trips (a round limited by its
    connections' windows takes many)."""
    return (args.compute_ms / 1000 + 2 * args.workers * 553e6 / args.scale_down * 8 / rate_bits
            + 100 * latency_us / 1e6)


_codec_seconds = {}


def codec_seconds(args, model, pushes, pulls):
    """cluster_sim_worker --time_codec for the full-size model (cached per model and codec)."""
    key = (model, pushes, pulls)
    if key not in _codec_seconds:
        _codec_seconds[key] = json.loads(subprocess.run(
            [args.bin_dir / "bench/cluster_sim_worker", f"--model={model}", "--scale_down=1",
             "--time_codec", f"--compression={'' if pushes == 'none' else pushes}",
             f"--pull_type={pulls}"],
            check=True, capture_output=True, text=True).stdout)
    return _codec_seconds[key]


def run_row(args, work, certs, token, model, gbps, latency_us, servers, compression, replicas,
            priority):
    """The parameter servers: one cluster on fresh hosts; the row's figures."""
    workers = args.workers
    pushes, _, pulls = compression.partition("/")  # e.g. "2bit/bf16": 2bit pushes, bf16 pulls
    rate_bits = gbps * 1e9 / args.scale_down
    security = {"TESSERA_TLS_DIR": str(certs), "TESSERA_TOKEN_FILE": str(token)}
    # Colocated, server i shares worker i's host (MXNet's usual deployment); else each has its own.
    worker_host = (lambda w: w) if args.colocate else (lambda w: servers + w)
    with Hosts(args, work, workers if args.colocate else servers + workers, rate_bits,
               latency_us, security) as h:
        ps_hosts = ",".join(f"{h.net.address(i)}:{PORT}" for i in range(servers))
        for i in range(servers):
            h.start(f"ps-{i}", i, [
                args.bin_dir / "server/tessera-ps", f"--address={h.net.address(i)}:{PORT}",
                f"--ps_hosts={ps_hosts}", f"--index={i}", f"--num_workers={workers}",
                f"--replicas={replicas}", f"--port_file={h.dir}/ps-{i}.port"])
        wait_for(lambda: all((h.dir / f"ps-{i}.port").exists() for i in range(servers)),
                 START_SECONDS, "servers listening", h.processes)
        for w in range(workers):
            h.start(f"worker-{w}", worker_host(w), [
                args.bin_dir / "bench/cluster_sim_worker", f"--model={model}",
                f"--scale_down={args.scale_down}", f"--compute_ms={args.compute_ms}",
                f"--rounds={args.rounds}", f"--warmup={args.warmup}",
                f"--mode={args.mode}", f"--ready_dir={h.ready}",
                f"--schedule={args.schedule}", f"--priority={priority}",
                f"--compression={'' if pushes == 'none' else pushes}",
                f"--pull_type={pulls}"], {
                    "TESSERA_INDEX": str(w), "TESSERA_PS_HOSTS": ps_hosts,
                    "TESSERA_NUM_WORKERS": str(workers),
                    "TESSERA_KVSTORE_BIGARRAY_BOUND": str(
                        max(1, BIGARRAY_BOUND // args.scale_down))})
        reports, links, cpu, retransmitted = h.measure([f"worker-{w}" for w in range(workers)])
    model_bytes = reports[0]["model_bytes"]
    # Each worker sends and receives its model once; a server's link carries W/S of it.
    ideal_server = workers * model_bytes / servers
    if args.colocate:
        # A host with a server: its worker's pushes but the 1/S its own server takes, and its
        # server's values for the W - 1 other workers (and as much in): M (W + S - 2) / S.
        server_links, worker_links = links[:servers], links
        comm_bound = (max(model_bytes, model_bytes * (workers + servers - 2) / servers) * 8
                      / rate_bits)
    else:
        server_links, worker_links = links[:servers], links[servers:]
        comm_bound = max(model_bytes, ideal_server) * 8 / rate_bits
    comm_bound += 4 * latency_us / 1e6  # a request and its answer, two links each way
    bound = args.compute_ms / 1000 + comm_bound
    row = {
        "model": model, "gbps": gbps, "latency_us": latency_us,
        "link_mbit_simulated": rate_bits / 1e6,
        "servers": servers, "compression": compression, "replicas": replicas,
        "colocated": args.colocate, "schedule": args.schedule, "priority": priority,
        "keys": reports[0]["keys"],
        "model_bytes_scaled": model_bytes, "model_bytes_full": model_bytes * args.scale_down,
        **round_figures(args, reports, bound, comm_bound),
        "server_link_bytes_per_round": [{"sent": s, "received": r} for s, r in server_links],
        "worker_link_bytes_per_round": [{"sent": s, "received": r} for s, r in worker_links],
        # (Colocated, a server's link carries its worker's traffic too.)
        "busiest_server_link_vs_ideal": (None if args.colocate else
                                         max(max(s, r) for s, r in server_links) / ideal_server),
        "worker_sent_vs_model": statistics.mean(s for s, _ in worker_links) / model_bytes,
        "cpu_busy": cpu, "retransmitted_segments_per_round": retransmitted,
    }
    if compression != "none":
        t = codec_seconds(args, model, pushes, pulls)
        codec = {"worker": t["quantize_s"] + t["unpack_pull_s"],
                 "server": workers / servers * (t["dequantize_s"] + t["pack_pull_s"])}
        row["full_size_codec_s"] = codec
        missing = (1 - 1 / args.scale_down) * (codec["worker"] + codec["server"])
        row["rounds_per_s_full_size_codec_worst"] = 1 / (1 / row["rounds_per_s"] + missing)
    return row


def run_gloo(args, work, model, gbps, latency_us):
    """The allreduce peer on the same links: W processes of bench/cluster_sim_gloo.py on the
    workers' hosts, PyTorch's gloo allreduce between them over TCP in DDP's buckets."""
    workers = args.workers
    rate_bits = gbps * 1e9 / args.scale_down
    sizes = work / f"{model}-sizes.json"
    sizes.write_text(subprocess.run(
        [args.bin_dir / "bench/cluster_sim_worker", f"--model={model}",
         f"--scale_down={args.scale_down}", "--list_parameters"],
        check=True, capture_output=True, text=True).stdout)
    with Hosts(args, work, workers, rate_bits, latency_us, {"GLOO_SOCKET_IFNAME": "eth0"}) as h:
        for w in range(workers):
            h.start(f"gloo-{w}", w, [
                "/usr/bin/python3", ROOT / "bench/cluster_sim_gloo.py", f"--rank={w}",
                f"--world={workers}", f"--master={h.net.address(0)}:{PORT}",
                f"--sizes={sizes}", f"--bucket_bytes={DDP_BUCKET_BYTES // args.scale_down}",
                f"--compute_ms={args.compute_ms}", f"--rounds={args.rounds}",
                f"--warmup={args.warmup}", f"--ready_dir={h.ready}",
                f"--schedule={args.schedule}"])
        reports, links, cpu, retransmitted = h.measure([f"gloo-{w}" for w in range(workers)])
    model_bytes = reports[0]["model_bytes"]
    # A ring allreduce sends and receives 2 (W - 1) / W of the model on every link.
    comm_bound = 2 * (workers - 1) / workers * model_bytes * 8 / rate_bits
    comm_bound += 2 * (workers - 1) * 2 * latency_us / 1e6  # its steps, one after another
    bound = args.compute_ms / 1000 + comm_bound
    return {"model": model, "gbps": gbps, "latency_us": latency_us, "peer": reports[0]["peer"],
            "schedule": args.schedule,
            **round_figures(args, reports, bound, comm_bound),
            "worker_sent_vs_model": statistics.mean(s for s, _ in links) / model_bytes,
            "cpu_busy": cpu, "retransmitted_segments_per_round": retransmitted}


def main():
    # A SIGTERM (a time-out, ^C's cousin) unwinds like an error, deleting the hosts.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tessera", required=True, help="the tessera binary (./tessera bench)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--servers", default="2", help="server counts; comma list")
    parser.add_argument("--models", default="resnet50,vgg16,embedding_mlp")
    parser.add_argument("--gbps", default="1,10,25", help="link bandwidths each way, full size")
    parser.add_argument("--scale_down", type=int, default=100)
    parser.add_argument("--latency_us", default="0",
                        help="each way, per link (a path between hosts crosses two); comma list")
    parser.add_argument("--loss", type=float, default=0.0,
                        help="percent of the packets each side of a link drops at random")
    # Linux's largest TCP send buffer by default (tcp_wmem), scaled down with the links: at full
    # size it holds a few milliseconds of a 10 Gbps link, unscaled a second of the scaled one
    # (and everything queued there is out of reach of the workers' priorities). With a latency,
    # a connection moves at most about a buffer per round trip: hosts tuned for long links
    # raise it to the bandwidth times the round trip.
    parser.add_argument("--socket_buffer_mb", type=float, default=4,
                        help="each host's largest TCP send and receive buffer, full size")
    parser.add_argument("--queue_ms", type=float, default=100,
                        help="a switch port's queue (and the host's), in time at the link's rate")
    parser.add_argument("--compute_ms", type=float, default=0.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--compression", default="none",
                        help="the pushes' none, 2bit or fp16, each optionally /bf16 for the "
                             "pulls (2bit/bf16, none/bf16); comma list")
    parser.add_argument("--replicas", default="1", help="1 or 2; comma list")
    parser.add_argument("--mode", default="dist_sync")
    parser.add_argument("--colocate", action="store_true",
                        help="server i on worker i's host (at most one server per worker)")
    parser.add_argument("--schedule", default="serial", choices=["serial", "layered"],
                        help="the compute before the exchange, or layer by layer overlapping it")
    parser.add_argument("--priority", default="forward",
                        help="forward, backward: which layers' keys are most urgent; comma list")
    parser.add_argument("--peer", default="gloo", choices=["gloo", "none"],
                        help="the allreduce peer on the same links, per model and bandwidth")
    parser.add_argument("--work_dir", default=None)
    args = parser.parse_args()
    args.bin_dir = pathlib.Path(args.tessera).resolve().parent.parent
    server_counts = [int(s) for s in args.servers.split(",")]
    latencies = [int(u) for u in args.latency_us.split(",")]
    if os.geteuid() != 0:
        sys.exit("cluster_sim: needs root (network namespaces and tc)")
    if args.workers < 1 or min(server_counts) < 1 or args.workers + max(server_counts) > 253:
        sys.exit("cluster_sim: --workers and --servers must be at least 1, together at most 253")
    if min(latencies) < 0:
        sys.exit("cluster_sim: --latency_us must not be negative")
    if args.socket_buffer_mb <= 0:
        sys.exit("cluster_sim: --socket_buffer_mb must be positive")
    if args.colocate and max(server_counts) > args.workers:
        sys.exit("cluster_sim: --colocate puts each server on a worker's host: at most --workers "
                 "servers")

    work = pathlib.Path(args.work_dir or tempfile.mkdtemp(prefix="tessera-cluster-sim-"))
    work.mkdir(parents=True, exist_ok=True)
    addresses = "+".join(f"{SUBNET}.{i + 1}" for i in range(max(server_counts) + args.workers))
    subprocess.run([args.tessera, "certs", str(work / "certs"), "--hosts", addresses],
                   check=True, capture_output=True)
    certs = work / "certs" / f"{SUBNET}.1"
    token = work / "token"
    token.write_text(secrets.token_hex(24) + "\n")
    token.chmod(0o600)

    rows, peer_rows = [], []
    for model in args.models.split(","):
        for gbps, latency_us in [(float(g), u) for g in args.gbps.split(",") for u in latencies]:
            link = f"{gbps:5g} Gbps" + (f" {latency_us} us" if latency_us else "")
            peer = None
            if args.peer == "gloo":
                try:
                    peer = run_gloo(args, work, model, gbps, latency_us)
                except (BenchError, Failure, subprocess.CalledProcessError) as e:
                    sys.exit(f"cluster_sim: gloo peer, {model} at {link}: {e}")
                peer_rows.append(peer)
                print(f"{model:>13} {link} gloo allreduce: "
                      f"{peer['rounds_per_s']:.2f} rounds/s, bound "
                      f"{1 / peer['bound_round_s']:.2f} (ratio {peer['ratio_to_bound']:.2f})",
                      file=sys.stderr, flush=True)
            for servers in server_counts:
                for compression in args.compression.split(","):
                    for replicas, priority in [(int(r), p) for r in args.replicas.split(",")
                                               for p in args.priority.split(",")]:
                        try:
                            row = run_row(args, work, certs, token, model, gbps, latency_us,
                                          servers, compression, replicas, priority)
                        except (BenchError, Failure) as e:
                            sys.exit(f"cluster_sim: {model} at {link}, {servers} servers, "
                                     f"{compression}, replicas {replicas}, priority "
                                     f"{priority}: {e}")
                        if peer is not None:
                            row["vs_gloo"] = row["rounds_per_s"] / peer["rounds_per_s"]
                        rows.append(row)
                        print(f"{model:>13} {link} S={servers} {compression:>9} "
                              f"r{replicas}: {row['rounds_per_s']:.2f} rounds/s, bound "
                              f"{1 / row['bound_round_s']:.2f} (ratio "
                              f"{row['ratio_to_bound']:.2f}), "
                              + ("colocated, " if args.colocate else
                                 f"busiest server link "
                                 f"{row['busiest_server_link_vs_ideal']:.2f}x ideal, ")
                              + (f"{row['vs_gloo']:.2f}x gloo, " if peer else "")
                              + (f"priority {priority}, hidden "
                                 f"{row.get('hidden_fraction', 0):.0%} (waits: first layer "
                                 f"{row.get('first_layer_wait_s', 0) * 1000:.1f} ms, forward "
                                 f"{row.get('forward_wait_s', 0) * 1000:.1f}, backward "
                                 f"{row.get('backward_wait_s', 0) * 1000:.1f}), " if
                                 args.schedule == "layered" else "")
                              + (f"with full-size codecs at worst "
                                 f"{row['rounds_per_s_full_size_codec_worst']:.2f}, "
                                 if "full_size_codec_s" in row else "")
                              + f"cpu {row['cpu_busy']:.0%}", file=sys.stderr, flush=True)
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({
        "bench": "cluster_sim", "machine": machine(), "workers": args.workers,
        "scale_down": args.scale_down, "latency_us": latencies,
        "socket_buffer_mb": args.socket_buffer_mb,
        "loss_percent": args.loss, "compute_ms": args.compute_ms, "mode": args.mode,
        "schedule": args.schedule, "rounds": args.rounds, "rows": rows,
        "peer_rows": peer_rows}))


if __name__ == "__main__":
    main()
