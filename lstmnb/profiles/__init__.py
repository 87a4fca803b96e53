"""Device profiles: the YAML files in ``lstmnb/profiles/`` (runner settings + notebook parameters).

A leaf module, so the notebook runner and the speed benchmark read the same files the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import NotebookError

RUNNER_KEYS = ("label", "description", "kernel", "cell_timeout_s", "parameters")


@dataclass
class Profile:
    """A device profile: runner settings plus the parameters given to the notebooks."""

    name: str
    label: str
    description: str = ""
    kernel: str = "python3"
    cell_timeout_s: int = 3600
    parameters: dict[str, Any] = field(default_factory=dict)


def profile_names() -> list[str]:
    """Names of the profiles shipped with the package (``lstmnb/profiles/*.yaml``)."""
    folder = resources.files("lstmnb").joinpath("profiles")
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_profile(name: str) -> Profile:
    """A shipped profile by name, or a profile YAML file by path (for site-specific profiles)."""
    import yaml

    path = Path(name)
    if name.endswith((".yaml", ".yml")) and path.is_file():
        text, pname = path.read_text(encoding="utf-8"), path.stem
    else:
        names = profile_names()
        if name not in names:
            raise NotebookError(f"unknown profile {name!r}; choose from {', '.join(names)} (or give a .yaml file path)")
        text, pname = resources.files("lstmnb").joinpath("profiles", f"{name}.yaml").read_text(encoding="utf-8"), name
    data = yaml.safe_load(text) or {}
    unknown = sorted(set(data) - set(RUNNER_KEYS))
    if unknown:
        raise NotebookError(f"profile {pname!r} has unknown key(s) {unknown}; allowed: {', '.join(RUNNER_KEYS)}")
    params = data.get("parameters") or {}
    if not isinstance(params, dict):
        raise NotebookError(f"profile {pname!r}: 'parameters' must be a mapping of notebook parameters")
    return Profile(name=pname, label=str(data.get("label") or pname), description=str(data.get("description") or ""),
                   kernel=str(data.get("kernel") or "python3"), cell_timeout_s=int(data.get("cell_timeout_s") or 3600),
                   parameters=dict(params))
