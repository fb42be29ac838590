# The bash victims: bash victims.sh KIND SLEEP CHILDREN CLEANUP
#
# One function per kind. Bash pitfalls this file is written around:
# - `bash -c "trap '' TERM; sleep 7200"` execs sleep in place; a script file does
#   not, but to be sure every kind keeps its shell alive in a loop.
# - a shell in a foreground `sleep` with a handler trap dies with the group's SIGTERM
#   killing that sleep only if it waits on it in the foreground; so the adversarial
#   kinds loop `sleep & wait $!` and restart the sleep the SIGTERM killed.
# - handler traps are reset in subshells: every child sets its own.
# - SIG_IGN (trap '') IS inherited by children and exec'd programs.
# The token and ready path come in the environment (STOPLATENCY_VICTIM, STOPLATENCY_READY).
# Children report readiness through fd 3 (a pipe opened read-write), so the ready
# file is written only when every process has its disposition.
#
# Start cost: every fork+exec costs about a millisecond, so the start path uses
# builtins where one exists: pipes come from a here-string (no mkfifo, no rm), the
# shells sleep with `read -t` on a pipe nobody writes (no sleep(1) children), start
# ticks are read without a command substitution, and the environment is dropped with
# `exec -c` (no env -i). Only the atomic publish still needs mv (bash cannot rename).

trap '' HUP INT

KIND=$1 SLEEP=${2:-7200} CHILDREN=${3:-2} CLEANUP=${4:-1}
SLEEP=${SLEEP%.*}; [ -n "$SLEEP" ] || SLEEP=0
SELF=$0

h() { :; }

# open_pipe FD: FD (3 or 9) on a new pipe, both ends in one read-write fd, without a
# fork. A small here-string is a pipe (bash >= 5.1); reopening it through /proc gives
# a fd that is also a writer, so a read on it never sees EOF. False where that fails
# (an older bash's here-string is a temporary file): the callers then fork as before.
open_pipe() {
    local t ok=0
    exec {t}<<<'' 2>/dev/null || return 1
    case $1 in
        3) exec 3<>"/proc/self/fd/$t" && ok=1 ;;
        9) exec 9<>"/proc/self/fd/$t" && ok=1 ;;
    esac 2>/dev/null
    exec {t}<&-
    (( ok )) && [[ -p /dev/fd/$1 ]] && read -r -u "$1"  # drop the here-string's newline
}

# fd 9: the pipe every shell of this victim sleeps on. Opened by each bash that runs
# this file (never one inherited from whoever started us: someone might write to it).
if open_pipe 9; then LINGER_PIPE=1; else exec 9<&-; LINGER_PIPE=0; fi

# Sleep until SLEEP seconds after this shell started. `read -t` keeps waiting when a
# trap handler runs (a trapped SIGTERM does not end it) and ignores SIG_IGN'd signals;
# the loop covers the rest. Without the pipe: `sleep & wait`, restarting a killed sleep.
linger() {
    while (( SECONDS < SLEEP )); do
        if (( LINGER_PIPE )); then
            read -r -t $(( SLEEP - SECONDS )) -u 9
        else
            sleep $(( SLEEP - SECONDS )) &
            wait $!
        fi
    done
}

ticks() {  # TICKS=start ticks of $1 (field 22 of /proc/PID/stat); no $(...) fork
    local line rest
    read -r line < /proc/$1/stat
    rest=${line##*) }
    set -- $rest
    TICKS=${20}
}

CHILD_PIDS=()
EXTRAS=""
NREADY=0

handshake_open() {
    open_pipe 3 && return 0
    local fifo=${STOPLATENCY_READY:-/tmp/stoplatency-victim.$$}.fifo
    mkfifo "$fifo" && exec 3<>"$fifo" && rm -f "$fifo"
}

# A child: set the trap, then tell the parent through fd 3, then linger.
trapping_child() { trap h TERM; echo r >&3; exec 3>&-; linger; }
plain_child() { echo r >&3; exec 3>&-; linger; }

await_children() {
    local line i
    for (( i = 0; i < NREADY; i++ )); do read -r -u 3 line; done
    exec 3>&-
}

write_ready() {
    [ -n "$STOPLATENCY_READY" ] || return 0
    local kids="" p
    for p in "${CHILD_PIDS[@]}"; do kids+="${kids:+, }$p"; done
    ticks $$
    # The publisher: a subshell that names itself in the file, then becomes mv (the
    # atomic rename: the reader never sees half a file). It is still exiting when the
    # file appears, so adopt() waits for it to be gone: the handle never shows a
    # transient member (a snapshot taken right after would see it die).
    (
        tmp=$STOPLATENCY_READY.tmp.$BASHPID
        printf '{"pid": %d, "start_ticks": %d, "kind": "%s", "lang": "bash", "token": "%s", "children": [%s], "extras": [%s], "publisher": %d}\n' \
            $$ "$TICKS" "$KIND" "$STOPLATENCY_VICTIM" "$kids" "$EXTRAS" "$BASHPID" > "$tmp"
        exec mv -f "$tmp" "$STOPLATENCY_READY"
    )
}

k_cooperative() { write_ready; linger; }
k_trap_term() { trap h TERM; write_ready; linger; }
k_stopped() { trap h TERM; write_ready; kill -STOP $$; linger; }

k_ignore_term() {
    trap '' TERM
    handshake_open
    local i
    for (( i = 0; i < CHILDREN; i++ )); do plain_child & CHILD_PIDS+=($!); NREADY=$((NREADY + 1)); done
    await_children; write_ready; linger
}

k_slow_exit() { trap 'sleep "$CLEANUP"; exit 0' TERM; write_ready; linger; }

k_forker() {
    trap h TERM
    handshake_open
    local i
    for (( i = 0; i < CHILDREN; i++ )); do trapping_child & CHILD_PIDS+=($!); NREADY=$((NREADY + 1)); done
    await_children; write_ready; linger
}

k_escapee() {
    trap h TERM
    handshake_open
    # setsid(1) execs in place: a background child is not a group leader.
    setsid bash "$SELF" __child "$SLEEP" & CHILD_PIDS+=($!); NREADY=1
    await_children; write_ready; linger
}

k_double_fork() {
    trap h TERM
    handshake_open
    ( trapping_child & exit 0 ) &
    wait $!   # reap the intermediate: the daemon is re-parented away from us
    NREADY=1
    await_children; write_ready; linger
}

k_pipe_holder() {
    # The shell dies on SIGTERM; its child keeps stdout open after it.
    handshake_open
    trapping_child & CHILD_PIDS+=($!); NREADY=1
    await_children; write_ready; linger
}

k_respawner() {
    trap h TERM
    handshake_open
    local i n=$(( CHILDREN > 0 ? CHILDREN : 1 ))
    for (( i = 0; i < n; i++ )); do trapping_child & CHILD_PIDS+=($!); NREADY=$((NREADY + 1)); done
    await_children; write_ready
    exec 3<>/dev/null   # later children get a harmless fd 3
    local p alive
    while (( SECONDS < SLEEP )); do
        # Look before waiting: a child that died while write_ready's mv ran in the
        # foreground was reaped then, and `wait -n` would wait for the next death only.
        alive=()
        for p in "${CHILD_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive+=("$p"); done
        while (( ${#alive[@]} < n )); do trapping_child & alive+=($!); done
        CHILD_PIDS=("${alive[@]}")
        wait -n
    done
}

# record_extra: append this process to <id>.extras (pid + start ticks), while it still
# carries the token: a kill at any later moment finds it by token or by this line.
record_extra() {
    [ -n "$STOPLATENCY_READY" ] || return 0
    ticks $BASHPID
    printf '%d %d\n' "$BASHPID" "$TICKS" >> "${STOPLATENCY_READY%.ready}.extras"
}

k_env_scrubber() {
    trap h TERM
    handshake_open
    # No token past `exec -c` (an empty environment, as env -i): the grandchild must be
    # one process (a recorded extra), so it ignores SIGTERM and never forks a sleep.
    # It records itself first (setsid(1) execs in place: the pid stays).
    { record_extra; exec -c setsid bash "$SELF" __scrubbed "$SLEEP"; } & local p=$!
    NREADY=1
    await_children
    CHILD_PIDS+=($p)
    ticks $p
    EXTRAS="{\"role\": \"scrubbed\", \"pid\": $p, \"start_ticks\": $TICKS}"
    write_ready; linger
}

k_zombie_leader() {
    # A shell has no threads of its own to outlive its main one: the Python program
    # beside this file makes the shape (with the token and ready path of this one).
    exec "${STOPLATENCY_PYTHON:-python3}" -S "${SELF%/*}/victim.py" zombie-leader --sleep "$SLEEP"
}

k_setsid_spawner() {
    trap h TERM
    handshake_open
    { record_extra; exec -c setsid bash "$SELF" __scrubbed "$SLEEP"; } &
    NREADY=1
    await_children
    write_ready
    exec 3<>/dev/null   # later ones get a harmless fd 3
    local n=1
    # Every SPAWN_EVERY seconds one more, env-less (exec -c) in a session of its own,
    # until SPAWN_CAP of them (a victim nothing stops must not fill the machine).
    while (( SECONDS < SLEEP )); do
        if (( n < SPAWN_CAP )); then
            { record_extra; exec -c setsid bash "$SELF" __scrubbed "$SLEEP"; } &
            n=$((n + 1))
        fi
        if (( LINGER_PIPE )); then read -r -t "$SPAWN_EVERY" -u 9; else sleep "$SPAWN_EVERY"; fi
    done
}

SPAWN_EVERY=0.05 SPAWN_CAP=400

case $KIND in
    __child) trap h TERM; echo r >&3; exec 3>&-; linger ;;
    __scrubbed)
        trap '' TERM; echo r >&3; exec 3>&-
        if (( LINGER_PIPE )); then linger; else exec sleep "$SLEEP"; fi ;;
    cooperative|trap-term|ignore-term|slow-exit|forker|escapee|double-fork|pipe-holder|respawner|stopped|env-scrubber|zombie-leader|setsid-spawner)
        "k_${KIND//-/_}" ;;
    *) echo "unknown victim kind: $KIND" >&2; exit 2 ;;
esac
