#!/usr/bin/env bash
# A deploy/k8s kustomization on simulated hosts, with the binaries this build made as the
# image's (at the paths the manifests name).
# usage: k8s_simulation_test.sh KUSTOMIZATION TESSERA TESSERA_PS TESSERA_WORKER FETCH_MNIST
set -euo pipefail
exec /usr/bin/python3 tests/deploy/simulate_cluster.py "$1" --tessera "$2" \
  --image_file "/usr/local/bin/tessera=$2" --image_file "/usr/local/bin/tessera-ps=$3" \
  --image_file "/usr/local/bin/tessera-worker=$4" \
  --image_file "/usr/share/tessera/fetch_mnist.py=$5"
