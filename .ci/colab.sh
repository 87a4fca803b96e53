#!/usr/bin/env bash
# The notebooks' first cell, run for real as Colab runs it: a fresh venv stands in for Colab's runtime
# (torch preinstalled, a Jupyter kernel, a `google.colab` module), the notebook is opened from the checkout
# (its folder is the kernel's working folder), and the cell installs lstmnb from that checkout with %pip.
# The notebook must then run to the end in the same kernel, with no restart.
# Usage: bash .ci/colab.sh WORKDIR   (from the checkout; its committed state is what is cloned)
set -euo pipefail
# pip, without the machine's notes on local index folders it skips
pip_install() { local py=$1; shift; "$py" -m pip install --quiet "$@" 2> >(grep -v "is ignored: it is neither" >&2); }
cd "$(dirname "$0")/.."
WORK=${1:?give a work folder}
V="$WORK/colab-venv"
python3 -m venv "$V"
pip_install "$V/bin/python" "torch==2.13.0" ipykernel nbclient nbformat
# google.colab as a namespace part, so it does not hide the real google.* packages lstmnb may install
mkdir -p "$WORK/colab-site/google/colab" && : > "$WORK/colab-site/google/colab/__init__.py"
# Colab's kernel has google.colab imported when a notebook starts: an IPython startup file does that here
mkdir -p "$WORK/colab-ipython/profile_default/startup"
echo "import google.colab" > "$WORK/colab-ipython/profile_default/startup/00-colab.py"
(cd "$WORK" && "$V/bin/python" -c "import lstmnb" 2>/dev/null) && { echo "lstmnb is already in the stand-in runtime"; exit 1; }
# the repository cloned to /content/lstmnb, as a Colab user does, and the notebook opened from there
git clone --quiet . "$WORK/content/lstmnb"
cd "$WORK/content/lstmnb"
env -u PYTHONPATH PYTHONPATH="$WORK/colab-site" IPYTHONDIR="$WORK/colab-ipython" JUPYTER_DATA_DIR="$WORK/colab-jupyter" LSTMNB_CACHE="$WORK/colab-cache" \
  "$V/bin/python" - notebooks/01_data_access.ipynb <<'PY'
import sys, time
import nbclient, nbformat
path = sys.argv[1]
nb = nbformat.read(path, as_version=4)
t0 = time.time()
client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=900, resources={"metadata": {"path": "notebooks"}})
client.execute()
pip_out = "".join(o.get("text", "") for o in nb.cells[1].outputs)
print(f"{path}: {len(nb.cells)} cells ran in {time.time() - t0:.0f} s; the install cell said: {pip_out.strip()[:300] or '(nothing)'}")
PY
(cd "$WORK" && "$V/bin/python" -c "import lstmnb; print('installed in the stand-in runtime:', lstmnb.__file__)")
