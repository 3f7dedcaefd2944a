#!/usr/bin/env python3
"""Counts test cases from the GoogleTest XML files Bazel leaves under bazel-testlogs.

Usage: count_tests.py TAG TESTLOGS_DIR LABEL...   (groups repeat: -- TAG DIR LABEL...)
Prints one line per failed case, then the plain closing line 'N passed, N failed, N skipped'.
Only the given test targets count, so results of targets deleted since an earlier run never
do. A target without a test.xml (it did not build) counts as one failure; one that crashed
before writing its own XML has Bazel's stand-in XML with an <error>, also a failure.
"""
import pathlib
import sys
import xml.etree.ElementTree as ET


def count(root: pathlib.Path, tag: str, labels: list, totals: dict) -> None:
    for label in labels:
        package, _, name = label.lstrip("/").partition(":")
        xml_path = root / package / name / "test.xml"
        if not xml_path.exists():
            totals["failed"] += 1
            print(f"FAILED {tag}{label}: no test result (did it build?)")
            continue
        try:
            tree = ET.parse(xml_path)
        except ET.ParseError as e:
            totals["failed"] += 1
            print(f"FAILED {tag}{label}: unreadable test.xml ({e})")
            continue
        for case in tree.iter("testcase"):
            name = f"{case.get('classname', '')}.{case.get('name', '')}"
            if case.find("failure") is not None or case.find("error") is not None:
                totals["failed"] += 1
                print(f"FAILED {tag}{label}: {name}")
            elif case.get("result") == "skipped" or case.find("skipped") is not None:
                totals["skipped"] += 1
            else:
                totals["passed"] += 1


def main() -> int:
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    args = sys.argv[1:]
    while args:
        group = args[: args.index("--")] if "--" in args else args
        args = args[len(group) + 1 :]
        tag, directory, labels = group[0], group[1], group[2:]
        count(pathlib.Path(directory), f"[{tag}] ", labels, totals)
    print(f"{totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped")
    return 1 if totals["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
