#!/bin/sh
# /init of the lane-1 initramfs (busybox sh): a bare cgroup-v2 kernel that
# runs the static Go test binaries in /tests and prints one LANE1 line per
# package and a final "LANE1 RESULT PASS|FAIL". Packed by lane1.sh.
/bin/busybox --install -s /bin
# A job's default PATH is systemd's, of a merged-/usr host
# (/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin): the applets are
# found there too.
for f in /bin/*; do [ -e "/usr/bin/${f##*/}" ] || ln -s "$f" /usr/bin/; done
[ -x /bin/dash ] && ln -sf dash /bin/sh
export PATH=/bin:/sbin:/usr/bin:/usr/sbin HOME=/tmp TMPDIR=/tmp BERTH_VM=1

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
# Only emergencies on the console: kernel lines (OOM kills are pr_err)
# must not split the LANE1 lines the host parses.
echo 1 >/proc/sys/kernel/printk
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up

for m in virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci virtio_blk; do
	[ -f /lib/modules/$m.ko ] && insmod /lib/modules/$m.ko
done

fail=0
mount -t cgroup2 cgroup2 /sys/fs/cgroup || { echo "LANE1 FAIL setup: mount cgroup2"; fail=1; }
# As on a systemd host, the root enables every controller for its children
# (Documentation/admin-guide/cgroup-v2.rst, "Enabling and Disabling").
for c in $(cat /sys/fs/cgroup/cgroup.controllers); do
	echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control || { echo "LANE1 FAIL setup: enable $c"; fail=1; }
done
for c in cpu memory io pids; do
	grep -qw $c /sys/fs/cgroup/cgroup.controllers || { echo "LANE1 FAIL setup: controller $c missing"; fail=1; }
done
i=0
while [ ! -b /dev/vda ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
[ -b /dev/vda ] || echo "LANE1 NOTE no /dev/vda scratch disk"
mkdir -p /var/tmp
[ -b /dev/vdb ] && mount -t ext4 /dev/vdb /var/tmp && chmod 1777 /var/tmp
echo "LANE1 KERNEL $(uname -r) CONTROLLERS $(cat /sys/fs/cgroup/cgroup.subtree_control) CPUS $(nproc)"

flags=$(cat /tests/flags 2>/dev/null)
[ -x /tests/berth ] && export BERTH_TEST_BIN=/tests/berth
[ -x /tests/shapejob ] && export BERTH_TEST_SHAPEJOB=/tests/shapejob
guard=$(cat /tests/guard 2>/dev/null || echo 360)
for t in /tests/*.test; do
	[ -e "$t" ] || continue
	pkg=$(basename "$t" .test)
	echo "LANE1 RUN $pkg"
	# A package's tests run in its directory (testdata) as go test does.
	dir=/tests/$pkg.dir
	[ -d "$dir" ] || dir=/tmp
	start=$(date +%s)
	run=
	[ -f /tests/$pkg.run ] && run="-test.run=$(cat /tests/$pkg.run)"
	# shellcheck disable=SC2086
	(cd "$dir" && exec "$t" $flags $run 2>&1) &
	pid=$!
	# A binary that outlives -test.timeout (it cannot panic: frozen, or
	# stuck in the kernel) is reported with where its threads wait, and
	# killed, instead of eating the whole lane's timeout in silence.
	(
		sleep "$guard"
		echo "LANE1 HUNG $pkg: still running after ${guard}s"
		for task in /proc/$pid/task/*; do
			echo "LANE1 HUNG $pkg ${task##*/} $(cut -d' ' -f3 "$task/stat" 2>/dev/null) wchan=$(cat "$task/wchan" 2>/dev/null) cgroup=$(cat "$task/cgroup" 2>/dev/null)"
			sed "s/^/LANE1 HUNG $pkg   /" "$task/stack" 2>/dev/null
		done
		kill -9 $pid
	) &
	guardpid=$!
	wait $pid
	rc=$?
	kill $guardpid 2>/dev/null
	took=$(($(date +%s) - start))
	if [ $rc -eq 0 ]; then
		echo "LANE1 PASS $pkg (${took}s)"
	else
		echo "LANE1 FAIL $pkg (exit $rc, ${took}s)"
		fail=1
	fi
done
if [ $fail -eq 0 ]; then echo "LANE1 RESULT PASS"; else echo "LANE1 RESULT FAIL"; fi
sync
poweroff -f
