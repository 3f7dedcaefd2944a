#!/usr/bin/python3
"""Builds the container image (deploy/image/Dockerfile) with podman, offline too, and checks
what it holds. ./tessera image runs it.

Steps: podman as this machine needs it (tools/container_engine.py: each lack named before
anything long starts); the base images debian:12 and debian:12-slim, pulled where a registry
answers, else imported from Debian 12 debootstrapped from Debian's archive (or --debian_mirror);
the build; then the checks of check(). The last line is one JSON object: the image, its size,
the build's seconds, the checks.

usage: image.py [build] [--variant cpu|cuda] [--tag NAME] [--debian_mirror URL]
       image.py check NAME
"""
import argparse
import fnmatch
import io
import json
import pathlib
import re
import subprocess
import sys
import tarfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from container_engine import REPO, EngineError, Podman  # noqa: E402

BASES = ("debian:12", "debian:12-slim")
# The image's programs, and what each one's --help must print: the CLI its commands (exit 0),
# a daemon its flags (absl ends --help with exit 1).
PROGRAMS = {"/usr/local/bin/tessera": "usage: tessera COMMAND",
            "/usr/local/bin/tessera-ps": "--round_timeout",
            "/usr/local/bin/tessera-worker": "--keep_jobs"}
# What a runtime stage must not hold: a compiler, or what apt downloaded.
COMPILERS = ("gcc", "g++", "cc", "c++", "clang", "nvcc", "ld")
PULL_SECONDS = 120


def log(message):
    print(f"tessera image: {message}", file=sys.stderr, flush=True)


def base_images(engine, mirror):
    """debian:12 and debian:12-slim in podman's store: there already, pulled, or imported
    from a debootstrapped Debian 12."""
    missing = [b for b in BASES if not engine.has_image(b)]
    for base in list(missing):
        try:
            done = engine.run("pull", "--quiet", f"docker.io/library/{base}", check=False,
                              timeout=PULL_SECONDS)
        except subprocess.TimeoutExpired:
            done = None
        if done is not None and done.returncode == 0:
            log(f"{base}: pulled")
            missing.remove(base)
        else:
            log(f"{base}: no registry answered; importing it from Debian's archive")
            break  # one failed pull is enough to know
    if not missing:
        return
    root = REPO / ".cache" / "image" / "base"
    subprocess.run([REPO / "deploy" / "image" / "debootstrap.sh", root] +
                   ([mirror] if mirror else []), check=True)
    for base in missing:
        engine.run("import", "--change", 'CMD ["bash"]', "-", f"localhost/{base}",
                   input=base_tar(root, slim=base.endswith("-slim")), text=False)
        log(f"{base}: imported from {root}")


# Where a slim Debian image has no files, now and for every package installed later
# (dpkg's path-exclude, as Docker's debian:12-slim): documentation but the copyright
# files, manuals, translations.
SLIM_EXCLUDES = ["/usr/share/doc/*", "/usr/share/groff/*", "/usr/share/info/*",
                 "/usr/share/linda/*", "/usr/share/lintian/overrides/*", "/usr/share/locale/*",
                 "/usr/share/man/*"]
SLIM_DPKG_CONFIG = ("".join(f"path-exclude {p}\n" for p in SLIM_EXCLUDES) +
                    "path-include /usr/share/doc/*/copyright\n")


def base_tar(root, slim):
    """The debootstrapped `root` as a tar archive for podman import, as Docker's Debian
    images are made: without package lists, downloaded packages or the contents of /proc,
    /sys and /dev; `slim` also without what SLIM_EXCLUDES names."""
    skip = ["/var/lib/apt/lists/*", "/var/cache/apt/*", "/proc/*", "/sys/*", "/dev/*",
            "/.debootstrapped"] + (SLIM_EXCLUDES if slim else [])

    def keep(info):
        path = "/" + info.name.removeprefix(".").lstrip("/")
        if slim and (fnmatch.fnmatch(path, "/usr/share/doc/*/copyright") or
                     (info.isdir() and fnmatch.fnmatch(path, "/usr/share/doc/*") and
                      path.count("/") == 4)):  # a package's folder, for its copyright
            return info
        return None if any(fnmatch.fnmatch(path, pattern) for pattern in skip) else info

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        tar.add(root, arcname=".", filter=keep)
        if slim:
            config = tarfile.TarInfo("./etc/dpkg/dpkg.cfg.d/slim")
            data = SLIM_DPKG_CONFIG.encode()
            config.size, config.mode = len(data), 0o644
            tar.addfile(config, io.BytesIO(data))
    return out.getvalue()


def check(engine, image):
    """What the image must hold, checked in containers of it: every program's shared
    libraries resolve (ldd there, not here), the entry point answers --help, the user is
    10001, and no compiler or package cache was left. Returns the checks' outcomes;
    EngineError on the first that fails."""
    def inside(*argv, entrypoint="/bin/sh"):
        done = engine.run("run", "--rm", "--network", "none", "--entrypoint", entrypoint,
                          image, *argv, check=False)
        return done.returncode, done.stdout + done.stderr

    found = {}
    code, out = inside("-c", " ".join(f"echo '== {p}'; ldd {p} || echo 'ldd failed'"
                                      for p in PROGRAMS))
    unresolved = [line.strip() for line in out.splitlines()
                  if "not found" in line or "ldd failed" in line]
    if code != 0 or unresolved:
        raise EngineError(f"{image}: shared libraries that do not resolve inside it: "
                          f"{unresolved or out[-2000:]}")
    found["libraries"] = f"{len(PROGRAMS)} programs, every library resolves"
    for program, expected in PROGRAMS.items():
        code, out = inside("--help", entrypoint=program)
        if expected not in out or (code != 0 and program.endswith("/tessera")):
            raise EngineError(f"{image}: {program} --help: exit {code}, without "
                              f"{expected!r}: {out[-1000:]}")
    found["help"] = "tessera --help (exit 0), tessera-ps and tessera-worker list their flags"
    user = engine.run("image", "inspect", "--format", "{{.Config.User}}", image).stdout.strip()
    code, out = inside("-c", "id -u; id -g")
    if user != "10001:10001" or out.split() != ["10001", "10001"]:
        raise EngineError(f"{image}: runs as {user!r} (id: {out.split()}), not 10001:10001")
    found["user"] = "10001:10001"
    code, out = inside("-c", " ".join(f"command -v {c};" for c in COMPILERS) +
                       " ls /var/cache/apt/archives/*.deb /var/lib/apt/lists/*_Packages*"
                       " 2>/dev/null; true")
    if out.strip():
        raise EngineError(f"{image}: a compiler or package cache left in it: {out.split()}")
    found["leftovers"] = "no compiler, no package cache"
    return found


def size_bytes(engine, image):
    return int(engine.run("image", "inspect", "--format", "{{.Size}}", image).stdout)


def build(engine, args):
    base_images(engine, args.debian_mirror)
    engine.check_runs(BASES[0])
    for note in engine.notes:
        log(note)
    log_path = REPO / ".cache" / "image" / f"build-{args.variant}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log(f"building {args.tag} ({args.variant}); the whole output: {log_path}")
    started = time.monotonic()
    with open(log_path, "w") as out:
        process = subprocess.Popen(
            engine.argv("build", "--file", "deploy/image/Dockerfile", "--tag", args.tag,
                        "--build-arg", f"VARIANT={args.variant}",
                        "--build-arg", f"DEBIAN_MIRROR={args.debian_mirror or ''}", "."),
            cwd=REPO, env=engine.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True)
        for line in process.stdout:
            out.write(line)
            if re.match(r"\[\d+/\d+\] STEP|STEP \d+", line):
                log(line.strip()[:100])
    if process.wait() != 0:
        tail = log_path.read_text(errors="replace")[-3000:]
        raise EngineError(f"the build failed (exit {process.returncode}):\n{tail}")
    seconds = time.monotonic() - started
    found = check(engine, args.tag)
    size = size_bytes(engine, args.tag)
    log(f"{args.tag}: {size / 2**20:.0f} MiB, built in {seconds:.0f} s")
    return {"image": args.tag, "variant": args.variant, "size_bytes": size,
            "build_seconds": round(seconds), "checks": found}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", nargs="?", default="build", choices=["build", "check"])
    parser.add_argument("name", nargs="?", help="the image to check")
    parser.add_argument("--variant", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--tag")
    parser.add_argument("--debian_mirror",
                        help="a Debian mirror in place of http://deb.debian.org")
    args = parser.parse_args()
    args.tag = args.tag or ("tessera:latest" if args.variant == "cpu" else
                            "tessera-cuda:latest")
    try:
        engine = Podman.detect()
        if args.command == "check":
            if not args.name:
                parser.error("check needs the image's NAME")
            engine.check_runs(args.name)
            result = {"image": args.name, "size_bytes": size_bytes(engine, args.name),
                      "checks": check(engine, args.name)}
        else:
            result = build(engine, args)
    except EngineError as e:
        log(str(e))
        return 2
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
