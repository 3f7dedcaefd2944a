#!/usr/bin/env bash
# deploy/k8s/overlays/cpu on simulated hosts, with the binaries this build made as the image's
# (the paths the manifests name).
# usage: k8s_simulation_test.sh TESSERA TESSERA_PS TESSERA_WORKER FETCH_MNIST
set -euo pipefail
exec /usr/bin/python3 tests/deploy/simulate_cluster.py deploy/k8s/overlays/cpu --tessera "$1" \
  --image_file "/usr/local/bin/tessera=$1" --image_file "/usr/local/bin/tessera-ps=$2" \
  --image_file "/usr/local/bin/tessera-worker=$3" \
  --image_file "/usr/share/tessera/fetch_mnist.py=$4"
