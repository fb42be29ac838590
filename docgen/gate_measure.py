"""docs/gate.json: the latency gate's default rule (kit/gate.py: DEFAULT_RULE with
DEFAULT_REPEAT samples per kind) on unchanged code and on a stop 1.5x slower, beside two
CPU hogs, through the kit's own command line (`--compare`, `--compare-fail`).

One baseline (the kit's --json), then TRIALS runs of the same stopper and TRIALS runs of
the same stopper slowed down 1.5x (SlowerRunner: after the stop returns, it sleeps half of
the stop's own time), interleaved, each compared with the baseline by the default rule.
The baseline is taken beside the hogs too, as a CI runner's saved baseline would be. The
hogs (`python3 -c 'while True: pass'`, two) are killed by pid when it ends, whatever happens.
docgen/render_plugin.py renders docs/plugin.md's gate figures from the JSON.

    .venv/bin/python docgen/gate_measure.py --trials 20 --out docs/gate.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from pytest_stoplatency.kit import gate  # noqa: E402
from pytest_stoplatency.kit.adapters import RunnerHard  # noqa: E402

STOPPER = "runner"
KINDS = "trap-term,setsid-escapee"
SLOWDOWN = 1.5


class SlowerRunner(RunnerHard):
    """The runner's hard stop, SLOWDOWN times as long: the same label (its id), a slower stop."""

    def stop(self, rd: Any) -> dict[str, Any]:
        t0 = time.monotonic()
        said = super().stop(rd)
        time.sleep((SLOWDOWN - 1) * (time.monotonic() - t0))
        return said


def kit(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)])}
    return subprocess.run(
        [sys.executable, "-m", "pytest_stoplatency", "conformance", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )


def figures(path: Path) -> dict[str, dict[str, float | None]]:
    """Each label's statistics (the gate's rule reads one; the others say how it compares)."""
    return {label: {k: s[k] for k in gate.STATS} for label, s in json.loads(path.read_text())["labels"].items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--hogs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "gate.json")
    args = ap.parse_args(argv)
    common = ["--kinds", KINDS, "--repeat", str(gate.DEFAULT_REPEAT)]
    hogs = [subprocess.Popen(["python3", "-c", "while True: pass"]) for _ in range(args.hogs)]
    trials: list[dict[str, Any]] = []
    load = [os.getloadavg()[0]]
    try:
        with tempfile.TemporaryDirectory(prefix="gate-measure-") as tmp:
            base = Path(tmp) / "baseline.json"
            first = kit("--stopper", STOPPER, *common, "--json", str(base))
            if first.returncode != 0:
                print(first.stdout + first.stderr, file=sys.stderr)
                return 1
            for i in range(args.trials):
                for variant, stopper in (("unchanged", STOPPER), ("slower", "gate_measure:SlowerRunner")):
                    out = Path(tmp) / f"{variant}-{i}.json"
                    r = kit("--stopper", stopper, *common, "--json", str(out), "--compare", str(base),
                            "--compare-fail", gate.DEFAULT_RULE)  # fmt: skip
                    trials.append({"variant": variant, "exit": r.returncode, "labels": figures(out)})
                    print(f"gate_measure: trial {i + 1} {variant}: exit {r.returncode}", file=sys.stderr)
                load.append(os.getloadavg()[0])
            baseline = figures(base)
    finally:
        for h in hogs:
            h.kill()
            h.wait()

    def count(variant: str, codes: tuple[int, ...]) -> dict[str, int]:
        rows = [t for t in trials if t["variant"] == variant]
        return {"count": sum(1 for t in rows if t["exit"] in codes), "of": len(rows)}

    doc = {
        "command": "docgen/gate_measure.py",
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {**gate.machine(), "platform": platform.platform()},
        "stopper": STOPPER,
        "kinds": KINDS.split(","),
        "repeat": gate.DEFAULT_REPEAT,
        "rule": gate.DEFAULT_RULE,
        "slowdown": SLOWDOWN,
        "hogs": args.hogs,
        "load_1min": {"min": min(load), "max": max(load)},
        "baseline": baseline,
        "trials": trials,
        "unchanged_passed": count("unchanged", (0,)),
        "slower_failed": count("slower", (gate.GATE_FAILED,)),
        "slower_nonzero": count("slower", tuple(range(1, 256))),
    }
    args.out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    passed, failed = doc["unchanged_passed"], doc["slower_failed"]
    print(f"gate_measure: unchanged passed {passed}, slower failed {failed} (by the gate)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
