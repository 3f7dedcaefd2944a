#!/usr/bin/env python3
"""Fault injection for a training job: `./tessera chaos JOB.yaml` runs the job once without
faults, then again on its own local cluster while SIGKILLing its processes at random batches,
and checks what must survive:

  - the faulted job finishes (recovering by itself from lost workers and servers, and with
    `tessera train --resume` after the client itself is killed);
  - its final parameters equal the fault-free run's, byte for byte (CPU, fixed threads);
  - metrics.csv holds every epoch once;
  - every checkpoint folder left has its manifest (a kill mid-write leaves none behind that
    a later checkpoint does not replace, and none is loaded);
  - a parameter-server job that never rolled back: the servers' per-key counters at the end
    (RUN_DIR/round_counters.json: the rounds and pushes each key part applied, and each
    worker's pushes in it) equal the fault-free run's, so no round was lost or applied twice,
    and in both every push taken was summed exactly once.

Kinds of kill (--kill, comma-separated): worker (a random worker daemon), ps (a random
parameter server), client (the `tessera train` process: its daemons stop with it, and the
job is resumed with --resume), checkpoint (worker 0 while it writes a checkpoint: killed as
soon as a checkpoint folder without its manifest is seen).

Recovery time of a kill: from the kill until the rerun (announced by the client: "restart N")
has written its first checkpoint, i.e. its first batch past the point it resumed from; after a
client kill, until the resumed run has written two checkpoints past the newest at the kill
(the first may be one the old run's writer finished). A parameter server of a replicated job
(two servers or more, `replicas` not 1) fails over instead (docs/replication.md): its
recovery is until the next checkpoint past the one at the kill, and the next kill waits until
the restarted server holds its copies again (the survivors' logs say so), so that no two
faults fall on one key range. A worker of a job that replaces lost workers (the default for
parameter-server jobs: `recovery: {replace_workers: true}`) is replaced instead (worker and
checkpoint kills): its replacement rejoins the run where it was lost (the client says "its
replacement rejoins the run"), and its recovery is until the next checkpoint after that.

--no-rollback: the run must announce no restart at all: ps kills of a replicated job and
worker and checkpoint kills of a job that replaces workers (a killed client still resumes from
a checkpoint). The job should checkpoint every batch for this to be one batch
(`checkpoint: {every_batches: 1}`). The last line is one JSON object: the kills, recovery
p50/p99 per kind, and the checks.

usage: tools/chaos.py JOB.yaml [--kill worker,ps,client,checkpoint] [--times N] [--seed S]
                      [--no-rollback] [--tessera PATH] [--out DIR]
"""
import argparse
import json
import os
import pathlib
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time

import yaml

KINDS = ("worker", "ps", "client", "checkpoint")
JOB_TIMEOUT = 1800


def pid_with_argument(part):
    """The pid of the process whose command line holds `part`, or None."""
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if part in cmdline:
            return int(entry.name)
    return None


def checkpoints(folder):
    """(complete, incomplete) checkpoint folder names under `folder`, sorted."""
    complete, incomplete = [], []
    if folder.is_dir():
        for entry in sorted(folder.iterdir()):
            if entry.name.startswith("ckpt-"):
                (complete if (entry / "MANIFEST").exists() else incomplete).append(entry.name)
    return complete, incomplete


def newest(folder):
    complete, _ = checkpoints(folder)
    return complete[-1] if complete else ""


def restarts_said(log_path):
    """How many restarts `tessera train` has announced in its log."""
    try:
        return log_path.read_text(errors="replace").count("; restart ")
    except OSError:
        return 0


def replacements_said(log_path):
    """How many lost workers' replacements `tessera train` has announced in its log (the
    runner's line; rank 0's is printed once more as an event)."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return 0
    return sum("its replacement rejoins the run" in line and not line.startswith("tessera:")
               for line in lines)


def resyncs_said(logs):
    """How often the parameter servers' logs (restarted ones' too) say a backup holds every
    key again."""
    count = 0
    for path in logs.glob("ps-*.log*"):
        try:
            count += path.read_text(errors="replace").count("holds every key again")
        except OSError:
            pass
    return count


def replicated(job):
    """Whether the job's parameter servers fail over (two or more, each backed up)."""
    cluster = job.get("cluster") or {}
    return int(cluster.get("servers", 1)) >= 2 and int(cluster.get("replicas", 2)) != 1


def replaces_workers(job):
    """Whether lost workers of the job are replaced (jobs/recovery_policy.h)."""
    return (str(job.get("kvstore", "")).startswith("dist_") and
            (job.get("recovery") or {}).get("replace_workers", True) is not False)


def write_job(original, job, run_dir, suffix):
    """A copy of the job with its run folder set, beside the original (relative data paths
    stay right)."""
    changed = dict(job)
    changed["run_dir"] = str(run_dir)
    path = original.with_name(f".{original.stem}.chaos-{suffix}.yaml")
    path.write_text(yaml.safe_dump(changed))
    return path


def round_counters(run_dir):
    """The servers' counters at the end of a run, by (server index, key), or None."""
    path = run_dir / "round_counters.json"
    if not path.exists():
        return None
    return {(c["server_index"], c["key"]): c for c in json.loads(path.read_text())}


def compare_counters(clean, faulted):
    """What the faulted run's servers applied against the fault-free run's, over every key
    part: rounds and pushes lost or applied twice, and parts whose pushes are not each taken
    push once (in either run)."""
    lost = twice = pushes_lost = pushes_twice = 0
    for part, c in clean.items():
        f = faulted.get(part, {"version": 0, "pushes": 0, "taken": []})
        lost += max(0, c["version"] - f["version"])
        twice += max(0, f["version"] - c["version"])
        pushes_lost += max(0, c["pushes"] - f["pushes"])
        pushes_twice += max(0, f["pushes"] - c["pushes"])
    extra = [part for part in faulted if part not in clean]
    twice += sum(faulted[part]["version"] for part in extra)
    not_once = sorted(f"{i}/{k}" for run in (clean, faulted) for (i, k), c in run.items()
                      if c["pushes"] != sum(c["taken"]))
    return {"key_parts": len(clean), "rounds": sum(c["version"] for c in clean.values()),
            "rounds_lost": lost, "rounds_applied_twice": twice, "pushes_lost": pushes_lost,
            "pushes_applied_twice": pushes_twice, "parts_not_summing_each_push_once": not_once}


def train(tessera, job_file, log, resume=False):
    args = [tessera, "train", str(job_file), "--json"] + (["--resume"] if resume else [])
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)


def run_chaos(job_path, kinds, times, seed, tessera, out=None, balanced=False,
              no_rollback=False):
    """Runs the job without faults, then with `times` kills of `kinds` (each chosen at random,
    or with `balanced` in turn); the report (a dict, "passed" among its keys)."""
    for kind in kinds:
        if kind not in KINDS:
            sys.exit(f"chaos: --kill: unknown kind '{kind}' (known: {', '.join(KINDS)})")
    rng = random.Random(seed)
    original = pathlib.Path(job_path).resolve()
    job = yaml.safe_load(original.read_text())
    fails_over = replicated(job)
    replaced = replaces_workers(job)
    if no_rollback:
        rolls_back = [k for k in kinds if k == "client" or (k == "ps" and not fails_over) or
                      (k in ("worker", "checkpoint") and not replaced)]
        if rolls_back:
            sys.exit(f"chaos: --no-rollback: kills of {', '.join(sorted(set(rolls_back)))} roll "
                     "the job back (ps kills need a replicated job, cluster: {servers: 2 or more}; "
                     "worker kills a job that replaces workers; a killed client resumes from a "
                     "checkpoint)")
    if job.get("checkpoint") is False:
        sys.exit(f"chaos: {original}: the job takes no checkpoints (checkpoint: false), so "
                 "it cannot resume")
    name = job.get("name", original.stem)
    out = pathlib.Path(out or f"runs/chaos-{name}").resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    clean_dir, faulted_dir = out / "clean", out / "faulted"
    clean_job = write_job(original, job, clean_dir, "clean")
    faulted_job = write_job(original, job, faulted_dir, "faulted")
    report = {"job": name, "seed": seed, "kills": []}
    try:
        with open(out / "clean.log", "w") as log:
            started = time.monotonic()
            code = train(tessera, clean_job, log).wait(JOB_TIMEOUT)
            report["clean_seconds"] = round(time.monotonic() - started, 3)
        if code != 0:
            sys.exit(f"chaos: the fault-free run failed ({out / 'clean.log'})")

        folder = faulted_dir / f"{name}-checkpoints"
        log = open(out / "faulted.log", "w")
        process = train(tessera, faulted_job, log)
        started = time.monotonic()
        for i in range(times):
            kind = kinds[i % len(kinds)] if balanced else rng.choice(kinds)
            # A random batch: 1-3 more checkpoints (checkpoint kills: a write in progress).
            wait_for = rng.randint(1, 3)
            seen, target = newest(folder), None
            deadline = time.monotonic() + JOB_TIMEOUT
            while process.poll() is None and time.monotonic() < deadline:
                complete, incomplete = checkpoints(folder)
                if kind == "checkpoint" and incomplete and complete and incomplete[-1] > complete[-1]:
                    target = pid_with_argument(f"{faulted_dir}/logs/worker-0.port")
                    break
                if kind != "checkpoint" and len([c for c in complete if c > seen]) >= wait_for:
                    if kind == "client":
                        target = process.pid
                    else:
                        daemon = "ps" if kind == "ps" else "worker"
                        count = len(list((faulted_dir / "logs").glob(f"{daemon}-*.port")))
                        target = pid_with_argument(
                            f"{faulted_dir}/logs/{daemon}-{rng.randrange(max(count, 1))}.port")
                    break
                time.sleep(0.001)
            if target is None:
                break  # the job ended first
            at = newest(folder)
            restarts = restarts_said(out / "faulted.log")
            replacements = replacements_said(out / "faulted.log")
            resyncs = resyncs_said(faulted_dir / "logs")
            os.kill(target, signal.SIGKILL)
            killed = time.monotonic()
            copied = None  # a failover's: until the restarted server holds its copies again
            if kind == "ps" and fails_over:
                # No rerun: the job goes on past the checkpoint it stood at.
                def recovered():
                    return newest(folder) > at
            elif kind in ("worker", "checkpoint") and replaced:
                # No rerun: the client gives the restarted daemon the rank's share again, and
                # the job goes on past the checkpoint it stood at.
                while (process.poll() is None and
                       replacements_said(out / "faulted.log") <= replacements and
                       restarts_said(out / "faulted.log") <= restarts):
                    time.sleep(0.001)

                def recovered():
                    return newest(folder) > at
            elif kind == "client":
                process.wait()
                process = train(tessera, faulted_job, log, resume=True)
                # The old run can finish at most the checkpoint it was writing: recovered at
                # the second past the one it stood at.
                def recovered():
                    return len([c for c in checkpoints(folder)[0] if c > at]) >= 2
            else:
                # The survivors may finish a round or a write before they see the loss:
                # recovered at the first checkpoint of the rerun the client announces.
                while process.poll() is None and restarts_said(out / "faulted.log") <= restarts:
                    time.sleep(0.001)
                rerun_from = newest(folder)

                def recovered():
                    return newest(folder) > rerun_from
            while process.poll() is None and not recovered():
                time.sleep(0.001)
            recovery = time.monotonic() - killed if recovered() else None
            if kind == "ps" and fails_over:
                # The next kill waits for the restarted server to hold its copies again (two
                # resyncs: of its own keys and of its left neighbour's), so that no two faults
                # fall on one key range.
                while (process.poll() is None and
                       resyncs_said(faulted_dir / "logs") < resyncs + 2):
                    time.sleep(0.01)
                if resyncs_said(faulted_dir / "logs") >= resyncs + 2:
                    copied = round(time.monotonic() - killed, 3)
            report["kills"].append({"kind": kind, "checkpoint": at,
                                    "recovery_seconds": None if recovery is None else round(recovery, 3)})
            if copied is not None:
                report["kills"][-1]["copies_again_seconds"] = copied
            print(f"chaos: kill {i + 1}: {kind} at {at or 'the start'}; recovered in "
                  f"{'-' if recovery is None else f'{recovery:.2f} s'}", file=sys.stderr)
        code = process.wait(JOB_TIMEOUT)
        log.close()
        report["faulted_seconds"] = round(time.monotonic() - started, 3)
        report["finished"] = code == 0
        clean_params = (clean_dir / f"{name}-final.params")
        faulted_params = (faulted_dir / f"{name}-final.params")
        report["params_identical"] = (faulted_params.exists() and clean_params.exists() and
                                      faulted_params.read_bytes() == clean_params.read_bytes())
        rows = (faulted_dir / "metrics.csv").read_text().splitlines()[1:] \
            if (faulted_dir / "metrics.csv").exists() else []
        epochs = [int(row.split(",")[0]) for row in rows if row]
        report["epochs_once"] = epochs == list(range(1, int(job["epochs"]) + 1))
        complete, incomplete = checkpoints(folder)
        report["half_written_left"] = [c for c in incomplete if complete and c < complete[-1]]
        for kind in kinds:
            times = sorted(k["recovery_seconds"] for k in report["kills"]
                           if k["kind"] == kind and k["recovery_seconds"] is not None)
            if times:
                report[f"{kind}_recovery_p50_s"] = round(statistics.median(times), 3)
                report[f"{kind}_recovery_p99_s"] = times[min(len(times) - 1, int(0.99 * len(times)))]
        report["rollbacks"] = restarts_said(out / "faulted.log")
        report["replacements"] = replacements_said(out / "faulted.log")
        # A rerun's or a resumed client's servers count from its checkpoint: comparable only
        # when the servers went on counting the run they started.
        clean_counters, faulted_counters = round_counters(clean_dir), round_counters(faulted_dir)
        counters_ok = True
        if (clean_counters is not None and report["rollbacks"] == 0 and
                not any(k["kind"] == "client" for k in report["kills"])):
            counts = compare_counters(clean_counters, faulted_counters or {})
            report["round_counters"] = counts
            counters_ok = (faulted_counters is not None and counts["rounds_lost"] == 0 and
                           counts["rounds_applied_twice"] == 0 and counts["pushes_lost"] == 0 and
                           counts["pushes_applied_twice"] == 0 and
                           not counts["parts_not_summing_each_push_once"])
        report["passed"] = (report["finished"] and report["params_identical"] and
                            report["epochs_once"] and not report["half_written_left"] and
                            counters_ok and (not no_rollback or report["rollbacks"] == 0))
    finally:
        clean_job.unlink(missing_ok=True)
        faulted_job.unlink(missing_ok=True)
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("job")
    parser.add_argument("--kill", default="worker,ps,client,checkpoint")
    parser.add_argument("--times", type=int, default=4)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--tessera", default=os.environ.get("TESSERA_BIN", "tessera"))
    parser.add_argument("--out", default=None, help="the runs' folder (default runs/chaos-NAME)")
    parser.add_argument("--no-rollback", action="store_true",
                        help="no restart from a checkpoint at all (ps kills of a replicated job, "
                             "worker kills of a job that replaces workers)")
    args = parser.parse_args()
    report = run_chaos(args.job, [k for k in args.kill.split(",") if k], args.times, args.seed,
                       args.tessera, args.out, no_rollback=args.no_rollback)
    print(json.dumps(report))
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
