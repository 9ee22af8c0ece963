#!/usr/bin/env bash
# Runs one phase of `make test` and records its wall seconds: tests/phase.sh NAME COMMAND...
# (tests/phases.py prints the record at the end and appends it to bench/chapter-times.jsonl).
name="$1"; shift
start=$(date +%s%N)
"$@"; status=$?
echo "$name $(( ($(date +%s%N) - start) / 1000000 ))" >> _build/phases.txt
exit $status
