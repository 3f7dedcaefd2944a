#!/usr/bin/python3
"""Validates rendered manifests against the CustomResourceDefinitions of the APIs they use
(JobSet, Kubeflow Trainer, the training operator's TFJob, the Prometheus Operator's
PodMonitor): each custom object against its version's openAPIV3Schema, with fields the schema
does not declare reported (the API server would drop them silently).

The CRDs are not in this repository: give the files their projects publish (e.g. JobSet's
config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml) or a cluster's own
(`kubectl get crd jobsets.jobset.x-k8s.io -o yaml`). Objects of kinds no CRD given defines
are listed as unchecked. Exits 1 when any object is invalid.

usage: validate_against_crds.py --crd FILE... KUSTOMIZATION_OR_FILE...
"""
import argparse
import pathlib
import subprocess
import sys

import jsonschema
import yaml


def schemas(crd_files):
    """{(apiVersion, kind): openAPIV3Schema} of every version the CRDs define."""
    found = {}
    for path in crd_files:
        for crd in yaml.safe_load_all(path.read_text()):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            for version in spec["versions"]:
                found[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = (
                    closed(version["schema"]["openAPIV3Schema"]))
    return found


def closed(schema):
    """`schema` with undeclared properties refused where it declares properties and does not
    keep unknown fields (structural schemas prune them; here they are errors)."""
    if isinstance(schema, dict):
        if ("properties" in schema and "additionalProperties" not in schema and
                not schema.get("x-kubernetes-preserve-unknown-fields")):
            schema["additionalProperties"] = False
        for value in schema.values():
            closed(value)
    elif isinstance(schema, list):
        for value in schema:
            closed(value)
    return schema


def render(source):
    if source.is_file():
        return source.read_text()
    return subprocess.run(["kubectl", "kustomize", "--load-restrictor=LoadRestrictionsNone",
                           str(source)], check=True, capture_output=True, text=True).stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--crd", type=pathlib.Path, action="append", required=True)
    parser.add_argument("sources", type=pathlib.Path, nargs="+")
    args = parser.parse_args()
    known = schemas(args.crd)
    invalid = 0
    for source in args.sources:
        for obj in yaml.safe_load_all(render(source)):
            if not obj:
                continue
            what = f"{source}: {obj['kind']} {obj['metadata']['name']}"
            schema = known.get((obj["apiVersion"], obj["kind"]))
            if schema is None:
                group = obj["apiVersion"].rpartition("/")[0]
                if "." in group and not group.endswith(".k8s.io"):  # not a built-in API
                    print(f"{what}: unchecked (no CRD for {obj['apiVersion']})")
                continue
            errors = list(jsonschema.Draft7Validator(schema).iter_errors(obj))
            invalid += bool(errors)
            print(f"{what}: {'valid' if not errors else 'INVALID'}")
            for e in errors:
                print(f"  {'.'.join(map(str, e.absolute_path))}: {e.message[:300]}")
    return 1 if invalid else 0


if __name__ == "__main__":
    sys.exit(main())
