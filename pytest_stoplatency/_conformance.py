"""`pytest --stop-conformance STOPPER` (or `--stop-conformance-stop CMD`, with
`--stop-conformance-start CMD`, as the kit's --stop and --start): the conformance kit's zoo
as tests, one per kind and repetition (`--stop-latency-repeat N`), in the user's own session
(registered by plugin.pytest_configure only when asked for). Each test is one sample of the
kit (kit/measure.py), recorded as a stop-latency sample under the kit's label
(`STOPPER / KIND`): the usual table, JSON and gate, whose median is over the N samples."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

NAME = "stoplatency-conformance"


class KindTest(pytest.Item):
    def __init__(self, *, stopper: str, spec, sink: list, worker: str | None, command=None, **kw) -> None:
        super().__init__(**kw)
        self.stopper, self.spec, self.sink, self.worker = stopper, spec, sink, worker
        self.command = command  # (start, stop) for the command stopper

    def runtest(self) -> None:
        from .kit import cli, load, measure, zoo
        from .kit.command import Command
        from .kit.stopper import Stopper

        grace = cli.KILL_GRACE
        bound = grace + cli.BOUND_MARGIN
        work = Path(tempfile.mkdtemp(prefix="stop-conformance-"))
        try:
            stopper: Stopper
            if self.command is not None:
                start, stop = self.command
                stopper = Command(work, grace, start=start, stop=stop)
            else:
                stopper = load.stopper_class(self.stopper)(work, grace)
            # The kit's label (kit/gate.py): the stopper's id, so that the kit's JSON and
            # this session's are each a baseline for the other.
            label = f"{stopper.id} / {self.spec.id}"
            if why := stopper.missing():
                pytest.skip(why)
            try:
                got = measure.sample(stopper, zoo.Tree(self.spec, work / "trees"))
            finally:
                stopper.close()
        finally:
            zoo.clean_up(work, "stop-conformance")
        if "error" in got:
            pytest.fail(f"{label}: {got['error']}", pytrace=False)
        latency = got["latency_s"] if got["stopped"] else bound
        ok = got["stopped"] and latency <= bound
        self.sink.append(
            {
                "label": label,
                "nodeid": self.nodeid,
                "latency": latency,
                "returned": got["returned_s"],
                "bound": bound,
                "ok": ok,
                "stopped": got["stopped"],
                "worker": self.worker,
            }
        )
        if not got["stopped"]:
            pytest.fail(f"{label}: {got['left']} process(es) of the tree orphaned ({self.spec.label})", pytrace=False)
        if not ok:
            pytest.fail(f"{label}: {latency:.3f} s exceeds the bound {bound:g} s", pytrace=False)

    def reportinfo(self):
        return self.path, None, self.name


class Conformance:
    def __init__(self, config, sink: list, worker: str | None) -> None:
        from ._options import conformance_command
        from .kit import load

        self.names = list(config.getoption("stop_conformance"))
        for name in self.names:
            try:
                load.stopper_class(name)
            except load.UnknownStopper as exc:
                raise pytest.UsageError(f"--stop-conformance: {exc}") from None
        self.command = conformance_command(config)
        self.repeat = config.getoption("stop_latency_repeat")
        if self.repeat < 1:
            raise pytest.UsageError("--stop-latency-repeat: at least 1")
        self.sink, self.worker = sink, worker

    def pytest_collection_modifyitems(self, session, config, items):
        from .kit import zoo
        from .kit.command import Command

        stoppers: list[tuple[str, tuple[str | None, str] | None]] = [(name, None) for name in self.names]
        if self.command is not None:
            stoppers.insert(0, (Command.id, self.command))
        reps = [f"/rep{r + 1}" if self.repeat > 1 else "" for r in range(self.repeat)]
        # Round by round, as the kit's measure.run: a change of load spreads over every kind.
        for rep in reps:
            for name, command in stoppers:
                for spec in zoo.VICTIMS:
                    items.append(
                        KindTest.from_parent(
                            session,
                            name=f"stop-conformance[{name}/{spec.id}{rep}]",
                            stopper=name,
                            spec=spec,
                            sink=self.sink,
                            worker=self.worker,
                            command=command,
                        )
                    )
