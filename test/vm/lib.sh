# shellcheck shell=bash
# Shared helpers of the qemu test lanes (lane1.sh, lane2.sh) and deb.sh.
# Sourced, not run. The choices here (TCG only, virtio modules and their
# order, timeout -s KILL) follow from measurements on the CI hosts; each is
# explained where it is made.

set -euo pipefail

VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$VM_DIR/../.." && pwd)
# CACHE holds the kernel, the debootstrapped rootfs and the run artefacts;
# it is git-ignored and reused between runs. BERTH_VM_CACHE overrides it.
CACHE=${BERTH_VM_CACHE:-$REPO/.cache/vm}
mkdir -p "$CACHE"

# The virtio modules the Debian cloud kernel needs for a virtio disk, in
# load order (VM.md).
VIRTIO_MODULES="virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci virtio_blk"

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 2; }

# vm_lock waits until no other lane runs on this cache, then holds the
# lock until this script exits: concurrent runs (several engineers, or CI
# and a developer, on one machine) would delete each other's work
# directories and images, and two TCG guests on two cores slow each other
# past the tests' timing margins.
vm_lock() {
	exec 9>"$CACHE/.lock"
	if ! flock -n 9; then
		log "another lane is running on $CACHE; waiting for it"
		flock 9
	fi
}

APT_UPDATED=0
# need_pkgs CMD:PKG... installs PKG when CMD is missing (idempotent; one
# apt-get update per run at most).
need_pkgs() {
	local missing=() pair cmd pkg
	for pair in "$@"; do
		cmd=${pair%%:*} pkg=${pair#*:}
		if ! command -v "$cmd" >/dev/null 2>&1 && [ ! -x "$cmd" ]; then
			missing+=("$pkg")
		fi
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	log "installing ${missing[*]}"
	if [ "$APT_UPDATED" = 0 ]; then
		apt-get update -o DPkg::Lock::Timeout=300 >/dev/null || log "apt-get update reported errors (continuing)"
		APT_UPDATED=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o DPkg::Lock::Timeout=300 "${missing[@]}" >/dev/null
}

# kernel_fetch sets KVER, VMLINUZ and KMODDIR: the Debian cloud kernel
# (the version linux-image-cloud-amd64 depends on, or $BERTH_VM_KERNEL),
# downloaded with apt-get download and extracted with dpkg-deb -x (never
# installed: its hooks want a boot loader).
kernel_fetch() {
	local pkg
	if [ -n "${BERTH_VM_KERNEL:-}" ]; then
		pkg=linux-image-$BERTH_VM_KERNEL
	else
		pkg=$(ls -d "$CACHE"/kernel/linux-image-*-cloud-amd64 2>/dev/null | sort -V | tail -n1 || true)
		pkg=${pkg##*/}
		if [ -z "$pkg" ]; then
			pkg=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null |
				awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
			if [ -z "$pkg" ]; then
				apt-get update -o DPkg::Lock::Timeout=300 >/dev/null || true
				APT_UPDATED=1
				pkg=$(apt-cache depends linux-image-cloud-amd64 |
					awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
			fi
		fi
	fi
	[ -n "$pkg" ] || die "no Debian cloud kernel found (apt-cache search 'linux-image.*cloud-amd64')"
	KVER=${pkg#linux-image-}
	local dir=$CACHE/kernel/$pkg
	if [ ! -e "$dir/.done" ]; then
		log "downloading $pkg"
		rm -rf "$dir" "$CACHE/kernel/dl"
		mkdir -p "$CACHE/kernel/dl"
		(cd "$CACHE/kernel/dl" && apt-get download "$pkg" >/dev/null)
		dpkg-deb -x "$CACHE"/kernel/dl/"$pkg"_*.deb "$dir"
		rm -rf "$CACHE/kernel/dl"
		touch "$dir/.done"
	fi
	VMLINUZ=$dir/boot/vmlinuz-$KVER
	KMODDIR=$dir/lib/modules/$KVER
	[ -r "$VMLINUZ" ] || die "no kernel image at $VMLINUZ"
}

# copy_virtio_modules DEST copies the virtio modules, decompressed (busybox
# insmod cannot read .ko.xz/.ko.zst), to DEST/<name>.ko.
copy_virtio_modules() {
	local dest=$1 m f
	mkdir -p "$dest"
	for m in $VIRTIO_MODULES; do
		f=$(find "$KMODDIR" \( -name "$m.ko" -o -name "$m.ko.xz" -o -name "$m.ko.zst" -o -name "$m.ko.gz" \) | head -n1)
		if [ -z "$f" ]; then
			# Built into this kernel: nothing to load.
			grep -q "/$m.ko\$" "$KMODDIR/modules.builtin" 2>/dev/null ||
				log "note: module $m neither found nor listed as built in"
			continue
		fi
		case $f in
		*.xz) xz -dc "$f" >"$dest/$m.ko" ;;
		*.zst) zstd -qdc "$f" >"$dest/$m.ko" ;;
		*.gz) gzip -dc "$f" >"$dest/$m.ko" ;;
		*) cp "$f" "$dest/$m.ko" ;;
		esac
	done
}

# busybox_root DEST lays out a busybox-static root with the applet links in
# /bin (busybox --install -s runs in the guest; here only busybox itself).
busybox_root() {
	local dest=$1
	mkdir -p "$dest"/{bin,sbin,usr/bin,usr/sbin,dev,proc,sys,tmp,etc,mnt,root,var/tmp,lib/modules}
	cp "$(command -v busybox)" "$dest/bin/busybox"
	ln -sf busybox "$dest/bin/sh"
}

# pack_cpio DIR OUT writes DIR as an uncompressed newc initramfs (the
# kernel unpacks it faster under TCG than it would decompress gzip).
pack_cpio() {
	(cd "$1" && find . -print0 | cpio --null -o -H newc --quiet) >"$2"
}

# run_qemu TIMEOUT LOG ARGS... boots qemu (TCG: KVM does not work here),
# console on stdout, copied to LOG with carriage returns stripped.
# timeout -s KILL: qemu may ignore TERM.
run_qemu() {
	local t=$1 out=$2
	shift 2
	local rc=0
	timeout -s KILL "$t" qemu-system-x86_64 -accel tcg -nographic -no-reboot -nic none "$@" </dev/null |
		tr -d '\r' | tee "$out" || rc=$?
	return $rc
}
