#!/usr/bin/env bash
# deploy/k8s objects on simulated hosts, with the binaries this build made as the image's (at
# the paths the manifests name).
# usage: k8s_simulation_test.sh TESSERA TESSERA_PS TESSERA_WORKER FETCH_MNIST SOURCE...
#   SOURCE: a kustomization folder or a manifest file under deploy/k8s
set -euo pipefail
tessera="$1" ps="$2" worker="$3" fetch_mnist="$4"
shift 4
exec /usr/bin/python3 tests/deploy/simulate_cluster.py "${@/#/deploy/k8s/}" \
  --tessera "$tessera" --image_file "/usr/local/bin/tessera=$tessera" \
  --image_file "/usr/local/bin/tessera-ps=$ps" --image_file "/usr/local/bin/tessera-worker=$worker" \
  --image_file "/usr/share/tessera/fetch_mnist.py=$fetch_mnist"
