"""Start cost of each victim kind and wait_gone's detection delay after SIGKILL.

    .venv/bin/python tests/plugin/bench_victims.py [--n 20]

Start cost: Popen of PreparedVictim.argv until adopt() returns (the ready handshake
done), median over N starts, next to the bare interpreter (python -c pass, bash -c :).
Detection: time from os.killpg(SIGKILL) to Victim.wait_gone() returning True.
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
    proc = subprocess.Popen(p.argv, start_new_session=True, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    v = p.adopt(10.0, process=proc)
    return v, proc, time.monotonic() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20)
    n = ap.parse_args().n
    print(f"bare: python -c pass {bare([sys.executable, '-c', 'pass'], n) * 1000:.1f} ms, "
          f"bash -c : {bare(['bash', '-c', ':'], n) * 1000:.1f} ms (median of {n})")
    print(f"{'kind':14} {'python ms':>10} {'bash ms':>8}   detect after SIGKILL ms (python / bash)")
    for kind in KINDS:
        row = []
        det = []
        for lang in ("python", "bash"):
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
            det.append(statistics.median(detects) * 1000)
        print(f"{kind:14} {row[0]:10.1f} {row[1]:8.1f}   {det[0]:.2f} / {det[1]:.2f}")


if __name__ == "__main__":
    main()
