#!/bin/sh
# PID 1 of the rdma-testvm guest, run by the host's own /bin/sh after the
# initramfs switch_root'ed into the (overlaid, read-only) host root.
#
# Protocol with the host (files in the read-write share, mounted at $S):
#   in:  config.sh  shell variables (TESTVM_*), written by the host
#        env.sh     "export K='V'" lines: the command's whole environment
#        cmd.sh     the command (sources env.sh, cd's, exec's)
#   out: ready      created once RDMA is set up; the command starts right after
#        output     the command's combined stdout/stderr (tailed live by the host)
#        timed_out  present if the in-guest `timeout` killed the command
#        dmesg      the guest kernel log
#        rc         the command's exit status and a newline; written last
#        error      a setup failure (also printed as RDMA-TESTVM-ERROR: on the console)
# Nothing here may hang forever: every wait is a bounded poll.
#
# Every exec costs ~50-150 ms under TCG, so commands are batched and shell
# builtins are used wherever possible.

S=/run/rdma-testvm
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
exec </dev/null
cd /

poweroff_now() {
    # The share is mounted without caching (writes are synchronous) and the
    # root's upper layer is tmpfs: there is nothing to sync.
    # The power-off is asynchronous and PID 1 must not exit before it
    # happens. It shuts the virtio devices down first, the 9p root among
    # them, so from then on nothing can be exec'ed (a "sleep" here failed at
    # once on a slow host, init exited and the kernel panicked). Wait with
    # builtins only: a read on a FIFO opened read-write (on the /run tmpfs)
    # blocks until the machine is off. The host kills the VM if it never is.
    halt=/run/rdma-testvm-halt
    mkfifo "$halt" 2>/dev/null
    echo o > /proc/sysrq-trigger
    if [ -p "$halt" ]; then
        read -r _ <> "$halt"
    fi
    sleep 60
    exit 1
}

fail() {
    echo "RDMA-TESTVM-ERROR: $*"
    dmesg > "$S/dmesg" 2>&1
    printf '%s\n' "$*" > "$S/error"
    poweroff_now
}

# uptime in centiseconds, without forking.
uptime_cs() {
    read -r up _ < /proc/uptime
    echo $(( ${up%.*} * 100 + 1${up#*.} - 100 ))
}

log() {
    read -r up _ < /proc/uptime
    echo "rdma-testvm: [$up] $*"
}

# run CMD...: run a setup command, fail with its output if it fails.
run() {
    out=$("$@" 2>&1) || fail "command failed: $*: $out"
    [ -z "$out" ] || echo "$out"
}

setsys() {
    echo "$2" > "/proc/sys/$1" || fail "cannot set /proc/sys/$1 to $2"
}

# wait_rxe DEV GID: poll (bounded) until port 1 of DEV is ACTIVE and its GID
# table entry $TESTVM_GID_INDEX is the expected RoCEv2 GID.
wait_rxe() {
    p=/sys/class/infiniband/$1/ports/1
    i=0
    state= gid= gtype=
    while [ $i -lt 200 ]; do
        read -r state < "$p/state" 2>/dev/null
        read -r gid < "$p/gids/$TESTVM_GID_INDEX" 2>/dev/null
        read -r gtype < "$p/gid_attrs/types/$TESTVM_GID_INDEX" 2>/dev/null
        case "$state" in
            *ACTIVE*)
                if [ "$gid" = "$2" ] && [ "$gtype" = "RoCE v2" ]; then
                    return 0
                fi ;;
        esac
        sleep 0.05
        i=$((i + 1))
    done
    fail "$1: port not ready after 10 s (state='$state', gid[$TESTVM_GID_INDEX]='$gid' type='$gtype', expected '$2' RoCE v2)"
}

[ -r "$S/config.sh" ] || fail "no $S/config.sh"
. "$S/config.sh"

log "guest init"
echo rdma-testvm > /proc/sys/kernel/hostname

# The initramfs loaded the modules (rdma_rxe ib_umad rdma_ucm dummy veth).
for m in rdma_rxe ib_umad rdma_ucm dummy veth; do
    [ -d "/sys/module/$m" ] || fail "kernel module $m is not loaded"
done

VETH_CMDS=
RXE_CMDS=
if [ "$TESTVM_TWO_HOST" = 1 ]; then
    # Two "hosts" in the initial namespace (rxe in 6.1 only works there):
    # rxe1 on veth0, rxe2 on veth1, and policy routing so that traffic
    # generated locally for the peer's address really crosses the veth pair
    # instead of being short-circuited through the local table.
    A1=$TESTVM_HOST1_ADDR
    A2=$TESTVM_HOST2_ADDR
    VETH_CMDS="link add veth0 type veth peer name veth1
addr add $A1/24 dev veth0
addr add $A2/24 dev veth1
link set veth0 up
link set veth1 up
route add $A2/32 dev veth0 src $A1 table 101
route add $A1/32 dev veth1 src $A2 table 102
rule add pref 100 lookup local
rule del pref 0 lookup local
rule add pref 10 iif lo to $A2/32 lookup 101
rule add pref 11 iif lo to $A1/32 lookup 102"
    RXE_CMDS="
link add rxe1 type rxe netdev veth0
link add rxe2 type rxe netdev veth1"
    for c in all default; do
        setsys "net/ipv4/conf/$c/accept_local" 1
        setsys "net/ipv4/conf/$c/rp_filter" 0
    done
fi

# rxe0 on a dummy interface (rxe cannot attach to lo).
run ip -batch - <<EOF
link set lo up
link add dummy0 type dummy
addr add $TESTVM_RXE0_ADDR/24 dev dummy0
link set dummy0 up
$VETH_CMDS
EOF

if [ "$TESTVM_TWO_HOST" = 1 ]; then
    # (interfaces created after the change of "default" inherit it, but
    # be explicit)
    for c in veth0 veth1; do
        setsys "net/ipv4/conf/$c/accept_local" 1
        setsys "net/ipv4/conf/$c/rp_filter" 0
    done
fi

run rdma -b - <<EOF
link add rxe0 type rxe netdev dummy0$RXE_CMDS
EOF
log "rxe devices created"

wait_rxe rxe0 "$TESTVM_RXE0_GID"
if [ "$TESTVM_TWO_HOST" = 1 ]; then
    wait_rxe rxe1 "$TESTVM_HOST1_GID"
    wait_rxe rxe2 "$TESTVM_HOST2_GID"
fi

for d in /dev/infiniband/uverbs0 /dev/infiniband/rdma_cm /dev/infiniband/umad0; do
    [ -c "$d" ] || fail "$d is missing"
done

[ -d "$TESTVM_CWD" ] || fail "working directory $TESTVM_CWD does not exist in the guest (note: /tmp, /run and /dev/shm are fresh tmpfs there)"
[ -d "$S/out" ] || fail "$S/out is missing"

# The host only checks that "ready" exists.
: > "$S/ready" || fail "cannot write $S/ready"
log "ready"

start=$(uptime_cs)
# This script's environment is only PATH (the initramfs cleared the rest);
# cmd.sh replaces it with the caller's.
timeout -k "$TESTVM_KILL_AFTER" "$TESTVM_TIMEOUT" /bin/sh "$S/cmd.sh" \
    > "$S/output" 2>&1 < /dev/null
rc=$?
end=$(uptime_cs)
elapsed_ms=$(( (end - start) * 10 ))
if { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && [ $elapsed_ms -ge "$TESTVM_TIMEOUT_MS" ]; then
    echo "$elapsed_ms" > "$S/timed_out"
fi
log "command exited with $rc after ${elapsed_ms} ms"

dmesg > "$S/dmesg" 2>&1
# Written last, in one write(2); the host waits for the trailing newline.
echo "$rc" > "$S/rc"
poweroff_now
