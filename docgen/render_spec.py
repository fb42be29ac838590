"""Render docs/spec.md (the reference of every spec key) from runner/files/spec.py's SCHEMA.

    python docgen/render_spec.py            # write docs/spec.md (make docs)
    python docgen/render_spec.py --check    # fail if it is stale or misses a key (make docs-check)

The parser reads every key through `runner.files.spec.SCHEMA` (its tables, kinds,
defaults and limits); this script prints the same table, with each default and limit
taken from runner/defaults.py by the name SCHEMA gives. Placeholders of
docs/spec.template.md:

    {{spec_keys}}     one table per spec table: key, type, default, limit, meaning
    {{spec_limits}}   every limit, with the keys it applies to
    {{derived:NAME}}  a runner.defaults constant with its provenance
    {{example}}       examples/spec/every-key.toml, as it is (tests/docs/test_render_spec.py loads it)
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent / "docs"  # the documents: templates, data, output
ROOT = HERE.parent
if str(ROOT) not in sys.path[:1]:
    sys.path.insert(0, str(ROOT))

from render_stop_latency import Context as StopLatencyContext  # noqa: E402
from render_stop_latency import _human, refuse_typed_durations, write_or_check  # noqa: E402

_PLACEHOLDER = re.compile(r"\{\{\s*([a-z_]+)(?::([^}]+?))?\s*\}\}")
SPEC_FILE = "runner/files/spec.py"
DEFAULTS_FILE = "runner/defaults.py"

# The limits that hold for the whole file rather than one key (spec.load_bytes, spec.loads).
FILE_LIMITS = {
    "SPEC_MAX_BYTES": "the spec file (and the copy frozen into a run directory)",
    "SPEC_MAX_DEPTH": "the spec file: nesting of arrays and inline tables",
}


class RenderError(ValueError):
    """The template names something the code cannot supply."""


def _spec():
    from runner.files import spec

    return spec


def _defaults():
    import runner.defaults

    return runner.defaults


def _number(name: str) -> str:
    v = getattr(_defaults(), name)
    if name.endswith("_BYTES"):
        return f"{v:,} bytes"
    if name == "MAX_DURATION":
        return f"{v:,.0f} s ({_human(v)})"
    if isinstance(v, float):
        return f"{v:g} s" + (f" ({_human(v)})" if v >= 120 else "")
    return f"{v:,}"


_TYPES = {
    "items": "array of strings",
    "argv": "array of strings",
    "seconds": "number (seconds)",
    "integer": "integer",
    "choice": "string",
    "boolean": "boolean",
}


def _default(key) -> str:
    if key.required:
        return "**required**"
    if key.default:
        v = getattr(_defaults(), key.default)
        shown = f'`"{v}"`' if isinstance(v, str) else _number(key.default)
        return f"{shown} (`{key.default}`)"
    v = key.literal_default
    return f"`{str(v).lower()}`" if isinstance(v, bool) else f"`{v!r}`"


def _limit(key) -> str:
    if key.kind in ("seconds", "integer"):
        low = f"{'>' if key.exclusive else '>='} {key.minimum:g}"
        unit = " s" if key.kind == "seconds" else ""
        return f"{low}{unit}, <= {_number(key.maximum)} (`{key.maximum}`)"
    if key.kind == "choice":
        return "one of " + ", ".join(f'`"{c}"`' for c in key.choices)
    if key.kind == "boolean":
        return "`true` or `false`"
    if key.kind == "argv":
        return (
            f"each argument at most {_number('MAX_ARG_BYTES')} (`MAX_ARG_BYTES`) once the longest item is "
            "substituted, the whole argv within the kernel's `ARG_MAX`; no NUL"
        )
    if key.kind == "items":
        return f"1 to {_number(key.maximum)} (`{key.maximum}`) unique non-empty strings, no NUL"
    raise RenderError(f"spec key {key.dotted} has a kind ({key.kind!r}) this renderer does not know")


def _heading(table: str, arrays) -> str:
    if not table:
        return "Top level"
    return f"`[[{table}]]` (an array of tables: any number of entries)" if table in arrays else f"`[{table}]`"


EXAMPLE = ROOT / "examples" / "spec" / "every-key.toml"


class Context:
    def __init__(self) -> None:
        self.stop = StopLatencyContext(None, None)

    def example(self) -> str:
        return EXAMPLE.read_text(encoding="utf-8").rstrip("\n")

    def derived(self, name: str) -> str:
        return self.stop.derived(name)

    def spec_keys(self) -> str:
        spec = _spec()
        tables: dict[str, list] = {}
        for key in spec.SCHEMA:
            tables.setdefault(key.table, []).append(key)
        out = []
        for table, keys in tables.items():
            rows = [f"### {_heading(table, spec.ARRAYS)}", "", "| key | type | default | limit | meaning |"]
            rows.append("|---|---|---|---|---|")
            for key in keys:
                rows.append(
                    f"| `{key.dotted}` | {_TYPES[key.kind]} | {_default(key)} | {_limit(key)} | {key.meaning} |"
                )
            out.append("\n".join(rows))
        return "\n\n".join(out) + f"\n\n(DERIVED: `{SPEC_FILE}: SCHEMA`, defaults and limits from `{DEFAULTS_FILE}`.)"

    def spec_limits(self) -> str:
        spec = _spec()
        applies: dict[str, list[str]] = {}
        for key in spec.SCHEMA:
            if key.maximum:
                applies.setdefault(key.maximum, []).append(key.dotted)
            if key.kind == "argv":
                applies.setdefault("MAX_ARG_BYTES", []).append(key.dotted)
        lines = []
        for name, keys in applies.items():
            lines.append(f"- {self.derived(name)}: " + ", ".join(f"`{k}`" for k in keys))
        for name, what in FILE_LIMITS.items():
            lines.append(f"- {self.derived(name)}: {what}")
        return "\n".join(lines)


def render(template: str, ctx: Context) -> str:
    refuse_typed_durations(template)

    def sub(m: re.Match) -> str:
        kind, arg = m.group(1), m.group(2)
        if kind == "derived" and arg:
            return ctx.derived(arg.strip())
        if arg is None and kind in ("spec_keys", "spec_limits", "example"):
            return getattr(ctx, kind)()
        raise RenderError(f"unknown placeholder {m.group(0)!r}")

    return _PLACEHOLDER.sub(sub, template)


def missing_keys(text: str) -> list[str]:
    """The SCHEMA keys that `text` has no row for."""
    return [k.dotted for k in _spec().SCHEMA if f"| `{k.dotted}` |" not in text]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="render_spec", description="render docs/spec.md")
    ap.add_argument("--template", type=Path, default=HERE / "spec.template.md")
    ap.add_argument("--out", type=Path, default=HERE / "spec.md")
    ap.add_argument("--check", action="store_true", help="fail if --out is stale or lacks a key of the schema")
    args = ap.parse_args(argv)
    try:
        text = render(args.template.read_text(encoding="utf-8"), Context())
    except (RenderError, ValueError, KeyError) as exc:
        print(f"render_spec: {exc}", file=sys.stderr)
        return 2
    if args.check:
        committed = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        missing = missing_keys(committed)
        if missing:
            print(f"{args.out} has no row for the spec key(s) {', '.join(missing)}: run `make docs`", file=sys.stderr)
            return 1
    return write_or_check(args.out, text, check=args.check)


if __name__ == "__main__":
    sys.exit(main())
