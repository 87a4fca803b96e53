"""The notebook series: ``runner`` executes the numbered notebooks through papermill with a device profile, ``series``
says what happened to each, ``site`` renders the run folder as the report (06 its front page); ``steps`` holds what
the notebooks call, tested here so the notebooks stay thin. See docs/architecture.md."""

from .params import parse_value
from .runner import (check_series, find_notebooks, listing, notebook_parameters, notebooks_dir, plan_parameters,
                     run_series, select_notebooks)

__all__ = ["check_series", "find_notebooks", "listing", "notebook_parameters", "notebooks_dir", "parse_value",
           "plan_parameters", "run_series", "select_notebooks"]
