#!/bin/busybox sh
# /init of the rdma-testvm initramfs (runs under busybox-static).
#
# Loads the virtio/9p/overlay modules shipped in /modules (in the order given
# by /modules/order), mounts the host's root filesystem read-only over 9p,
# puts a throw-away tmpfs overlay on top, mounts the per-run read-write share
# and switch_roots into /guest_init.sh running from the host's own /bin/sh.
#
# Any failure prints a line starting with RDMA-TESTVM-ERROR: on the console
# (which the host turns into a VMError) and powers the VM off.

/bin/busybox mkdir -p /proc /sys /dev /bin /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin

mount -t proc proc /proc
mount -t devtmpfs devtmpfs /dev 2>/dev/null

die() {
    echo "RDMA-TESTVM-ERROR: initramfs: $*" > /dev/console
    mount -t proc proc /proc 2>/dev/null
    dmesg | tail -n 30 > /dev/console
    echo o > /proc/sysrq-trigger
    sleep 30
    exit 1
}

read -r up _ < /proc/uptime
echo "rdma-testvm: [$up] initramfs" > /dev/console

# Each line of /modules/order: module name, then its parameters.
while read -r m params; do
    insmod "/modules/$m.ko" $params || die "insmod $m failed"
done < /modules/order

mkdir -p /lower /upper /newroot
# (retried for up to 2 s in case the virtio device is still being probed)
ok=
for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
    if err=$(mount -t 9p -o ro,trans=virtio,version=9p2000.L,cache=loose,msize=262144 \
            /dev/root /lower 2>&1); then
        ok=1
        break
    fi
    sleep 0.1
done
[ -n "$ok" ] || die "cannot mount the host root filesystem over 9p: $err"

mount -t tmpfs -o mode=0755 tmpfs /upper || die "tmpfs for overlay"
mkdir -p /upper/upper /upper/work
mount -t overlay -o lowerdir=/lower,upperdir=/upper/upper,workdir=/upper/work \
    overlay /newroot || die "cannot mount overlayfs over the 9p root"

R=/newroot
mount -t proc proc $R/proc || die "proc"
mount -t sysfs sysfs $R/sys || die "sysfs"
mount -t devtmpfs devtmpfs $R/dev || die "devtmpfs"
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts $R/dev/pts || die "devpts"
mount -t tmpfs -o mode=1777 tmpfs $R/dev/shm || die "/dev/shm"
mount -t tmpfs -o mode=0755 tmpfs $R/run || die "/run"
# A command that runs under /tmp keeps the host's /tmp (copy-on-write
# through the overlay); otherwise /tmp is fresh.
case " $(cat /proc/cmdline) " in
*" rdmatestvm.keeptmp=1 "*) ;;
*) mount -t tmpfs -o mode=1777 tmpfs $R/tmp || die "/tmp" ;;
esac

mkdir -p $R/run/rdma-testvm
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 rdmatestvm \
    $R/run/rdma-testvm || die "cannot mount the rdma-testvm share"
read -r up _ < /proc/uptime
echo "rdma-testvm: [$up] root mounted" > /dev/console
cp /guest_init.sh $R/run/rdma-testvm-init.sh || die "copy guest init"

umount /proc
# Start the guest init with a clean environment (just PATH).
exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    switch_root $R /bin/sh /run/rdma-testvm-init.sh
die "switch_root failed"
