#!/usr/bin/env bash
# Lane 1: berth's Go tests on a bare cgroup-v2 kernel under qemu (TCG).
#
#   test/vm/lane1.sh [PKG...] [-- TESTFLAGS...]
#
# PKG is a package directory relative to the repository (default: cgroup
# worker supervisor) or an absolute path to a Go package directory (built
# in its own directory, so it may be its own module). A package that does
# not exist or has no tests is skipped with a note; one that does not
# compile fails the lane. TESTFLAGS go to every test binary, e.g.
#   test/vm/lane1.sh cgroup -- -test.v -test.run 'TestV2'
#
# The guest is the Debian cloud kernel with cgroup2 mounted at
# /sys/fs/cgroup (every controller enabled for the root's children),
# busybox applets in /bin, a tmpfs /tmp, loopback up, BERTH_VM=1, HOME=/tmp,
# a 64 MiB scratch virtio disk at /dev/vda (254:0) for io.max tests, an
# ext4 disk /dev/vdb mounted at /var/tmp, and dash as /bin/sh.
# Each package prints "LANE1 PASS|FAIL <pkg>", then "LANE1 RESULT PASS|FAIL".
# Exit status: 0 on PASS, 1 on FAIL or a missing result line (crash,
# timeout), 2 on a setup error.
#
# A binary still running a minute after LANE1_TEST_TIMEOUT (it could not
# panic: frozen, or stuck in the kernel) is killed and reported with
# "LANE1 HUNG" lines: each thread's state, wchan, cgroup and kernel stack.
# Runs on one cache wait for each other (vm_lock in lib.sh).
#
# Environment: LANE1_TIMEOUT (seconds, default 900), LANE1_TEST_TIMEOUT
# (-test.timeout of each binary, whole seconds or minutes, default 300s;
# set it here rather than as -test.timeout after --), LANE1_MEM (MiB, default
# 1024), LANE1_SMP (vCPUs, default 2), BERTH_VM_KERNEL (e.g.
# 6.1.0-57-cloud-amd64), BERTH_VM_CACHE (default .cache/vm).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

pkgs=() flags=()
while [ $# -gt 0 ]; do
	if [ "$1" = -- ]; then
		shift
		flags=("$@")
		break
	fi
	pkgs+=("$1")
	shift
done
[ ${#pkgs[@]} -gt 0 ] || pkgs=(cgroup worker supervisor)

t0=$(date +%s)
need_pkgs qemu-system-x86_64:qemu-system-x86 /bin/busybox:busybox-static cpio:cpio mkfs.ext4:e2fsprogs
[ -x /bin/busybox ] && file -L /bin/busybox 2>/dev/null | grep -q dynamically && die "/bin/busybox is not static (install busybox-static)"
vm_lock
kernel_fetch

work=$CACHE/lane1
rm -rf "$work"
mkdir -p "$work/root/tests"
root=$work/root
busybox_root "$root"
copy_virtio_modules "$root/lib/modules"
install -m 0755 "$VM_DIR/lane1-init.sh" "$root/init"
printf 'root:x:0:0:root:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
printf '127.0.0.1 localhost\n::1 localhost\n' >"$root/etc/hosts"
# /bin/sh is dash, as on Debian hosts: tests count the processes of
# `sh -c` trees, and busybox sh forks and execs differently.
cp /bin/dash "$root/bin/dash"
for lib in $(ldd /bin/dash | grep -oE '/[^ ]+'); do
	mkdir -p "$root$(dirname "$lib")"
	cp -L "$lib" "$root$lib"
done
# A hung test panics with every goroutine's stack instead of hanging the
# guest until the outer timeout; flags given after -- come later and win.
printf '%s ' "-test.timeout=${LANE1_TEST_TIMEOUT:-300s}" "${flags[@]}" >"$root/tests/flags"
# The guest kills a binary still running a minute after that timeout (one
# that could not panic) and prints where it hangs.
tt=${LANE1_TEST_TIMEOUT:-300s}
case $tt in
*[!0-9]*[ms] | [ms]) tt=300 ;;
*m) tt=$((${tt%m} * 60)) ;;
*s) tt=${tt%s} ;;
*) tt=300 ;;
esac
echo $((tt + 60)) >"$root/tests/guard"

built=0
for p in "${pkgs[@]}"; do
	# PKG:REGEX runs only the tests of PKG that match REGEX (-test.run).
	run=
	case $p in
	*:*) run=${p#*:} p=${p%%:*} ;;
	esac
	case $p in
	/*) dir=$p name=$(basename "$p") ;;
	*) p=${p#./} p=${p%/} dir=$REPO/$p name=${p//\//_} ;;
	esac
	if [ ! -d "$dir" ]; then
		log "LANE1 SKIP $p: no such package (yet)"
		continue
	fi
	if ! ls "$dir"/*_test.go >/dev/null 2>&1; then
		log "LANE1 SKIP $p: no test files"
		continue
	fi
	log "building $p"
	if ! (cd "$dir" && CGO_ENABLED=0 GOFLAGS=${GOFLAGS:--mod=mod} go test -c -o "$root/tests/$name.test" .); then
		log "LANE1 FAIL $p: does not compile"
		echo "LANE1 RESULT FAIL"
		exit 1
	fi
	if [ ! -e "$root/tests/$name.test" ]; then
		log "LANE1 SKIP $p: no test binary produced"
		continue
	fi
	[ -z "$run" ] || printf '%s' "$run" >"$root/tests/$name.run"
	# The end-to-end tests run the real binary: built here, static, as the
	# guest has no Go (BERTH_TEST_BIN, test/env_test.go).
	if [ "$name" = test ] && [ ! -e "$root/tests/berth" ]; then
		log "building the berth binary for the end-to-end tests"
		(cd "$REPO" && CGO_ENABLED=0 go build -o "$root/tests/berth" ./cmd/berth) || {
			log "LANE1 FAIL: bin/berth does not build"
			echo "LANE1 RESULT FAIL"
			exit 1
		}
		# And the synthetic jobs of berth recommend's test
		# (BERTH_TEST_SHAPEJOB, test/recommend_test.go).
		(cd "$REPO" && CGO_ENABLED=0 go build -o "$root/tests/shapejob" ./test/shapejob) || {
			log "LANE1 FAIL: test/shapejob does not build"
			echo "LANE1 RESULT FAIL"
			exit 1
		}
	fi
	if [ -d "$dir/testdata" ]; then
		mkdir -p "$root/tests/$name.dir"
		cp -a "$dir/testdata" "$root/tests/$name.dir/"
	fi
	built=$((built + 1))
done
if [ "$built" -eq 0 ]; then
	log "LANE1 RESULT FAIL: no package to test"
	exit 1
fi

pack_cpio "$root" "$work/initrd.cpio"
truncate -s 64M "$work/disk.raw"
# A second disk, ext4, mounted at /var/tmp: a directory backed by a real
# block device (/dev/vdb, 254:16) for tests that write files there.
truncate -s 256M "$work/vartmp.raw"
mkfs.ext4 -q -F "$work/vartmp.raw"
log "booting $KVER with $built test binaries ($(du -m "$work/initrd.cpio" | cut -f1) MiB initramfs)"
t1=$(date +%s)
run_qemu "${LANE1_TIMEOUT:-900}" "$work/console.log" \
	-m "${LANE1_MEM:-1024}" -smp "${LANE1_SMP:-2}" \
	-kernel "$VMLINUZ" -initrd "$work/initrd.cpio" \
	-append "console=ttyS0 panic=-1 quiet" \
	-drive "file=$work/disk.raw,format=raw,if=virtio" \
	-drive "file=$work/vartmp.raw,format=raw,if=virtio" || log "qemu exited with status $?"
t2=$(date +%s)

result=$(grep -oE 'LANE1 RESULT (PASS|FAIL)$' "$work/console.log" | tail -n1 || true)
log "lane1: build+pack $((t1 - t0))s, guest $((t2 - t1))s; console log $work/console.log"
grep -oE 'LANE1 (PASS|FAIL) .*' "$work/console.log" >&2 || true
case $result in
"LANE1 RESULT PASS") exit 0 ;;
"LANE1 RESULT FAIL") exit 1 ;;
*)
	log "LANE1 RESULT missing: guest crashed or timed out"
	exit 1
	;;
esac
