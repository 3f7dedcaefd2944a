"""Runs the SDK's unittest modules with the wire modules generated first (generate_stubs.py,
into a temporary folder), and writes their results as JUnit XML to $XML_OUTPUT_FILE when
Bazel sets it, so ./tessera test counts every case.

usage: run_tests.py PROTO_DIR
"""
import os
import pathlib
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

HERE = pathlib.Path(__file__).resolve().parent
PYTHON = HERE.parent


def main():
    stubs = pathlib.Path(tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR")))
    sys.path[:0] = [str(PYTHON)]
    import generate_stubs
    generate_stubs.generate(sys.argv[1], stubs)
    sys.path[:0] = [str(stubs), str(HERE)]
    suite = unittest.defaultTestLoader.discover(str(HERE), pattern="test_*.py")
    ids = [test.id() for test in cases(suite)]  # before running: a run empties the suite
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    if os.environ.get("XML_OUTPUT_FILE"):
        write_junit(ids, result, os.environ["XML_OUTPUT_FILE"])
    return 0 if result.wasSuccessful() else 1


def cases(suite):
    for test in suite:
        if isinstance(test, unittest.TestSuite):
            yield from cases(test)
        else:
            yield test


def write_junit(ids, result, path):
    failed = {t.id(): text for t, text in result.failures + result.errors}
    skipped = {t.id(): reason for t, reason in result.skipped}
    root = ET.Element("testsuites")
    tests = ET.SubElement(root, "testsuite", name="python_sdk")
    for test_id in ids:
        classname, _, name = test_id.rpartition(".")
        case = ET.SubElement(tests, "testcase", classname=classname, name=name)
        if test_id in failed:
            ET.SubElement(case, "failure", message=failed[test_id][-500:]).text = failed[test_id]
        elif test_id in skipped:
            ET.SubElement(case, "skipped", message=skipped[test_id])
    ET.ElementTree(root).write(path, encoding="unicode")


if __name__ == "__main__":
    sys.exit(main())
