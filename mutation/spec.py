"""mutations.toml: one [[mutation]] per ablation, plus optional [settings]."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

# What every inner pytest run gets unless [settings] says otherwise: the killers are
# mostly stop tests (skipped without --stop-latency); mutations are parallelised by the
# campaign, so no xdist inside; no cache writes into the scratch copy.
DEFAULT_PYTEST_ARGS = ("-p", "no:cacheprovider", "-p", "no:xdist", "--stop-latency")
DEFAULT_TIMEOUT = 240.0

_MUTATION_KEYS = {"id", "path", "why", "file", "marker", "replace", "killers", "survivors", "timeout"}
_REQUIRED = ("id", "path", "why", "file", "replace", "killers")
_SETTINGS_KEYS = {"pytest_args", "timeout"}


class SpecError(ValueError):
    """mutations.toml is malformed; the message names the file and the key."""


@dataclass(frozen=True)
class Mutation:
    id: str
    path: str
    why: str
    file: str
    marker: str
    """The site: the one line of `file` ending in `# ablate: <marker>` (default: the id)."""
    replace: str
    killers: tuple[str, ...]
    survivors: tuple[str, ...] = ()
    timeout: float = DEFAULT_TIMEOUT

    @property
    def node_ids(self) -> tuple[str, ...]:
        return self.killers + self.survivors


@dataclass(frozen=True)
class Campaign:
    mutations: tuple[Mutation, ...]
    pytest_args: tuple[str, ...] = DEFAULT_PYTEST_ARGS
    timeout: float = DEFAULT_TIMEOUT
    source: str = ""

    def node_ids(self, mutations=None) -> list[str]:
        seen: dict[str, None] = {}
        for m in mutations if mutations is not None else self.mutations:
            for n in m.node_ids:
                seen.setdefault(n, None)
        return list(seen)


def _str_list(where: str, key: str, value, *, nonempty: bool) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise SpecError(f"{where}: {key} must be a list of non-empty strings")
    if nonempty and not value:
        raise SpecError(f"{where}: {key} must name at least one test")
    return tuple(value)


def _mutation(src: str, index: int, raw: dict, default_timeout: float) -> Mutation:
    where = f"{src}: mutation #{index + 1}"
    if not isinstance(raw, dict):
        raise SpecError(f"{where}: must be a table")
    if "id" in raw and isinstance(raw["id"], str):
        where = f"{src}: mutation {raw['id']!r}"
    if "find" in raw:
        raise SpecError(
            f"{where}: find is gone: mark the line in the code with '# ablate: {raw.get('id', 'ID')}' instead"
        )
    unknown = set(raw) - _MUTATION_KEYS
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {sorted(unknown)}")
    for key in _REQUIRED:
        if key not in raw:
            raise SpecError(f"{where}: missing key {key!r}")
    for key in ("id", "path", "why", "file", "replace"):
        if not isinstance(raw[key], str) or not raw[key].strip():
            raise SpecError(f"{where}: {key} must be a non-empty string")
    marker = raw.get("marker", raw["id"])
    if not isinstance(marker, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", marker):
        raise SpecError(f"{where}: marker must be letters, digits, '_', '.' or '-'")
    timeout = raw.get("timeout", default_timeout)
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
        raise SpecError(f"{where}: timeout must be a positive number of seconds")
    return Mutation(
        id=raw["id"],
        path=raw["path"],
        why=raw["why"],
        file=raw["file"],
        marker=marker,
        replace=raw["replace"],
        killers=_str_list(where, "killers", raw["killers"], nonempty=True),
        survivors=_str_list(where, "survivors", raw.get("survivors", []), nonempty=False),
        timeout=float(timeout),
    )


def load(path: str | Path) -> Campaign:
    path = Path(path)
    src = str(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SpecError(f"{src}: {exc}") from None
    unknown = set(data) - {"settings", "mutation"}
    if unknown:
        raise SpecError(f"{src}: unknown top-level key(s) {sorted(unknown)}")
    settings = data.get("settings", {})
    if set(settings) - _SETTINGS_KEYS:
        raise SpecError(f"{src}: [settings] unknown key(s) {sorted(set(settings) - _SETTINGS_KEYS)}")
    pytest_args: tuple[str, ...] = DEFAULT_PYTEST_ARGS
    if "pytest_args" in settings:
        pytest_args = _str_list(f"{src}: [settings]", "pytest_args", settings["pytest_args"], nonempty=False)
    timeout = settings.get("timeout", DEFAULT_TIMEOUT)
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
        raise SpecError(f"{src}: [settings] timeout must be a positive number of seconds")
    raws = data.get("mutation", [])
    if not isinstance(raws, list):
        raise SpecError(f"{src}: mutation must be an array of tables ([[mutation]])")
    mutations = tuple(_mutation(src, i, r, float(timeout)) for i, r in enumerate(raws))
    ids = [m.id for m in mutations]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise SpecError(f"{src}: duplicate mutation id(s) {dupes}")
    return Campaign(mutations=mutations, pytest_args=tuple(pytest_args), timeout=float(timeout), source=src)
