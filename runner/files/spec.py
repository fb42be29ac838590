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
        """The hard stop's worst case: `runner stop` waits `grace` for the engine's own
        teardown, then forces (SIGTERM, `kill_grace`, SIGKILL) and confirms the kill for
        up to CONFIRM_TIMEOUT. tests/runner/test_stop_races.py's wedged-engine test holds
        the forced path to it, against an engine that answers nothing."""
        return self.grace + self.kill_grace + defaults.CONFIRM_TIMEOUT


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

    def commands(
        self, doc: dict[str, Any], key: str, name: str, default_timeout: float, allowed: Collection[str]
    ) -> tuple[CommandSpec, ...]:
        value = doc.get(name, _MISSING)
        if value is _MISSING:
            return ()
        if not isinstance(value, list):
            self.fail(key, f"an array of tables ([[{key}]])", value)
        out: list[CommandSpec] = []
        for i, entry in enumerate(value):
            prefix = f"{key}[{i}]"
            if not isinstance(entry, dict):
                self.fail(prefix, "a table", entry)
            self.no_unknown(entry, prefix, allowed)
            command = self.argv(entry, prefix)
            timeout = self.number(entry, prefix, "timeout", default_timeout, exclusive=True)
            fixable = self.boolean(entry, prefix, "fixable", True) if "fixable" in allowed else True
            out.append(CommandSpec(command=command, timeout=timeout, fixable=fixable))
        return tuple(out)

    def items(self, doc: dict[str, Any]) -> tuple[str, ...]:
        value = doc.get("items", _MISSING)
        if value is _MISSING:
            self.fail("items", "a non-empty list of unique non-empty strings (required)")
        if not isinstance(value, list) or not value:
            self.fail("items", "a non-empty list of unique non-empty strings", value)
        if len(value) > defaults.MAX_ITEMS:
            self.fail("items", f"at most {defaults.MAX_ITEMS} items", value)
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
    return f"{kind} {'>' if exclusive else '>='} {minimum:g} and <= {maximum:g}"


def _show(value: object) -> object:
    # Keep the error short, whatever was pasted into the spec (repr keeps it on one line).
    if isinstance(value, str) and len(value) > 60:
        return value[:57] + "..."
    if isinstance(value, (list, dict)) and len(repr(value)) > 60:
        return f"<{type(value).__name__} of {len(value)}>"
    return value


_TOP = {"items", "provider", "stop", "hooks", "verify", "repair", "retry", "output"}
_PROVIDER = {"command", "call_timeout", "idle_timeout"}
_STOP = {"grace", "kill_grace", "containment", "channel"}
_HOOK = {"command", "timeout"}
_VERIFY = {"command", "timeout", "fixable"}


def _validate(doc: dict[str, Any], source: str | os.PathLike[str]) -> Spec:
    r = _Reader(source)
    r.no_unknown(doc, "", _TOP)
    items = r.items(doc)

    p = r.table(doc, "provider", _PROVIDER, required=True)
    provider = ProviderSpec(
        command=r.argv(p, "provider"),
        call_timeout=r.number(p, "provider", "call_timeout", defaults.CALL_TIMEOUT),
        idle_timeout=r.number(p, "provider", "idle_timeout", defaults.IDLE_TIMEOUT),
    )

    s = r.table(doc, "stop", _STOP)
    stop = StopSpec(
        grace=r.number(s, "stop", "grace", defaults.STOP_GRACE, exclusive=True),
        kill_grace=r.number(s, "stop", "kill_grace", defaults.KILL_GRACE, exclusive=True),
        containment=r.choice(s, "stop", "containment", defaults.CONTAINMENT, CONTAINMENTS),
        channel=r.choice(s, "stop", "channel", defaults.STOP_CHANNEL, CHANNELS),
    )

    hooks = r.table(doc, "hooks", {"post_session", "post_run"})
    post_session = r.commands(hooks, "hooks.post_session", "post_session", defaults.HOOK_TIMEOUT, _HOOK)
    post_run = r.commands(hooks, "hooks.post_run", "post_run", defaults.HOOK_TIMEOUT, _HOOK)
    verify = r.commands(doc, "verify", "verify", defaults.VERIFY_TIMEOUT, _VERIFY)

    repair = r.table(doc, "repair", {"max_attempts"})
    retry = r.table(doc, "retry", {"backoff"})
    output = r.table(doc, "output", {"cap_bytes"})

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
        repair_max_attempts=r.integer(
            repair, "repair", "max_attempts", defaults.REPAIR_MAX_ATTEMPTS, minimum=0, maximum=defaults.MAX_COUNT
        ),
        retry_backoff=r.number(retry, "retry", "backoff", defaults.RETRY_BACKOFF),
        output_cap_bytes=r.integer(
            output,
            "output",
            "cap_bytes",
            defaults.OUTPUT_CAP_BYTES,
            minimum=0,
            exclusive=True,
            maximum=defaults.MAX_OUTPUT_CAP_BYTES,
        ),
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
