#!/usr/bin/env bash
# The checks of `make test` after the lint, as three jobs side by side on the machine's
# cores, each a phase (tests/phase.sh) with its own log in _build/:
#   static     the tests of the sources, outputs, helpers, bootstrap and bench copies;
#   site       the site built with warnings as errors, then the browser check of it (it
#              reads the stored outputs, which nbval compares but never rewrites);
#   nbval      the notebooks' three passes (tests/nbval_passes.sh), the longest job.
# The nbval passes alone keep both cores busy for most of their run; the other two jobs
# fill what they leave idle (their start-up, the tail where one pass is left), so the
# whole ends soon after nbval does rather than a static and a site phase after it.
# Nothing is lost by the overlap: each job checks what it checked when they ran one after
# another. tests/test_leftovers.py runs after all three, when every kernel has ended.
# Usage: tests/checks_side_by_side.sh PYTHON COUNTS... (BARE_COUNT as for nbval_passes.sh)
py="$1"; shift
mkdir -p _build
tests/phase.sh "static tests" "$py" -m pytest tests/test_sources.py tests/test_outputs.py \
  tests/test_helpers.py tests/test_bootstrap.py tests/test_bench.py tests/test_compile_cache.py \
  > _build/static.log 2>&1 &
static=$!
{ tests/phase.sh "site" make --no-print-directory site \
    && tests/phase.sh "browser" "$py" -m pytest tests/test_browser.py; } > _build/site.log 2>&1 &
site=$!
counts=$(printf '%s, ' "$@")
tests/phase.sh "nbval: 8 strict (varied CPU paths), ${counts%, } (${BARE_COUNT:-none} bare)" \
  tests/nbval_passes.sh "$py" "$@"
status=$?
failed=""
[ $status = 0 ] || failed="nbval"
wait $static || failed="$failed static"
wait $site || failed="$failed site"
echo "--- static tests:"; cat _build/static.log
echo "--- site and browser:"; cat _build/site.log
[ -z "$failed" ] || { echo "make test failed: $failed"; exit 1; }
