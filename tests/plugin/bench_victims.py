"""Start cost of each victim kind and wait_gone's detection delay after SIGKILL.

    .venv/bin/python tests/plugin/bench_victims.py [--n 20]

Start cost: Popen of PreparedVictim.argv until adopt() returns (the ready handshake
done), median over N starts, next to the bare interpreter (python -c pass, bash -c :;
python -S -c pass shows how much of the venv's start is site, the editable finder).
Detection: time from os.killpg(SIGKILL) to Victim.wait_gone() returning True (median
and p95). The machine is shared: compare runs taken at the same time, never alone.
"""

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time

from pytest_stoplatency import PreparedVictim
from pytest_stoplatency.victim import KINDS

LANGS = ("python", "bash")


def p95(xs):
    return sorted(xs)[max(0, round(0.95 * len(xs)) - 1)]


def bare(argv, n):
    out = []
    for _ in range(n):
        t = time.monotonic()
        subprocess.run(argv, check=True)
        out.append(time.monotonic() - t)
    return statistics.median(out)


def start(kind, lang):
    p = PreparedVictim(kind, lang=lang)
    t = time.monotonic()
    proc = subprocess.Popen(
        p.argv, start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    v = p.adopt(10.0, process=proc)
    return v, proc, time.monotonic() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--lang", choices=LANGS, action="append", help="only these languages (repeatable)")
    a = ap.parse_args()
    n, langs = a.n, a.lang or list(LANGS)
    print(
        f"bare: python -c pass {bare([sys.executable, '-c', 'pass'], n) * 1000:.1f} ms, "
        f"python -S -c pass {bare([sys.executable, '-S', '-c', 'pass'], n) * 1000:.1f} ms, "
        f"bash -c : {bare(['bash', '-c', ':'], n) * 1000:.1f} ms (median of {n})"
    )
    print(
        f"{'kind':14} "
        + " ".join(f"{lang + ' ms':>10}" for lang in langs)
        + f"   detect after SIGKILL ms, median (p95): {' / '.join(langs)}"
    )
    for kind in KINDS:
        row = []
        det = []
        for lang in langs:
            starts, detects = [], []
            for _ in range(n):
                v, proc, dt = start(kind, lang)
                starts.append(dt)
                t = time.monotonic()
                os.killpg(v.pgid, signal.SIGKILL)
                v.kill()  # escapee / env-scrubber members are outside the group
                ok = v.wait_gone(5.0)
                detects.append(time.monotonic() - t)
                assert ok, f"{kind}/{lang} survived"
                proc.wait()
            row.append(statistics.median(starts) * 1000)
            det.append(f"{statistics.median(detects) * 1000:.2f} ({p95(detects) * 1000:.2f})")
        print(f"{kind:14} " + " ".join(f"{ms:10.1f}" for ms in row) + "   " + " / ".join(det))


if __name__ == "__main__":
    main()
