"""`--stopper NAME` or `--stopper module:Class`: the stopper class a name means."""

from __future__ import annotations

import importlib

from .adapters import BUILTIN
from .stopper import Stopper


class UnknownStopper(ValueError):
    """A name that is neither a built-in adapter nor an importable `module:Class`."""


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


def stopper_class(name: str) -> type[Stopper]:
    if ":" not in name:
        if name not in BUILTIN:
            raise UnknownStopper(f"unknown stopper {name!r}; one of {', '.join(BUILTIN)}, or module:Class")
        return BUILTIN[name]
    module, _, attr = name.partition(":")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except Exception as exc:  # whatever the user's module raises on import: one line, a usage error
        raise UnknownStopper(f"--stopper {name}: cannot load it: {type(exc).__name__}: {_one_line(exc)}") from exc
    missing = [m for m in ("start", "stop") if not callable(getattr(cls, m, None))]
    if not isinstance(cls, type) or missing:
        raise UnknownStopper(f"--stopper {name}: not a Stopper class (needs start and stop; see Stopper)")
    if not issubclass(cls, Stopper):  # the protocol's methods without its base: its defaults fill in
        cls = type(cls.__name__, (cls, Stopper), {})
    if not cls.id:
        cls.id = name
    return cls
