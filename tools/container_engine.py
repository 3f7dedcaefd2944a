"""Podman, as this machine lets it run containers: what ./tessera image and the Kubernetes
simulation's container pods call it with. Every check says what is missing and how to get
it, before anything long starts.

What a machine may need (each found here, on Debian 12 VMs):
- root: rootless podman needs subordinate id ranges (/etc/subuid), newuidmap and
  fuse-overlayfs, which these commands do not set up;
- runc where the cgroups are in hybrid mode (v1 controllers, cgroup2 at
  /sys/fs/cgroup/unified): crun refuses them ("cgroups in hybrid mode not supported");
- the cgroupfs manager where systemd is not PID 1 (containers in systemd's slices need it);
- no default ulimits where this machine's hard limits are below podman's defaults for root
  (nofile 1048576, nproc 4194304): runc then cannot set them ("error setting rlimit ...
  operation not permitted"), and deploy/image/containers.conf (default_ulimits = []) leaves
  the containers this machine's own limits.
"""
import os
import pathlib
import shutil
import subprocess

REPO = pathlib.Path(__file__).resolve().parent.parent
NO_DEFAULT_ULIMITS = REPO / "deploy" / "image" / "containers.conf"


class EngineError(Exception):
    """What this machine lacks to run containers, and how to get it."""


def cgroup_mode(mountinfo):
    """'unified', 'hybrid', 'legacy' or None (no cgroup file system) from the text of
    /proc/self/mountinfo."""
    v2, v1 = set(), False
    for line in mountinfo.splitlines():
        fields = line.split(" - ", 1)
        if len(fields) != 2:
            continue
        mount_point = fields[0].split()[4]
        fs_type = fields[1].split()[0]
        if fs_type == "cgroup2":
            v2.add(mount_point)
        elif fs_type == "cgroup" and mount_point.startswith("/sys/fs/cgroup/"):
            v1 = True
    if "/sys/fs/cgroup" in v2:
        return "unified"
    if v1:
        return "hybrid" if v2 else "legacy"
    return None


def _blocked_by_ulimits(stderr):
    return "rlimit" in stderr and "operation not permitted" in stderr


class Podman:
    """podman with the global options and environment this machine needs."""

    def __init__(self, options, env, notes):
        self.options = options  # global options, before the subcommand
        self.env = env  # environment for every call
        self.notes = notes  # what was found and chosen, one line each, for the user

    @classmethod
    def detect(cls, mountinfo=None, euid=None, which=shutil.which, runtime=None,
               systemd=None):
        """The engine for this machine, or EngineError naming what is missing. The
        arguments stand in for this machine's own facts in tests."""
        euid = os.geteuid() if euid is None else euid
        if euid != 0:
            raise EngineError(
                "needs root: rootless podman needs subordinate id ranges (/etc/subuid), "
                "newuidmap and fuse-overlayfs, which this command does not set up; run it "
                "as root (sudo)")
        if which("podman") is None:
            raise EngineError("podman is not installed: apt-get install podman runc "
                              "(./tessera image installs them)")
        if mountinfo is None:
            mountinfo = pathlib.Path("/proc/self/mountinfo").read_text()
        mode = cgroup_mode(mountinfo)
        if mode is None:
            raise EngineError(
                "no cgroup file system is mounted at /sys/fs/cgroup, and a container needs "
                "one: mount -t cgroup2 none /sys/fs/cgroup (or boot with systemd)")
        options, notes = [], [f"cgroups: {mode}"]
        if runtime is None:
            runtime = subprocess.run(
                ["podman", "info", "--format", "{{.Host.OCIRuntime.Name}}"],
                capture_output=True, text=True).stdout.strip()
        if mode == "hybrid" and runtime != "runc":
            if which("runc") is None:
                raise EngineError(
                    f"cgroups are in hybrid mode, which {runtime or 'crun'} refuses; runc "
                    "runs them: apt-get install runc")
            options += ["--runtime", "runc"]
            notes.append(f"runtime: runc ({runtime} refuses hybrid cgroups)")
        systemd = (pathlib.Path("/run/systemd/system").is_dir() if systemd is None
                   else systemd)
        if not systemd:
            options += ["--cgroup-manager", "cgroupfs"]
            notes.append("cgroup manager: cgroupfs (systemd is not running)")
        return cls(options, dict(os.environ), notes)

    def argv(self, *args):
        return ["podman", *self.options, *args]

    def run(self, *args, check=True, **kwargs):
        """Runs podman; its output captured as text unless told otherwise."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        done = subprocess.run(self.argv(*args), env=self.env, **kwargs)
        if check and done.returncode != 0:
            stderr = done.stderr or ""
            if isinstance(stderr, bytes):
                stderr = stderr.decode(errors="replace")
            raise EngineError(f"podman {' '.join(args[:3])} ...: exit {done.returncode}: "
                              f"{stderr.strip()[-2000:]}")
        return done

    def has_image(self, name):
        return self.run("image", "exists", name, check=False).returncode == 0

    def check_runs(self, image):
        """Starts a container of `image` (one that exists) and, where podman's default
        ulimits are what stops it, turns them off; EngineError if it still cannot."""
        def start():
            return self.run("run", "--rm", "--network", "none", "--entrypoint", "true", image,
                            check=False)

        done = start()
        if done.returncode != 0 and _blocked_by_ulimits(done.stderr):
            self.env["CONTAINERS_CONF"] = str(NO_DEFAULT_ULIMITS)
            self.notes.append(f"ulimits: this machine's (podman's defaults are above its "
                              f"hard limits; {NO_DEFAULT_ULIMITS.relative_to(REPO)})")
            done = start()
        if done.returncode != 0:
            raise EngineError(f"podman cannot start a container of {image} here: "
                              f"{done.stderr.strip()[-2000:]}")
