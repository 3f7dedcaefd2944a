#!/usr/bin/env bash
# deploy/k8s renders and holds together, and names only flags and variables the programs know
# (tests/deploy/check_manifests.py says what is checked).
# usage: k8s_manifests_test.sh TESSERA TESSERA_PS TESSERA_WORKER
set -euo pipefail
exec /usr/bin/python3 tests/deploy/check_manifests.py deploy/k8s --binary "tessera=$1" \
  --binary "tessera-ps=$2" --binary "tessera-worker=$3"
