# Bootstrap, the first cell of every chapter: it picks the devices before JAX starts.
import os
import sys

# JAX reads this variable too: check it first.
SIMULATED = os.environ.get("JAX_NUM_CPU_DEVICES", "")
if not SIMULATED:  # unset, or set but empty (which JAX itself refuses): the default
    os.environ.pop("JAX_NUM_CPU_DEVICES", None)
    SIMULATED = "8"
if SIMULATED not in ("4", "8", "16", "32", "64"):
    sys.exit(f"JAX_NUM_CPU_DEVICES={SIMULATED!r} makes no sense here: the book "
             "simulates 4, 8, 16, 32 or 64 CPU devices (8 when the variable is unset).")
import jax
import jax.extend.backend
from jax._src import hardware_utils  # JAX's own search for accelerator chips

if tuple(int(p) for p in jax.__version__.split(".")[:2]) < (0, 12):
    sys.exit(f"This book needs JAX >= 0.12, found {jax.__version__}. Run "
             '`pip install -U "jax>=0.12"` ("jax[tpu]>=0.12" on a TPU runtime), '
             "then restart the runtime.")
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
    pass
devices = jax.devices()
kind = ("simulated CPU devices" if devices[0].platform == "cpu"
        else f"real {devices[0].device_kind} devices")
print(f"JAX {jax.__version__} on {jax.default_backend()}: "
      f"{len(devices)} {kind}{why_simulated}")
