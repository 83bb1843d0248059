#!/usr/bin/env bash
# test-under-load.sh [N] runs `make test` N times in a row (default 3) with a
# CPU-heavy process beside it (`yes > /dev/null`, one full core), as issue 17
# asks of the suite: no test may depend on timing that load changes. It
# stops at the first failure, prints each run's exit status and seconds,
# and leaves each run's output in test-under-load-K.log (the current
# directory). Run it from the repository's root on a 2-core machine.
set -u
n=${1:-3}
for k in $(seq 1 "$n"); do
  yes > /dev/null & hog=$!
  start=$(date +%s)
  make test > "test-under-load-$k.log" 2>&1; rc=$?
  kill "$hog" 2>/dev/null; wait "$hog" 2>/dev/null
  echo "run $k of $n: exit $rc, $(( $(date +%s) - start )) s (output: test-under-load-$k.log)"
  [ "$rc" = 0 ] || exit "$rc"
done
