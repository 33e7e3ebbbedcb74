# Shared by scripts/slurm-cluster.sh and scripts/slurm-two-nodes.sh (sourced, not run).

DB_PASSWORD=aoscale-ci  # the slurm user's password in the clusters' mariadb

# running PIDFILE COMM: the pid in PIDFILE is alive and is the program COMM (not a reused pid)
running() {
    local pid
    [ -s "$1" ] || return 1
    pid=$(cat "$1")
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]
}

# until SECONDS_MAX CMD...: poll CMD every 0.2 s until it succeeds or the time runs out
until_ok() {
    local deadline=$((SECONDS + $1))
    shift
    while ! "$@" >/dev/null 2>&1; do
        [ $SECONDS -lt $deadline ] || return 1
        sleep 0.2
    done
}

# stop_daemon PIDFILE COMM: SIGTERM our daemon, wait up to 10 s, then SIGKILL
stop_daemon() {
    local pid i
    if running "$1" "$2"; then
        pid=$(cat "$1")
        kill -TERM "$pid" 2>/dev/null || true
        for i in $(seq 50); do [ -d "/proc/$pid" ] || break; sleep 0.2; done
        if [ -d "/proc/$pid" ]; then
            say "$2 ($pid) ignored SIGTERM; SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
        say "stopped $2 ($pid)"
    fi
    rm -f "$1"
}

# slurm_common_conf: the slurm.conf lines both clusters share (root daemons, munge, no cgroups,
# backfill that starts pending jobs within seconds, cores as the unit, accounting through slurmdbd).
# cred_expire=10: a requeued job may restart 10 s after it ends (default 120 s).
# config_overrides: trust the advertised CPUs even above the real core count.
slurm_common_conf() {
    cat <<EOF
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=cred_expire=10
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,bf_interval=1,sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/linux
JobCompType=jobcomp/none
ReturnToService=2
InactiveLimit=0
KillWait=5
MinJobAge=600
Waittime=0
SlurmctldTimeout=30
SlurmdTimeout=30
EOF
}

# write_slurmdbd_conf FILE PIDFILE LOGFILE: a slurmdbd.conf on localhost, storage in mariadb
write_slurmdbd_conf() {
    (umask 077; cat >"$1" <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
SlurmUser=root
PidFile=$2
LogFile=$3
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$DB_PASSWORD
StorageLoc=slurm_acct_db
EOF
    )
}
