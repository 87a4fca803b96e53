#!/usr/bin/env bash
# "Installed is as good as checked out": build the sdist and the wheel, check that both carry the notebook
# series, install the wheel in a fresh venv (no checkout on its path), and run the main job from an empty
# folder. Any file the package forgets (profiles, reference records, sample recipe, notebooks) fails here.
# Usage: bash .ci/wheel.sh WORKDIR   (from the checkout, with the test extra's `build` installed)
set -euo pipefail
# pip, without the machine's notes on local index folders it skips
pip_install() { local py=$1; shift; "$py" -m pip install --quiet "$@" 2> >(grep -v "is ignored: it is neither" >&2); }
cd "$(dirname "$0")/.."
WORK=${1:?give a work folder}
DIST="$WORK/dist"
python -m build --outdir "$DIST" . > "$WORK/build.log" 2>&1 || { tail -30 "$WORK/build.log"; exit 1; }
ls -l "$DIST"
python - "$DIST" <<'PY'
import sys, tarfile, zipfile
from pathlib import Path
dist = Path(sys.argv[1])
wheel = zipfile.ZipFile(next(dist.glob("*.whl"))).namelist()
sdist = tarfile.open(next(dist.glob("*.tar.gz"))).getnames()
notebooks = sorted(Path("notebooks").glob("[0-9][0-9]_*.ipynb"))
missing = [f"wheel: lstmnb/series/{p.name}" for p in notebooks if f"lstmnb/series/{p.name}" not in wheel]
missing += [f"sdist: notebooks/{p.name}" for p in notebooks if not any(n.endswith(f"/notebooks/{p.name}") for n in sdist)]
for needed in ("lstmnb/profiles/quick.yaml", "lstmnb/published_figures.yaml", "lstmnb/datasets/era5_t2m_study_points.npz",
               "lstmnb/datasets/era5_t2m_study_points.NOTICE.txt", "lstmnb/datasets/airline_passengers.csv"):
    if needed not in wheel:
        missing.append(f"wheel: {needed}")
if missing:
    sys.exit("missing from the distributions: " + ", ".join(missing))
print(f"wheel: {len(wheel)} files, sdist: {len(sdist)} files; both carry the {len(notebooks)} notebooks")
PY
python3 -m venv "$WORK/wheel-venv"
pip_install "$WORK/wheel-venv/bin/python" "torch==2.13.0"
pip_install "$WORK/wheel-venv/bin/python" "$(ls "$DIST"/*.whl)[site]"  # the site is the rendered report
mkdir -p "$WORK/empty" && cd "$WORK/empty"
# the installed package, not the checkout: no source folder on the path, and this folder is empty
env -u PYTHONPATH "$WORK/wheel-venv/bin/python" -c "import lstmnb, sys; print('lstmnb from', lstmnb.__file__); sys.exit('site-packages' not in lstmnb.__file__)"
# the main job at the `ci` profile and 2 epochs: every notebook and file the wheel must carry is still used, in
# minutes instead of the quick profile's 20 on a busy day (README's command 1 above ran the quick profile already)
env -u PYTHONPATH PATH="$WORK/wheel-venv/bin:$PATH" lstmnb quickstart --profile ci --epochs 2 --results "$WORK/empty/results"
ls "$WORK/empty/runs"/*/*/site/index.html
env -u PYTHONPATH PATH="$WORK/wheel-venv/bin:$PATH" lstmnb notebooks copy "$WORK/empty/my-notebooks"
