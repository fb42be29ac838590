"""The package an index would carry (issue 42, item 3): tools/check_package.py builds the
sdist and the wheel with `python -m build`, runs `twine check --strict` and
`check-wheel-contents` on them, finds LICENSE in the wheel's .dist-info and at the
sdist's root, a wheel of the runtime packages alone, and the unpacked sdist's own
`pytest --collect-only` collecting as many tests as this checkout."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_sdist_and_the_wheel_pass_the_index_checks(tmp_path):
    """Path: `make package-check`'s script on this tree. Ablation: without MANIFEST.in's
    `graft tests` the sdist lacks tests/conftest.py and its collection finds nothing;
    without `license-files` the wheel has no licence."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "check_package.py"), "--collect", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "check-package: ok" in done.stdout
