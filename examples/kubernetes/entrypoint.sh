#!/bin/sh
# The container's entrypoint, started by tini, the image's PID 1 (Containerfile): the
# first start runs the spec, every later start (a new pod after a node drain, a restart
# after a crash) resumes the same run from the volume, and a start after the run has
# finished says so and exits with the run's own code, so re-applying the Job is harmless.
#
# Not PID 1 itself: tini is, and catches every signal from its first instruction (the
# kernel drops a signal that a pid namespace's init has no handler for). A SIGTERM that
# tini forwards before `runner` has started kills this shell, or `runner` in its
# interpreter's start-up, before anything of the run was started (tini exits 143); from
# `runner`'s first instruction on it is a stop of the run (STOPPED, recorded).
#
# The run directory's parent is this user's own directory (0700), made here: a volume
# root that Kubernetes' fsGroup makes group-writable (2775), or an emptyDir (0777), is
# one that `runner run` rightly refuses to create a run directory in (FOREIGN_DIR, the
# safe.directory rule). The runner checks the directory made here instead: this user's,
# private. A link or someone else's directory planted in its place is refused.
set -eu
spec=${RUNNER_SPEC:-/etc/runner/spec.toml}
run_dir=${RUNNER_RUN_DIR:-/runs/runner/job}
own=$(dirname "$run_dir")
mkdir -m 0700 "$own" 2>/dev/null || : # ablate: entrypoint-own-dir
if [ -L "$own" ] || { [ -e "$own" ] && [ ! -d "$own" ]; }; then
    echo "runner-entrypoint: $own: not a directory (a link or a file): refused, the run's directory goes only in a directory of this user's" >&2
    exit 13 # FOREIGN_DIR (docs/exit-codes.md)
fi
if [ -e "$run_dir/state.json" ]; then
    # The run's status, as `runner status --json` decides it (from its files: the run's
    # engine, of another pod's pid namespace, is not looked for). A finished run exits with
    # its own code; anything else is resume's to continue, or to report on its own line.
    status=$(runner status --json --run-dir "$run_dir" 2>/dev/null |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["status"])' 2>/dev/null) || status=
    case $status in
    completed)
        echo "runner-entrypoint: the run in $run_dir already completed: nothing to do" >&2
        exit 0
        ;;
    failed)
        echo "runner-entrypoint: the run in $run_dir already completed with failed items (runner status --run-dir $run_dir)" >&2
        exit 3
        ;;
    esac
    exec runner resume --run-dir "$run_dir"
fi
exec runner run "$spec" --run-dir "$run_dir"
