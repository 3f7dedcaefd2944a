#!/usr/bin/python3
"""tools/container_engine.py decides what podman needs from this machine's facts, and
deploy/image/use_mirror.sh points apt at a mirror: both checked on given facts and files, so
no container engine is needed (./tessera image and test-deploy --image run the real one)."""
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest

REPO = pathlib.Path(__file__).absolute().parents[2]  # the workspace, or its runfiles
sys.path.insert(0, str(REPO / "tools"))
from container_engine import EngineError, Podman, cgroup_mode  # noqa: E402

# /proc/self/mountinfo lines as a Debian 12 VM with v1 controllers and cgroup2 shows them.
HYBRID = """\
30 24 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec shared:10 - cgroup2 cgroup2 rw
33 30 0:29 / /sys/fs/cgroup/cpu rw,nosuid,nodev,noexec shared:12 - cgroup cgroup rw,cpu
34 30 0:30 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec shared:13 - cgroup cgroup rw,memory
"""
UNIFIED = "29 24 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec shared:4 - cgroup2 cgroup2 rw\n"
LEGACY = "\n".join(l for l in HYBRID.splitlines() if "cgroup2" not in l) + "\n"
NONE = "22 1 0:21 / /proc rw,nosuid,nodev,noexec shared:12 - proc proc rw\n"


def everything(_):
    return "/usr/bin/x"


class CgroupModeTest(unittest.TestCase):
    def test_each_mode_is_told_from_the_mounts(self):
        self.assertEqual(cgroup_mode(UNIFIED), "unified")
        self.assertEqual(cgroup_mode(HYBRID), "hybrid")
        self.assertEqual(cgroup_mode(LEGACY), "legacy")
        self.assertIsNone(cgroup_mode(NONE))


class DetectTest(unittest.TestCase):
    def detect(self, **facts):
        facts = {"mountinfo": UNIFIED, "euid": 0, "which": everything, "runtime": "crun",
                 "systemd": True, **facts}
        return Podman.detect(**facts)

    def test_a_user_without_root_is_told_so(self):
        with self.assertRaisesRegex(EngineError, "needs root.*subuid"):
            self.detect(euid=1000)

    def test_a_machine_without_podman_is_told_what_to_install(self):
        with self.assertRaisesRegex(EngineError, "apt-get install podman runc"):
            self.detect(which=lambda name: None if name == "podman" else "/usr/bin/" + name)

    def test_a_machine_without_cgroups_is_told_how_to_mount_them(self):
        with self.assertRaisesRegex(EngineError, "mount -t cgroup2"):
            self.detect(mountinfo=NONE)

    def test_hybrid_cgroups_need_runc_instead_of_crun(self):
        engine = self.detect(mountinfo=HYBRID)
        self.assertEqual(engine.argv("ps")[:3], ["podman", "--runtime", "runc"])
        with self.assertRaisesRegex(EngineError, "hybrid mode.*apt-get install runc"):
            self.detect(mountinfo=HYBRID,
                        which=lambda name: None if name == "runc" else "/usr/bin/" + name)

    def test_runc_already_chosen_and_unified_cgroups_need_no_runtime_option(self):
        self.assertNotIn("--runtime", self.detect(mountinfo=HYBRID, runtime="runc").options)
        self.assertNotIn("--runtime", self.detect().options)

    def test_without_systemd_podman_manages_cgroups_itself(self):
        self.assertIn("cgroupfs", self.detect(systemd=False).argv("ps"))
        self.assertNotIn("--cgroup-manager", self.detect().options)


class UseMirrorTest(unittest.TestCase):
    def setUp(self):
        self.root = pathlib.Path(tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR")))
        apt = self.root / "etc" / "apt"
        (apt / "sources.list.d").mkdir(parents=True)
        (apt / "sources.list").write_text("deb http://deb.debian.org/debian bookworm main\n")
        (apt / "sources.list.d" / "debian.sources").write_text(
            "Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm\n")

    def use_mirror(self, *args):
        return subprocess.run(["sh", REPO / "deploy" / "image" / "use_mirror.sh", *args],
                              capture_output=True, text=True)

    def test_every_source_of_the_debian_archive_moves_to_the_mirror(self):
        done = self.use_mirror("http://debian.internal:3142/", str(self.root))
        self.assertEqual(done.returncode, 0, done.stderr)
        apt = self.root / "etc" / "apt"
        self.assertEqual((apt / "sources.list").read_text(),
                         "deb http://debian.internal:3142/debian bookworm main\n")
        self.assertIn("URIs: http://debian.internal:3142/debian-security\n",
                      (apt / "sources.list.d" / "debian.sources").read_text())

    def test_no_mirror_leaves_the_sources_alone(self):
        before = (self.root / "etc" / "apt" / "sources.list").read_text()
        self.assertEqual(self.use_mirror("", str(self.root)).returncode, 0)
        self.assertEqual((self.root / "etc" / "apt" / "sources.list").read_text(), before)

    def test_a_mirror_that_is_not_a_url_is_refused(self):
        done = self.use_mirror("debian.internal", str(self.root))
        self.assertEqual(done.returncode, 2)
        self.assertIn("'debian.internal' is not an http:// or https:// URL", done.stderr)


if __name__ == "__main__":
    unittest.main()
