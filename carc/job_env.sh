# Sourced by the sbatch scripts in this folder, from the repository root (where jobs are submitted):
# the Python environment and the device, chosen by variables so that the same scripts run on CARC's
# GPU nodes (the defaults) and on any other SLURM cluster, CPU nodes included.
#
# LSTMNB_ACTIVATE  how a job gets the lstmnb Python:
#     conda (default)   CARC: `module load conda` where there are modules, then `conda activate $ENV_NAME`
#                       (default env: lstmnb, made by carc/install_kernel.sh from environment.yml)
#     a file path       sourced, e.g. a virtual environment's activate script:
#                       LSTMNB_ACTIVATE=$HOME/venvs/lstmnb/bin/activate sbatch ...
#     none              use lstmnb and torchrun as found on PATH (sbatch passes the submitting shell's
#                       environment on, so an environment active at submission is active in the job)
# LSTMNB_DEVICE    cuda (default): one rank per GPU, NCCL between them;
#                  cpu: gloo ranks on CPU cores, no GPU needed (ask for cores with --cpus-per-task)
#
# No `set -u` around this file: conda's and module's scripts read unset variables.

LSTMNB_ACTIVATE="${LSTMNB_ACTIVATE:-conda}"
LSTMNB_DEVICE="${LSTMNB_DEVICE:-cuda}"
ENV_NAME="${ENV_NAME:-lstmnb}"

case "$LSTMNB_DEVICE" in
  cuda|cpu) ;;
  *) echo "LSTMNB_DEVICE='$LSTMNB_DEVICE' is not one of cuda, cpu" >&2; exit 2 ;;
esac

case "$LSTMNB_ACTIVATE" in
  conda)
    if command -v module >/dev/null 2>&1; then module purge; module load conda; fi
    command -v conda >/dev/null 2>&1 || {
      echo "LSTMNB_ACTIVATE=conda, but there is no conda here; set LSTMNB_ACTIVATE to an environment's activate script, or to none" >&2
      exit 2
    }
    eval "$(conda shell.bash hook)"
    conda activate "$ENV_NAME"
    ;;
  none) ;;
  *)
    [ -f "$LSTMNB_ACTIVATE" ] || {
      echo "LSTMNB_ACTIVATE='$LSTMNB_ACTIVATE' is not conda, none or an existing file (e.g. a venv's bin/activate)" >&2
      exit 2
    }
    # shellcheck disable=SC1090
    . "$LSTMNB_ACTIVATE"
    ;;
esac

command -v lstmnb >/dev/null 2>&1 || {
  echo "no lstmnb command after activating (LSTMNB_ACTIVATE=$LSTMNB_ACTIVATE): install the project in that environment" >&2
  exit 2
}
