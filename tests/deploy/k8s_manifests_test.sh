#!/usr/bin/env bash
# deploy/k8s renders and holds together (tests/deploy/check_manifests.py says what is checked).
set -euo pipefail
exec /usr/bin/python3 tests/deploy/check_manifests.py deploy/k8s
