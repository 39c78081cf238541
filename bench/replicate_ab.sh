#!/usr/bin/env bash
# Side-by-side one-shot local replication (not a test): for each round, each settee binary
# given is started on the same data directory, replicates SOURCE into a fresh target with
# one `POST /_replicate`, and is stopped; alternating binaries evens out machine drift.
#
#   DATA=/tmp/rb1 SOURCE=peerbench-repl-src bench/replicate_ab.sh old/settee new/settee
#
# DATA must hold SOURCE (e.g. left by `peerbench.py replicate --keep`) and the admin
# admin:admin. Prints docs/s per binary and round.
set -euo pipefail
DATA="${DATA:?set DATA to a data directory}"
SOURCE="${SOURCE:-peerbench-repl-src}"
URL=http://admin:admin@127.0.0.1:5995
for round in 1 2; do
  for bin in "$@"; do
    "$bin" serve --data-dir "$DATA" --bind 127.0.0.1:5995 --admin admin:admin >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 50); do curl -s -o /dev/null "$URL/" && break; sleep 0.2; done
    curl -s -o /dev/null -X DELETE "$URL/ab-target"
    start=$(date +%s.%N)
    out=$(curl -s -X POST "$URL/_replicate" -H 'content-type: application/json' \
      -d "{\"source\":\"$SOURCE\",\"target\":\"ab-target\",\"create_target\":true}")
    end=$(date +%s.%N)
    kill "$pid"; wait "$pid" || true
    python3 -c "import json,sys; n=json.loads(sys.argv[1])['history'][0]['docs_written']; \
print('%s round %s: %d docs in %.2f s = %.0f docs/s' % (sys.argv[2], sys.argv[3], n, \
float(sys.argv[5]) - float(sys.argv[4]), n / (float(sys.argv[5]) - float(sys.argv[4]))))" \
      "$out" "$bin" "$round" "$start" "$end"
  done
done
