#!/usr/bin/env bash
# A real SLURM cluster on this one machine, for trying the sbatch scripts in this folder without a
# cluster (and for tests/test_slurm.py). Debian's slurm-wlm and munge (carc/ci_slurm.sh installs them);
# needs root. Everything it makes lives in one folder; `stop` ends only what `start` started.
#
#   carc/local_slurm.sh start      # munged, slurmctld and slurmd(s); waits until the node(s) are idle
#   eval "$(carc/local_slurm.sh env)"   # SLURM_CONF for sbatch/squeue/scontrol in this shell
#   sbatch --partition=local --gres=none --cpus-per-task=2 --mem=1G --wait carc/ddp_single_node.sbatch 2
#   carc/local_slurm.sh status     # what runs, and sinfo
#   carc/local_slurm.sh stop       # cancels jobs, stops the daemons, removes the namespaces it made
#
# LSTMNB_SLURM_DIR    state, configuration and logs (default: ${TMPDIR:-/tmp}/lstmnb-slurm)
# LSTMNB_SLURM_NODES  1 (default): this machine is the node, at 127.0.0.1;
#                     2: two nodes, node1 and node2, each a slurmd in its own network namespace (own
#                     hostname, address and /etc/hosts) on a bridge with the controller, so that a job
#                     really spans two hosts as far as SLURM, torchrun and gloo can tell.
# LSTMNB_SLURM_PORT   slurmctld's port (default 6817); slurmd listens on the next one.
# LSTMNB_SLURM_NET    the /24 of the two-node bridge (default 10.213.71): controller .1, nodes .11, .12
# LSTMNB_SLURM_CPUS   CPUs each node declares (default: this machine's, split evenly between the nodes);
#                     more than the machine has lets jobs that mostly wait run beside the ones that compute
#
# Cgroup-free settings (proctrack/linuxproc, task/none), so it runs in containers and small VMs; the
# node's memory is this machine's, split evenly between the nodes.
# Exit status: 0 done; 1 a daemon failed (its log is named); 2 a bad setting; 3 SLURM cannot run here
# (not installed, not root, no network namespaces): tests/test_slurm.py skips on 3.
set -euo pipefail
PATH="$PATH:/usr/sbin:/sbin"   # the daemons live in sbin, which a non-login shell may leave out

DIR="${LSTMNB_SLURM_DIR:-${TMPDIR:-/tmp}/lstmnb-slurm}"
# start: LSTMNB_SLURM_NODES (default 1); status: the count the running cluster was started with
NODES="${LSTMNB_SLURM_NODES:-$( [ "${1:-}" = start ] || cat "$DIR/nodes" 2>/dev/null || true )}"
NODES="${NODES:-1}"
PORT="${LSTMNB_SLURM_PORT:-6817}"
CPUS="${LSTMNB_SLURM_CPUS:-}"
NET="${LSTMNB_SLURM_NET:-10.213.71}"
PARTITION=local
CONF="$DIR/slurm.conf"
BRIDGE=lnb-br0
NS_PREFIX=lnb-node        # network namespaces lnb-node1, lnb-node2

die() { echo "local_slurm: $1" >&2; exit "${2:-1}"; }

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }

# --- what runs ------------------------------------------------------------------------------------

# pid from a pid file, if that process is alive and is the program named (pids get reused)
alive_pid() {
  local file="$1" prog="$2" pid
  [ -s "$file" ] || return 1
  pid="$(tr -dc 0-9 < "$file")"
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q -- "$prog" || return 1
  echo "$pid"
}

node_names() {
  if [ "$NODES" = 1 ]; then hostname -s; else seq -f "node%g" 1 "$NODES"; fi
}

daemons() {  # "name pidfile program" per daemon this cluster runs
  echo "munged $DIR/munge/munged.pid munged"
  echo "slurmctld $DIR/run/slurmctld.pid slurmctld"
  local n
  for n in $(node_names); do echo "slurmd:$n $DIR/run/slurmd-$n.pid slurmd"; done
}

all_running() {
  local name file prog
  [ -f "$CONF" ] || return 1
  while read -r name file prog; do alive_pid "$file" "$prog" >/dev/null || return 1; done < <(daemons)
}

# --- start ----------------------------------------------------------------------------------------

check_tools() {
  local missing=() t
  [[ -z "$CPUS" || "$CPUS" =~ ^[1-9][0-9]{0,3}$ ]] || die "LSTMNB_SLURM_CPUS=$CPUS is not a whole number of CPUs from 1 to 9999" 2
  for t in munged mungekey slurmctld slurmd sbatch sinfo scontrol; do
    command -v "$t" >/dev/null 2>&1 || missing+=("$t")
  done
  [ "${#missing[@]}" -eq 0 ] || die "not installed: ${missing[*]} (Debian: carc/ci_slurm.sh installs slurm-wlm and munge)" 3
  [ "$(id -u)" -eq 0 ] || die "needs root: slurmd starts jobs as their user, and munged and the namespaces need root" 3
  # a unix socket's path holds at most 107 bytes
  [ "${#DIR}" -le 80 ] || die "LSTMNB_SLURM_DIR is ${#DIR} characters long; munged's socket in it needs a path of at most 80" 2
  case "$NODES" in
    1) ;;
    2) for t in ip nsenter unshare; do
         command -v "$t" >/dev/null 2>&1 || die "LSTMNB_SLURM_NODES=2 needs $t (iproute2, util-linux)" 3
       done
       local probe="lnb-probe$$" why
       why="$(ip netns add "$probe" 2>&1 && ip netns del "$probe" 2>&1)" \
         || die "LSTMNB_SLURM_NODES=2 needs network namespaces, which this machine refuses: $why" 3
       if ip link show "$BRIDGE" >/dev/null 2>&1 && [ ! -f "$DIR/network" ]; then
         die "network $BRIDGE exists but is not this cluster's ($DIR): stop the other local cluster first" 3
       fi ;;
    *) die "LSTMNB_SLURM_NODES=$NODES is not 1 or 2" 2 ;;
  esac
}

write_conf() {
  local cores mem_mb cpus mem ctl_addr n i nodes_line
  cores="$(nproc)"
  mem_mb="$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)"
  cpus="${CPUS:-$(( cores / NODES > 0 ? cores / NODES : 1 ))}"
  mem=$(( mem_mb * 9 / 10 / NODES ))
  if [ "$NODES" = 1 ]; then
    ctl_addr=127.0.0.1
    nodes_line="NodeName=$(hostname -s) NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN"
  else
    ctl_addr="$NET.1"
    nodes_line=""
    i=0
    for n in $(node_names); do
      i=$((i + 1))
      nodes_line+="NodeName=$n NodeAddr=$NET.$((10 + i)) CPUs=$cpus RealMemory=$mem State=UNKNOWN"$'\n'
    done
  fi
  cat > "$CONF" <<EOF
# written by carc/local_slurm.sh: a throw-away cluster of $NODES node(s) on $(hostname -s)
ClusterName=lstmnb-local
SlurmctldHost=$(hostname -s)($ctl_addr)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# no cgroups: processes tracked by their parent pids, no CPU binding (works inside containers)
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# the configured CPUs and memory count, not what slurmd detects (the nodes share one machine)
SlurmdParameters=config_overrides
ReturnToService=2
# sbatch --wait polls every 8 s once MinJobAge < 16 (22.05: the poll grows 2, 8, 32 s while it stays
# under MinJobAge / 2), instead of up to 32 s; a finished job stays visible to scontrol that long
MinJobAge=15
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
$nodes_line
PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

start_munge() {
  mkdir -p "$DIR/munge"
  chmod 700 "$DIR/munge"
  [ -s "$DIR/munge/munge.key" ] || mungekey --create --keyfile "$DIR/munge/munge.key" >/dev/null
  chmod 400 "$DIR/munge/munge.key"
  # --force: the folder lives under /tmp, whose permissions munged would otherwise refuse
  munged --force --socket "$DIR/munge/munge.socket" --key-file "$DIR/munge/munge.key" \
    --pid-file "$DIR/munge/munged.pid" --log-file "$DIR/log/munged.log" \
    --seed-file "$DIR/munge/munged.seed" 2>>"$DIR/log/munged.log" || die "munged did not start; see $DIR/log/munged.log" 1
}

# two network namespaces on a bridge with the controller; each node's own /etc/hosts (bound over
# /etc/hosts in the node's mount namespace, see start_slurmd) names every node by its address
make_network() {
  local i j ns
  touch "$DIR/network"   # ours: stop removes it
  ip link add "$BRIDGE" type bridge
  ip addr add "$NET.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  for i in $(seq 1 "$NODES"); do
    ns="$NS_PREFIX$i"
    ip netns add "$ns"
    ip link add "lnb-h$i" type veth peer name "lnb-n$i"
    ip link set "lnb-h$i" master "$BRIDGE" up
    ip link set "lnb-n$i" netns "$ns"
    ip -n "$ns" addr add "$NET.$((10 + i))/24" dev "lnb-n$i"
    ip -n "$ns" link set "lnb-n$i" up
    ip -n "$ns" link set lo up
  done
  {
    echo "127.0.0.1 localhost"
    echo "$NET.1 $(hostname -s)"
    for j in $(seq 1 "$NODES"); do echo "$NET.$((10 + j)) node$j"; done
  } > "$DIR/hosts"
  # no name server is reachable from the bridge: fail lookups at once instead of after timeouts
  printf 'nameserver 127.0.0.1\noptions timeout:1 attempts:1\n' > "$DIR/resolv.conf"
}

remove_network() {
  local i
  [ -f "$DIR/network" ] || return 0
  for i in 1 2; do ip netns del "$NS_PREFIX$i" 2>/dev/null || true; done   # with its end of the veth pair
  ip link del "$BRIDGE" 2>/dev/null || true
  rm -f "$DIR/network"
}

start_slurmd() {
  local n i=0
  for n in $(node_names); do
    i=$((i + 1))
    mkdir -p "$DIR/spool/$n"
    if [ "$NODES" = 1 ]; then
      slurmd -f "$CONF" || die "slurmd did not start; see $DIR/log/slurmd-$n.log" 1
    else
      # its own network namespace, hostname, /etc/hosts and resolv.conf: to SLURM, torchrun and gloo
      # this is host node<i>. (nsenter, not `ip netns exec`, which mounts a fresh /sys without the
      # cgroup file system that slurmd 22.05 opens even with cgroups unused.)
      nsenter --net="/run/netns/$NS_PREFIX$i" unshare --uts --mount sh -c \
        'mount --bind "$3/hosts" /etc/hosts && mount --bind "$3/resolv.conf" /etc/resolv.conf &&
         hostname "$1" && exec slurmd -f "$2" -N "$1"' \
        slurmd "$n" "$CONF" "$DIR" \
        || die "slurmd for node $n did not start; see $DIR/log/slurmd-$n.log" 1
    fi
  done
}

wait_idle() {
  local t want="$NODES" idle
  for t in $(seq 1 60); do
    idle="$(SLURM_CONF="$CONF" sinfo -h -N -o '%T' 2>/dev/null | grep -c '^idle' || true)"
    [ "$idle" = "$want" ] && return 0
    sleep 1
  done
  SLURM_CONF="$CONF" sinfo -N >&2 || true
  die "the node(s) did not become idle within 60 s; logs in $DIR/log" 1
}

# node1 reaches node2's slurmd through the bridge (a host whose firewall filters bridged traffic, e.g.
# br_netfilter with a FORWARD policy of DROP, would otherwise hang the two-node jobs)
check_network() {
  [ "$NODES" != 1 ] || return 0
  nsenter --net="/run/netns/${NS_PREFIX}1" timeout 5 bash -c "exec 3<>/dev/tcp/$NET.12/$((PORT + 1))" 2>/dev/null \
    || { stop quiet; die "node1 cannot reach node2 ($NET.12) through bridge $BRIDGE: is bridged traffic filtered here?" 3; }
}

start() {
  check_tools
  if all_running && grep -q "of $NODES node(s)" "$CONF"; then
    echo "already running ($NODES node(s)); SLURM_CONF=$CONF"
    return 0
  fi
  stop quiet
  rm -rf "$DIR/state" "$DIR/spool" "$DIR/run"
  mkdir -p "$DIR/state" "$DIR/spool" "$DIR/run" "$DIR/log"
  write_conf
  echo "$NODES" > "$DIR/nodes"
  start_munge
  slurmctld -c -f "$CONF" || die "slurmctld did not start; see $DIR/log/slurmctld.log" 1  # -c: a clean start
  if [ "$NODES" != 1 ]; then make_network; fi
  start_slurmd
  wait_idle
  check_network
  echo "SLURM running: $NODES node(s) in partition '$PARTITION'; SLURM_CONF=$CONF (logs in $DIR/log)"
}

# --- stop, status ---------------------------------------------------------------------------------

stop() {
  local file pid pids=()
  if [ -f "$CONF" ] && alive_pid "$DIR/run/slurmctld.pid" slurmctld >/dev/null; then
    SLURM_CONF="$CONF" scancel --quiet --full --user "$(id -un)" 2>/dev/null || true
  fi
  # the daemons that this folder's pid files name (whatever node count started them): nodes first,
  # munged last
  for file in "$DIR"/run/slurmd-*.pid; do
    if pid="$(alive_pid "$file" slurmd)"; then pids+=("$pid"); fi
  done
  if pid="$(alive_pid "$DIR/run/slurmctld.pid" slurmctld)"; then pids+=("$pid"); fi
  if pid="$(alive_pid "$DIR/munge/munged.pid" munged)"; then pids+=("$pid"); fi
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for _ in $(seq 1 20); do
    local left=0
    for pid in "${pids[@]}"; do [ -d "/proc/$pid" ] && left=1; done
    [ "$left" = 0 ] && break
    sleep 0.5
  done
  for pid in "${pids[@]}"; do [ -d "/proc/$pid" ] && kill -9 "$pid" 2>/dev/null || true; done
  remove_network
  [ "${1:-}" = quiet ] || echo "stopped (${#pids[@]} daemon(s)); logs kept in $DIR/log"
}

status() {
  local name file prog pid rc=0
  [ -f "$CONF" ] || { echo "not started (no $CONF)"; return 1; }
  while read -r name file prog; do
    if pid="$(alive_pid "$file" "$prog")"; then echo "$name: running (pid $pid)"; else echo "$name: not running"; rc=1; fi
  done < <(daemons)
  [ "$rc" = 0 ] && SLURM_CONF="$CONF" sinfo -N -o '%N %P %T %c %m'
  return "$rc"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  -h|--help|help) usage ;;
  *) usage >&2; exit 2 ;;
esac
