#!/usr/bin/env bash
# deploy/k8s objects on simulated hosts, with the files this build made as the image's, where
# deploy/image/layout.txt puts them.
# usage: k8s_simulation_test.sh SOURCE...
#   SOURCE: a kustomization folder or a manifest file under deploy/k8s
set -euo pipefail
image_files=()
while read -r path mode source; do
  [[ -z "$path" || "$path" == \#* ]] && continue
  image_files+=(--image_file "$path=${source#bazel-bin/}")  # runfiles lie at the source's path
done <deploy/image/layout.txt
exec /usr/bin/python3 tests/deploy/simulate_cluster.py "${@/#/deploy/k8s/}" \
  --tessera client/tessera "${image_files[@]}"
