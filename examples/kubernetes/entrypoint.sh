#!/bin/sh
# The container's entrypoint: the first start runs the spec, every later start (a new
# pod after a node drain, a restart after a crash) resumes the same run from the volume.
# `exec`, so that `runner` itself is PID 1: it reaps every zombie and takes the runtime's
# SIGTERM as `runner stop` (hard, bounded, the whole tree).
set -eu
spec=${RUNNER_SPEC:-/etc/runner/spec.toml}
run_dir=${RUNNER_RUN_DIR:-/runs/job}
if [ -e "$run_dir/state.json" ]; then
    exec runner resume --run-dir "$run_dir"
fi
exec runner run "$spec" --run-dir "$run_dir"
