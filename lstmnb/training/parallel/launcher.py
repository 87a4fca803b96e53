"""Starting DDP ranks as local processes (outside torchrun): one per GPU, or gloo ranks on CPU. Rank 0's
result comes back to the caller; a failing rank stops the others, and the clearest error is raised."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import torch
from tqdm import tqdm

from ... import errors
from ...errors import ConfigError, LstmnbError
from ...machine.processes import START_METHOD, preload
from ...models import Forecaster
from ...paths import atomic_path
from ...rules import PYTHON, Spelling
from ..checkpoints import sweep_checkpoint_temps
from ..evaluate import RunResult
from .ddp import RankOptions, train_rank
from .groups import (DistEnv, DistributedError, check_world_size, close_distributed, ddp_device_kind, free_port,
                     init_distributed, local_rendezvous_environment)


@dataclass
class _Job:
    """What each spawned rank runs: ``fn(env, **kwargs)``; rank 0's return value goes back to the caller."""

    fn: Callable[..., Any]
    kwargs: dict[str, Any]
    world_size: int
    port: int
    device: str
    timeout_s: float
    threads: int | None
    workdir: str
    environ: dict[str, str]  # the caller's environment now (a forkserver's children start with the server's)
    queue: Any = None
    backend: str | None = None  # None: NCCL on GPUs, gloo on CPU; 'gloo' on CUDA: ranks may share a GPU


def _rank_main(local_rank: int, job: _Job) -> None:
    """Entry of one spawned rank: join the group, run the job, hand back rank 0's result or the error."""
    os.environ.clear()
    os.environ.update(job.environ)
    os.environ.update(RANK=str(local_rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(job.world_size),
                      LOCAL_WORLD_SIZE=str(job.world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(job.port))
    for name, value in local_rendezvous_environment().items():  # loopback; Windows: no libuv TCPStore
        os.environ.setdefault(name, value)
    warnings.showwarning = errors.one_line_warnings(f"lstmnb rank {local_rank}")  # as the command says its own
    # tqdm's default lock is a named semaphore, which a rank the launcher kills (deadline, Ctrl-C, SIGTERM) leaves
    # to the resource tracker's warning at exit; a rank shares no bar with another process, so a thread lock serves
    tqdm.set_lock(threading.RLock())
    try:
        env = init_distributed(job.device, job.timeout_s, job.threads, job.backend)
        result = job.fn(env, **job.kwargs, **({"queue": job.queue} if job.queue is not None else {}))
        if env.is_writer:
            with atomic_path(Path(job.workdir) / "result.pt") as tmp:
                torch.save(result, tmp)
        close_distributed(env)
        Path(job.workdir, f"done-rank{local_rank}").touch()  # past here only the interpreter's own exit is left
    except BaseException as exc:  # noqa: BLE001 - report every failure to the launcher, then exit non-zero
        Path(job.workdir, f"error-rank{local_rank}.json").write_text(json.dumps({
            "rank": local_rank, "type": type(exc).__name__, "message": str(exc).strip().splitlines()[0][:500]
            if str(exc).strip() else type(exc).__name__, "ours": isinstance(exc, LstmnbError)}))
        if isinstance(exc, LstmnbError):
            os._exit(2)  # our errors are one clear line, reported by the launcher; no traceback here
        raise


def _launch_error(workdir: Path, exc: BaseException, world: int, exitcodes: dict[int, int | None],
                  backend: str = "gloo", limit: str = "the collective timeout") -> LstmnbError:
    """The clearest single error for a failed job, in order: a rank's own error (bad input, a bug), a rank that died
    without a word (killed, crashed; under NCCL a SIGABRT is NCCL's watchdog ending a rank whose collective timed
    out or whose peer failed, before Python could report it), a rank's report that it lost the others."""
    reports = []
    for f in sorted(workdir.glob("error-rank*.json")):
        with contextlib.suppress(OSError, ValueError):  # a report half-written by a killed rank
            reports.append(json.loads(f.read_text()))
    if own := [r for r in reports if r["type"] != "DistributedError"]:
        r = own[0]
        cls = getattr(errors, r["type"], None) if r["ours"] else None
        if not (isinstance(cls, type) and issubclass(cls, LstmnbError)):
            cls = DistributedError
        msg = r["message"] if r["ours"] else f"{r['type']}: {r['message']}"
        return cls(f"rank {r['rank']} of {world}: {msg}")
    reported = {r["rank"] for r in reports}
    # how the launcher stops the bystanders (Windows has no SIGKILL)
    stopped = tuple(-getattr(signal, n) for n in ("SIGTERM", "SIGKILL") if hasattr(signal, n))
    silent = [(i, c) for i, c in sorted(exitcodes.items()) if i not in reported and c not in (0, None) + stopped]
    if not silent and isinstance(exc, torch.multiprocessing.ProcessExitedException) \
            and exc.error_index not in reported:
        silent = [(exc.error_index, exc.exit_code)]
    if silent:
        i, code = silent[0]
        how = (f"was killed by {signal.Signals(-code).name}" if code is not None and code < 0
               else f"exited with status {code}")
        if backend == "nccl" and code == -signal.SIGABRT:
            return DistributedError(f"rank {i} of {world} lost contact with the other ranks: NCCL's watchdog aborted "
                                    f"it (SIGABRT) when a collective waited longer than {limit} or a peer failed; "
                                    f"the other ranks were stopped and no record was written")
        return DistributedError(f"rank {i} of {world} {how} before finishing; the other ranks were stopped and "
                                f"no record was written")
    if reports:
        return DistributedError(reports[0]["message"])
    return DistributedError(f"a rank of {world} failed: {str(exc).strip().splitlines()[-1][:300]}")


def _died_after_its_work(workdir: Path, exc: BaseException, world: int) -> bool:
    """Whether a rank died only as its interpreter exited, its work done: rank 0's result is written and the dead
    rank had closed its group (past the last barrier). gloo can abort a process at exit (SIGABRT, 'terminate called
    without an active exception'); that loses nothing, so it is a warning, not a failed job."""
    i = getattr(exc, "error_index", None)
    if i is None or not (workdir / "result.pt").exists() or not (workdir / f"done-rank{i}").exists():
        return False
    code = getattr(exc, "exit_code", None)
    how = f"by {signal.Signals(-code).name}" if isinstance(code, int) and code < 0 else f"with status {code}"
    warnings.warn(f"rank {i} of {world} ended {how} while exiting, after its work was done and its result "
                  f"handed back; nothing was lost", RuntimeWarning, stacklevel=3)
    return True


def spawn(fn: Callable[..., Any], world_size: int, *, device: str = "auto", kwargs: dict[str, Any] | None = None,
          timeout_s: float = 300.0, threads: int | None = None, deadline_s: float | None = None,
          on_message: Callable[[Any], None] | None = None, backend: str | None = None,
          say: Spelling = PYTHON) -> Any:
    """Run ``fn(env, **kwargs)`` in ``world_size`` local processes (one per GPU, or gloo ranks on CPU); returns rank
    0's return value. If any rank fails, the others are stopped and the clearest error is raised here. ``deadline_s``
    bounds the whole job. With ``on_message``, ``fn`` gets a ``queue`` whose items are passed to it as they arrive.
    ``say``: how a refusal of too many ranks and a lost rank's error name ``world_size`` and ``timeout_s`` (its
    ``names`` map them to the caller's settings)."""
    import torch.multiprocessing as mp

    kind = ddp_device_kind(device)
    if backend not in (None, "nccl", "gloo"):
        raise ConfigError(f"backend={backend!r} is not one of None (NCCL on GPUs, gloo on CPU), nccl, gloo")
    if not (kind == "cuda" and backend == "gloo"):  # gloo ranks may share a GPU (a correctness check)
        check_world_size(kind, world_size, say.key("world_size"))
    workdir = Path(tempfile.mkdtemp(prefix="lstmnb-ranks-"))
    queue = mp.get_context("spawn").SimpleQueue() if on_message is not None else None
    job = _Job(fn, kwargs or {}, world_size, free_port(), device, timeout_s, threads, str(workdir), dict(os.environ),
               queue, backend)

    def drain() -> None:
        while queue is not None and not queue.empty():
            on_message(queue.get())

    preload(__name__)  # on Linux, ranks forked from one server (machine.processes)
    start = time.monotonic()
    try:
        pc = mp.start_processes(_rank_main, args=(job,), nprocs=world_size, join=False, start_method=START_METHOD)
        try:
            while not pc.join(timeout=0.2):
                drain()
                if deadline_s is not None and time.monotonic() - start > deadline_s:
                    _stop(pc.processes)
                    raise DistributedError(f"the {world_size} ranks did not finish within {deadline_s:g} s; "
                                           f"they were stopped and no record was written")
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM to this process alone (the CLI's Terminated)
            _stop(pc.processes)
            raise
        except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:
            if not _died_after_its_work(workdir, exc, world_size):
                codes = {i: p.exitcode for i, p in enumerate(pc.processes)}
                backend_used = backend or ("nccl" if kind == "cuda" else "gloo")
                raise _launch_error(workdir, exc, world_size, codes, backend_used, say("timeout_s", timeout_s)) from None
        drain()
        result_file = workdir / "result.pt"
        if not result_file.exists():
            raise DistributedError(f"rank 0 of {world_size} finished without a result")
        return torch.load(result_file, map_location="cpu", weights_only=False)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _stop(processes) -> None:
    """Kill the ranks still running and reap them: what they left is then a dead process's to sweep, and none
    outlives the launcher (a rank left running would write into a folder removed under it)."""
    for p in processes:
        if p.is_alive():
            p.kill()
    for p in processes:
        p.join(10)


def _train_job(env: DistEnv, windows, cfg, data_info, options: RankOptions, state, say, queue=None) -> dict[str, Any]:
    """One spawned rank of ``launch_train``: train, and relay rank 0's epoch entries to the launcher."""
    relay = (lambda entry: queue.put(entry)) if (queue is not None and env.is_writer) else None
    result = train_rank(windows, cfg, env, data_info=data_info, on_epoch_end=relay, options=options, state=state,
                        say=say)
    if not env.is_writer:
        return {}
    return {"record": result.record, "state": {k: v.cpu() for k, v in result.model.state_dict().items()},
            "history": result.history}


def launch_train(windows, cfg, world_size: int | None = None, *, data_info: dict[str, Any] | None = None,
                 on_epoch_end: Callable[[dict[str, Any]], None] | None = None,
                 options: RankOptions | None = None, deadline_s: float | None = None, backend: str | None = None,
                 state: dict[str, Any] | None = None, say: Spelling = PYTHON):
    """A DDP run of ``world_size`` (default ``cfg.nproc``) local processes; returns rank 0's ``RunResult``, its model
    on the CPU. ``backend='gloo'`` on CUDA lets ranks share GPUs (``init_distributed``). ``state``: the checkpoint
    as ``pipeline.train`` read it (the ranks do not read it again). ``on_epoch_end`` runs in this process with rank
    0's epoch entries as they finish, so a notebook can plot live. ``say``: how refusals name settings."""
    world = world_size or cfg.nproc or 1
    cfg = replace(cfg, strategy="ddp", nproc=world)
    cfg.validate()
    try:
        out = spawn(_train_job, world, device=cfg.device, timeout_s=cfg.dist_timeout_s, threads=cfg.threads,
                    kwargs={"windows": windows, "cfg": cfg, "data_info": data_info, "options": options or RankOptions(),
                            "state": state, "say": say},
                    on_message=on_epoch_end, deadline_s=deadline_s, backend=backend,
                    say=replace(say, names={**say.names, "timeout_s": "dist_timeout_s",
                                            **({"world_size": "nproc"} if world_size is None else {})}))
    except BaseException:
        if cfg.checkpoint:  # rank 0 may have been stopped mid-write: its temporaries go, the last checkpoint stays
            sweep_checkpoint_temps(cfg.checkpoint)
        raise
    model = Forecaster(cfg.model_config(windows.n_features))
    model.load_state_dict(out["state"])
    return RunResult(record=out["record"], model=model, windows=windows, device=torch.device("cpu"),
                     history=out["history"])
