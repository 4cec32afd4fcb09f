#!/usr/bin/env bash
# A one-node Slurm cluster of its own (no systemd): munged, slurmctld and
# slurmd started from a config written under DIR, with one partition,
# "xfer", of 8 task slots on this host (oversubscribed: a transfer task
# waits on the network and the disks, not the CPU). The tests of sharded
# sends (tests/shards.rs) and scripts/bench-shards.sh submit to it.
#
#   scripts/slurm-one-node.sh start DIR   prints SLURM_CONF=DIR/slurm.conf
#   scripts/slurm-one-node.sh stop DIR
#
# Needs root and Debian's slurmctld, slurmd, slurm-client and munge.
set -euo pipefail
cmd=${1:?start or stop}
dir=$(realpath -m "${2:?a directory for the cluster}")
conf=$dir/slurm.conf

stop() {
  for p in slurmd slurmctld; do
    [ -f "$dir/$p.pid" ] && kill "$(cat "$dir/$p.pid")" 2>/dev/null || true
  done
  sleep 1
  pkill -f "$conf" 2>/dev/null || true
}

if [ "$cmd" = stop ]; then
  stop
  exit 0
fi

for t in slurmctld slurmd sbatch munged; do
  command -v "$t" >/dev/null || PATH=$PATH:/usr/sbin
  command -v "$t" >/dev/null || { echo "slurm-one-node: $t is missing (apt-get install slurmctld slurmd slurm-client munge)" >&2; exit 2; }
done
mkdir -p "$dir/state" "$dir/spool"
# munge: one key, its daemon under its own user (it refuses root).
if [ ! -s /etc/munge/munge.key ]; then
  mkdir -p /etc/munge
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
chown munge:munge /etc/munge/munge.key 2>/dev/null || true
chmod 0400 /etc/munge/munge.key
mkdir -p /run/munge /var/lib/munge /var/log/munge
chown munge:munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
if ! munge -n </dev/null >/dev/null 2>&1; then
  runuser -u munge -- munged
  for _ in $(seq 50); do munge -n </dev/null >/dev/null 2>&1 && break; sleep 0.1; done
fi
host=$(hostname -s)
cat > "$conf" <<CONF
ClusterName=urmove
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldPort=${SLURMCTLD_PORT:-16817}
SlurmdPort=${SLURMD_PORT:-16818}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
NodeName=$host CPUs=8 State=UNKNOWN
PartitionName=xfer Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
# slurmd needs a cgroup plugin even with proctrack/linuxproc: v2 on a
# unified hierarchy (outside systemd's), v1 otherwise.
if [ -e /sys/fs/cgroup/cgroup.controllers ]; then
  printf 'CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\n' > "$dir/cgroup.conf"
else
  echo "CgroupPlugin=cgroup/v1" > "$dir/cgroup.conf"
fi
stop
export SLURM_CONF=$conf
slurmctld -f "$conf"
slurmd -f "$conf"
for _ in $(seq 100); do
  if sinfo -h -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then
    echo "SLURM_CONF=$conf"
    exit 0
  fi
  scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true
  sleep 0.2
done
echo "slurm-one-node: the node never came up; see $dir/slurmctld.log and $dir/slurmd.log" >&2
tail -5 "$dir/slurmctld.log" "$dir/slurmd.log" >&2 || true
exit 1
