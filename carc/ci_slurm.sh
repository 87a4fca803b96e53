#!/usr/bin/env bash
# CI, before the test suite: install Debian's slurm-wlm and munge if they are missing, so that
# tests/test_slurm.py runs the carc/ scripts under a real local cluster (carc/local_slurm.sh).
#
#   bash carc/ci_slurm.sh
#
# Where SLURM cannot be had this way (no apt-get, not root) it says so and exits 0: the SLURM tests are
# then skipped with that reason. Where apt-get and root are there, a failed install fails (exit 1).
set -euo pipefail

PACKAGES=(slurm-wlm munge)
have() { command -v slurmctld >/dev/null 2>&1 && command -v slurmd >/dev/null 2>&1 \
           && command -v sbatch >/dev/null 2>&1 && command -v munged >/dev/null 2>&1; }

if have; then
  echo "ci_slurm: SLURM already installed ($(slurmd -V))"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "ci_slurm: no apt-get here, SLURM not installed: the slurm tests will be skipped"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "ci_slurm: not root, SLURM not installed: the slurm tests (which need root) will be skipped"
  exit 0
fi

export DEBIAN_FRONTEND=noninteractive
start=$SECONDS
log="$(mktemp)"
install() { apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >>"$log" 2>&1; }
# the package lists may be missing or stale on a fresh machine: update once, then try again
if ! install; then
  apt-get update -qq >>"$log" 2>&1 && install || {
    tail -n 20 "$log" >&2
    echo "ci_slurm: installing ${PACKAGES[*]} failed (log above)" >&2
    exit 1
  }
fi
rm -f "$log"
have || { echo "ci_slurm: ${PACKAGES[*]} installed, but slurmctld/slurmd/sbatch/munged are still missing" >&2; exit 1; }
echo "ci_slurm: installed ${PACKAGES[*]} ($(slurmd -V)) in $((SECONDS - start)) s"
