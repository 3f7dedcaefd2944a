#!/usr/bin/env bash
# deploy/k8s objects on simulated hosts, with the files this build made as the image's, where
# deploy/image/layout.txt puts them.
# usage: k8s_simulation_test.sh SOURCE... [--FLAG...]
#   SOURCE: a kustomization folder or a manifest file under deploy/k8s; --FLAGs go to
#   simulate_cluster.py as they are
set -euo pipefail
image_files=()
while read -r path mode source; do
  [[ -z "$path" || "$path" == \#* ]] && continue
  image_files+=(--image_file "$path=${source#bazel-bin/}")  # runfiles lie at the source's path
done <deploy/image/layout.txt
args=()
for a in "$@"; do
  if [[ "$a" == --* ]]; then args+=("$a"); else args+=("deploy/k8s/$a"); fi
done
exec /usr/bin/python3 tests/deploy/simulate_cluster.py "${args[@]}" \
  --tessera client/tessera "${image_files[@]}"
