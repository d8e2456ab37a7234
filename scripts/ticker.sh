# shellcheck shell=bash
# Sourced by scripts/setup.sh and scripts/studio.sh: a long step says what it does, and that it still does.
#   ticking "installing torch" pip install torch     # "setup: installing torch", then every CALM_TICK_S
#                                                    # seconds (15) "setup: still installing torch (45 s)"
# The command runs in the foreground and its exit status is ticking's. The ticker's own `sleep` holds no
# output open, so a reader of the script's output sees its end as soon as the script ends.
# tests/test_ticker.py runs a stubbed long step and checks the gaps between the lines.
ticking() {
    local what="$1" every="${CALM_TICK_S:-15}" prefix="${TICK_PREFIX:-setup}" start=$SECONDS ticker status=0
    shift
    echo "$prefix: $what"
    (
        while sleep "$every" </dev/null >/dev/null 2>&1; do
            echo "$prefix: still $what ($((SECONDS - start)) s)"
        done
    ) &
    ticker=$!
    "$@" || status=$?
    kill "$ticker" 2>/dev/null
    wait "$ticker" 2>/dev/null || true
    return "$status"
}
