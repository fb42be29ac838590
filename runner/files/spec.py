"""The run spec: TOML, validated completely into frozen values (values.py) before anything starts.

Every default comes from runner.defaults. Every mistake raises SpecError with one line
naming the file, the dotted key (array entries indexed, e.g. `verify[1].timeout`) and
what was expected, so the CLI can print it as is and exit BAD_INPUT.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from collections.abc import Collection, Iterable

from runner import defaults
from runner.errors import SpecError
from runner.events import StopKind
from runner.values import SealedValue

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Final, NoReturn

CONTAINMENTS = ("auto", "group", "cgroup")
CHANNELS = defaults.STOP_CHANNELS
PLACEHOLDERS = ("item", "feedback")


class CommandSpec(SealedValue):
    __slots__ = ("command", "timeout", "fixable")

    def __init__(self, command: tuple[str, ...], timeout: float, fixable: bool = True) -> None:
        self.command: Final = command
        self.timeout: Final = timeout
        self.fixable: Final = fixable


class ProviderSpec(SealedValue):
    __slots__ = ("command", "call_timeout", "idle_timeout")

    def __init__(self, command: tuple[str, ...], call_timeout: float, idle_timeout: float) -> None:
        self.command: Final = command
        self.call_timeout: Final = call_timeout
        self.idle_timeout: Final = idle_timeout


class StopSpec(SealedValue):
    __slots__ = ("grace", "kill_grace", "containment", "channel")

    def __init__(self, grace: float, kill_grace: float, containment: str, channel: str) -> None:
        self.grace: Final = grace
        self.kill_grace: Final = kill_grace
        self.containment: Final = containment
        self.channel: Final = channel

    @property
    def hard_worst_case(self) -> float:
        """The hard stop's worst case (events.StopKind.HARD.worst_case, the one sum): the
        lodge's lock wait, `grace` for the engine's own teardown, then the forced kill
        (SIGTERM, `kill_grace`, SIGKILL), its confirmation (CONFIRM_TIMEOUT) and the
        recording lock's wait. tests/runner/test_stop_races.py's wedged-engine test holds
        the forced path to it, against an engine that answers nothing."""
        return StopKind.HARD.worst(self.grace, self.kill_grace)


class Spec(SealedValue):
    __slots__ = (
        "items",
        "provider",
        "stop",
        "post_session",
        "post_run",
        "verify",
        "repair_max_attempts",
        "retry_backoff",
        "output_cap_bytes",
        "source",
    )

    def __init__(
        self,
        items: tuple[str, ...],
        provider: ProviderSpec,
        stop: StopSpec,
        post_session: tuple[CommandSpec, ...],
        post_run: tuple[CommandSpec, ...],
        verify: tuple[CommandSpec, ...],
        repair_max_attempts: int,
        retry_backoff: float,
        output_cap_bytes: int,
        source: str,
    ) -> None:
        self.items: Final = items
        self.provider: Final = provider
        self.stop: Final = stop
        self.post_session: Final = post_session
        self.post_run: Final = post_run
        self.verify: Final = verify
        self.repair_max_attempts: Final = repair_max_attempts
        self.retry_backoff: Final = retry_backoff
        self.output_cap_bytes: Final = output_cap_bytes
        self.source: Final = source


_MISSING = object()


class _Reader:
    """Walks one parsed document; knows the file name for every error it raises."""

    def __init__(self, source: str | os.PathLike[str]) -> None:
        self.source = source

    def fail(self, key: str, expected: str, got: object = _MISSING) -> NoReturn:
        # SpecError renders `got` with repr; a missing value has nothing to show.
        raise SpecError(self.source, key, expected, None if got is _MISSING else _show(got))

    def table(self, doc: dict[str, Any], key: str, allowed: Collection[str], required: bool = False) -> dict[str, Any]:
        """A top-level table `key` of the document."""
        value = doc.get(key, _MISSING)
        if value is _MISSING:
            if required:
                self.fail(key, "a table (required)")
            return {}
        if not isinstance(value, dict):
            self.fail(key, "a table", value)
        self.no_unknown(value, key, allowed)
        return value

    def no_unknown(self, table: dict[str, Any], prefix: str, allowed: Collection[str]) -> None:
        for name in table:
            if name not in allowed:
                dotted = f"{prefix}.{name}" if prefix else name
                self.fail(dotted, "one of the known keys " + ", ".join(sorted(allowed)) + " (unknown key)")

    def number(
        self,
        table: dict[str, Any],
        prefix: str,
        name: str,
        default: float,
        *,
        minimum: float = 0.0,
        exclusive: bool = False,
        maximum: float = defaults.MAX_DURATION,
    ) -> float:
        """A duration in seconds: finite, in [minimum, maximum] (above minimum if
        exclusive). Compared before any float() conversion, so an integer beyond 64 bits
        is refused with its key instead of overflowing."""
        key = f"{prefix}.{name}" if prefix else name
        value = table.get(name, _MISSING)
        if value is _MISSING:
            return float(default)
        expected = _bound_text("a number of seconds", minimum, exclusive, maximum)
        # bool is an int in Python; `timeout = true` is a mistake, not 1 second.
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(key, expected, value)
        if isinstance(value, float) and not math.isfinite(value):
            self.fail(key, expected, value)
        if value < minimum or (exclusive and value == minimum) or value > maximum:
            self.fail(key, expected, value)
        return float(value)

    def integer(
        self,
        table: dict[str, Any],
        prefix: str,
        name: str,
        default: int,
        *,
        minimum: int,
        maximum: int,
        exclusive: bool = False,
    ) -> int:
        key = f"{prefix}.{name}" if prefix else name
        value = table.get(name, _MISSING)
        if value is _MISSING:
            return int(default)
        expected = _bound_text("an integer", minimum, exclusive, maximum)
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(key, expected, value)
        if value < minimum or (exclusive and value == minimum) or value > maximum:
            self.fail(key, expected, value)
        return value

    def choice(self, table: dict[str, Any], prefix: str, name: str, default: str, choices: Collection[str]) -> str:
        key = f"{prefix}.{name}"
        value = table.get(name, default)
        if not isinstance(value, str) or value not in choices:
            self.fail(key, "one of " + ", ".join(f'"{c}"' for c in choices), value)
        return value

    def boolean(self, table: dict[str, Any], prefix: str, name: str, default: bool) -> bool:
        key = f"{prefix}.{name}"
        value = table.get(name, default)
        if not isinstance(value, bool):
            self.fail(key, "true or false", value)
        return value

    def argv(self, table: dict[str, Any], prefix: str) -> tuple[str, ...]:
        key = f"{prefix}.command"
        value = table.get("command", _MISSING)
        if value is _MISSING:
            self.fail(key, "a non-empty list of strings (required)")
        if not isinstance(value, list) or not value:
            self.fail(key, "a non-empty list of strings", value)
        for i, arg in enumerate(value):
            if not isinstance(arg, str):
                self.fail(f"{key}[{i}]", "a string", arg)
            if "\0" in arg:
                self.fail(f"{key}[{i}]", "a string without NUL (exec cannot pass one)", arg)
            if len(arg.encode("utf-8", "surrogatepass")) > defaults.MAX_ARG_BYTES:
                self.fail(f"{key}[{i}]", f"an argument of at most {defaults.MAX_ARG_BYTES} bytes", arg)
        if not value[0]:
            self.fail(f"{key}[0]", "a non-empty program name", value[0])
        return tuple(value)

    def commands(self, doc: dict[str, Any], key: str, name: str) -> tuple[CommandSpec, ...]:
        """The array of tables `key` (SCHEMA's keys of that table: command, timeout and,
        for verify, fixable)."""
        value = doc.get(name, _MISSING)
        if value is _MISSING:
            return ()
        if not isinstance(value, list):
            self.fail(key, f"an array of tables ([[{key}]])", value)
        keys = _keys(key)
        out: list[CommandSpec] = []
        for i, entry in enumerate(value):
            prefix = f"{key}[{i}]"
            if not isinstance(entry, dict):
                self.fail(prefix, "a table", entry)
            self.no_unknown(entry, prefix, keys)
            command = _read(self, entry, keys["command"], prefix)
            timeout = _read(self, entry, keys["timeout"], prefix)
            fixable = _read(self, entry, keys["fixable"], prefix) if "fixable" in keys else True
            out.append(CommandSpec(command=command, timeout=timeout, fixable=fixable))
        return tuple(out)

    def items(self, doc: dict[str, Any]) -> tuple[str, ...]:
        value = doc.get("items", _MISSING)
        if value is _MISSING:
            self.fail("items", "a non-empty list of unique non-empty strings (required)")
        if not isinstance(value, list) or not value:
            self.fail("items", "a non-empty list of unique non-empty strings", value)
        most = int(_keys("")["items"].maximum_value())
        if len(value) > most:
            self.fail("items", f"at most {most} items", value)
        seen: set[str] = set()
        for i, item in enumerate(value):
            if not isinstance(item, str) or not item:
                self.fail(f"items[{i}]", "a non-empty string", item)
            if "\0" in item:
                self.fail(f"items[{i}]", "a string without NUL (it is passed as an argument)", item)
            if item in seen:
                self.fail(f"items[{i}]", "a unique item (duplicate)", item)
            seen.add(item)
        return tuple(value)


def _bound_text(kind: str, minimum: float, exclusive: bool, maximum: float) -> str:
    return f"{kind} {'>' if exclusive else '>='} {_number(minimum)} and <= {_number(maximum)}"


def _number(x: float) -> str:
    # 2592000, not 2.592e+06: the limit as a reader would write it in the spec.
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


class _Clipped:
    """A value too long to echo: its repr is a short description of it."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _show(value: object) -> object:
    # Keep the error short, whatever was pasted into the spec (repr keeps it on one line).
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:  # ablate: spec-clip-bigint
        # Counted from the bits: str() of a huge integer is slow, and refused past 4300 digits.
        digits = int(value.bit_length() * 0.30103) + 1
        if 10 ** (digits - 1) > abs(value):
            digits -= 1
        return _Clipped(f"<an integer of {digits} digits>")
    if isinstance(value, str) and len(value) > 60:
        return value[:57] + "..."
    if isinstance(value, (list, dict)) and len(repr(value)) > 60:
        return f"<{type(value).__name__} of {len(value)}>"
    return value


class Key(SealedValue):
    """One key of the spec: what the parser accepts and what docs/spec.md prints
    (docgen/render_spec.py reads this table; nothing about a key is written twice).

    `table` is the key's table ("" at the top level; "verify" and "hooks.post_session"
    are arrays of tables). Defaults and limits are names in runner.defaults, read when a
    spec is loaded, so the parser and the document follow a changed default. `kind`:
    "items", "argv", "seconds", "integer", "choice" or "boolean"; `default`: a
    runner.defaults name (None: required, unless `literal_default`, a default that is no
    runner.defaults constant); `maximum`: a runner.defaults name."""

    __slots__ = (
        "table",
        "name",
        "kind",
        "meaning",
        "default",
        "literal_default",
        "minimum",
        "exclusive",
        "maximum",
        "choices",
    )

    def __init__(
        self,
        table: str,
        name: str,
        kind: str,
        meaning: str,
        default: str | None = None,
        literal_default: object = None,
        minimum: float = 0.0,
        exclusive: bool = False,
        maximum: str | None = None,
        choices: tuple[str, ...] = (),
    ) -> None:
        self.table: Final = table
        self.name: Final = name
        self.kind: Final = kind
        self.meaning: Final = meaning
        self.default: Final = default
        self.literal_default: Final = literal_default
        self.minimum: Final = minimum
        self.exclusive: Final = exclusive
        self.maximum: Final = maximum
        self.choices: Final = choices

    @property
    def dotted(self) -> str:
        return f"{self.table}.{self.name}" if self.table else self.name

    @property
    def required(self) -> bool:
        return self.default is None and self.literal_default is None

    def default_value(self) -> object:
        return getattr(defaults, self.default) if self.default else self.literal_default

    def maximum_value(self) -> float:
        return float(getattr(defaults, self.maximum)) if self.maximum else math.inf


_ARGV = "A non-empty list of strings, run without a shell"
SCHEMA: tuple[Key, ...] = (
    Key("", "items", "items", "The queue: item names, run in this order.", maximum="MAX_ITEMS"),
    Key(
        "provider",
        "command",
        "argv",
        "The provider call for each item and each repair session. " + _ARGV + "; `{item}` and `{feedback}` replaced.",
    ),
    Key(
        "provider",
        "call_timeout",
        "seconds",
        "Longest single provider call; 0 disables. Bounds the graceful stop's worst case.",
        default="CALL_TIMEOUT",
        maximum="MAX_DURATION",
    ),
    Key(
        "provider",
        "idle_timeout",
        "seconds",
        "Longest silence of a provider call (any output chunk resets it); 0 disables.",
        default="IDLE_TIMEOUT",
        maximum="MAX_DURATION",
    ),
    Key(
        "stop",
        "grace",
        "seconds",
        "How long `runner stop` waits for the engine's own teardown before it force-kills the run.",
        default="STOP_GRACE",
        exclusive=True,
        maximum="MAX_DURATION",
    ),
    Key(
        "stop",
        "kill_grace",
        "seconds",
        "SIGTERM to SIGKILL when the runner kills a process group.",
        default="KILL_GRACE",
        exclusive=True,
        maximum="MAX_DURATION",
    ),
    Key(
        "stop",
        "containment",
        "choice",
        'How the run\'s processes are contained: "cgroup" (refused where cgroup v2 is not writable), '
        '"group" (process groups and the run tag), "auto" (a cgroup where one can be made, else group).',
        default="CONTAINMENT",
        choices=CONTAINMENTS,
    ),
    Key(
        "stop",
        "channel",
        "choice",
        'How `runner stop` reaches the engine: "signal" (request file, then SIGTERM), "file" (request '
        'file only until `grace` ends), "auto" (= signal).',
        default="STOP_CHANNEL",
        choices=CHANNELS,
    ),
    Key(
        "hooks.post_session",
        "command",
        "argv",
        "A hook run after each item's provider session. " + _ARGV + "; `{item}` replaced.",
    ),
    Key(
        "hooks.post_session",
        "timeout",
        "seconds",
        "Longest run of this hook.",
        default="HOOK_TIMEOUT",
        exclusive=True,
        maximum="MAX_DURATION",
    ),
    Key(
        "hooks.post_run",
        "command",
        "argv",
        "A hook run once after the whole queue. " + _ARGV + "; `{item}` replaced by nothing.",
    ),
    Key(
        "hooks.post_run",
        "timeout",
        "seconds",
        "Longest run of this hook.",
        default="HOOK_TIMEOUT",
        exclusive=True,
        maximum="MAX_DURATION",
    ),
    Key(
        "verify",
        "command",
        "argv",
        "A check run after each item's hooks; the first that fails decides. " + _ARGV + "; `{item}` replaced.",
    ),
    Key(
        "verify",
        "timeout",
        "seconds",
        "Longest run of this verify command.",
        default="VERIFY_TIMEOUT",
        exclusive=True,
        maximum="MAX_DURATION",
    ),
    Key(
        "verify",
        "fixable",
        "boolean",
        "Whether a failure of this command starts a repair session (false: the item fails at once).",
        literal_default=True,
    ),
    Key(
        "repair",
        "max_attempts",
        "integer",
        "Repair sessions per item after a fixable verify failure (the provider called with `{feedback}`).",
        default="REPAIR_MAX_ATTEMPTS",
        maximum="MAX_COUNT",
    ),
    Key(
        "retry",
        "backoff",
        "seconds",
        "Wait before each repair attempt; the STOP file is read every tick of it.",
        default="RETRY_BACKOFF",
        maximum="MAX_DURATION",
    ),
    Key(
        "output",
        "cap_bytes",
        "integer",
        "Captured output kept per command; the rest is counted, not stored.",
        default="OUTPUT_CAP_BYTES",
        exclusive=True,
        maximum="MAX_OUTPUT_CAP_BYTES",
    ),
)
"""Every key a spec may hold, in the order docs/spec.md lists them."""

ARRAYS = ("hooks.post_session", "hooks.post_run", "verify")
"""The tables of SCHEMA that are arrays of tables (`[[verify]]`)."""


def _keys(table: str) -> dict[str, Key]:
    return {k.name: k for k in SCHEMA if k.table == table}


def _allowed(prefix: str) -> set[str]:
    """The names a table may hold: its keys, and the subtables under it."""
    names = {k.name for k in SCHEMA if k.table == prefix}
    depth = prefix.count(".") + 1 if prefix else 0
    for k in SCHEMA:
        parts = k.table.split(".") if k.table else []
        if len(parts) > depth and ".".join(parts[:depth]) == prefix:
            names.add(parts[depth])
    return names


def _read(r: _Reader, table: dict[str, Any], key: Key, prefix: str | None = None) -> Any:
    """The value of `key` in `table`, validated as SCHEMA says (`prefix`: the table's
    dotted name in errors, `verify[1]` for an array entry)."""
    where = key.table if prefix is None else prefix
    if key.kind == "argv":
        return r.argv(table, where)
    if key.kind == "seconds":
        return r.number(
            table,
            where,
            key.name,
            float(key.default_value()),  # type: ignore[arg-type]
            minimum=key.minimum,
            exclusive=key.exclusive,
            maximum=key.maximum_value(),  # ablate: spec-schema-limit
        )
    if key.kind == "integer":
        return r.integer(
            table,
            where,
            key.name,
            int(key.default_value()),  # type: ignore[call-overload]
            minimum=int(key.minimum),
            exclusive=key.exclusive,
            maximum=int(key.maximum_value()),
        )
    if key.kind == "choice":
        return r.choice(table, where, key.name, str(key.default_value()), key.choices)
    if key.kind == "boolean":
        return r.boolean(table, where, key.name, bool(key.default_value()))
    raise AssertionError(f"spec key {key.dotted} has no reader for kind {key.kind!r}")


def _validate(doc: dict[str, Any], source: str | os.PathLike[str]) -> Spec:
    r = _Reader(source)
    r.no_unknown(doc, "", _allowed(""))
    items = r.items(doc)

    p = r.table(doc, "provider", _allowed("provider"), required=True)
    pk = _keys("provider")
    provider = ProviderSpec(
        command=_read(r, p, pk["command"]),
        call_timeout=_read(r, p, pk["call_timeout"]),
        idle_timeout=_read(r, p, pk["idle_timeout"]),
    )

    s = r.table(doc, "stop", _allowed("stop"))
    sk = _keys("stop")
    stop = StopSpec(
        grace=_read(r, s, sk["grace"]),
        kill_grace=_read(r, s, sk["kill_grace"]),
        containment=_read(r, s, sk["containment"]),
        channel=_read(r, s, sk["channel"]),
    )

    hooks = r.table(doc, "hooks", _allowed("hooks"))
    post_session = r.commands(hooks, "hooks.post_session", "post_session")
    post_run = r.commands(hooks, "hooks.post_run", "post_run")
    verify = r.commands(doc, "verify", "verify")

    repair = r.table(doc, "repair", _allowed("repair"))
    retry = r.table(doc, "retry", _allowed("retry"))
    output = r.table(doc, "output", _allowed("output"))

    _check_exec_sizes(
        r,
        items,
        [("provider.command", provider.command)]
        + [(f"hooks.post_session[{i}].command", c.command) for i, c in enumerate(post_session)]
        + [(f"hooks.post_run[{i}].command", c.command) for i, c in enumerate(post_run)]
        + [(f"verify[{i}].command", c.command) for i, c in enumerate(verify)],
    )
    return Spec(
        items=items,
        provider=provider,
        stop=stop,
        post_session=post_session,
        post_run=post_run,
        verify=verify,
        repair_max_attempts=_read(r, repair, _keys("repair")["max_attempts"]),
        retry_backoff=_read(r, retry, _keys("retry")["backoff"]),
        output_cap_bytes=_read(r, output, _keys("output")["cap_bytes"]),
        source=str(source),
    )


_TOML_SKIP = re.compile(r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*')


def toml_depth(text: str) -> int:
    """How deep arrays and inline tables nest (strings and comments skipped); counted
    with regular expressions, so a 1 MiB bomb costs milliseconds, not a recursion."""
    level = deepest = 0
    for match in re.finditer(r"[\[\]{}]", _TOML_SKIP.sub("", text)):
        level += 1 if match.group() in "[{" else -1
        deepest = max(deepest, level)
    return deepest


_FEEDBACK_STAND_IN = "f" * 4096
"""What {feedback} may become: a path in the run directory, at most PATH_MAX long."""


def _exec_budget() -> int:
    """Bytes left for a command's argv: the kernel's ARG_MAX less this environment (the
    engine passes it on, plus a few variables of its own) and a margin."""
    try:
        arg_max = os.sysconf("SC_ARG_MAX")
    except (ValueError, OSError):
        arg_max = 2 * 1024 * 1024
    env = sum(len(k) + len(v) + 2 for k, v in os.environ.items())
    return arg_max - env - 64 * 1024


def _check_exec_sizes(r: _Reader, items: tuple[str, ...], commands: list[tuple[str, tuple[str, ...]]]) -> None:
    """Every command must still exec once the longest item (and a long feedback path) is
    substituted: no argument past MAX_ARG_BYTES, the whole argv within ARG_MAX. Checked
    at load, so a run never fails at its 9,000th item with E2BIG."""
    longest = max(items, key=lambda i: len(i.encode("utf-8", "surrogatepass")))
    budget = _exec_budget()
    for key, command in commands:
        argv = substitute(command, item=longest, feedback=_FEEDBACK_STAND_IN)
        for i, arg in enumerate(argv):
            if len(arg.encode("utf-8", "surrogatepass")) > defaults.MAX_ARG_BYTES:
                r.fail(
                    f"{key}[{i}]",
                    f"an argument of at most {defaults.MAX_ARG_BYTES} bytes once the longest item is substituted",
                )
        total = sum(len(arg.encode("utf-8", "surrogatepass")) + 1 for arg in argv)
        if total > budget:
            r.fail(key, f"an argv of at most {budget} bytes once the longest item is substituted (it has {total})")


def loads(text: str, source: str | os.PathLike[str]) -> Spec:
    if toml_depth(text) > defaults.SPEC_MAX_DEPTH:
        raise SpecError(source, "(toml)", f"arrays and tables nested at most {defaults.SPEC_MAX_DEPTH} deep")
    try:
        doc = tomllib.loads(text)
    except RecursionError:
        raise SpecError(source, "(toml)", f"arrays and tables nested at most {defaults.SPEC_MAX_DEPTH} deep") from None
    except tomllib.TOMLDecodeError as e:
        # tomllib's message already carries line and column, on one line.
        raise SpecError(source, "(toml)", f"valid TOML ({_one_line(e)})") from None
    except ValueError:
        # tomllib converts an integer literal with int(), which refuses one past Python's
        # digit limit (sys.get_int_max_str_digits): no key could take such a number.
        import sys

        raise SpecError(source, "(toml)", f"integers of at most {sys.get_int_max_str_digits()} digits") from None
    return _validate(doc, source)


def load(path: str | os.PathLike[str]) -> Spec:
    return load_bytes(path)[0]


def load_bytes(path: str | os.PathLike[str]) -> tuple[Spec, bytes]:
    """The spec and the exact bytes it was validated from (what a run freezes). The file
    must be a regular file (a FIFO or /dev/zero is refused at once, never read) of at
    most SPEC_MAX_BYTES."""
    from runner.errors import Damaged
    from runner.files import untrusted

    try:
        raw = untrusted.read_bytes(path, defaults.SPEC_MAX_BYTES, follow=True)
    except FileNotFoundError:
        raise SpecError(path, "(file)", "a readable file (no such file)") from None
    except Damaged as e:
        raise SpecError(
            path, "(file)", f"a regular file of at most {defaults.SPEC_MAX_BYTES} bytes ({e.what})"
        ) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(path, "(file)", f"UTF-8 text ({_one_line(e)})") from None
    return loads(text, str(path)), raw


def load_frozen(path: str | os.PathLike[str]) -> Spec:
    """The spec frozen into a run directory, which is untrusted input: no link followed,
    no FIFO waited on, capped (Damaged); then validated like any spec (SpecError)."""
    from runner.files import untrusted

    text = untrusted.read_text(path, defaults.SPEC_MAX_BYTES)
    return loads(text, str(path))


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


_PLACEHOLDER = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")


def substitute(argv: Iterable[str], **values: object) -> list[str]:
    """Replace `{item}` / `{feedback}` in each argument by plain text.

    One pass per argument, so a value that itself contains `{feedback}` is never expanded
    again; braces that are not a known placeholder stay as they are (no str.format: an
    item named `{0}` or `{x.__class__}` is just text). Nothing here goes through a shell.
    """
    for name in values:
        if name not in PLACEHOLDERS:
            raise TypeError(f"substitute: unknown placeholder {name!r}")
    strs = {k: str(v) for k, v in values.items()}

    def repl(m: re.Match[str]) -> str:
        name = m.group(1)
        return strs[name] if name in strs else m.group(0)

    return [_PLACEHOLDER.sub(repl, arg) for arg in argv]
