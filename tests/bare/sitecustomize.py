"""A bare install, as a reader's laptop or a Colab runtime has it: the TPU compiler
(libtpu) and the GPU compiler (the CUDA plugin) look not installed.

`make test` runs its 4-device nbval pass with this folder on PYTHONPATH, so every
kernel imports this module at start-up (Python's `site` imports any `sitecustomize` on
the path). The chapters ask `importlib.util.find_spec` whether a compiler is installed
(`target_devices` in tests/helpers.py); here it answers None for both, so each chapter
takes the path a reader without them takes: one line saying what it skipped, and no
check that needs the missing compiler. Nothing is uninstalled: other passes use both."""

import importlib.util

HIDDEN = ("libtpu", "jax_plugins.xla_cuda13")
_find_spec = importlib.util.find_spec


def find_spec(name, package=None):
    if any(name == hidden or name.startswith(hidden + ".") for hidden in HIDDEN):
        return None
    return _find_spec(name, package)


importlib.util.find_spec = find_spec
