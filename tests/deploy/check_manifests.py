#!/usr/bin/python3
"""Checks deploy/k8s: each overlay renders (kubectl kustomize, when kubectl is installed;
else the base files are read as they are), and what the cluster needs holds across its
objects - the pods are locked down, the daemons have probes, resources and a grace period
longer than their SIGTERM bound, the Secret is mounted read-only, and the cluster size agrees
everywhere it is written (replicas, TESSERA_PS_HOSTS, TESSERA_NUM_WORKERS, the submitter's
--workers / --servers). Prints one line per failed check and exits 1 on any.

usage: check_manifests.py DEPLOY_K8S_DIR
"""
import pathlib
import shutil
import subprocess
import sys

import yaml

# The daemons stop within 10 s of SIGTERM (tests/integration/job_test.cc checks it).
DAEMON_STOP_SECONDS = 10

failures = []


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
    servers = [f"tessera-ps-{i}.tessera-ps:{ps_port}"
               for i in range(sets["tessera-ps"]["spec"]["replicas"])]
    workers = [f"tessera-worker-{i}.tessera-worker:{worker_port}"
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


def main():
    root = pathlib.Path(sys.argv[1])
    check_overlay(root / "overlays" / "cpu", gpu=False)
    if shutil.which("kubectl"):  # without it only the base can be read
        check_overlay(root / "overlays" / "gpu", gpu=True)
    for f in failures:
        print("FAIL:", f)
    print(f"{'kubectl kustomize' if shutil.which('kubectl') else 'base files only'}: "
          f"{len(failures)} failed checks")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
