"""Run every benchmark in benchmarks/ at its tiny size, as CI does: each script must run and print its tables.

    python benchmarks/run_tiny.py                  # every benchmarks/*.py (not this one, not _*.py)
    python benchmarks/run_tiny.py train_speed.py   # only these
    python benchmarks/run_tiny.py --show           # print each script's output too

A benchmark supports the tiny mode when its docstring shows the command `python benchmarks/NAME.py --tiny`
(tiny sizes, one repeat: seconds, not minutes); one that does not fails here without being run, since it
would run at full size. Each runs in a fresh process, in an empty temporary folder (nothing is written into
the checkout), and passes when it exits with 0 and the last line it prints is `_tiny.DONE`, which every
benchmark prints once its tables are printed, with at least two lines above it. The figures are not
checked: at tiny sizes they mean nothing. One line per script with its seconds; the exit status is 1 when
any script failed.
"""

from __future__ import annotations

import argparse
import ast
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _tiny import DONE

HERE = Path(__file__).resolve().parent
TAIL_LINES = 25  # of a failed script's output


def benchmarks() -> list[Path]:
    """Every benchmark script: benchmarks/*.py but this runner and the helpers (_*.py)."""
    return sorted(p for p in HERE.glob("*.py") if not p.name.startswith("_") and p.name != Path(__file__).name)


def tiny_usage(path: Path) -> bool:
    """Whether the script's docstring shows its tiny mode (`python benchmarks/NAME.py --tiny`)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))) or ""
    return f"benchmarks/{path.name} --tiny" in doc


def _stop(proc: subprocess.Popen) -> None:
    """End the script and what it started (DataLoader workers, gloo ranks): its process group where there is one."""
    if os.name == "posix":
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    else:
        proc.kill()


def run_one(path: Path, timeout_s: float, cwd: str) -> tuple[str | None, float, str, str]:
    """(None when it passed, else why it failed; seconds; stdout; stderr) of one ``--tiny`` run."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(path), "--tiny"], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, encoding="utf-8", errors="replace",
                            start_new_session=os.name == "posix")
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _stop(proc)
        out, err = proc.communicate()
        return f"still running after {timeout_s:g} s: stopped", time.perf_counter() - start, out, err
    except BaseException:  # Ctrl-C: its own session does not get the signal, so end it here
        _stop(proc)
        raise
    seconds = time.perf_counter() - start
    lines = [line.rstrip() for line in out.splitlines() if line.strip()]
    if proc.returncode != 0:
        return f"exit status {proc.returncode}", seconds, out, err
    if not lines or lines[-1] != DONE:
        last = lines[-1] if lines else "nothing"
        return f"its last line is not {DONE!r} (it printed {last!r})", seconds, out, err
    if len(lines) < 3:
        return f"it printed no table ({len(lines) - 1} line(s) before {DONE!r})", seconds, out, err
    return None, seconds, out, err


def _tail(text: str, n: int = TAIL_LINES) -> str:
    lines = text.rstrip().splitlines()
    return "\n".join(("      | " + line) for line in lines[-n:])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scripts", nargs="*", help="script names in benchmarks/ (default: all)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds one script may take (default 300)")
    ap.add_argument("--show", action="store_true", help="print each script's output, not only a failed one's")
    args = ap.parse_args(argv)
    every = benchmarks()
    if args.scripts:
        names = {p.name: p for p in every}
        unknown = [s for s in args.scripts if Path(s).name not in names]
        if unknown:
            print(f"run_tiny: no benchmark {', '.join(unknown)} in {HERE}; there are {', '.join(names)}",
                  file=sys.stderr)
            return 2
        every = [names[Path(s).name] for s in args.scripts]
    print(f"{len(every)} benchmark(s) at tiny size (--tiny), one at a time; python {sys.version.split()[0]}, "
          f"{os.cpu_count()} logical CPU(s)", flush=True)
    failed, total = [], time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lstmnb-bench-tiny-") as cwd:
        for path in every:
            try:
                advertised = tiny_usage(path)
            except SyntaxError as exc:
                failed.append(path.name)
                print(f"FAIL  {path.name:<22}    -    does not parse: {exc}", flush=True)
                continue
            if not advertised:
                failed.append(path.name)
                print(f"FAIL  {path.name:<22}    -    no tiny mode: its docstring shows no "
                      f"`python benchmarks/{path.name} --tiny` (every benchmark needs one; not run, since it would "
                      f"run at full size)", flush=True)
                continue
            why, seconds, out, err = run_one(path, args.timeout, cwd)
            if why is None:
                print(f"ok    {path.name:<22} {seconds:6.1f} s", flush=True)
            else:
                failed.append(path.name)
                print(f"FAIL  {path.name:<22} {seconds:6.1f} s  {why}", flush=True)
            if why is not None or args.show:
                if out.strip():
                    print(f"    stdout{' (last lines)' if not args.show else ''}:\n"
                          f"{_tail(out, 10**6 if args.show else TAIL_LINES)}")
                if err.strip():
                    print(f"    stderr (last lines):\n{_tail(err)}", flush=True)
    elapsed = time.perf_counter() - total
    if failed:
        print(f"{len(failed)} of {len(every)} benchmark(s) failed at tiny size: {', '.join(failed)} "
              f"({elapsed:.0f} s in all)")
        return 1
    print(f"all {len(every)} benchmark(s) ran at tiny size and printed their tables ({elapsed:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
