#!/usr/bin/env bash
# A real one-node Slurm on this machine, for the slow tests of `ckptgeo submit` (tests/test_slurm.py).
# Installs Debian's slurm-wlm and munge, writes /etc/slurm/slurm.conf for this host (its short name, CPU count
# and memory) and starts munged, slurmctld and slurmd without systemd. Needs root and apt-get; safe to run again
# (what runs already is left running). Exits non-zero if Slurm does not answer `sinfo` with an idle node.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then echo "slurm_local.sh: needs root (apt-get, /etc/slurm, daemons)" >&2; exit 1; fi
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq slurm-wlm munge >/dev/null
fi
host=$(hostname -s)
cpus=$(nproc)
mem_mb=$(awk '/MemTotal/ {print int($2 / 1024 * 0.8)}' /proc/meminfo)
mkdir -p /etc/munge /var/run/munge /var/log/munge /var/lib/munge /etc/slurm \
         /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
if [ ! -s /etc/munge/munge.key ]; then
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
fi
chown -R munge:munge /etc/munge /var/run/munge /var/log/munge /var/lib/munge
chmod 400 /etc/munge/munge.key
marker="# written by ckptgeo scripts/slurm_local.sh"
if [ -e /etc/slurm/slurm.conf ] && ! grep -qF "$marker" /etc/slurm/slurm.conf; then
  echo "slurm_local.sh: /etc/slurm/slurm.conf exists and was not written by this script; leaving it alone" >&2
  exit 1
fi
cat > /etc/slurm/slurm.conf.new <<CONF
${marker}
ClusterName=local
SlurmctldHost=${host}
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmctldPidFile=/var/run/slurmctld.pid
SlurmdPidFile=/var/run/slurmd.pid
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
MaxArraySize=1001
NodeName=${host} CPUs=${cpus} RealMemory=${mem_mb} State=UNKNOWN
PartitionName=debug Nodes=${host} Default=YES MaxTime=INFINITE State=UP
CONF
changed=0
if ! cmp -s /etc/slurm/slurm.conf.new /etc/slurm/slurm.conf; then
  mv /etc/slurm/slurm.conf.new /etc/slurm/slurm.conf; changed=1
else
  rm /etc/slurm/slurm.conf.new
fi
pgrep -x munged >/dev/null || su -s /bin/sh munge -c /usr/sbin/munged
if [ "$changed" = 1 ]; then
  # a new configuration (first start, or another host name / CPU count): restart the Slurm daemons
  for d in slurmd slurmctld; do
    if pid=$(pgrep -x "$d"); then kill $pid; while kill -0 $pid 2>/dev/null; do sleep 0.2; done; fi
  done
fi
pgrep -x slurmctld >/dev/null || /usr/sbin/slurmctld
pgrep -x slurmd >/dev/null || /usr/sbin/slurmd
for _ in $(seq 60); do
  if sinfo -h -o '%t' 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then
    sinfo; exit 0
  fi
  sleep 1
done
echo "slurm_local.sh: Slurm did not come up; see /var/log/slurm/slurmctld.log and slurmd.log" >&2
sinfo >&2 || true
exit 1
