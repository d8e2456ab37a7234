# shellcheck shell=bash
# Sourced by scripts/setup.sh and scripts/studio.sh: a long step says what it does, and that it still does.
#   ticking "installing torch" pip install torch
# prints "setup: installing torch", passes the command's output (stdout and stderr, as one stream) through
# line by line, and whenever CALM_TICK_S seconds (15) pass without a line, prints
# "setup: still installing torch (45 s)". A step that speaks for itself (the model conversion's own
# Ticker, calm_core/scoring/progress.py, which ticks a little sooner: TICK_S) is therefore not
# doubled, and its silent start (Python's imports) is covered. TICK_PREFIX replaces "setup".
# The command's exit status is ticking's.
# tests/test_ticker.py runs stubbed long steps and checks the gaps between the lines.
ticking() {
    local what="$1" every="${CALM_TICK_S:-15}" prefix="${TICK_PREFIX:-setup}" start=$SECONDS
    local -a status
    shift
    echo "$prefix: $what"
    "$@" 2>&1 | _tick_through "$prefix: still $what" "$every" "$start"
    status=("${PIPESTATUS[@]}")
    return "${status[0]}"
}

# Lines from stdin to stdout; "$1 (N s)" after each $2 seconds without one (N: seconds since $3).
# A line that is still arriving when the time is up counts as speech: it is kept whole, not cut.
_tick_through() {
    local line code pending=""
    while true; do
        code=0
        IFS= read -r -t "$2" line || code=$?
        if [ "$code" -eq 0 ]; then
            printf '%s\n' "$pending$line"
            pending=""
        elif [ "$code" -gt 128 ] && [ -n "$line" ]; then
            pending="$pending$line"  # timed out in the middle of a line: the step is speaking
        elif [ "$code" -gt 128 ]; then
            echo "$1 ($((SECONDS - $3)) s)"
        else
            [ -z "$pending$line" ] || printf '%s\n' "$pending$line"  # a last line without its newline
            return 0
        fi
    done
}
