#!/usr/bin/env bash
# Runs one phase of `make test` and records when it started and ended (milliseconds since
# the epoch): tests/phase.sh NAME COMMAND... (tests/phases.py prints the record at the end
# and appends it to bench/chapter-times.jsonl). Phases may run side by side.
name="$1"; shift
start=$(( $(date +%s%N) / 1000000 ))
"$@"; status=$?
printf '%s\t%s\t%s\n' "$name" "$start" "$(( $(date +%s%N) / 1000000 ))" >> _build/phases.txt
exit $status
