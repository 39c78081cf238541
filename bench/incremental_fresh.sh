#!/bin/bash
# incremental_fresh.sh BIN: a fresh data dir, seedbench indexing-002 --scale 1 --keep (JS only), then bench/incremental_query.py 5996 50 (SEEDBENCH: path of seedbench.py)
BIN=$1; D=$(mktemp -d /tmp/settee-incr.XXXX)
setsid $BIN serve --data-dir $D --bind 127.0.0.1:5996 --admin adm:pass > $D.log 2>&1 &
sleep 2
python3 "${SEEDBENCH:-../shared/bench/seedbench.py}" indexing-002 --scale 1 --keep --no-python --url http://adm:pass@127.0.0.1:5996 > $D.seed 2>&1
grep -E "builtin _sum " $D.seed | head -1
(cd "$(dirname "$0")" && python3 incremental_query.py 5996 50)
pkill -f "$D --bind"; sleep 1; rm -rf $D $D.log $D.seed
