"""The kernel client's event loop after an interrupted notebook (Ctrl-C, SIGTERM): settled, so the command's
last line is its own."""

from __future__ import annotations


def settle_kernel_client(limit_s: float = 15.0) -> None:
    """After an interruption, cancel and run out what the kernel client left pending on this thread's loop, and
    let no task the kernel's death ended print "Task exception was never retrieved" at exit (not in JupyterLab)."""
    import asyncio

    from jupyter_core.utils import ensure_event_loop
    from nbclient.exceptions import DeadKernelError

    loop = ensure_event_loop()
    if loop.is_running():
        return
    loop.set_exception_handler(lambda lp, context: None if isinstance(context.get("exception"), DeadKernelError)
                               else lp.default_exception_handler(context))
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.wait(pending, timeout=limit_s))
