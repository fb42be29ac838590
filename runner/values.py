"""The repr, == and hash of the plain value classes of the stop path and the engine's
start, without `dataclasses`: the one place that says why (log.py says the rule).

Every `runner stop` is a new interpreter, and its start-up is part of the stop's latency.
Importing `dataclasses` (it imports inspect, ast, dis, tokenize) and decorating the ten
classes a stop imports (each decoration compiles generated code) cost that start-up 74 M
of its 205 M instructions (valgrind, `import runner.cli` and the stop command's module of
the day, one module then, control/stop.py and its siblings now: 204.7 M with them, 130.5 M
without; `python -c pass` is 38.5 M), about 20 ms here. So those classes are plain ones:
each names its fields once, in `__slots__` (in field order),
and writes its own `__init__`; `Value` gives it the repr and == a dataclass would have,
and `FrozenValue` also the hash of a frozen one.
"""

from __future__ import annotations

from operator import attrgetter

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, ClassVar


class Value:
    """repr and == over the fields named in `__slots__`, as a dataclass has them: equal
    only to an instance of the very same class whose fields are all equal; unhashable
    (defining __eq__ sets __hash__ to None), since it is mutable."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    _values: ClassVar[Callable[[Any], Any]]

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        slots = cls.__dict__.get("__slots__", ())
        cls._fields = (slots,) if isinstance(slots, str) else tuple(slots)
        if cls._fields:
            # One C call reads every field (== and hash are on the scans' hot path).
            cls._values = attrgetter(*cls._fields)

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__qualname__}({inner})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            values = type(self)._values
            return bool(values(self) == values(other))
        return NotImplemented


class FrozenValue(Value):
    """A Value that is treated as immutable (nothing assigns its fields after __init__,
    and mypy holds the stop path to that through `Final`), hence hashable: a set member
    and a dict key, as a frozen dataclass is. Assignment is not blocked at run time: a
    raising __setattr__ would slow every Stat that a /proc scan creates (a frozen
    dataclass's __init__ made one in ~800 ns, this in ~250 ns), and nothing relies on it."""

    __slots__ = ()

    def __hash__(self) -> int:
        return hash(type(self)._values(self))


class SealedValue(FrozenValue):
    """A FrozenValue whose fields cannot be assigned again once set (AttributeError, as a
    frozen dataclass's FrozenInstanceError is one): for values built once and read
    everywhere (the spec), where a stray assignment would be a bug and the check's cost
    (a Python-level __setattr__ per field at construction) is paid once."""

    __slots__ = ()

    def __setattr__(self, name: str, value: object) -> None:
        if hasattr(self, name):
            raise AttributeError(f"cannot assign to field {name!r}: a {type(self).__name__} is frozen")
        object.__setattr__(self, name, value)
