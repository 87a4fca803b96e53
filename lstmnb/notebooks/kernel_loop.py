"""After an interrupted notebook (Ctrl-C, SIGTERM): the kernel client's event loop settled and the kernel
stopped, so the command's last line is its own and no kernel outlives it."""

from __future__ import annotations

import asyncio
from contextlib import suppress


def settle_kernel_client(limit_s: float = 15.0) -> None:
    """After an interruption, cancel and run out what the kernel client left pending on this thread's loop, and
    let no task the kernel's death ended print "Task exception was never retrieved" at exit (not in JupyterLab)."""
    from jupyter_core.utils import ensure_event_loop
    from nbclient.exceptions import CellControlSignal, DeadKernelError

    loop = ensure_event_loop()
    if loop.is_running():
        return
    # the cell's task may end by itself as the interruption lands (a terminal's Ctrl-C reaches the kernel too) with
    # nbclient's error for the cell or the dead kernel: the interruption is the command's outcome, not these
    abandoned = (CellControlSignal, DeadKernelError)
    loop.set_exception_handler(lambda lp, context: None if isinstance(context.get("exception"), abandoned)
                               else lp.default_exception_handler(context))
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.wait(pending, timeout=limit_s))


def stop_kernels(timeout_s: float = 5.0) -> None:
    """Stop every kernel this process started that still runs, with its children (DDP ranks, DataLoader workers), which
    nbclient's partial shutdown on cancel can leave to print, after the command's last line, that its parent is gone."""
    import psutil

    tree = []
    for k in psutil.Process().children():
        with suppress(psutil.Error):  # a process gone meanwhile
            if any("ipykernel" in part for part in k.cmdline()):
                tree += [k, *k.children(recursive=True)]
    for p in tree:
        with suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(tree, timeout=timeout_s)
    for p in alive:
        with suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=timeout_s)
