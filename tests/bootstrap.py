# Bootstrap, the first cell of every chapter: it picks the devices before JAX starts.
# Another count of simulated CPU devices (4, 8, 16, 32 or 64; 8 by default): set
# JAX_NUM_CPU_DEVICES before this cell runs in a fresh kernel, with
# `%env JAX_NUM_CPU_DEVICES=16` in a cell above it, or in the shell that starts Jupyter.
# The notebook asks Colab and Kaggle for a TPU runtime: Kaggle's TPU v5e-8 has 8 chips,
# and the chapter runs on them; Colab's free TPU is one chip, too few, so this cell
# simulates CPU devices there and says so (any runtime works).
import os
import re
import sys


class SetupError(RuntimeError):
    def _render_traceback_(self):  # IPython shows this line instead of a traceback
        return [f"SetupError: {self}"]


def stop(message):
    if "ipykernel" in sys.modules:
        raise SetupError(message)
    sys.exit(message)


# JAX reads this variable too: check it first. Set but empty, it counts as unset (JAX
# itself refuses it); unset, XLA's flag that many tutorials set gives the count.
SIMULATED, source = os.environ.get("JAX_NUM_CPU_DEVICES"), "JAX_NUM_CPU_DEVICES"
if not SIMULATED:
    os.environ.pop("JAX_NUM_CPU_DEVICES", None)
    flag = re.search(r"(--xla_force_host_platform_device_count)=(\S+)",
                     os.environ.get("XLA_FLAGS", ""))
    source, SIMULATED = flag.groups() if flag else (source, "8")
if SIMULATED not in ("4", "8", "16", "32", "64"):
    stop(f"{source}={SIMULATED!r} makes no sense here: the book simulates "
         "4, 8, 16, 32 or 64 CPU devices (8 when the variable is unset).")
import jax
import jax.extend.backend
from jax._src import hardware_utils  # JAX's own search for accelerator chips

if tuple(int(p) for p in jax.__version__.split(".")[:2]) < (0, 12):
    stop(f"This book needs JAX >= 0.12, found {jax.__version__}. Run "
         '`pip install -U "jax>=0.12"` ("jax[tpu]>=0.12" on a TPU runtime), '
         "then restart the runtime.")
# Colab and Kaggle lack some of the packages the chapters import: install those missing,
# at the versions of the book's lock (requirements.txt), and say so in one line.
import importlib.util
import subprocess


def missing(module):
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:  # its parent package is missing
        return True


NEEDED = {"tabulate": "tabulate==0.10.0", "termcolor": "termcolor==3.3.0",
          "optax": "optax==0.2.8", "orbax.checkpoint": "orbax-checkpoint==0.12.8",
          "graphviz": "graphviz==0.21", "matplotlib": "matplotlib==3.11.2",
          "cryptography": "cryptography==50.0.2"}
wanted = [pin for module, pin in NEEDED.items() if missing(module)]
if wanted:
    print(f"Installing {', '.join(wanted)}: missing here")
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", *wanted],
                         capture_output=True, text=True)
    if pip.returncode:
        stop(f"pip could not install {' '.join(wanted)}: {pip.stderr.strip()[-300:]}")
    importlib.invalidate_caches()
why_simulated = ""
try:  # raises only if JAX started already (this cell ran before): keep those devices
    jax.config.update("jax_num_cpu_devices", int(SIMULATED))
    if not os.environ.get("JAX_PLATFORMS"):
        # Start only what this machine has: JAX would try every installed plugin
        # (the book installs the TPU and GPU compilers) and log each that finds no chip.
        chips = ("tpu," if hardware_utils.num_available_tpu_chips_and_device_id()[0]
                 else "cuda," if hardware_utils.has_visible_nvidia_gpu()
                 else "rocm," if hardware_utils.num_available_amd_gpus(stop_at=1)
                 else "")
        jax.config.update("jax_platforms", chips + "cpu")
    try:
        found = jax.devices()
    except RuntimeError as err:  # chips, but JAX's plugin for them is missing or failed
        why_simulated = f" (JAX_PLATFORMS={jax.config.jax_platforms} failed: {err})"
        jax.config.update("jax_platforms", "cpu")
        jax.extend.backend.clear_backends()
        found = jax.devices()
    n = len(found)
    # Real accelerators serve when there are 4, 8, 16, ... of them.
    if found[0].platform != "cpu" and (n < 4 or n & (n - 1)):
        why_simulated = (f" (found {n} {found[0].device_kind}; "
                         "the book needs 4, 8, 16, ... accelerators)")
        jax.config.update("jax_platforms", "cpu")
        jax.extend.backend.clear_backends()
except RuntimeError:
    if jax.default_backend() == "cpu" and jax.device_count() != int(SIMULATED):
        why_simulated = (f" (JAX started with these before; restart the kernel "
                         f"for {SIMULATED})")
devices = jax.devices()
kind = ("simulated CPU devices" if devices[0].platform == "cpu"
        else f"real {devices[0].device_kind} devices")
print(f"JAX {jax.__version__} on {jax.default_backend()}: "
      f"{len(devices)} {kind}{why_simulated}")
