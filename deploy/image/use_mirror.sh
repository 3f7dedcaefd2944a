#!/bin/sh
# Points apt at a Debian mirror: MIRROR (scheme, host and port, e.g.
# http://debian.internal:3142) takes the place of http://deb.debian.org in every apt source,
# so .../debian and .../debian-security come from it. No MIRROR: the sources stay as they are.
# ROOT: the root file system whose sources change (default /).
# usage: use_mirror.sh [MIRROR [ROOT]]
set -eu
mirror=${1:-} root=${2:-}
[ -n "$mirror" ] || exit 0
case "$mirror" in
  http://* | https://*) ;;
  *) echo "use_mirror.sh: DEBIAN_MIRROR '$mirror' is not an http:// or https:// URL" >&2; exit 2 ;;
esac
mirror=${mirror%/}
found=
# Debian 12 images keep their sources in deb822 form, debootstrap's in sources.list.
for f in "$root"/etc/apt/sources.list "$root"/etc/apt/sources.list.d/*.list \
         "$root"/etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] || continue
  sed -i "s#https\?://deb\.debian\.org#$mirror#g" "$f"
  found=yes
done
[ -n "$found" ] || { echo "use_mirror.sh: no apt sources to point at $mirror" >&2; exit 2; }
