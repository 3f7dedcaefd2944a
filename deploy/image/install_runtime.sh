#!/bin/sh
# Makes the system it runs in a Tessera runtime: the Debian packages of runtime-packages.txt
# (and, with "cuda", NVIDIA's of cuda-packages.txt) and the unprivileged user the manifests
# run as (10001). The Dockerfile's runtime stage runs it, and so does make_rootfs.sh inside
# a debootstrapped root file system, so the image and the tested root file system agree.
# The programs themselves are copied in afterwards (./tessera image-files).
# usage: install_runtime.sh [cpu|cuda]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
variant=${1:-cpu}
packages() { grep -v '^#' "$1" | tr '\n' ' '; }
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2046
apt-get install -y -qq --no-install-recommends $(packages "$here/runtime-packages.txt") >/dev/null
if [ "$variant" = cuda ]; then
  # NVIDIA's repository key (cuda-keyring), fetched by the Dockerfile into this folder.
  dpkg -i "$here/cuda-keyring.deb"
  apt-get update -qq
  # shellcheck disable=SC2046
  apt-get install -y -qq --no-install-recommends $(packages "$here/cuda-packages.txt") >/dev/null
  echo /usr/local/cuda/lib64 >/etc/ld.so.conf.d/cuda.conf
  ldconfig
fi
getent group tessera >/dev/null || groupadd --gid 10001 tessera
getent passwd tessera >/dev/null ||
  useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin tessera
apt-get clean
rm -rf /var/lib/apt/lists/*
