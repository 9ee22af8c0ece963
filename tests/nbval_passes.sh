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
# The strict pass and the passes with the compilers share one record of what the TPU and
# GPU compilers made of each program (tests/compile_cache/sitecustomize.py, emptied here
# first): a program both compile for the same target is compiled once.
# Each pass logs to _build/nbval-NAME.log; the logs are shown in that order once all have
# ended, and the script fails if any pass failed. Usage: tests/nbval_passes.sh PYTHON COUNTS...
# (NOTEBOOKS="notebooks/10_pipeline.ipynb" tests/nbval_passes.sh ... runs fewer chapters.)
py="$1"; shift
nb=${NOTEBOOKS:-notebooks}
mkdir -p _build
record="_build/compile-cache"
rm -rf "$record"
cache=("PYTHONPATH=$PWD/tests/compile_cache${PYTHONPATH:+:$PYTHONPATH}"
       "BOOK_COMPILE_CACHE=$PWD/$record")
declare -A pids
echo "${cache[*]} BOOK_CPU=varied $py -m pytest --nbval --nbval-current-env $nb tests/test_timing.py"
env "${cache[@]}" BOOK_CPU=varied "$py" -m pytest --nbval --nbval-current-env $nb tests/test_timing.py \
  > _build/nbval-strict.log 2>&1 &
pids[strict]=$!
for k in "$@"; do
  extra=("${cache[@]}")
  [ "$k" = "${BARE_COUNT:-}" ] && extra=("PYTHONPATH=$PWD/tests/bare${PYTHONPATH:+:$PYTHONPATH}")
  echo "${extra[*]}${extra:+ }BOOK_DEVICES=$k $py -m pytest -q --nbval-lax --nbval-current-env $nb"
  env "${extra[@]}" BOOK_DEVICES=$k "$py" -m pytest -q --nbval-lax --nbval-current-env $nb \
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
[ -f "$record/log.txt" ] && echo "compile-only builds: $(grep -c ^compiled "$record/log.txt")" \
  "compiled, $(grep -c ^read "$record/log.txt") read from the record ($record)"
[ -z "$failed" ] || { echo "nbval failed:$failed"; exit 1; }
