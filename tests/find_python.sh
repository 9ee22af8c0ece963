#!/usr/bin/env bash
# Prints the path of a Python >= 3.12 (JAX 0.11 and later need it), preferring 3.12, the lock's version.
# Looks on PATH, then in pyenv's versions (pyenv shims fail unless PYENV_VERSION is set, so they are
# called by their real path), then in the usual system places. Says what is missing when none is found.
set -u
ok() { "$1" -c 'import sys, venv; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; }
candidates=()
for v in 3.12 3.13 3.14; do
  candidates+=("$(command -v "python$v" 2>/dev/null)")
  if command -v pyenv >/dev/null 2>&1; then
    for p in $(ls -d "$(pyenv root)"/versions/"$v"*/bin/python3 2>/dev/null | sort -rV); do candidates+=("$p"); done
  fi
  candidates+=("$HOME/.pyenv/versions/$v"*/bin/python3 "/usr/bin/python$v" "/usr/local/bin/python$v")
done
candidates+=("$(command -v python3 2>/dev/null)")
for c in "${candidates[@]}"; do
  [ -n "$c" ] && [ -x "$c" ] && ok "$c" && { echo "$c"; exit 0; }
done
echo "No Python >= 3.12 with venv found (JAX 0.12 needs it). Install one (e.g. 'pyenv install 3.12'," \
     "or Debian's python3.12 and python3.12-venv), or run: make PYTHON=/path/to/python3.12" >&2
exit 1
