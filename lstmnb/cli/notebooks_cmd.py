"""`lstmnb notebooks run|list|copy`: the notebook series through papermill with a device profile."""

from __future__ import annotations

import textwrap
from dataclasses import replace

from ..errors import NotebookError
from ..paths import check_cache
from ..rules import CLI

FOLDER_HELP = "notebook folder (default: the series lstmnb carries: a checkout's notebooks/, else the installed copy)"


def add_notebooks(sub, full: bool) -> None:
    p = sub.add_parser(
        "notebooks", help="run the notebook series with a device profile (papermill), list notebooks and profiles, or copy them to edit",
        description="Run the numbered notebooks through papermill with a device profile's parameters, write the "
                    "executed notebooks and their HTML to runs/<profile>/<timestamp>/, and print a summary.")
    nsub = p.add_subparsers(dest="notebooks_command", metavar="ACTION", required=True)
    run = nsub.add_parser(
        "run", help="execute the series (or some notebooks) with a profile",
        description="Execute the notebooks with a profile's parameters; -p overrides win. A failing notebook "
                    "stops the series; the notebooks executed so far are kept.",
        epilog="examples:\n"
               "  lstmnb notebooks run --profile cpu\n"
               "  lstmnb notebooks run --profile ci --only 01,03\n"
               "  lstmnb notebooks run --profile cpu -p epochs_list '[5]' -p input_paths '[dataloader]'\n"
               "  lstmnb notebooks run --profile cpu --only 06 -p results_paths '[results, ~/carc-results]'\n"
               "  lstmnb notebooks run --profile carc-v100 --kernel lstmnb")
    run.add_argument("--profile", required=True, help="profile name (see `lstmnb notebooks list`) or a .yaml path")
    run.add_argument("-p", "--parameter", dest="parameters", nargs=2, action="append", default=[],
                     metavar=("KEY", "VALUE"), help="override a notebook parameter; VALUE is read as YAML "
                                                    "(5, [5, 10], cuda, null); repeatable")
    run.add_argument("--only", default=None, help="comma-separated notebooks by number or name, e.g. 01,03")
    run.add_argument("--kernel", default=None, help="Jupyter kernel name (default: the profile's)")
    run.add_argument("--timeout", type=int, default=None, help="seconds allowed per cell (default: the profile's)")
    run.add_argument("--runs-dir", default="runs", help="where run folders go (default: ./runs)")
    run.add_argument("--notebooks", default=None, help=FOLDER_HELP)
    run.add_argument("--no-html", dest="html", action="store_false",
                     help="do not build the rendered report (the run folder's site)")
    run.add_argument("--no-progress", dest="progress", action="store_false", help="no per-cell progress bar")
    run.set_defaults(func=_run_notebooks, check=_check_notebooks_run)
    lst = nsub.add_parser("list", help="show the notebooks (with their parameters) and the profiles")
    lst.add_argument("--notebooks", default=None, help=FOLDER_HELP)
    lst.set_defaults(func=_list_notebooks, check=lambda args: _notebooks_folder(args.notebooks))
    cp = nsub.add_parser("copy", help="copy the notebook series into a folder, to open and edit there",
                         description="Copy the numbered notebooks this installation carries into DIR; then open "
                                     "them in JupyterLab, or run your copies with `lstmnb notebooks run --notebooks DIR`.")
    cp.add_argument("dir", metavar="DIR", help="folder to copy into (created if needed)")
    cp.add_argument("--overwrite", action="store_true", help="replace notebooks already in DIR (default: refuse)")
    cp.set_defaults(func=_copy_notebooks, check=_check_copy)


def _series_options(args) -> dict:
    """The options `notebooks run` passes to check_series and run_series alike (its -p overrides parsed)."""
    from ..notebooks.params import parse_override

    return dict(overrides={key: parse_override(key, value) for key, value in args.parameters}, only=args.only,
                runs_dir=args.runs_dir, notebooks=args.notebooks, kernel=args.kernel, cell_timeout_s=args.timeout,
                say=replace(CLI, names={"cell_timeout_s": "timeout"}))


def _notebooks_folder(folder) -> None:
    if folder is not None:
        from ..notebooks import notebooks_dir

        notebooks_dir(folder)


def _check_notebooks_run(args) -> None:
    from ..notebooks import check_series

    check_series(args.profile, **_series_options(args))
    check_cache()


def print_series(result, width: int = 100) -> None:
    """The series' outcome at ``width`` columns: a row per notebook, skipped or failed ones' reasons wrapped beneath,
    the run folder and the site or why none."""
    import pandas as pd

    from ..report import format_table

    table = pd.DataFrame([{"notebook": r.name, "status": r.label,
                           "seconds": round(r.seconds, 1) if r.seconds is not None else None}
                          for r in result.runs]).set_index("notebook")
    print("\n" + format_table(table, floatfmt="{:,.1f}"))
    for r in result.runs:
        if why := (r.reason if r.status == "skipped" else r.error if r.status == "failed" else None):
            print(textwrap.fill(f"{r.name} {r.label}: {why}", width, subsequent_indent="    "))
    print(f"\nrun folder  {result.run_dir}")
    print(f"records     {result.results}")
    if result.site:
        print(f"report      {result.site}  (06 first, every notebook a page, search)")
    elif result.site_note:
        print(f"report      {result.site_note}")


def _run_notebooks(args) -> int:
    from ..notebooks import run_series

    try:
        result = run_series(args.profile, **_series_options(args), html=args.html, progress=args.progress)
    except (NotebookError, KeyboardInterrupt) as exc:
        if getattr(exc, "series", None) is not None:
            print_series(exc.series)
        raise
    print_series(result)
    return 0


def _list_notebooks(args) -> int:
    from ..notebooks import listing

    nbs, profiles = listing(args.notebooks)
    print("notebooks:")
    for name, heading, params in nbs:
        print(f"  {name:<22} {heading}")
        print(f"  {'':<22} parameters: {params}")
    print("\nprofiles (lstmnb notebooks run --profile NAME):")
    for name, label, device, kernel in profiles:
        print(f"  {name:<10} {label:<14} device {device:<5} kernel {kernel}")
    return 0


def _check_copy(args) -> None:
    from ..notebooks.folder import check_copy

    check_copy(args.dir, overwrite=args.overwrite)


def _copy_notebooks(args) -> int:
    from ..notebooks.folder import copy_series

    copies = copy_series(args.dir, overwrite=args.overwrite)
    print(f"copied {len(copies)} notebooks into {copies[0].parent}:")
    for path in copies:
        print(f"  {path.name}")
    print(f"run them with: lstmnb notebooks run --profile quick --notebooks {copies[0].parent}")
    return 0
