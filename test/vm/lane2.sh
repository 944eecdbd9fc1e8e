#!/usr/bin/env bash
# Lane 2: the berth .deb on Debian 12 with systemd 252 (cgroup v2, unified)
# under qemu (TCG), and the service checks of test/vm/lane2/check.sh.
#
#   test/vm/lane2.sh [DEB]
#
# DEB defaults to a fresh build of bin/berth by test/vm/deb.sh. The Debian
# rootfs (debootstrap --variant=minbase, cached in .cache/vm/rootfs) gets, in
# a per-run copy, the .deb, the check script, its configuration and the
# oneshot berth-lane2.service; it boots from /dev/vda through a busybox
# initramfs that loads the virtio modules and switch_roots to systemd. The
# guest has no network (-nic none): the package is installed offline.
# Each check prints "LANE2 PASS|FAIL <name>", then "LANE2 RESULT PASS|FAIL";
# the unit's systemd-analyze security score is printed as "LANE2 INFO".
# Exit status: 0 on PASS, 1 on FAIL or a missing result line, 2 on a setup
# error.
#
# Environment: LANE2_PREV (the commit of the previous release, for the
# upgrade from it; "none" skips that check), LANE2_TIMEOUT (seconds, default 600), LANE2_MEM (MiB,
# default 1024), LANE2_SMP (default 2), BERTH_VM_MIRROR (default: the
# Debian mirror apt uses here), BERTH_VM_KERNEL, BERTH_VM_CACHE.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

t0=$(date +%s)
need_pkgs qemu-system-x86_64:qemu-system-x86 /bin/busybox:busybox-static cpio:cpio mkfs.ext4:e2fsprogs debootstrap:debootstrap
kernel_fetch

if [ $# -gt 0 ]; then
	deb=$(realpath "$1")
else
	deb=$REPO/$("$VM_DIR/deb.sh")
fi
[ -r "$deb" ] || die "no .deb at $deb"
# The previous release's package, for the check of an upgrade from it
# (check.sh, 12): built from the commit LANE2_PREV (default 09df814, the
# last release before the jobs' scope, whose agent keeps the jobs in the
# service's own cgroup), cached by commit; LANE2_PREV=none skips it.
prev=${LANE2_PREV:-09df814}
prevdeb=
if [ "$prev" != none ]; then
	rev=$(git -C "$REPO" rev-parse --short=12 "$prev^{commit}") || die "LANE2_PREV=$prev names no commit"
	prevdeb=$CACHE/prev/berth-$rev.deb
	if [ ! -r "$prevdeb" ]; then
		log "building the previous release's package from $rev"
		rm -rf "$CACHE/prev/src"
		mkdir -p "$CACHE/prev/src"
		git -C "$REPO" archive "$rev" | tar -x -C "$CACHE/prev/src"
		(cd "$CACHE/prev/src" && make build VERSION="0.0~git$rev" >&2 && VERSION="0.0~git$rev" test/vm/deb.sh >"$CACHE/prev/deb.path") ||
			die "could not build the package of $rev"
		cp "$CACHE/prev/src/$(cat "$CACHE/prev/deb.path")" "$prevdeb"
		rm -rf "$CACHE/prev/src"
	fi
fi
vm_lock

# mirror prints the Debian mirror apt is configured with (deb822
# .sources files or one-line sources.list), for debootstrap.
mirror() {
	local m
	m=$(awk '/^URIs:/ && $2 ~ /debian\/?$/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
	[ -n "$m" ] || m=$(awk '$1 == "deb" && $3 ~ /^bookworm$/ {print $2; exit}' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
	echo "${m:-http://deb.debian.org/debian}"
}
rootfs=$CACHE/rootfs
if [ ! -x "$rootfs/sbin/init" ]; then
	m=${BERTH_VM_MIRROR:-$(mirror)}
	log "debootstrap bookworm from $m into $rootfs"
	rm -rf "$rootfs" "$rootfs.tmp"
	debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus,ca-certificates,procps,curl \
		bookworm "$rootfs.tmp" "$m" >"$CACHE/debootstrap.log" 2>&1 ||
		die "debootstrap failed, see $CACHE/debootstrap.log"
	mv "$rootfs.tmp" "$rootfs"
fi

work=$CACHE/lane2
rm -rf "$work"
mkdir -p "$work"
root=$work/root
log "copying the rootfs"
cp -a "$rootfs" "$root"
echo lane2 >"$root/etc/hostname"
printf '127.0.0.1 localhost lane2\n::1 localhost\n' >"$root/etc/hosts"
# Nothing may wait for a console or a network that the guest lacks.
for u in systemd-firstboot.service serial-getty@ttyS0.service getty@tty1.service apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service; do
	ln -sf /dev/null "$root/etc/systemd/system/$u"
done
mkdir -p "$root/root/lane2" "$root/etc/systemd/system/multi-user.target.wants"
cp "$deb" "$root/root/berth.deb"
[ -z "$prevdeb" ] || cp "$prevdeb" "$root/root/berth-prev.deb"
install -m 0755 "$VM_DIR/lane2/check.sh" "$root/root/lane2/check.sh"
install -m 0644 "$VM_DIR/lane2/berth.toml" "$root/root/lane2/berth.toml"
install -m 0644 "$VM_DIR/lane2/berth-lane2.service" "$root/etc/systemd/system/berth-lane2.service"
ln -sf ../berth-lane2.service "$root/etc/systemd/system/multi-user.target.wants/berth-lane2.service"

truncate -s 1536M "$work/rootfs.img"
mkfs.ext4 -q -F -d "$root" "$work/rootfs.img"
rm -rf "$root"

ird=$work/initrd
busybox_root "$ird"
copy_virtio_modules "$ird/lib/modules"
install -m 0755 "$VM_DIR/lane2-init.sh" "$ird/init"
pack_cpio "$ird" "$work/initrd.cpio"

log "booting $KVER with $(basename "$deb")"
t1=$(date +%s)
run_qemu "${LANE2_TIMEOUT:-600}" "$work/console.log" \
	-m "${LANE2_MEM:-1024}" -smp "${LANE2_SMP:-2}" \
	-kernel "$VMLINUZ" -initrd "$work/initrd.cpio" \
	-append "console=ttyS0 panic=-1 quiet systemd.show_status=error" \
	-drive "file=$work/rootfs.img,format=raw,if=virtio" || log "qemu exited with status $?"
t2=$(date +%s)

log "lane2: setup $((t1 - t0))s, guest $((t2 - t1))s; console log $work/console.log"
grep -oE 'LANE2 (PASS|FAIL|INFO systemd-analyze) .*' "$work/console.log" >&2 || true
result=$(grep -oE 'LANE2 RESULT (PASS|FAIL)$' "$work/console.log" | tail -n1 || true)
case $result in
"LANE2 RESULT PASS") exit 0 ;;
"LANE2 RESULT FAIL") exit 1 ;;
*)
	log "LANE2 RESULT missing: guest crashed or timed out"
	exit 1
	;;
esac
