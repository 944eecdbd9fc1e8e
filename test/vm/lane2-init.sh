#!/bin/sh
# /init of the lane-2 initramfs (busybox sh): load the virtio modules, mount
# the Debian root file system from /dev/vda and hand over to systemd.
/bin/busybox --install -s /bin
export PATH=/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci virtio_blk; do
	[ -f /lib/modules/$m.ko ] && insmod /lib/modules/$m.ko
done
i=0
while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
mkdir -p /newroot
if ! mount -t ext4 -o rw /dev/vda /newroot; then
	echo "LANE2 FAIL boot: cannot mount /dev/vda"
	echo "LANE2 RESULT FAIL"
	poweroff -f
fi
umount /dev /sys /proc
exec switch_root /newroot /sbin/init
