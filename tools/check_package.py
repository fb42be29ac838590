"""`make package-check`: the sdist and the wheel as an index would get them.

Builds both (`python -m build`, isolated, as a publisher does) into a scratch directory,
then checks, each failure one line and the exit status 1:
- `twine check --strict`: the metadata and the long description render on an index;
- `check-wheel-contents`: no duplicate, empty or stray file in the wheel;
- the licence: LICENSE in the wheel's .dist-info/licenses/ and at the sdist's root, and
  the metadata's License-Expression;
- the wheel carries only the runtime packages (runner, pytest_stoplatency), no tests,
  docs or tools;
- the sdist holds what running the suite needs (tests with their conftest, docs,
  examples, the Makefile, LICENSE), and with --collect its own `pytest --collect-only -q`,
  run in the unpacked sdist with this interpreter, collects the suite (as many tests as
  the checkout's, from the sdist's files).
"""

from __future__ import annotations

import argparse
import email
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNTIME = ("runner/", "pytest_stoplatency/")
SDIST_NEEDS = (
    "LICENSE",
    "README.md",
    "Makefile",
    "pyproject.toml",
    "tests/conftest.py",
    "tests/runner/conftest.py",
    "tests/plugin/conftest.py",
    "docs/stop-latency.md",
    "docs/measure.json",
    "examples/pytest.ini",
    "tools/requirements.sh",
)


def run(argv: list[str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True)


def collected(where: Path) -> int:
    """How many tests `pytest --collect-only -q` finds in `where` (its last line)."""
    done = run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"], cwd=where)
    found = re.search(r"^(\d+) tests? collected", done.stdout, re.M)
    if done.returncode != 0 or not found:
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        raise SystemExit(f"check-package: pytest --collect-only failed in {where}: " + " | ".join(tail))
    return int(found.group(1))


def check(out: Path, *, collect: bool) -> list[str]:
    problems: list[str] = []
    built = run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)])
    if built.returncode != 0:
        return [f"python -m build failed: {(built.stdout + built.stderr).strip().splitlines()[-1:]}"]
    wheels, sdists = sorted(out.glob("*.whl")), sorted(out.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        return [f"expected one wheel and one sdist in {out}, found {[p.name for p in out.iterdir()]}"]
    wheel, sdist = wheels[0], sdists[0]
    print(f"check-package: built {wheel.name} and {sdist.name}")

    twine = run([sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)])
    if twine.returncode != 0:
        problems.append("twine check --strict: " + " ".join((twine.stdout + twine.stderr).split()))
    cwc = run([sys.executable, "-m", "check_wheel_contents", str(wheel)])
    if cwc.returncode != 0:
        problems.append("check-wheel-contents: " + " ".join((cwc.stdout + cwc.stderr).split()))

    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = email.message_from_string(z.read(info).decode())
    if not any(re.fullmatch(r"[^/]+\.dist-info/licenses/LICENSE", n) for n in names):
        problems.append("the wheel has no .dist-info/licenses/LICENSE")
    if meta.get("License-Expression") != "MIT":
        problems.append(f"the wheel's License-Expression is {meta.get('License-Expression')!r}, not 'MIT'")
    classifiers = meta.get_all("Classifier") or []
    if len(classifiers) < 8:
        problems.append(f"{len(classifiers)} classifiers, fewer than 8")
    stray = [n for n in names if not n.startswith(RUNTIME) and ".dist-info/" not in n]
    if stray:
        problems.append(f"the wheel carries more than the runtime: {stray[:5]}")

    with tarfile.open(sdist) as t:
        top = t.getnames()[0].split("/")[0]
        members = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
        missing = [n for n in SDIST_NEEDS if n not in members]
        if missing:
            problems.append(f"the sdist lacks {missing}")
        if any("__pycache__" in n for n in members):
            problems.append("the sdist carries __pycache__")
        if collect and not missing:
            t.extractall(out / "sdist", filter="data")
    if collect and not missing:
        here, there = collected(ROOT), collected(out / "sdist" / top)
        print(f"check-package: pytest --collect-only: {there} tests in the sdist, {here} in the checkout")
        if here != there:
            problems.append(f"the sdist's pytest collects {there} tests, the checkout's {here}")
    print(f"check-package: {len(classifiers)} classifiers, licence {meta.get('License-Expression')}")
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="check-package", description=__doc__.split("\n\n")[0])
    p.add_argument("--collect", action="store_true", help="also collect the suite in the unpacked sdist")
    p.add_argument("--out", help="where to build (default: a scratch directory, removed after)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="check-package-") as scratch:
        problems = check(Path(args.out or scratch), collect=args.collect)
    for line in problems:
        print(f"check-package: {line}", file=sys.stderr)
    if not problems:
        print("check-package: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
