"""`pytest --stop-conformance STOPPER`: the conformance kit's zoo as tests, one per kind, in
the user's own session (registered by plugin.pytest_configure only when asked for). Each
test is one sample of the kit (kit/measure.py), recorded as a stop-latency sample: the
usual table, JSON and gate."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

NAME = "stoplatency-conformance"


class KindTest(pytest.Item):
    def __init__(self, *, stopper: str, spec, sink: list, worker: str | None, **kw) -> None:
        super().__init__(**kw)
        self.stopper, self.spec, self.sink, self.worker = stopper, spec, sink, worker

    def runtest(self) -> None:
        from .kit import cli, load, measure, zoo

        grace = cli.KILL_GRACE
        bound = grace + cli.BOUND_MARGIN
        label = f"{self.stopper} / {self.spec.id}"
        work = Path(tempfile.mkdtemp(prefix="stop-conformance-"))
        try:
            stopper = load.stopper_class(self.stopper)(work, grace)
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
        from .kit import load

        self.names = config.getoption("stop_conformance")
        for name in self.names:
            try:
                load.stopper_class(name)
            except load.UnknownStopper as exc:
                raise pytest.UsageError(f"--stop-conformance: {exc}") from None
        self.sink, self.worker = sink, worker

    def pytest_collection_modifyitems(self, session, config, items):
        from .kit import zoo

        for name in self.names:
            for spec in zoo.VICTIMS:
                items.append(
                    KindTest.from_parent(
                        session,
                        name=f"stop-conformance[{name}/{spec.id}]",
                        stopper=name,
                        spec=spec,
                        sink=self.sink,
                        worker=self.worker,
                    )
                )
