"""The stop-latency document's formatting helpers and paths, shared by its renderer
(render_stop_latency.py), its sections (stop_latency_*.py) and the other renderers."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent / "docs"  # the documents: templates, data, output
# The defaults are those of the tree this script belongs to, whatever the installed
# `runner` points at (an editable install of another checkout would render its figures).
if str(HERE.parent) not in sys.path[:1]:
    sys.path.insert(0, str(HERE.parent))
DEFAULTS_FILE = "runner/defaults.py"
EXITCODES_FILE = "runner/exitcodes.py"


class RenderError(ValueError):
    """The template names something the code or the JSON cannot supply."""


def _defaults():
    import runner.defaults  # imported at render time so a monkeypatched default is seen

    return runner.defaults


def _exitcodes():
    import runner.exitcodes

    return runner.exitcodes.Exit


def _seconds(x: float) -> str:
    if x >= 100:
        return f"{x:.0f} s"
    if x >= 1:
        return f"{x:.2f} s"
    return f"{x * 1000:.0f} ms" if x >= 0.01 else f"{x * 1000:.1f} ms"


def _measured(x: float) -> str:
    """A measured duration: milliseconds matter at the scale of seconds too."""
    return f"{x:.3f} s" if 1 <= x < 100 else _seconds(x)


_REPEAT_ID = re.compile(r"-?\brep\d+\b-?")


def _without_repeat(nodeid: str) -> str:
    if not nodeid.endswith("]") or "[" not in nodeid:
        return nodeid
    head, params = nodeid[:-1].split("[", 1)
    params = _REPEAT_ID.sub(lambda m: "-" if m.group(0).startswith("-") and m.group(0).endswith("-") else "", params)
    return f"{head}[{params}]" if params else head


def _human(x: float) -> str:
    """7200 -> '2 h', 9120 -> '2 h 32 min': the scale a reader feels."""
    if x < 120:
        return _seconds(x)
    if x >= 2 * 86400 and x % 86400 == 0:
        return f"{x / 86400:.0f} days"
    h, rem = divmod(int(round(x)), 3600)
    m = rem // 60
    return " ".join(p for p in (f"{h} h" if h else "", f"{m} min" if m else "") if p)


def _load(path: Path | None) -> dict | None:
    if path is None or not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8"))
