#!/bin/sh
# mmdebstrap --customize-hook for the Kind node image: `customize.sh <rootfs>`.
# The Debian side of Kind's base image (its Dockerfile's package step): no unit of
# the packages starts by itself in a node container, the journal does not read
# the kernel's ring buffer, /sbin/init is systemd. The harness then adds Kind's
# base files, the Kubernetes binaries and the container images
# (harness/src/images/kind_node.rs).
set -eu

root="$1"

ln -sf /usr/share/zoneinfo/Etc/UTC "$root/etc/localtime"
echo "Etc/UTC" >"$root/etc/timezone"
: >"$root/etc/hostname"

rm -f "$root"/lib/systemd/system/multi-user.target.wants/* \
	"$root"/etc/systemd/system/*.wants/* \
	"$root"/lib/systemd/system/local-fs.target.wants/* \
	"$root"/lib/systemd/system/sockets.target.wants/*udev* \
	"$root"/lib/systemd/system/sockets.target.wants/*initctl* \
	"$root"/lib/systemd/system/basic.target.wants/*
echo "ReadKMsg=no" >>"$root/etc/systemd/journald.conf"
ln -sf /usr/lib/systemd/systemd "$root/sbin/init"
chroot "$root" systemctl mask systemd-binfmt.service systemd-firstboot.service

# Kind's units and scripts name Kind's own build locations: point them at Debian's.
mkdir -p "$root/usr/local/bin" "$root/opt/cni" "$root/etc/kubernetes/manifests"
ln -sf /usr/bin/containerd "$root/usr/local/bin/containerd"
ln -sf /usr/lib/cni "$root/opt/cni/bin"

rm -rf "$root/var/lib/apt/lists/"* "$root/var/cache/apt/"*.bin
