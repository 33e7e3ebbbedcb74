#!/usr/bin/env bash
# A single-node Slurm cluster on loopback for tests and CI, without systemd.
#
#   scripts/slurm-cluster.sh start    install (apt) + configure + start; idempotent; prints timings
#   scripts/slurm-cluster.sh stop     stop exactly the daemons `start` launched (via their pid files)
#   scripts/slurm-cluster.sh status   print what is running and the node state
#
# Partitions: `debug` (default, PriorityTier=1, preemptible by REQUEUE) and `high`
# (PriorityTier=2): a job in `high` preempts a `debug` job, which gets SIGUSR2 first
# (preempt_send_user_signal; GraceTime gives it time to checkpoint) and is requeued.
# Accounting (slurmdbd + mariadb) is on because submitit reads job states from `sacct`.
#
# Environment:
#   AOSCALE_SLURM_DIR   state/log/pid directory        (default: ${TMPDIR:-/tmp}/aoscale-slurm)
#   AOSCALE_SLURM_CPUS  CPUs the node advertises; more than the real count oversubscribes
#                       (default: 4 x real cores, so tiny CPU test jobs can run side by side)
set -euo pipefail

DIR=${AOSCALE_SLURM_DIR:-${TMPDIR:-/tmp}/aoscale-slurm}
PIDS=$DIR/pids
LOGS=$DIR/logs
CLUSTER=aoscale
HOST=$(hostname -s)
DB_SOCKET=$DIR/mysqlrun/mysqld.sock
PACKAGES="slurmctld slurmd slurm-client slurmdbd munge mariadb-server"
T0=$SECONDS

say() { echo "[slurm-cluster $((SECONDS - T0))s] $*" >&2; }
fail() { say "ERROR: $*"; exit 1; }

# shellcheck source=scripts/slurm-lib.sh
. "$(dirname "$0")/slurm-lib.sh"

install_packages() {
    local pkg missing=""
    for pkg in $PACKAGES; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || missing="$missing $pkg"
    done
    [ -z "$missing" ] && { say "packages present"; return; }
    say "apt-get install$missing"
    export DEBIAN_FRONTEND=noninteractive
    # policy-rc.d exit 101 stops the packages' maintainer scripts from starting daemons
    local own_policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
        own_policy=1
    fi
    local rc=0
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing; } \
        >"$LOGS/apt.log" 2>&1 || rc=$?
    [ -n "$own_policy" ] && rm -f /usr/sbin/policy-rc.d
    [ $rc = 0 ] || { tail -n 20 "$LOGS/apt.log" >&2; fail "apt-get failed (log: $LOGS/apt.log)"; }
    say "packages installed"
}

# node_line: the NodeName line for this machine, from `slurmd -C`
node_line() {
    local hw cpus mem_mb want
    hw=$(slurmd -C | head -n 1)
    cpus=$(sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' <<<"$hw")
    mem_mb=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$hw")
    want=${AOSCALE_SLURM_CPUS:-$((4 * cpus))}
    # leave 1 GiB to the OS on machines that have it
    mem_mb=$((mem_mb > 2048 ? mem_mb - 1024 : mem_mb / 2))
    echo "NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$want RealMemory=$mem_mb State=UNKNOWN"
}

write_slurm_conf() {
    mkdir -p /etc/slurm
    cat >"$DIR/slurm.conf.next" <<EOF
# written by aoscale scripts/slurm-cluster.sh
ClusterName=$CLUSTER
SlurmctldHost=$HOST(127.0.0.1)
$(slurm_common_conf)
StateSaveLocation=$DIR/slurmctld
SlurmdSpoolDir=$DIR/slurmd
SlurmctldPidFile=$PIDS/slurmctld.pid
SlurmdPidFile=$PIDS/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
SlurmctldParameters=preempt_send_user_signal
$(node_line)
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=60
PartitionName=high Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
EOF
    if cmp -s "$DIR/slurm.conf.next" /etc/slurm/slurm.conf; then
        rm -f "$DIR/slurm.conf.next"
        return
    fi
    mv "$DIR/slurm.conf.next" /etc/slurm/slurm.conf
    say "slurm.conf written"
    # a changed config only takes effect after our own daemons restart
    stop_daemon "$PIDS/slurmd.pid" slurmd
    stop_daemon "$PIDS/slurmctld.pid" slurmctld
}

munge_works() { munge -n </dev/null | unmunge >/dev/null; }

start_munge() {
    if [ ! -s /etc/munge/munge.key ]; then
        mungekey --create --keyfile=/etc/munge/munge.key
        chown munge:munge /etc/munge/munge.key
        chmod 600 /etc/munge/munge.key
    fi
    install -d -o munge -g munge -m 755 /run/munge
    install -d -o munge -g munge -m 700 "$DIR/munge"
    if munge_works 2>/dev/null; then
        running "$PIDS/munged.pid" munged || say "munged already running (not ours; left alone at stop)"
        return
    fi
    runuser -u munge -- /usr/sbin/munged --pid-file="$DIR/munge/munged.pid" \
        --log-file="$DIR/munge/munged.log" --seed-file="$DIR/munge/munged.seed"
    cp "$DIR/munge/munged.pid" "$PIDS/munged.pid"
    until_ok 20 munge_works || fail "munged did not start (log: $DIR/munge/munged.log)"
    say "munged up"
}

db() { mariadb --socket="$DB_SOCKET" "$@"; }

start_mariadb() {
    install -d -o mysql -g mysql "$DIR/mysql" "$DIR/mysqlrun"
    if ! running "$DIR/mysqlrun/mariadbd.pid" mariadbd; then
        if [ ! -d "$DIR/mysql/mysql" ]; then
            mariadb-install-db --user=mysql --datadir="$DIR/mysql" --skip-test-db \
                --auth-root-authentication-method=socket >"$LOGS/mariadb-install.log" 2>&1 \
                || fail "mariadb-install-db failed (log: $LOGS/mariadb-install.log)"
        fi
        setsid mariadbd --user=mysql --datadir="$DIR/mysql" --socket="$DB_SOCKET" \
            --pid-file="$DIR/mysqlrun/mariadbd.pid" --log-error="$DIR/mysqlrun/mariadb.log" \
            --skip-networking --innodb-buffer-pool-size=64M --performance-schema=OFF \
            </dev/null >/dev/null 2>&1 &
        until_ok 60 db -e 'select 1' || fail "mariadbd did not start (log: $DIR/mysqlrun/mariadb.log)"
        say "mariadbd up"
    fi
    db -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
        CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASSWORD';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
}

start_slurmdbd() {
    running "$PIDS/slurmdbd.pid" slurmdbd || MYSQL_UNIX_PORT="$DB_SOCKET" slurmdbd
    until_ok 60 sacctmgr -n list cluster || fail "slurmdbd does not answer (log: $LOGS/slurmdbd.log)"
    sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER" \
        || sacctmgr -i add cluster "$CLUSTER" >/dev/null
    say "slurmdbd up"
}

ctld_up() { scontrol ping | grep -q UP; }

start_slurm() {
    running "$PIDS/slurmctld.pid" slurmctld || slurmctld
    until_ok 30 ctld_up || fail "slurmctld is not UP (log: $LOGS/slurmctld.log)"
    running "$PIDS/slurmd.pid" slurmd || slurmd
    local state="" deadline=$((SECONDS + 60))
    while [ $SECONDS -lt $deadline ]; do
        state=$(sinfo -h -n "$HOST" -o %T 2>/dev/null | head -n 1)
        case "$state" in
            idle|mixed|allocated) break ;;
            down*|drain*|fail*) scontrol update NodeName="$HOST" State=RESUME 2>/dev/null || true ;;
        esac
        sleep 0.2
    done
    case "$state" in idle|mixed|allocated) ;; *) fail "node $HOST is '$state' (log: $LOGS/slurmd.log)" ;; esac
    say "cluster up: node $HOST $state, partitions: $(sinfo -h -o %P | tr '\n' ' ')"
}

cancel_our_jobs() {
    running "$PIDS/slurmctld.pid" slurmctld || return 0
    local ids i
    ids=$(squeue -h -o %A 2>/dev/null || true)
    [ -z "$ids" ] && return 0
    scancel $ids 2>/dev/null || true
    for i in $(seq 75); do [ -z "$(squeue -h -o %A 2>/dev/null)" ] && break; sleep 0.2; done
}

cmd_start() {
    [ "$(id -u)" = 0 ] || fail "start must run as root (it installs packages and starts daemons)"
    mkdir -p "$PIDS" "$LOGS" "$DIR/slurmctld" "$DIR/slurmd"
    install_packages
    write_slurm_conf
    write_slurmdbd_conf /etc/slurm/slurmdbd.conf "$PIDS/slurmdbd.pid" "$LOGS/slurmdbd.log"
    start_munge
    start_mariadb
    start_slurmdbd
    start_slurm
    say "start finished in $((SECONDS - T0)) s"
}

cmd_stop() {
    cancel_our_jobs
    stop_daemon "$PIDS/slurmd.pid" slurmd
    stop_daemon "$PIDS/slurmctld.pid" slurmctld
    stop_daemon "$PIDS/slurmdbd.pid" slurmdbd
    stop_daemon "$PIDS/munged.pid" munged
    stop_daemon "$DIR/mysqlrun/mariadbd.pid" mariadbd
    say "stop finished in $((SECONDS - T0)) s"
}

cmd_status() {
    local pair
    for pair in slurmctld:$PIDS/slurmctld.pid slurmd:$PIDS/slurmd.pid slurmdbd:$PIDS/slurmdbd.pid \
        munged:$PIDS/munged.pid mariadbd:$DIR/mysqlrun/mariadbd.pid; do
        if running "${pair#*:}" "${pair%%:*}"; then echo "${pair%%:*}: running"; else echo "${pair%%:*}: stopped"; fi
    done
    command -v sinfo >/dev/null && sinfo 2>/dev/null || true
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
