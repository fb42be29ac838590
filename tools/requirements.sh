#!/bin/sh
# What `make` needs before it creates .venv (README.md, "Requirements"): Linux 5.3 or
# later, Python 3.11 or later as $1 (make's PYTHON), and its venv module with ensurepip
# (Debian and Ubuntu ship those apart, as python3-venv). Says the first thing missing in
# one line and exits 1, before anything is created; silent and 0 when all is there. The
# Makefile runs it while .venv/.installed is missing and stops with its line.
python=${1:-python3}

fail() {
    echo "$*" >&2
    exit 1
}

[ "$(uname -s)" = Linux ] || fail "needs Linux 5.3 or later (pidfd_open); this is $(uname -s)"
release=$(uname -r)
major=${release%%.*}
rest=${release#*.}
minor=${rest%%[!0-9]*}
case $major$minor in *[!0-9]* | '') fail "cannot read the kernel's version from '$release' (needs Linux 5.3 or later)" ;; esac
if [ "$major" -lt 5 ] || { [ "$major" -eq 5 ] && [ "$minor" -lt 3 ]; }; then
    fail "needs Linux 5.3 or later (pidfd_open); this kernel is $release"
fi

command -v "$python" >/dev/null 2>&1 ||
    fail "no '$python' found: install Python 3.11 or later, or name it with PYTHON=/path/to/python3"
if [ "$("$python" -c 'import sys; print(sys.version_info >= (3, 11))' 2>/dev/null)" != True ]; then
    version=$("$python" -c 'import platform; print("Python", platform.python_version())' 2>/dev/null)
    fail "'$python' is ${version:-not a working Python}: needs Python 3.11 or later (name another with PYTHON=)"
fi
[ "$("$python" -c 'import venv, ensurepip; print("ok")' 2>/dev/null)" = ok ] ||
    fail "'$python' has no venv/ensurepip module: on Debian or Ubuntu, apt-get install python3-venv (or python3.X-venv for PYTHON=python3.X)"
exit 0
