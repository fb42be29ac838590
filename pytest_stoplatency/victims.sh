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
# Children report readiness through fd 3 (a FIFO opened read-write, then unlinked),
# so the ready file is written only when every process has its disposition.

trap '' HUP INT

KIND=$1 SLEEP=${2:-7200} CHILDREN=${3:-2} CLEANUP=${4:-1}
SLEEP=${SLEEP%.*}; [ -n "$SLEEP" ] || SLEEP=0
SELF=$0

h() { :; }

# Sleep until SLEEP seconds after this shell started, surviving a killed `sleep`.
linger() {
    while (( SECONDS < SLEEP )); do
        sleep $(( SLEEP - SECONDS )) &
        wait $!
    done
}

ticks() {  # start ticks of $1 (field 22 of /proc/PID/stat)
    local line rest
    read -r line < /proc/$1/stat
    rest=${line##*) }
    set -- $rest
    echo "${20}"
}

CHILD_PIDS=()
EXTRAS=""
NREADY=0

handshake_open() {
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
    local tmp=$STOPLATENCY_READY.tmp.$$ kids=""
    local p
    for p in "${CHILD_PIDS[@]}"; do kids+="${kids:+, }$p"; done
    printf '{"pid": %d, "start_ticks": %d, "kind": "%s", "lang": "bash", "token": "%s", "children": [%s], "extras": [%s]}\n' \
        $$ "$(ticks $$)" "$KIND" "$STOPLATENCY_VICTIM" "$kids" "$EXTRAS" > "$tmp"
    mv -f "$tmp" "$STOPLATENCY_READY"  # atomic rename: the reader never sees half a file
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
        wait -n
        alive=()
        for p in "${CHILD_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive+=("$p"); done
        while (( ${#alive[@]} < n )); do trapping_child & alive+=($!); done
        CHILD_PIDS=("${alive[@]}")
    done
}

k_env_scrubber() {
    trap h TERM
    handshake_open
    # No token past env -i: the grandchild must be one process (a recorded extra),
    # so it ignores SIGTERM and execs sleep instead of lingering with a child.
    env -i setsid bash "$SELF" __scrubbed "$SLEEP" & local p=$!
    NREADY=1
    await_children
    CHILD_PIDS+=($p)
    EXTRAS="{\"role\": \"scrubbed\", \"pid\": $p, \"start_ticks\": $(ticks $p)}"
    write_ready; linger
}

case $KIND in
    __child) trap h TERM; echo r >&3; exec 3>&-; linger ;;
    __scrubbed) trap '' TERM; echo r >&3; exec 3>&-; exec sleep "$SLEEP" ;;
    cooperative|trap-term|ignore-term|slow-exit|forker|escapee|double-fork|pipe-holder|respawner|stopped|env-scrubber)
        "k_${KIND//-/_}" ;;
    *) echo "unknown victim kind: $KIND" >&2; exit 2 ;;
esac
