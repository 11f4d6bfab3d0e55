#!/usr/bin/env bash
# Run every fuzz target under pkg/ and internal/ for a short time each (FUZZTIME, 10s by
# default) and print each one's executions per second. Targets are found
# by grep, so a new FuzzX joins without editing this script. A failing
# input is kept by go test under the package's testdata/fuzz/FuzzX/;
# commit it, and it runs with the unit tests from then on.
#
#   scripts/fuzz.sh                 # every target, 10s each
#   FUZZTIME=60s scripts/fuzz.sh Pickle   # targets whose name matches
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=1
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g}"
fuzztime=${FUZZTIME:-10s}
filter=${1:-}

status=0
summary=""
while IFS=: read -r file name; do
  [[ -n "$filter" && "$name" != *"$filter"* ]] && continue
  pkg=./$(dirname "$file")
  echo "== $name ($pkg, $fuzztime)"
  log=$(mktemp)
  # Minimizing each new input is capped at 50 runs: by default it may take
  # a minute, during which nothing else is explored (FuzzReadPickle ran a
  # dozen inputs a minute so).
  if go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -fuzzminimizetime 50x "$pkg" >"$log" 2>&1; then
    result=ok
  elif grep -q 'Failing input written to' "$log"; then
    # a real failure: go test kept the input under testdata/fuzz
    result=FAIL
    status=1
    cat "$log"
  else
    # the fuzzing engine itself gave up (a worker starved on a loaded
    # machine): nothing was found, so say so without failing the run
    result="engine stopped: $(grep -v '^fuzz: elapsed' "$log" | tail -1)"
  fi
  # the last progress line: "fuzz: elapsed: 10s, execs: 123456 (12345/sec), ..."
  last=$(grep -o 'elapsed: [0-9]*s, execs: [0-9]*' "$log" | tail -1 || true)
  secs=$(sed -E 's/elapsed: ([0-9]+)s.*/\1/' <<<"$last")
  execs=$(sed -E 's/.*execs: ([0-9]+)/\1/' <<<"$last")
  rate="?"
  if [[ -n "$secs" && "$secs" -gt 0 ]]; then rate=$((execs / secs)); fi
  summary+=$(printf '%-22s %-24s %8s execs %8s/sec  %s' "$name" "$pkg" "${execs:-?}" "$rate" "$result")$'\n'
  rm -f "$log"
done < <(grep -rHo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*' pkg internal | sed 's/:func /:/' | sort)

echo
echo "$summary"
exit $status
