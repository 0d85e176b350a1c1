#!/bin/sh
# mmdebstrap --customize-hook for the nspawn machine rootfs: `customize.sh <rootfs>`.
# The machine shares the host's network namespace (VirtualEthernet=no), so it
# runs no resolver and no network manager of its own; its resolv.conf is a
# regular file the agent copies in from the host.
set -eu

root="$1"

# /etc/machine-id: mmdebstrap leaves it empty after the hooks (machine-id(5):
# an image used on many machines ships an empty file), so each machine generates
# its own id at first boot and saves it; systemd-firstboot is masked below.
ln -sf /usr/share/zoneinfo/Etc/UTC "$root/etc/localtime"
echo "Etc/UTC" >"$root/etc/timezone"

rm -f "$root/etc/resolv.conf"
: >"$root/etc/resolv.conf"
: >"$root/etc/hostname"

for unit in \
	systemd-resolved.service \
	systemd-networkd.service systemd-networkd.socket systemd-networkd-wait-online.service \
	systemd-firstboot.service \
	systemd-timesyncd.service \
	apt-daily.timer apt-daily-upgrade.timer apt-daily.service apt-daily-upgrade.service \
	dpkg-db-backup.timer dpkg-db-backup.service \
	e2scrub_all.timer e2scrub_reap.service fstrim.timer; do
	chroot "$root" systemctl mask "$unit"
done

rm -rf "$root/var/lib/apt/lists/"* "$root/var/cache/apt/"*.bin
