#!/usr/bin/python3
"""Checks deploy/k8s: each overlay renders (kubectl kustomize, when kubectl is installed;
else the base files are read as they are), and what the cluster needs holds across its
objects - the pods are locked down, the daemons have probes, resources and a grace period
longer than their SIGTERM bound, the Secret is mounted read-only, and the cluster size agrees
everywhere it is written (replicas, TESSERA_PS_HOSTS, TESSERA_NUM_WORKERS, the submitter's
--workers / --servers), and monitoring/'s PodMonitor scrapes the port every daemon serves
metrics on, with the Secret's CA and token. Prints one line per failed check and exits 1 on
any.

With --binary NAME=PATH (tessera, tessera-ps, tessera-worker), every flag a container passes
to that program and every TESSERA_* variable it sets must be one the program knows: a
daemon's flags from its --helpfull, the command line's and the variables from the program's
own strings.

usage: check_manifests.py DEPLOY_K8S_DIR [--binary NAME=PATH]...
"""
import pathlib
import re
import shutil
import subprocess
import sys

import yaml

# Pods name their peers in their own namespace (the downward API's metadata.namespace).
NS = "$(POD_NAMESPACE).svc"

# The daemons stop within 10 s of SIGTERM (tests/integration/job_test.cc checks it).
DAEMON_STOP_SECONDS = 10

failures = []
binaries = {}  # program name -> (its bytes, the flags its --helpfull lists or None)


def load_binary(name, path):
    flags = None
    if name != "tessera":  # the daemons parse flags with Abseil, which lists them all
        helpfull = subprocess.run([path, "--helpfull"], capture_output=True, text=True)
        flags = set(re.findall(r"^\s+--(\w+)", helpfull.stdout + helpfull.stderr, re.M))
    binaries[name] = (pathlib.Path(path).read_bytes(), flags)


def check_known_to_binary(name, container):
    if not container.get("command") or container["command"][0] not in binaries:
        return
    program = container["command"][0]
    data, flags = binaries[program]
    for arg in container["command"][1:] + container.get("args", []):
        if not arg.startswith("--"):
            continue
        flag = arg[2:].split("=", 1)[0]
        known = flag in flags if flags is not None else f"--{flag}".encode() in data
        check(known, f"{name}: {program} has no flag --{flag}")
    for e in container.get("env", []):
        if e["name"].startswith("TESSERA_"):
            check(e["name"].encode() in data, f"{name}: {program} reads no {e['name']}")


def check(ok, what):
    if not ok:
        failures.append(what)


def render(overlay):
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        base = overlay.parent.parent / "base"
        docs = []
        for f in sorted(base.glob("*.yaml")):
            if f.name not in ("kustomization.yaml", "job.yaml"):
                docs += [d for d in yaml.safe_load_all(f.read_text()) if d]
        return docs
    out = subprocess.run([kubectl, "kustomize", "--load-restrictor=LoadRestrictionsNone",
                          str(overlay)], check=True, capture_output=True, text=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def by_kind(docs, kind):
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def env_of(container):
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def check_pod(where, spec, daemon):
    security = spec.get("securityContext", {})
    check(security.get("runAsNonRoot") is True, f"{where}: runAsNonRoot")
    check(security.get("seccompProfile", {}).get("type") == "RuntimeDefault",
          f"{where}: seccompProfile RuntimeDefault")
    check(spec.get("automountServiceAccountToken") is False,
          f"{where}: automountServiceAccountToken false")
    for c in spec.get("initContainers", []) + spec["containers"]:
        name = f"{where} container {c['name']}"
        sc = c.get("securityContext", {})
        check(sc.get("readOnlyRootFilesystem") is True, f"{name}: readOnlyRootFilesystem")
        check(sc.get("allowPrivilegeEscalation") is False, f"{name}: allowPrivilegeEscalation")
        check(sc.get("capabilities", {}).get("drop") == ["ALL"], f"{name}: drop ALL")
        # Kubernetes expands $(VAR) only from variables defined before the use.
        defined = set()
        for e in c.get("env", []):
            for var in re.findall(r"\$\((\w+)\)", str(e.get("value", ""))):
                check(var in defined, f"{name}: env {e['name']} uses $({var}) before it is set")
            defined.add(e["name"])
        for arg in c.get("command", []) + c.get("args", []):
            for var in re.findall(r"\$\((\w+)\)", arg):
                check(var in defined, f"{name}: its command uses $({var}), which is not set")
        for m in c.get("volumeMounts", []):
            for var in re.findall(r"\$\((\w+)\)", m.get("subPathExpr", "")):
                check(var in defined, f"{name}: volume {m['name']}'s subPathExpr uses $({var}), "
                      "which is not set")
        check_known_to_binary(name, c)
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for c in spec["containers"]:
        name = f"{where} container {c['name']}"
        if daemon:
            check("readinessProbe" in c and "livenessProbe" in c, f"{name}: probes")
            res = c.get("resources", {})
            check(res.get("requests", {}).get("cpu") and res.get("limits", {}).get("memory"),
                  f"{name}: resource requests and limits")
        for m in c.get("volumeMounts", []):
            v = volumes.get(m["name"], {})
            if "secret" in v:
                check(m.get("readOnly") is True, f"{name}: Secret {m['name']} read-only")
                # The kubelet writes a Secret's files as root's; a non-root user reads them
                # only through the group it gives fsGroup.
                check(security.get("fsGroup") is not None,
                      f"{name}: Secret {m['name']} unreadable without the pod's fsGroup")
                check(v["secret"].get("secretName") == "tessera-cluster",
                      f"{name}: the tessera-cluster Secret")
    if daemon:
        grace = spec.get("terminationGracePeriodSeconds", 30)
        check(grace > DAEMON_STOP_SECONDS,
              f"{where}: terminationGracePeriodSeconds {grace} <= {DAEMON_STOP_SECONDS}")


def arg_after(command, flag):
    return command[command.index(flag) + 1] if flag in command else None


def check_overlay(overlay, gpu):
    docs = render(overlay)
    sets = by_kind(docs, "StatefulSet")
    services = by_kind(docs, "Service")
    check({"tessera-ps", "tessera-worker"} <= sets.keys(), f"{overlay}: both StatefulSets")
    if failures:
        return
    for name, s in sets.items():
        check(services.get(s["spec"]["serviceName"], {}).get("spec", {}).get("clusterIP") ==
              "None", f"{overlay}: {name}'s headless Service")
        check_pod(f"{overlay} {name}", s["spec"]["template"]["spec"], daemon=True)
    ps_port = services["tessera-ps"]["spec"]["ports"][0]["port"]
    worker_port = services["tessera-worker"]["spec"]["ports"][0]["port"]
    # Namespace-qualified, as the certificates name them (*.tessera-ps.NAMESPACE.svc).
    servers = [f"tessera-ps-{i}.tessera-ps.{NS}:{ps_port}"
               for i in range(sets["tessera-ps"]["spec"]["replicas"])]
    workers = [f"tessera-worker-{i}.tessera-worker.{NS}:{worker_port}"
               for i in range(sets["tessera-worker"]["spec"]["replicas"])]
    ps_env = env_of(sets["tessera-ps"]["spec"]["template"]["spec"]["containers"][0])
    check(ps_env.get("TESSERA_PS_HOSTS") == ",".join(servers),
          f"{overlay}: TESSERA_PS_HOSTS {ps_env.get('TESSERA_PS_HOSTS')} != {servers}")
    check(ps_env.get("TESSERA_NUM_WORKERS") == str(len(workers)),
          f"{overlay}: TESSERA_NUM_WORKERS != {len(workers)} worker replicas")
    jobs = by_kind(docs, "Job")
    check("tessera-submit" in jobs, f"{overlay}: the submitter Job")
    if "tessera-submit" in jobs:
        pod = jobs["tessera-submit"]["spec"]["template"]["spec"]
        check_pod(f"{overlay} tessera-submit", pod, daemon=False)
        command = pod["containers"][0]["command"]
        check(arg_after(command, "--workers") == ",".join(workers),
              f"{overlay}: submitter --workers {arg_after(command, '--workers')} != {workers}")
        check(arg_after(command, "--servers") == ",".join(servers),
              f"{overlay}: submitter --servers != {servers}")
        if shutil.which("kubectl"):  # kustomize generates it (with a hash in its name)
            maps = by_kind(docs, "ConfigMap")
            job_volume = [v for v in pod["volumes"] if "configMap" in v]
            check(len(job_volume) == 1 and job_volume[0]["configMap"]["name"] in maps,
                  f"{overlay}: the submitter mounts the generated job ConfigMap")
    policies = by_kind(docs, "NetworkPolicy")
    check(len(policies) == 1, f"{overlay}: a NetworkPolicy")
    for p in policies.values():
        ports = {x["port"] for rule in p["spec"]["ingress"] for x in rule.get("ports", [])}
        check(ports == {ps_port, worker_port}, f"{overlay}: NetworkPolicy ports {ports}")
    budgets = by_kind(docs, "PodDisruptionBudget")
    check(len(budgets) == 2, f"{overlay}: a PodDisruptionBudget per daemon")
    worker_res = sets["tessera-worker"]["spec"]["template"]["spec"]["containers"][0]["resources"]
    has_gpu = "nvidia.com/gpu" in worker_res.get("limits", {})
    check(has_gpu == gpu, f"{overlay}: nvidia.com/gpu limit {'missing' if gpu else 'present'}")


def metrics_port(container):
    """The port of a daemon's --metrics_address, or None."""
    for arg in container.get("command", []) + container.get("args", []):
        if arg.startswith("--metrics_address="):
            return int(arg.rsplit(":", 1)[1])
    return None


def check_monitoring(root):
    """deploy/k8s/monitoring: its PodMonitor scrapes a port every daemon serves metrics on,
    with the Secret's CA and token, and its NetworkPolicy opens that port."""
    folder = root / "monitoring"
    docs = (render(folder) if shutil.which("kubectl") else
            [d for d in yaml.safe_load_all((folder / "podmonitor.yaml").read_text()) if d])
    monitors = by_kind(docs, "PodMonitor")
    check(len(monitors) == 1, "monitoring: one PodMonitor")
    if not monitors:
        return
    endpoint = next(iter(monitors.values()))["spec"]["podMetricsEndpoints"][0]
    check(endpoint.get("scheme") == "https", "monitoring: the PodMonitor scrapes over TLS")
    check(endpoint.get("tlsConfig", {}).get("ca", {}).get("secret") ==
          {"name": "tessera-cluster", "key": "ca.pem"}, "monitoring: the cluster CA")
    check(endpoint.get("authorization", {}).get("credentials") ==
          {"name": "tessera-cluster", "key": "token"}, "monitoring: the cluster token")
    ports = set()
    for name, s in by_kind(render(root / "overlays" / "cpu"), "StatefulSet").items():
        container = s["spec"]["template"]["spec"]["containers"][0]
        named = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
        port = named.get(endpoint["port"])
        check(port is not None and port == metrics_port(container),
              f"monitoring: {name}'s port '{endpoint['port']}' ({port}) is not its "
              f"--metrics_address port ({metrics_port(container)})")
        ports.add(port)
    for p in by_kind(docs, "NetworkPolicy").values():
        opened = {x["port"] for rule in p["spec"]["ingress"] for x in rule.get("ports", [])}
        check(opened == ports, f"monitoring: NetworkPolicy opens {opened}, not {ports}")


def check_jobset(where, spec, worker_job, num_workers):
    """A JobSet spec (jobset.yaml, or the Trainer runtime's template) whose workers are the
    replicated job `worker_job` with `num_workers` pods."""
    jobs = {j["name"]: j for j in spec["replicatedJobs"]}
    check(set(jobs) == {"ps", worker_job, "submitter"}, f"{where}: replicated jobs {set(jobs)}")
    if set(jobs) != {"ps", worker_job, "submitter"}:
        return
    check(spec.get("network", {}).get("enableDNSHostnames") is True, f"{where}: DNS hostnames")
    check(spec.get("successPolicy", {}).get("targetReplicatedJobs") == ["submitter"],
          f"{where}: success when the submitter succeeds")
    check(spec.get("failurePolicy", {}).get("maxRestarts", 0) > 0, f"{where}: bounded restarts")
    pods = {name: j["template"]["spec"]["template"]["spec"] for name, j in jobs.items()}
    for name, pod in pods.items():
        check_pod(f"{where} {name}", pod, daemon=name != "submitter")
    ps = pods["ps"]["containers"][0]
    ps_port = ps["ports"][0]["containerPort"]
    worker_port = pods[worker_job]["containers"][0]["ports"][0]["containerPort"]
    name = "$(JOBSET_NAME)"
    servers = [f"{name}-ps-0-{i}.{name}.{NS}:{ps_port}"
               for i in range(jobs["ps"]["template"]["spec"].get("parallelism", 1))]
    workers = [f"{name}-{worker_job}-0-{i}.{name}.{NS}:{worker_port}" for i in range(num_workers)]
    check(env_of(ps).get("TESSERA_PS_HOSTS") == ",".join(servers), f"{where}: TESSERA_PS_HOSTS")
    check(env_of(ps).get("TESSERA_NUM_WORKERS") == str(num_workers),
          f"{where}: TESSERA_NUM_WORKERS != {num_workers}")
    command = pods["submitter"]["containers"][0]["command"]
    check(arg_after(command, "--workers") == ",".join(workers),
          f"{where}: submitter --workers {arg_after(command, '--workers')} != {workers}")
    check(arg_after(command, "--servers") == ",".join(servers), f"{where}: submitter --servers")


def check_batch(root):
    jobsets = by_kind(render(root / "batch") if shutil.which("kubectl") else
                      list(yaml.safe_load_all((root / "batch" / "jobset.yaml").read_text())),
                      "JobSet")
    check(len(jobsets) == 1, "batch: one JobSet")
    for name, js in jobsets.items():
        worker = next(j for j in js["spec"]["replicatedJobs"] if j["name"] == "worker")
        check_jobset(f"JobSet {name}", js["spec"], "worker",
                     worker["template"]["spec"]["parallelism"])
    runtime = yaml.safe_load((root / "batch" / "trainer-runtime.yaml").read_text())
    train_job = yaml.safe_load((root / "batch" / "trainjob.yaml").read_text())
    nodes = runtime["spec"]["mlPolicy"]["numNodes"]
    template = runtime["spec"]["template"]["spec"]
    node = next((j for j in template["replicatedJobs"] if j["name"] == "node"), None)
    check(node is not None and node["template"]["metadata"]["labels"].get(
        "trainer.kubeflow.org/trainjob-ancestor-step") == "trainer",
          "runtime: the workers are the trainer step 'node'")
    check_jobset("runtime", template, "node", nodes)
    check(train_job["spec"]["runtimeRef"]["name"] == runtime["metadata"]["name"],
          "TrainJob: runs the Tessera runtime")
    check(train_job["spec"]["trainer"]["numNodes"] == nodes,
          "TrainJob: numNodes agrees with the runtime's worker lists")
    docs = list(yaml.safe_load_all((root / "batch" / "tfjob.yaml").read_text()))
    tfjob = by_kind(docs, "TFJob")
    submit = by_kind(docs, "Job")
    check(len(tfjob) == 1 and len(submit) == 1, "tfjob.yaml: a TFJob and its submitter")
    for name, tf in tfjob.items():
        replicas = tf["spec"]["tfReplicaSpecs"]
        check(set(replicas) == {"PS", "Worker"}, f"TFJob: replicas {set(replicas)}")
        for kind, r in replicas.items():
            pod = r["template"]["spec"]
            check_pod(f"TFJob {kind}", pod, daemon=True)
            c = pod["containers"][0]
            check(c["name"] == "tensorflow" and c["ports"][0]["name"] == "tfjob-port",
                  f"TFJob {kind}: the container and port the operator configures")
        port = replicas["PS"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]
        for job in submit.values():
            pod = job["spec"]["template"]["spec"]
            check_pod("TFJob submitter", pod, daemon=False)
            command = pod["containers"][0]["command"]
            workers = [f"{name}-worker-{i}.{NS}:{port}"
                       for i in range(replicas["Worker"]["replicas"])]
            servers = [f"{name}-ps-{i}.{NS}:{port}" for i in range(replicas["PS"]["replicas"])]
            check(arg_after(command, "--workers") == ",".join(workers), "TFJob: --workers")
            check(arg_after(command, "--servers") == ",".join(servers), "TFJob: --servers")


def main():
    root = pathlib.Path(sys.argv[1])
    args = sys.argv[2:]
    while args[:1] == ["--binary"] and len(args) >= 2:
        name, path = args[1].split("=", 1)
        load_binary(name, path)
        args = args[2:]
    check(not args, f"unknown arguments {args}")
    check_overlay(root / "overlays" / "cpu", gpu=False)
    if shutil.which("kubectl"):  # without it only the base can be read
        check_overlay(root / "overlays" / "gpu", gpu=True)
        check_overlay(root / "overlays" / "replicated", gpu=False)
    check_batch(root)
    check_monitoring(root)
    for f in failures:
        print("FAIL:", f)
    print(f"{'kubectl kustomize' if shutil.which('kubectl') else 'base files only'}, "
          f"binaries {sorted(binaries)}: {len(failures)} failed checks")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
