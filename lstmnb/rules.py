"""How a setting is checked and named in a refusal: a ``Rule`` (what one value accepts, declared beside
its field, e.g. ``TrainConfig``'s knobs) and a ``Spelling`` (the setting as the user gave it: ``lr=0.0`` in
Python, ``--lr 0`` on the command line, ``parameter lr=0.0`` for a notebook parameter). A leaf: no torch."""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field, fields
from typing import Any, Callable

from .errors import ConfigError

INT_MAX = 2**31 - 1  # larger counts are nonsense here, and overflow torch's C ints


@dataclass(frozen=True)
class Rule:
    """What one value accepts. ``kind``: whole (lo..hi), number (>= lo, > lo where ``open_lo``; up to hi),
    choice (one of ``choices``), name (non-empty text) or pattern (text matching ``pattern``, any case: one of
    ``says``). ``hi`` may be a function (a limit of this machine). ``note`` ends the refusal in brackets; ``says``
    replaces its phrase."""

    kind: str
    lo: float = 0
    hi: float | Callable[[], float] = math.inf
    open_lo: bool = False
    open_hi: bool = False
    unit: str = ""
    note: str = ""
    says: str = ""
    choices: tuple[str, ...] = ()
    pattern: str = ""

    def why(self, value: Any, none: str = "") -> str | None:
        """None when ``value`` passes; else what it must be (``none``: the word for 'left out', when allowed)."""
        hi = self.hi() if callable(self.hi) else self.hi
        if self.kind == "whole":
            whole = isinstance(value, int) and not isinstance(value, bool) or type(value).__name__.startswith("int")
            if whole and self.lo <= value <= hi:
                return None
            if self.says:
                return f"must be {self.says}"
            top = f" and <= {hi}" if whole and value > hi else ""
            return f"must be a whole number >= {self.lo:g}{top}" + "".join(
                f" ({n})" for n in (self.note, none and f"or {none}") if n)
        if self.kind == "number":
            ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
                  or type(value).__name__.startswith(("float", "int")))
            if ok and math.isfinite(value) and (value > self.lo if self.open_lo else value >= self.lo) \
                    and (value < hi if self.open_hi else value <= hi):
                return None
            if self.says:
                return f"must be {self.says}"
            kind = ("a positive number" if self.lo == 0 else f"a number > {self.lo:g}") if self.open_lo \
                else f"a number >= {self.lo:g}"
            top = "" if not math.isfinite(hi) else f" up to {hi:.0f}" if hi == int(hi) else f" up to {hi:g}"
            return f"must be {kind}{self.unit}{top}" + (f" ({self.note})" if self.note else "")
        if self.kind == "choice":
            return None if value in self.choices else f"is not one of {', '.join(self.choices)}"
        if self.kind == "name":
            return None if isinstance(value, str) and value.strip() else "is empty; give a name" + (
                f" (or {self.note})" if self.note else "")
        if self.kind == "pattern":
            return None if isinstance(value, str) and re.fullmatch(self.pattern, value.strip().lower()) \
                else f"is not one of {self.says}"
        return None

    def schema(self, nullable: bool) -> dict[str, Any]:
        """This rule as the record schema types it (JSON Schema): a whole number keeps its lowest value."""
        kind = {"whole": "integer", "number": "number"}.get(self.kind, "string")
        out: dict[str, Any] = {"type": [kind, "null"] if nullable else kind}
        if self.kind == "whole":
            out["minimum"] = int(self.lo)
        return out


def whole(lo: int = 1, hi: int | Callable[[], int] = INT_MAX, note: str = "", says: str = "") -> Rule:
    return Rule("whole", lo, hi, note=note, says=says)


def number(lo: float = 0, *, positive: bool = False, **kw: Any) -> Rule:
    return Rule("number", lo, open_lo=positive, **kw)


def choice(choices: tuple[str, ...]) -> Rule:
    return Rule("choice", choices=tuple(choices))


def known(names: Any, choices: tuple[str, ...], typed: str, hint: str = "") -> list[str]:
    """A list option's names (``--variants``, ``--versions``, ...): each once, in the order given, each one of
    ``choices``; else one line naming the option as typed (``typed``), the unknown names and the choices."""
    names = list(dict.fromkeys(names))
    bad = [n for n in names if n not in choices]
    if bad or not names:
        raise ConfigError(f"{typed}: {', '.join(map(repr, bad)) or 'none given'} not known; choose from "
                          f"{','.join(choices)}{hint}")
    return names


def schema_of(config: type) -> dict[str, Any]:
    """Each field of the dataclass ``config`` as JSON Schema types it: by its Rule (``metadata["rule"]``), else by
    its annotation (bool, int, float, str, tuple[X, ...]); null allowed where the annotation allows None."""
    kinds = {"bool": "boolean", "int": "integer", "float": "number", "str": "string"}
    out: dict[str, Any] = {}
    for f in fields(config):
        nullable, rule, base = "None" in str(f.type), f.metadata.get("rule"), str(f.type).split(" |")[0]
        if base.startswith("tuple["):
            item = kinds[base[6:].split(",")[0].rstrip("]")]
            out[f.name] = {"type": ["array", "null"] if nullable else "array", "items": {"type": item}}
        elif rule is not None:
            out[f.name] = rule.schema(nullable)
        else:
            out[f.name] = {"type": [kinds[base], "null"] if nullable else kinds[base]}
    return out


@dataclass(frozen=True)
class Spelling:
    """How refusals name a setting: as the user gave it. ``PYTHON`` (``lr=0.0``), ``CLI`` (``--lr 0``) or a
    notebook parameter (``Spelling("parameter ", none="null", lists=True)``: ``parameter lr=0.0``); ``names``
    renames a field to the parameter that gives it (``split_dates`` -> ``fit_split_dates``)."""

    prefix: str = ""
    cli: bool = False
    none: str = "None"
    lists: bool = False  # show tuples as lists (a notebook's YAML values)
    names: dict[str, str] = field(default_factory=dict)

    def key(self, name: str) -> str:
        """The setting's own name, as the user writes it (``--lr``, ``lr``)."""
        name = self.names.get(name, name)
        return "--" + name.replace("_", "-") if self.cli else name

    def __call__(self, name: str, value: Any) -> str:
        """The setting with its value, as a refusal starts: ``lr=0.0``, ``--lr 0``, ``parameter lr=0.0``."""
        if not self.cli:
            shown = list(value) if self.lists and isinstance(value, tuple) else value
            return f"{self.prefix}{self.key(name)}={shown!r}"
        if isinstance(value, bool):
            return self.key(name) if value else "--no-" + self.key(name)[2:]
        return f"{self.key(name)} {cli_text(value)}"

    def refuse(self, name: str, value: Any, why: str) -> ConfigError:
        """The one-line refusal of ``value`` given as ``name``."""
        return ConfigError(f"{self(name, value)}{'' if why.startswith(':') else ' '}{why}")


def cli_text(value: Any) -> str:
    """A value as the command line writes it: ``none``, ``0.5``, ``40,280`` (a list), a quoted text."""
    if value is None:
        return "none"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (tuple, list)):
        return ",".join(cli_text(v) for v in value)
    return shlex.quote(value) if isinstance(value, str) else str(value)


def ruled(default: Any, rule: Rule) -> Any:
    """A dataclass field whose values ``rule`` checks (``check_fields``), declared beside it."""
    return field(default=default, metadata={"rule": rule})


def check_fields(config: Any, say: Spelling) -> None:
    """Each field of the dataclass ``config`` by its Rule (a field that allows None may be None): the first value
    refused, named as ``say`` spells it."""
    for f in fields(config):
        value, rule = getattr(config, f.name), f.metadata.get("rule")
        if rule is None or (value is None and "None" in str(f.type)):
            continue
        if why := rule.why(value, say.none if "None" in str(f.type) else ""):
            raise say.refuse(f.name, value, why)


PYTHON = Spelling()
CLI = Spelling(cli=True, none="none")


def parameter(prefix: str = "", **names: str) -> Spelling:
    """A notebook parameter's spelling (``prefix``: e.g. 'recommended: ' for a key of that mapping)."""
    return Spelling("parameter " + prefix, none="null", lists=True, names=names)
