"""The papermill runner: a device profile + the numbered notebooks -> executed notebooks in
``runs/<profile>/<timestamp>/`` and their site; everything is checked before a kernel starts (``check_series``),
and the first failing notebook stops the series, named with its cell, keeping what ran before."""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import nbformat

from ..machine.device import device_problem
from ..doctor import kernel_problem
from ..errors import DeviceError, NotebookError
from ..paths import check_writable, results_dir
from ..profiles import Profile, load_profile, profile_names
from ..rules import PYTHON, Spelling
from .params import check_dates_per_notebook, check_values, default_value
from .folder import PATTERN, shipped_folder
from .kernel_loop import settle_kernel_client, stop_kernels
from .series import NotebookRun, SeriesResult, records_outcome, run_ids
from .site import build_site, site_missing

NOTEBOOKS_ENV = "LSTMNB_NOTEBOOKS"
# parameters the runner fills in itself (a notebook may declare them; a profile or -p may still set them)
INJECTED = ("profile", "label", "output_dir", "results", "results_paths")


def notebooks_dir(folder: str | os.PathLike | None = None) -> Path:
    """The notebook folder: ``folder``, else $LSTMNB_NOTEBOOKS, else the series this installation carries
    (a checkout's ``notebooks/``, or the copy inside the installed package)."""
    if folder is not None:  # a folder asked for is that folder or an error, never the shipped one
        if not str(folder).strip() or not Path(folder).expanduser().is_dir():
            raise NotebookError(f"notebook folder {str(folder)!r} does not exist (or is not a folder)")
        return Path(folder).expanduser()
    if env := os.environ.get(NOTEBOOKS_ENV):
        if not Path(env).expanduser().is_dir():
            raise NotebookError(f"{NOTEBOOKS_ENV}={env!r} is not a folder; point it at a notebook folder, or unset it")
        return Path(env).expanduser()
    shipped = shipped_folder()
    if shipped is None:
        raise NotebookError("this installation carries no notebooks; reinstall lstmnb, or pass --notebooks DIR "
                            f"(or set {NOTEBOOKS_ENV})")
    return shipped


def find_notebooks(folder: str | os.PathLike | None = None) -> list[Path]:
    """The numbered notebooks (``NN_name.ipynb``) in order."""
    root = notebooks_dir(folder)
    found = sorted(root.glob(PATTERN))  # a name starting with a dot (a running copy) never matches
    if not found:
        raise NotebookError(f"no numbered notebooks (NN_name.ipynb) in {root}")
    return found


def select_notebooks(available: Sequence[Path], only: Iterable[str] | str | None = None) -> list[Path]:
    """The notebooks named in ``only`` ('01', '01_data_access' or '01_data_access.ipynb'), in series order."""
    if only is None:
        return list(available)
    tokens = [t.strip() for t in (only.split(",") if isinstance(only, str) else only) if t and t.strip()]
    chosen: set[Path] = set()
    for token in tokens:
        stem = token.removesuffix(".ipynb")
        hits = [p for p in available if p.stem == stem or p.stem.split("_", 1)[0] == stem]
        if not hits:
            names = ", ".join(p.stem for p in available)
            raise NotebookError(f"unknown notebook {token!r}; choose from {names} (by number, e.g. 01,03, or by name)")
        chosen.update(hits)
    if not chosen:
        raise NotebookError("--only names no notebook; give numbers such as 01,03")
    return [p for p in available if p in chosen]


def notebook_parameters(path: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """The parameters a notebook declares in its ``parameters`` cell (papermill's inspection)."""
    import papermill

    return dict(papermill.inspect_notebook(str(path)))


def plan_parameters(notebooks: Sequence[Path], base: Mapping[str, Any], overrides: Mapping[str, Any],
                    declared: Mapping[Path, Mapping[str, Any]] | None = None) -> dict[Path, dict[str, Any]]:
    """Per notebook, the parameters it declares from ``base`` (profile + runner), ``overrides`` winning. An override
    that no selected notebook declares is an error naming what they declare (not papermill's warning afterwards)."""
    declared = declared or {nb: notebook_parameters(nb) for nb in notebooks}
    known = set().union(*(declared[nb] for nb in notebooks))
    unknown = sorted(k for k in overrides if k not in known)
    if unknown:
        raise NotebookError(f"parameter(s) {', '.join(map(repr, unknown))} not declared by "
                            f"{', '.join(nb.stem for nb in notebooks)}; their parameters: {', '.join(sorted(known))}")
    merged = {**base, **overrides}
    return {nb: {k: v for k, v in merged.items() if k in declared[nb]} for nb in notebooks}


def new_run_dir(runs_dir: str | os.PathLike, profile: str) -> Path:
    """A fresh ``<runs_dir>/<profile>/<timestamp>`` folder (a suffix keeps two runs in one second apart)."""
    base = Path(runs_dir) / profile
    base.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    for i in range(1000):
        path = base / (stamp if i == 0 else f"{stamp}-{i}")
        with contextlib.suppress(FileExistsError):
            path.mkdir()
            return path.resolve()
    raise NotebookError(f"cannot create a new run folder under {base}")


def _failing_cell(notebook: Path) -> tuple[int | None, int | None, str]:
    """(index, execution count, first source line) of the cell that stopped the notebook: the one papermill marked
    failed or left running, else (a timeout or a dead kernel, which papermill marks completed) the last that started."""
    try:
        nb = nbformat.read(notebook, as_version=4)
    except Exception:  # the partial file may be unreadable after a crash
        return None, None, ""
    meta = [c.get("metadata", {}).get("papermill", {}) for c in nb.cells]
    hits = ([i for i, m in enumerate(meta) if m.get("status") in ("failed", "running")]
            or [i for i, m in enumerate(meta) if m.get("start_time")][-1:])
    if not hits:
        return None, None, ""
    cell = nb.cells[hits[0]]
    return hits[0], cell.get("execution_count"), (cell.source.strip().splitlines() or [""])[0][:80]


def _describe_failure(exc: BaseException, notebook: Path) -> str:
    from papermill.exceptions import PapermillExecutionError

    if isinstance(exc, PapermillExecutionError):
        index, count, first = exc.cell_index, exc.exec_count, (exc.source.strip().splitlines() or [""])[0][:80]
        what = f"{exc.ename}: {(str(exc.evalue).strip().splitlines() or [''])[0][:300]}".rstrip(": ")
    else:
        index, count, first = _failing_cell(notebook)
        what = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}".rstrip(":. ")
    if index is None:
        return f"an unknown cell: {what}"
    detail = ", ".join(filter(None, (f"In [{count}]" if count else "", repr(first) if first else "")))
    return f"cell {index}" + (f" ({detail})" if detail else "") + f": {what}"


def check_series(profile: str | Profile, *, overrides: Mapping[str, Any] | None = None,
                 only: Iterable[str] | str | None = None, runs_dir: str | os.PathLike = "runs",
                 notebooks: str | os.PathLike | None = None, kernel: str | None = None,
                 cell_timeout_s: int | None = None, other_device: str = "pass -p device auto", say: Spelling = PYTHON):
    """Everything ``run_series`` checks before it creates anything (profile, notebooks, every override's name and
    parameter's value, cell timeout, kernel, run folder); ``other_device``: how the caller's user runs elsewhere than
    the profile's absent device; ``say``: how a refused timeout or kernel is named (``--timeout 0``,
    ``cell_timeout_s=0``). Returns (profile, notebooks, declared parameters, kernel name, timeout)."""
    prof = profile if isinstance(profile, Profile) else load_profile(profile)
    overrides = dict(overrides or {})
    selected = select_notebooks(find_notebooks(notebooks), only)
    declared = {nb: notebook_parameters(nb) for nb in selected}
    timeout = prof.cell_timeout_s if cell_timeout_s is None else cell_timeout_s
    if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 1:
        raise say.refuse("cell_timeout_s", timeout, "must be a whole number of seconds >= 1 (a cell's limit)")
    kernel_name = prof.kernel if kernel is None else kernel
    if not isinstance(kernel_name, str) or not kernel_name.strip():
        raise say.refuse("kernel", kernel_name, "is empty; give a Jupyter kernel name (see `lstmnb doctor`)")
    plan_parameters(selected, {}, overrides, declared)  # names first: a typo is named as such
    every = declared if only is None else {nb: notebook_parameters(nb) for nb in find_notebooks(notebooks)}
    known = set(INJECTED).union(*every.values())
    if stray := sorted(set(prof.parameters) - known):
        raise NotebookError(f"profile {prof.name!r}: parameter(s) {', '.join(map(repr, stray))} are declared by no "
                            f"notebook; check the spelling (notebook parameters: {', '.join(sorted(known))})")
    own = {nb.stem: {k: default_value(v) for k, v in declared[nb].items()} for nb in selected}
    given = {**prof.parameters, **overrides}
    check_values(given, {k: v for d in own.values() for k, v in d.items()})
    check_dates_per_notebook(own, given)
    if any("device" in declared[nb] for nb in selected):  # 06 alone reads records: any machine will do
        check_profile_device(prof.name, given.get("device"), other_device)
    if problem := kernel_problem(kernel_name):  # not installed: names the ones that are, as `lstmnb doctor` does
        raise NotebookError(problem)
    check_writable(runs_dir, "folder", "--runs-dir")
    results = overrides.get("results", prof.parameters.get("results"))
    if results not in (None, "") and "{run_dir}" not in str(results):
        check_writable(Path(str(results)).expanduser(), "folder", "results folder (parameter results)")
    return prof, selected, declared, kernel_name, timeout


def check_profile_device(profile: str, device, other_device: str) -> None:
    """A profile whose device this machine lacks (a GPU profile on a laptop) is refused in one line before any kernel
    starts where a selected notebook trains on it (declares ``device``), not in 02's first training cell."""
    if not isinstance(device, str):
        return  # no device parameter: the notebooks' own default (auto)
    problem = device_problem(device, hint=f"run profile {profile!r} where that device is, or {other_device}")
    if problem is not None:
        raise DeviceError(f"profile {profile!r}: {problem}")


# figures in the notebooks' outputs whatever MPLBACKEND says (a kernel inheriting SLURM's or a headless server's Agg
# draws them nowhere): IPython's --matplotlib option selects the inline backend at kernel start, over the variable
KERNEL_ARGUMENTS = ["--matplotlib=inline"]


def kernel_config():
    """The notebook client's configuration: the kernel's sockets encrypted where possible, since ipykernel 7 logs
    "Kernel is running over TCP without encryption" into every run's output when they have no CurveZMQ keys.
    jupyter_client 8.10+ provisions the keys (``KernelManager.transport_encryption = "auto"``) when pyzmq has Curve and
    the kernelspec declares ``supported_encryption: curve``; otherwise the default, unencrypted loopback TCP, stays."""
    import zmq
    from jupyter_client.manager import KernelManager
    from traitlets.config import Config

    config = Config()
    if "transport_encryption" in KernelManager.class_traits() and zmq.has("curve"):
        config.KernelManager.transport_encryption = "auto"
    return config


def run_series(profile: str | Profile, *, overrides: Mapping[str, Any] | None = None,
               only: Iterable[str] | str | None = None, runs_dir: str | os.PathLike = "runs",
               notebooks: str | os.PathLike | None = None, kernel: str | None = None, cell_timeout_s: int | None = None,
               html: bool = True, progress: bool = True, echo: Callable[[str], None] | None = print,
               say: Spelling = PYTHON) -> SeriesResult:
    """Execute the selected notebooks with ``profile``'s parameters (``overrides`` win) and build the run folder's
    site (``html``). Raises ``NotebookError`` for bad input before any kernel starts, and when a notebook fails (after
    writing its executed copy and the site; the earlier notebooks' results stay in the run folder)."""
    import papermill

    overrides = dict(overrides or {})
    prof, selected, declared, kernel_name, timeout = check_series(
        profile, overrides=overrides, only=only, runs_dir=runs_dir, notebooks=notebooks, kernel=kernel,
        cell_timeout_s=cell_timeout_s, say=say)

    run_dir = new_run_dir(runs_dir, prof.name)
    value = overrides.get("results", prof.parameters.get("results"))  # None or '': ./results; '{run_dir}' expanded
    results = (Path(str(value).format(run_dir=run_dir)).expanduser() if value not in (None, "")
               else results_dir()).resolve()
    runner = (prof.name, prof.label, str(run_dir), str(results), [str(results)])  # in the order of INJECTED
    base = {**prof.parameters, **dict(zip(INJECTED, runner, strict=True))}
    if "results_paths" in overrides:  # one path or a list; '~' expanded here, where the user typed it
        paths = overrides["results_paths"]
        paths = [paths] if isinstance(paths, str) else list(paths or [])
        overrides["results_paths"] = [str(Path(p).expanduser()) for p in paths]
    if "results" in overrides:
        overrides["results"] = str(results)
    plans = plan_parameters(selected, base, overrides, declared)

    say = echo or (lambda _msg: None)
    say(f"profile {prof.name} ({prof.label}), kernel {kernel_name}, {len(selected)} notebook(s) -> {run_dir}")
    runs = [NotebookRun(nb.stem) for nb in selected]
    result = SeriesResult(prof.name, run_dir, results, runs)
    for i, (nb, entry) in enumerate(zip(selected, runs), 1):
        out = run_dir / nb.name
        partial = run_dir / f".{nb.stem}.running.ipynb"
        say(f"[{i}/{len(selected)}] {nb.stem} ...")
        before = run_ids(results)
        t0 = time.perf_counter()
        failure: BaseException | None = None
        try:
            papermill.execute_notebook(
                str(nb), str(partial), parameters=plans[nb], kernel_name=kernel_name, progress_bar=progress,
                execution_timeout=timeout, cwd=None, log_output=False, config=kernel_config(),
                extra_arguments=KERNEL_ARGUMENTS)
        # Ctrl-C, or SIGTERM from the CLI (a SLURM time limit), keeps what ran; papermill, nbclient and the
        # kernel raise many kinds of failure: all are reported
        except (KeyboardInterrupt, Exception) as exc:
            failure = exc
        entry.seconds = time.perf_counter() - t0
        if partial.exists():  # papermill's progressively written copy onto its final name: never half a file
            os.replace(partial, out)
        entry.notebook = out if out.exists() else None
        if isinstance(failure, KeyboardInterrupt):
            entry.status = "interrupted"
            result.site_note = "no site: the series was interrupted (a job at its time limit has seconds left)"
            failure.series = result  # the summary so far, for the caller to show
            settle_kernel_client()
            stop_kernels()
            raise failure
        if failure is not None:
            entry.status = "failed"
            entry.error = _describe_failure(failure, out)
            say(f"    failed after {entry.seconds:.1f} s")
            finish(result, html, say)
            kept = [r.name for r in runs if r.notebook is not None]
            err = NotebookError(
                f"notebook {nb.stem} failed in {entry.error}; the series stopped. Executed notebook: "
                f"{out if out.exists() else '(not written)'}; kept in {run_dir}: {', '.join(kept) or 'nothing'}")
            err.series = result  # the summary so far, for the caller to show
            raise err from None
        entry.status, entry.reason = records_outcome(results, before)
        say(f"    {entry.summary} in {entry.seconds:.1f} s")
    finish(result, html, say)
    return result


def finish(result: SeriesResult, html: bool, say: Callable[[str], None]) -> None:
    """The run folder's site (``site/``, 06 its front page); a site that cannot be built (the ``site`` extra missing, a
    failed build) is said in one line and kept in ``result.site_note``, never a failed series nor other pages."""
    if not html:
        result.site_note = "no site: not asked for (--no-html)"
        return
    result.site_note = site_missing()
    if result.site_note is None:
        try:
            result.site = build_site(result)
        except Exception as exc:  # Sphinx and its extensions raise many kinds: the notebooks ran all the same
            result.site_note = f"no site: its build failed ({type(exc).__name__}: {exc})"
    if result.site_note:
        say(f"    ({result.site_note})")


def listing(notebooks: str | os.PathLike | None = None) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str, str]]]:
    """(notebooks: name, first heading, parameters; profiles: name, label, device, kernel) for ``notebooks list``."""
    nbs = []
    for path in find_notebooks(notebooks):
        nb = nbformat.read(path, as_version=4)
        heading = next((c.source.strip().splitlines()[0].lstrip("# ") for c in nb.cells
                        if c.cell_type == "markdown" and c.source.strip()), "")
        nbs.append((path.stem, heading, ", ".join(notebook_parameters(path))))
    profiles = map(load_profile, profile_names())  # a shipped profile's name is the one it was loaded by
    return nbs, [(p.name, p.label, str(p.parameters.get("device", "")), p.kernel) for p in profiles]
