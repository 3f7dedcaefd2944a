#!/usr/bin/env bash
# The container image's runtime stage as a root file system, from Debian's archive: Debian 12
# (debootstrap.sh), install_runtime.sh run inside it as the Dockerfile runs it, then
# FILES (./tessera image-files) copied over it. Made once; later calls run install_runtime.sh
# again only when it or its package lists changed, and copy FILES again.
# usage: make_rootfs.sh ROOTFS FILES [cpu|cuda]   (as root)
set -euo pipefail
rootfs="$(realpath -m "$1")" files="$(realpath "$2")" variant="${3:-cpu}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log() { echo "make_rootfs: $*" >&2; }

# What install_runtime.sh installs: when it changes, it runs again over the same Debian.
recipe="$(cat "$here"/install_runtime.sh "$here"/*-packages.txt | sha256sum | cut -d' ' -f1) $variant"
"$here"/debootstrap.sh "$rootfs"
if [[ "$(cat "$rootfs/.runtime-installed" 2>/dev/null)" != "$recipe" ]]; then
  mkdir -p "$rootfs/tmp/image"
  cp "$here"/install_runtime.sh "$here"/*-packages.txt "$rootfs/tmp/image/"
  cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
  log "install_runtime.sh $variant inside it"
  # A mount namespace of its own, so /proc is mounted for the chroot only.
  unshare --mount --propagation private -- sh -c "mount -t proc proc '$rootfs/proc' &&
    chroot '$rootfs' sh /tmp/image/install_runtime.sh $variant"
  rm -rf "$rootfs/tmp/image"
  echo "$recipe" >"$rootfs/.runtime-installed"
fi
cp -a "$files"/. "$rootfs"/
log "$rootfs: $(du -sh --exclude=proc "$rootfs" | cut -f1)"
