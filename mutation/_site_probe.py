"""Installed as sitecustomize.py at the root of a mutation's scratch copy.

Every Python process that inherits the inner run's environment (PYTHONPATH = the scratch
root) imports it at start-up. It records where the mutated module really came from, at
import time (a record written at exit would be lost to a SIGKILL), so the campaign can
prove that the code under test was the scratch copy and not the editable install.
Deliberately tiny and dependency-free: victims import it too.
"""

import json
import os
import sys


def _install():
    out = os.environ.get("MUTATION_PROBE_DIR")
    if not out:
        return
    sys._mutation_site_probe = True  # type: ignore[attr-defined]  # a mark other probes read
    target = os.environ.get("MUTATION_TARGET_MODULE")
    if not target:
        return
    log = os.path.join(out, "imports.jsonl")

    def record(origin):
        line = (
            json.dumps(
                {
                    "pid": os.getpid(),
                    "module": target,
                    "file": origin,
                    "argv": list(getattr(sys, "argv", []))[:4],
                }
            )
            + "\n"
        )
        # One O_APPEND write per line: concurrent processes never interleave.
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    class _Probe:
        @classmethod
        def find_spec(cls, fullname, path=None, target_module=None):
            if fullname != target:
                return None
            for finder in sys.meta_path:
                if finder is cls:
                    continue
                find = getattr(finder, "find_spec", None)
                spec = find(fullname, path, target_module) if find else None
                if spec is not None:
                    record(spec.origin)
                    return spec
            return None

    if target in sys.modules:
        record(getattr(sys.modules[target], "__file__", None))
    sys.meta_path.insert(0, _Probe)


try:
    _install()
except Exception as exc:  # the probe must never break the process it watches
    sys.stderr.write(f"mutation site probe failed: {exc!r}\n")
