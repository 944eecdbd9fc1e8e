#!/usr/bin/env bash
# Installs the Debian packages berth's tests use, when they are missing, as
# on a fresh Debian 12 machine (root). `make test` and .ci/run both call it,
# so that no test skips for a missing etcd, prometheus or chromium.
set -euo pipefail
pkgs=(
	etcd-server # etcd: cluster tests run real etcd processes
	etcd-client # etcdctl: the fencing example writes through etcdctl txn (docs/fencing.md)
	iproute2    # ip: network namespaces for partition tests
	fdisk       # sfdisk: a partitioned loop device (case C7)
	util-linux  # losetup
	coreutils procps curl
	prometheus  # prometheus, promtool: rules and dashboard tests
	chromium    # the status page test drives headless Chromium
	tmux        # the berth top and completion tests run them in tmux panes
	bash-completion zsh fish # completion tested in each shell
	groff-base  # groff: the man pages are formatted without a warning
)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
((${#missing[@]})) || exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
	echo "test/deps.sh: missing ${missing[*]}; install them (Debian: apt-get install ${missing[*]}) or run as root" >&2
	exit 1
fi
echo "test/deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian starts etcd and prometheus as services where systemd runs; the
# tests start their own on free loopback ports, so nothing else is needed.
