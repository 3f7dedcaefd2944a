#!/usr/bin/env bash
# Debian 12 (bookworm, minbase) into DIR from Debian's archive, once: the base that
# make_rootfs.sh installs the runtime into, and that ./tessera image imports as debian:12 and
# debian:12-slim where no registry is reachable. MIRROR (scheme and host, as use_mirror.sh
# takes it) takes the place of deb.debian.org. Needs root.
# usage: debootstrap.sh DIR [MIRROR]
set -euo pipefail
dir="$(realpath -m "$1")" mirror="${2:-http://deb.debian.org}"
[[ -f "$dir/.debootstrapped" ]] && exit 0
command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
rm -rf "$dir" && mkdir -p "$dir"
echo "debootstrap: bookworm (minbase) into $dir from ${mirror%/}/debian" >&2
debootstrap --variant=minbase bookworm "$dir" "${mirror%/}/debian" >/dev/null
touch "$dir/.debootstrapped"
