#!/bin/bash
# seedbench indexing-002 at --scale 1 against a Settee started on an empty data directory,
# printing seedbench's build rows and the server's own round timings; the server is stopped
# afterwards. Usage: bench/seedbench_fresh.sh PORT [seedbench args, e.g. --no-python]
# The binary is $SETTEE_BIN (default: the release build in $CARGO_TARGET_DIR or target/).
set -u
P=$1; shift
BIN=${SETTEE_BIN:-${CARGO_TARGET_DIR:-target}/release/settee}
DIR=$(mktemp -d)
SETTEE_LOG=settee_views=debug "$BIN" serve --data-dir "$DIR" --bind 127.0.0.1:$P --admin adm:pass > "$DIR.log" 2>&1 &
PID=$!
sleep 2
python3 "$(dirname "$0")/../../shared/bench/seedbench.py" indexing-002 --scale 1 \
    --url http://adm:pass@127.0.0.1:$P "$@" 2>&1 | grep -E "JS map|Python map"
grep "view update round" "$DIR.log" | sed 's/.*ddoc=//'
kill $PID; wait $PID
rm -rf "$DIR" "$DIR.log"
