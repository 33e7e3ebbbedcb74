#!/usr/bin/env bash
# A two-node Slurm cluster on this machine, for the multi-node tests.
#
#   scripts/slurm-two-nodes.sh start DIR   create the namespaces, start the daemons, wait for both nodes
#   scripts/slurm-two-nodes.sh stop DIR    stop exactly those daemons, delete the namespaces
#
# Two network namespaces joined by one veth pair: node n1 (10.213.0.1) runs slurmd plus this
# cluster's slurmctld and slurmdbd, node n2 (10.213.0.2) runs the second slurmd. The addresses
# exist only inside the namespaces. The daemons run in a private mount namespace where DIR/hosts
# is bound over /etc/hosts, so the node names resolve for them and their jobs only. munged and
# mariadb are the single-node cluster's (scripts/slurm-cluster.sh start), reached through their
# unix sockets. Clients run inside n1's namespace: `start` writes DIR/bin/{sbatch,squeue,...}
# wrappers; use the cluster with
#   export SLURM_CONF=DIR/slurm.conf PATH=DIR/bin:$PATH
set -euo pipefail

CMD=${1:-}
DIR=${2:-}
NS1=aoscale-n1
NS2=aoscale-n2
CLUSTER=aoscale2
MAIN_DIR=${AOSCALE_SLURM_DIR:-${TMPDIR:-/tmp}/aoscale-slurm}  # scripts/slurm-cluster.sh's state
DB_SOCKET=$MAIN_DIR/mysqlrun/mysqld.sock
CLIENTS="sbatch squeue sacct scancel scontrol sinfo sacctmgr"
T0=$SECONDS

say() { echo "[slurm-two-nodes $((SECONDS - T0))s] $*" >&2; }
fail() { say "ERROR: $*"; exit 1; }
# shellcheck source=scripts/slurm-lib.sh
. "$(dirname "$0")/slurm-lib.sh"

# in NS CMD...: run CMD in network namespace NS with DIR/hosts as its /etc/hosts (unlike
# `ip netns exec`, this keeps /sys and its cgroup mounts, which slurmd needs)
in_ns() {
    local ns=$1
    shift
    nsenter --net="/run/netns/$ns" unshare --mount --propagation private \
        sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$DIR/hosts" env SLURM_CONF="$DIR/slurm.conf" "$@"
}
in1() { in_ns "$NS1" "$@"; }
in2() { in_ns "$NS2" "$@"; }

make_network() {
    ip netns add "$NS1"
    ip netns add "$NS2"
    ip link add aos0 netns "$NS1" type veth peer name aos0 netns "$NS2"
    ip -n "$NS1" addr add 10.213.0.1/30 dev aos0
    ip -n "$NS2" addr add 10.213.0.2/30 dev aos0
    local ns
    for ns in "$NS1" "$NS2"; do
        ip -n "$ns" link set lo up
        ip -n "$ns" link set aos0 up
    done
    printf '127.0.0.1 localhost\n10.213.0.1 n1\n10.213.0.2 n2\n' >"$DIR/hosts"
}

write_conf() {
    mkdir -p "$DIR/pids" "$DIR/logs" "$DIR/ctld" "$DIR/bin" "$DIR/slurmd-n1" "$DIR/slurmd-n2"
    cat >"$DIR/slurm.conf" <<EOF
# written by aoscale scripts/slurm-two-nodes.sh
ClusterName=$CLUSTER
SlurmctldHost=$(hostname -s)(10.213.0.1)
$(slurm_common_conf)
StateSaveLocation=$DIR/ctld
SlurmdSpoolDir=$DIR/slurmd-%n
SlurmctldPidFile=$DIR/pids/slurmctld.pid
SlurmdPidFile=$DIR/pids/slurmd-%n.pid
SlurmctldLogFile=$DIR/logs/slurmctld.log
SlurmdLogFile=$DIR/logs/slurmd-%n.log
NodeName=n1 NodeAddr=10.213.0.1 CPUs=2 RealMemory=2048 State=UNKNOWN
NodeName=n2 NodeAddr=10.213.0.2 CPUs=2 RealMemory=2048 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    write_slurmdbd_conf "$DIR/slurmdbd.conf" "$DIR/pids/slurmdbd.pid" "$DIR/logs/slurmdbd.log"
    local client
    for client in $CLIENTS; do
        printf '#!/bin/sh\nexec nsenter --net=/run/netns/%s /usr/bin/%s "$@"\n' "$NS1" "$client" >"$DIR/bin/$client"
        chmod +x "$DIR/bin/$client"
    done
}

nodes_idle() { [ "$(in1 sinfo -h -o '%T %D' | tr '\n' ' ')" = "idle 2 " ]; }

cmd_start() {
    [ "$(id -u)" = 0 ] || fail "start must run as root (network namespaces)"
    [ -n "$DIR" ] || fail "usage: $0 start DIR"
    [ -S "$DB_SOCKET" ] || fail "no mariadb socket at $DB_SOCKET (run scripts/slurm-cluster.sh start first)"
    ip netns list | grep -q "^$NS1" && fail "namespace $NS1 exists (a cluster is running; stop it first)"
    mkdir -p "$DIR"
    make_network
    write_conf
    in1 env MYSQL_UNIX_PORT="$DB_SOCKET" slurmdbd
    until_ok 60 in1 sacctmgr -n list cluster || fail "slurmdbd does not answer (log: $DIR/logs/slurmdbd.log)"
    in1 sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER" || in1 sacctmgr -i add cluster "$CLUSTER" >/dev/null
    in1 slurmctld
    until_ok 30 sh -c "nsenter --net=/run/netns/$NS1 env SLURM_CONF=$DIR/slurm.conf scontrol ping | grep -q UP" \
        || fail "slurmctld is not UP (log: $DIR/logs/slurmctld.log)"
    in1 slurmd -N n1
    in2 slurmd -N n2
    until_ok 90 nodes_idle || fail "nodes not idle: $(in1 sinfo -h -N -o '%N %T' | tr '\n' ' ') (logs: $DIR/logs)"
    say "cluster $CLUSTER up: n1 10.213.0.1 and n2 10.213.0.2 idle"
}

cmd_stop() {
    [ -n "$DIR" ] || fail "usage: $0 stop DIR"
    if [ -f "$DIR/slurm.conf" ] && running "$DIR/pids/slurmctld.pid" slurmctld; then
        in1 scancel --full --quiet --user=root 2>/dev/null || true
    fi
    stop_daemon "$DIR/pids/slurmd-n2.pid" slurmd
    stop_daemon "$DIR/pids/slurmd-n1.pid" slurmd
    stop_daemon "$DIR/pids/slurmctld.pid" slurmctld
    stop_daemon "$DIR/pids/slurmdbd.pid" slurmdbd
    ip netns del "$NS1" 2>/dev/null || true
    ip netns del "$NS2" 2>/dev/null || true
    say "stopped"
}

case "$CMD" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    *) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
