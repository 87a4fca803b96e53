#!/usr/bin/env bash
# Create (or update) the conda env from carc/environment.yml and register it as a Jupyter kernel, so that
# OnDemand JupyterLab sessions and `lstmnb notebooks run --profile carc-*` (kernel "lstmnb") find it.
#
#   bash carc/install_kernel.sh              # env "lstmnb", kernel "lstmnb"
#   ENV_NAME=lstmnb-dev KERNEL_NAME=lstmnb-dev bash carc/install_kernel.sh
#
# Run it once on a login node (it takes ~10 minutes); re-run after carc/environment.yml changes.
set -eo pipefail  # no -u: conda and module scripts read unset variables
cd "$(dirname "$0")/.."

ENV_NAME="${ENV_NAME:-lstmnb}"
KERNEL_NAME="${KERNEL_NAME:-lstmnb}"
# login nodes have no GPU driver for conda to see; the GPU nodes' drivers support at least CUDA 12.4
export CONDA_OVERRIDE_CUDA="${CONDA_OVERRIDE_CUDA:-12.4}"

if ! command -v conda >/dev/null 2>&1; then
  if command -v module >/dev/null 2>&1; then
    module purge
    module load conda
  fi
fi
command -v conda >/dev/null 2>&1 || { echo "conda not found: on CARC run 'module load conda' first" >&2; exit 1; }
SOLVER=conda
command -v mamba >/dev/null 2>&1 && SOLVER=mamba

if conda env list | awk '{print $1}' | grep -qx "$ENV_NAME"; then
  echo "updating conda env $ENV_NAME from carc/environment.yml"
  "$SOLVER" env update -n "$ENV_NAME" -f carc/environment.yml --prune
else
  echo "creating conda env $ENV_NAME from carc/environment.yml"
  "$SOLVER" env create -n "$ENV_NAME" -f carc/environment.yml
fi

conda run -n "$ENV_NAME" python -m ipykernel install --user --name "$KERNEL_NAME" \
  --display-name "Python (lstmnb)"
conda run -n "$ENV_NAME" python -c \
  "import torch, lstmnb; print(f'lstmnb {lstmnb.__version__}, torch {torch.__version__}, CUDA build {torch.version.cuda}')"
echo "kernel '$KERNEL_NAME' registered: pick 'Python (lstmnb)' in JupyterLab, or run"
echo "  sbatch --gres=gpu:v100:1 carc/run_profile.sbatch v100"
