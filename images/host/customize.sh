#!/bin/sh
# mmdebstrap --customize-hook for the VM host image: `customize.sh <rootfs>`.
# Copies overlay/ in, sets the identity of the guest, enables the lab's units
# and masks what only slows a lab VM's boot. Runs as root on the build host.
set -eu

root="$1"
here=$(cd "$(dirname "$0")" && pwd)

cp -a --no-preserve=ownership "$here/overlay/." "$root/"
chown -R 0:0 "$root/etc/systemd/system" "$root/usr/local/libexec"
mkdir -p "$root/mnt/lab"

# /etc/machine-id: mmdebstrap leaves it empty after the hooks (machine-id(5):
# an image used on many machines ships an empty file), so each VM generates
# its own id at first boot and saves it; systemd-firstboot is masked below.
ln -sf /usr/share/zoneinfo/Etc/UTC "$root/etc/localtime"
echo "Etc/UTC" >"$root/etc/timezone"

# A lab VM: root has no password (console login on ttyS0 and hvc0).
chroot "$root" passwd -d root

# No systemd-resolved: a plain resolv.conf, rewritten by lab-net from lab.dns=.
rm -f "$root/etc/resolv.conf"
printf '# Written by lab-net.service from lab.dns= on the kernel command line.\n' >"$root/etc/resolv.conf"

chroot "$root" systemctl enable \
	systemd-networkd.service \
	lab-net.service \
	lab-ready.service \
	serial-getty@hvc0.service
# qemu-guest-agent is started by udev when its virtio port appears (a static
# unit bound to the device); make sure nothing masks it.
chroot "$root" systemctl unmask qemu-guest-agent.service

for unit in \
	apt-daily.timer apt-daily-upgrade.timer apt-daily.service apt-daily-upgrade.service \
	dpkg-db-backup.timer dpkg-db-backup.service \
	e2scrub_all.timer e2scrub_all.service e2scrub_reap.service \
	fstrim.timer fstrim.service \
	systemd-firstboot.service \
	systemd-resolved.service \
	systemd-timesyncd.service \
	getty@tty1.service \
	man-db.timer; do
	chroot "$root" systemctl mask "$unit"
done

# The initrd must mount root=/dev/vda: virtio_pci, virtio_blk and ext4 (listed
# in /etc/initramfs-tools/modules from the overlay).
chroot "$root" update-initramfs -u -k all

# Nothing of the build host's apt lists in the image.
rm -rf "$root/var/lib/apt/lists/"* "$root/var/cache/apt/"*.bin
