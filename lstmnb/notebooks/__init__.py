"""The notebook series: ``runner`` executes the numbered notebooks through papermill with a device
profile (``lstmnb.profiles``) and renders HTML; ``steps`` holds what the notebooks call, tested here
so the notebooks stay thin. See docs/architecture.md."""

from .runner import (INJECTED, NOTEBOOKS_ENV, NotebookRun, SeriesResult, check_kernel, check_series, find_notebooks,
                     installed_kernels, listing, notebook_parameters, notebooks_dir, parse_value, plan_parameters,
                     render_html, run_series, select_notebooks)

__all__ = [
    "INJECTED", "NOTEBOOKS_ENV", "NotebookRun", "SeriesResult", "check_kernel", "check_series", "find_notebooks",
    "installed_kernels", "listing", "notebook_parameters", "notebooks_dir", "parse_value", "plan_parameters",
    "render_html", "run_series", "select_notebooks",
]
