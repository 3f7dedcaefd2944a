"""Simulated hosts on one machine: a network namespace per host, each with its own address on
a bridge that lives in a namespace of its own, so the machine's own network is never touched.
Links can be cut, paced or shaped like a real network's (tc's tbf for the rate, a delay line
in user space for the latency - sim_delay_line.cc, which needs no netem -, random loss by a
BPF classifier, in both directions of a host's link), and every link's bytes and TCP
retransmissions read back. Deleting the namespaces removes the links and their queueing
disciplines with them: close() stops the delay lines and cleans everything up, whatever
failed before it.

Used by tests/deploy/simulate_cluster.py (Kubernetes pods on hosts of their own) and
bench/cluster_sim.py (parameter-server traffic over shaped links). Needs root.
"""
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile


class Failure(Exception):
    pass


def run(argv, **kwargs):
    result = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise Failure(f"{' '.join(map(str, argv))}: exit {result.returncode}: {result.stderr}")
    return result.stdout


class Network:
    """One bridge in a namespace of its own and a namespace per host with a veth on it. Host
    `index` has address SUBNET.index+1; the bridge (the node) is SUBNET.254."""

    def __init__(self, subnet, prefix="tsk", delay_line=None):
        """`delay_line`: the sim_delay_line program, needed only for links with a delay."""
        self.subnet = subnet
        self.delay_line = delay_line
        self.delay_lines = []  # their processes, stopped before the namespaces go
        self.node_address = f"{subnet}.254"
        self.prefix = f"{prefix}{os.getpid()}"
        self.hub = f"{self.prefix}-hub"
        self.namespaces = []
        self.ports = {}  # host namespace -> its veth's end on the bridge
        self.dir = None  # built programs (random loss), made on first use
        self._add(self.hub)
        run(["ip", "-n", self.hub, "link", "add", "br0", "type", "bridge"])
        run(["ip", "-n", self.hub, "addr", "add", f"{self.node_address}/24", "dev", "br0"])
        run(["ip", "-n", self.hub, "link", "set", "br0", "up"])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _add(self, ns):
        run(["ip", "netns", "add", ns])
        self.namespaces.append(ns)
        run(["ip", "-n", ns, "link", "set", "lo", "up"])

    def address(self, index):
        return f"{self.subnet}.{index + 1}"

    def add_host(self, index):
        """The namespace of host `index` (0-based), with address SUBNET.index+1."""
        ns = f"{self.prefix}-{index}"
        self._add(ns)
        port = f"p{index}"
        run(["ip", "-n", self.hub, "link", "add", port, "type", "veth", "peer", "name", "eth0",
             "netns", ns])
        run(["ip", "-n", self.hub, "link", "set", port, "master", "br0", "up"])
        run(["ip", "-n", ns, "addr", "add", f"{self.address(index)}/24", "dev", "eth0"])
        run(["ip", "-n", ns, "link", "set", "eth0", "up"])
        self.ports[ns] = port
        return ns

    def set_link(self, ns, state):
        """Cuts a host off the network ("down") or joins it again ("up")."""
        run(["ip", "-n", ns, "link", "set", "eth0", state])

    def pace(self, ns, rate):
        """Limits what the host sends to `rate` (tc's tbf, e.g. "1gbit"): a dist_sync job with
        a worker there takes at least a push's bytes over the rate per batch on any machine,
        so a test that must act while the job runs does not depend on the CPU's speed."""
        run(["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", "eth0", "root", "tbf",
             "rate", rate, "burst", "256kb", "latency", "200ms"])

    def shape(self, ns, rate_bits, delay_us=0, loss_percent=0.0, queue_ms=100,
              socket_buffer_bytes=None):
        """Makes the host's link behave like a full-duplex link of `rate_bits` bits/s each way:
        on the host's side for what it sends and on the bridge's side for what it receives
        (each direction its own queue, as a switch port has). Bandwidth is tc's tbf (a bucket
        of at least 64 KiB, the largest segment a veth hands over, and at most `queue_ms` of
        queue, as a switch port buffers). A delay holds every frame `delay_us` each way
        between the host's port and the switch (a host-to-host path crosses two links, so
        its one-way delay is twice that), in a wire of user space (sim_delay_line) rather
        than netem, which many kernels lack. Random loss drops each packet a side sends with
        probability `loss_percent` / 100 (sim_loss.bpf.c on the link's egress, both sides;
        needs clang and the kernel's cls_bpf, not netem). `socket_buffer_bytes` caps the
        host's TCP send and receive buffers (its namespace's tcp_wmem and tcp_rmem): a
        simulation that scales the bandwidth down scales them with it, or they hold seconds
        of traffic."""
        if socket_buffer_bytes is not None:
            limit = max(16384, int(socket_buffer_bytes))
            for name in ["net.ipv4.tcp_wmem", "net.ipv4.tcp_rmem"]:
                run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w",
                     f"{name}=4096 {min(16384, limit)} {limit}"])
        burst = max(64 * 1024, int(rate_bits / 8 * 0.002))
        args = ["tbf", "rate", f"{int(rate_bits)}bit", "burst", str(burst), "latency",
                f"{queue_ms}ms"]
        run(["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", "eth0", "root", *args])
        run(["ip", "netns", "exec", self.hub, "tc", "qdisc", "replace", "dev", self.ports[ns],
             "root", *args])
        if delay_us > 0:
            self._delay(ns, delay_us)
        if loss_percent > 0:
            program = self._loss_program(loss_percent)
            for where, dev in [(ns, "eth0"), (self.hub, self.ports[ns])]:
                run(["ip", "netns", "exec", where, "tc", "qdisc", "add", "dev", dev, "clsact"])
                run(["ip", "netns", "exec", where, "tc", "filter", "add", "dev", dev, "egress",
                     "bpf", "direct-action", "obj", program, "sec", "classifier"])

    def _delay(self, ns, delay_us):
        """Puts a delay line between the host's port and the bridge: the port leaves the
        bridge, a tap takes its place, and sim_delay_line carries the frames between the two,
        each `delay_us` late. The port keeps its queueing disciplines (the delay line sends
        through them)."""
        if self.delay_line is None:
            raise Failure("a link delay needs the sim_delay_line program (Network(delay_line=))")
        port = self.ports[ns]
        tap = f"d{port}"
        run(["ip", "-n", self.hub, "tuntap", "add", "dev", tap, "mode", "tap", "vnet_hdr"])
        run(["ip", "-n", self.hub, "link", "set", port, "nomaster"])
        proc = subprocess.Popen(["ip", "netns", "exec", self.hub, str(self.delay_line),
                                 f"--delay_us={int(delay_us)}", f"--port={port}", f"--tap={tap}"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.delay_lines.append(proc)
        if proc.stdout.readline().strip() != "ready":
            proc.wait()
            raise Failure(f"the delay line of {ns} did not start: {proc.stderr.read()}")
        run(["ip", "-n", self.hub, "link", "set", tap, "master", "br0", "up"])

    def _loss_program(self, loss_percent):
        """sim_loss.bpf.c built for `loss_percent` (once per value), in this network's folder."""
        if not 0 < loss_percent < 100:
            raise Failure(f"loss {loss_percent}%: not between 0 and 100")
        drop_below = min(2**32 - 1, round(loss_percent / 100 * 2**32))
        self.dir = self.dir or tempfile.mkdtemp(prefix="sim-network-")
        program = os.path.join(self.dir, f"loss-{drop_below}.o")
        if not os.path.exists(program):
            clang = shutil.which("clang-14") or shutil.which("clang")
            if clang is None:
                raise Failure("random loss needs clang to build its BPF program "
                              "(apt-get install clang-14)")
            source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sim_loss.bpf.c")
            multiarch = f"/usr/include/{platform.machine()}-linux-gnu"  # asm/types.h
            run([clang, "-O2", "-target", "bpf", f"-I{multiarch}", f"-DDROP_BELOW={drop_below}u",
                 "-c", source, "-o", program])
        return program

    def retransmitted(self, ns):
        """The TCP segments the host has sent again so far (its namespace's RetransSegs)."""
        lines = run(["ip", "netns", "exec", ns, "cat", "/proc/net/snmp"]).splitlines()
        tcp = [line.split() for line in lines if line.startswith("Tcp:")]
        return int(tcp[1][tcp[0].index("RetransSegs")])

    def link_bytes(self, ns):
        """(sent, received) bytes of the host's link so far, as its kernel counts them
        (headers included)."""
        link = json.loads(run(["ip", "-n", ns, "-s", "-j", "link", "show", "eth0"]))[0]
        stats = link["stats64"]
        return stats["tx"]["bytes"], stats["rx"]["bytes"]

    def http_get(self, url, python=sys.executable):
        """The body of a GET from the node, or None when it is not answered with 200."""
        get = ("import sys,urllib.request; "
               "sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())")
        result = subprocess.run(["ip", "netns", "exec", self.hub, python, "-c", get, url],
                                capture_output=True, text=True)
        return result.stdout if result.returncode == 0 else None

    def tcp_open(self, address, port, python=sys.executable):
        """A TCP probe from the node, as the kubelet's."""
        probe = ("import socket,sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), "
                 "timeout=2).close()")
        return subprocess.run(["ip", "netns", "exec", self.hub, python, "-c", probe,
                               address, str(port)], capture_output=True).returncode == 0

    def close(self):
        # First the delay lines: a namespace with a process in it outlives its deletion.
        for proc in self.delay_lines:
            proc.terminate()
        for proc in self.delay_lines:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.delay_lines = []
        for ns in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.namespaces = []
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
