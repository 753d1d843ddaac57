#!/usr/bin/env bash
# A real Slurm on this machine, on loopback: one node with this machine's CPUs, for the tests of
# `rlbridge submit --to slurm` (tests/test_slurm.py) and for trying the launcher by hand.
#
#   scripts/slurm-local.sh install   # Debian's slurm-wlm and munge (apt-get; needs root)
#   scripts/slurm-local.sh start     # munged + slurmctld + slurmd, config and state under $RLBRIDGE_SLURM_DIR
#   scripts/slurm-local.sh stop      # stops the daemons this script started (by their pid files)
#   scripts/slurm-local.sh env       # prints `export SLURM_CONF=...` for sbatch, squeue, scancel
#
# Nothing outside $RLBRIDGE_SLURM_DIR (default /tmp/rlbridge-slurm) is configured: /etc/slurm stays as
# the package left it, and the client commands find this cluster through SLURM_CONF. The daemons run
# as root (SlurmUser=root), the jobs as the user who submits them.
set -euo pipefail

DIR="${RLBRIDGE_SLURM_DIR:-/tmp/rlbridge-slurm}"
CTLD_PORT="${RLBRIDGE_SLURM_PORT:-6917}"   # not Slurm's default 6817, so a real site config elsewhere is never hit
SLURMD_PORT=$((CTLD_PORT + 1))
NODE="$(hostname -s)"

install() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; then
    echo "slurm-wlm and munge are installed"; return 0
  fi
  [ "$(id -u)" = 0 ] || { echo "installing slurm-wlm and munge needs root (apt-get)" >&2; exit 1; }
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm munge
}

write_config() {
  mkdir -p "$DIR/state" "$DIR/spool" "$DIR/munge" "$DIR/log"
  local cpus mem
  cpus="$(nproc)"
  mem="$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)"
  cat > "$DIR/slurm.conf" <<EOF
ClusterName=rlbridge-local
SlurmctldHost=${NODE}(127.0.0.1)
SlurmctldPort=${CTLD_PORT}
SlurmdPort=${SLURMD_PORT}
SlurmUser=root
AuthType=auth/munge
# cred_expire is also how long a requeued job waits before it starts again (default 120 s); a
# start forced sooner can fall in the second of the old credential's revocation, and slurmd then
# kills it ("Job credential revoked")
AuthInfo=socket=${DIR}/munge/munge.socket.2,cred_expire=10
CredType=cred/munge
StateSaveLocation=${DIR}/state
SlurmdSpoolDir=${DIR}/spool
SlurmctldPidFile=${DIR}/slurmctld.pid
SlurmdPidFile=${DIR}/slurmd.pid
SlurmctldLogFile=${DIR}/log/slurmctld.log
SlurmdLogFile=${DIR}/log/slurmd.log
# process tracking by parent pid: no cgroups in a container; Ray's processes stay in the step's tree
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobRequeue=1
KillWait=10
InactiveLimit=0
MinJobAge=300
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=${NODE} NodeAddr=127.0.0.1 NodeHostname=${NODE} CPUs=${cpus} RealMemory=${mem} State=UNKNOWN
PartitionName=debug Nodes=${NODE} Default=YES MaxTime=INFINITE State=UP
EOF
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

start() {
  install >/dev/null
  write_config
  if ! alive "$DIR/munge/munged.pid"; then
    chown -R munge:munge "$DIR/munge"
    runuser -u munge -- munged --socket="$DIR/munge/munge.socket.2" --pid-file="$DIR/munge/munged.pid" \
      --log-file="$DIR/munge/munged.log" --seed-file="$DIR/munge/munged.seed"
  fi
  export SLURM_CONF="$DIR/slurm.conf"
  alive "$DIR/slurmctld.pid" || slurmctld -f "$SLURM_CONF"
  alive "$DIR/slurmd.pid" || slurmd -f "$SLURM_CONF"
  for _ in $(seq 60); do  # the node registers with the controller
    if sinfo -h -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
      echo "slurm is up: SLURM_CONF=$SLURM_CONF ($(sinfo -h -o '%P %D node(s) %c CPUs %T'))"; return 0
    fi
    sleep 1
  done
  echo "slurm did not come up; logs in $DIR/log" >&2; exit 1
}

stop() {
  for pidfile in "$DIR/slurmd.pid" "$DIR/slurmctld.pid" "$DIR/munge/munged.pid"; do
    if alive "$pidfile"; then kill "$(cat "$pidfile")"; fi
  done
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  env) echo "export SLURM_CONF=$DIR/slurm.conf" ;;
  *) echo "usage: $0 install|start|stop|env" >&2; exit 2 ;;
esac
