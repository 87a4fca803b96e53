"""Device profiles: the YAML files in ``lstmnb/profiles/`` (runner settings + notebook parameters). A leaf module,
so the notebook runner and the speed benchmark read the same files the same way."""

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
    """A shipped profile by name, or a profile YAML file by path (for site-specific profiles); every
    key and runner setting checked (NotebookError naming the file, the key and what is allowed)."""
    import yaml

    if not isinstance(name, str) or not name.strip():
        raise NotebookError(f"profile name {name!r} is empty; choose from {', '.join(profile_names())} "
                            "(or give a .yaml file path)")
    path = Path(name).expanduser()
    if name.endswith((".yaml", ".yml")):
        if not path.is_file():
            raise NotebookError(f"profile file {name} not found; give an existing .yaml file or one of "
                                f"{', '.join(profile_names())}")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise NotebookError(f"profile file {name} cannot be read ({type(exc).__name__})") from None
        pname = path.stem
    else:
        names = profile_names()
        if name not in names:
            raise NotebookError(f"unknown profile {name!r}; choose from {', '.join(names)} (or give a .yaml file path)")
        text, pname = resources.files("lstmnb").joinpath("profiles", f"{name}.yaml").read_text(encoding="utf-8"), name
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise NotebookError(f"profile {name} is not valid YAML ({problem}{where})") from None
    if data is None or data == {}:  # an empty file, or comments only: running the defaults would be a silent guess
        raise NotebookError(f"profile {name} is empty (no settings); give at least its label and parameters, or one "
                            f"of {', '.join(profile_names())}")
    if not isinstance(data, dict):
        raise NotebookError(f"profile {name} must be a YAML mapping of {', '.join(RUNNER_KEYS)}; "
                            f"it is a {type(data).__name__}")
    if unknown := sorted(map(str, set(data) - set(RUNNER_KEYS))):
        raise NotebookError(f"profile {pname!r} has unknown key(s) {unknown}; allowed: {', '.join(RUNNER_KEYS)}")
    params = data.get("parameters") or {}
    if not isinstance(params, dict):
        raise NotebookError(f"profile {pname!r}: 'parameters' must be a mapping of notebook parameters")
    timeout = data.get("cell_timeout_s", 3600)
    if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 1:
        raise NotebookError(f"profile {pname!r}: cell_timeout_s={timeout!r} must be a whole number of seconds >= 1")
    for key in ("label", "description", "kernel"):
        if key in data and not isinstance(data[key], str):
            raise NotebookError(f"profile {pname!r}: {key}={data[key]!r} must be text")
    if "kernel" in data and not data["kernel"].strip():
        raise NotebookError(f"profile {pname!r}: kernel is empty; give a Jupyter kernel name (e.g. python3)")
    return Profile(name=pname, label=str(data.get("label") or pname), description=str(data.get("description") or ""),
                   kernel=str(data.get("kernel") or "python3"), cell_timeout_s=timeout, parameters=dict(params))
