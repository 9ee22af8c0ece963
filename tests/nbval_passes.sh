#!/usr/bin/env bash
# The notebooks' three nbval passes of `make test`, side by side on the machine's cores:
#   strict   8 simulated devices on varied CPU code paths (BOOK_CPU=varied, conftest.py),
#            every output compared with the stored one, chapter times recorded and judged
#            (tests/test_timing.py);
#   k        for each k in OTHER_COUNTS (4 and 64), outputs not compared: every cell and
#            every assert must pass with the mesh shapes that count gives. The pass at
#            BARE_COUNT (make test: 64) runs as a bare install, libtpu and the CUDA plugin
#            hidden (tests/bare/sitecustomize.py): every chapter must then skip, with one
#            line, what needs a missing compiler, as on a reader's laptop or Colab.
# Each pass logs to _build/nbval-NAME.log; the logs are shown in that order once all have
# ended, and the script fails if any pass failed. Usage: tests/nbval_passes.sh PYTHON COUNTS...
# (NOTEBOOKS="notebooks/10_pipeline.ipynb" tests/nbval_passes.sh ... runs fewer chapters.)
py="$1"; shift
nb=${NOTEBOOKS:-notebooks}
mkdir -p _build
declare -A pids
echo "BOOK_CPU=varied $py -m pytest --nbval --nbval-current-env $nb tests/test_timing.py"
BOOK_CPU=varied "$py" -m pytest --nbval --nbval-current-env $nb tests/test_timing.py \
  > _build/nbval-strict.log 2>&1 &
pids[strict]=$!
for k in "$@"; do
  bare=()
  [ "$k" = "${BARE_COUNT:-}" ] && bare=("PYTHONPATH=$PWD/tests/bare${PYTHONPATH:+:$PYTHONPATH}")
  echo "${bare[*]}${bare:+ }BOOK_DEVICES=$k $py -m pytest -q --nbval-lax --nbval-current-env $nb"
  env "${bare[@]}" BOOK_DEVICES=$k "$py" -m pytest -q --nbval-lax --nbval-current-env $nb \
    > "_build/nbval-$k.log" 2>&1 &
  pids[$k]=$!
done
failed=""
for name in strict "$@"; do
  wait "${pids[$name]}" || failed="$failed $name"
done
for name in strict "$@"; do
  echo "--- nbval $name:"; cat "_build/nbval-$name.log"
done
[ -z "$failed" ] || { echo "nbval failed:$failed"; exit 1; }
