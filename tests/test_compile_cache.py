"""make test's shared record of compile-only builds (tests/compile_cache/): a build read
from the record is what a fresh compile of the same program gives, and anything else
changes the key."""

import json
import os

from tests.test_helpers import run_on_simulated_devices

ROOT = os.path.dirname(os.path.dirname(__file__))

# Compiles two programs for the TPU and one for the GPU, once with XLA:GPU's dumped
# schedule (gpu_timeline), and prints what the chapters read of each build.
PROGRAM = """
import json, sys
import jax, jax.numpy as jnp
from jax import P
from tests import helpers
mesh = jax.make_mesh((8,), ("data",))
rows = jax.NamedSharding(mesh, P("data"))
x = jax.device_put(jnp.ones((2048, 512), jnp.bfloat16), rows)
w = jax.device_put(jnp.ones((512, 1024), jnp.bfloat16), rows)
def loss(w, x):  # FSDP: w gathered, its gradient reduce-scattered
    return jnp.mean((x @ w).astype(jnp.float32) ** 2)
grad = jax.grad(loss)
seen, builds = {}, {}
other = {"xla_tpu_enable_windowed_einsum_for_all_gather": False}
for name, target, fn, options in (("tpu", "tpu-v5e-8", grad, None),
                                  ("gpu", "h100-8", grad, None),
                                  ("tpu, other options", "tpu-v5e-8", grad, other),
                                  ("tpu, other program", "tpu-v5e-8", loss, None)):
    b = builds[name] = helpers.compile_for(target, fn, w, x, compiler_options=options)
    m = b.compiled.memory_analysis()
    seen[name] = {"hlo": b.hlo, "collectives": b.collectives, "flops": b.flops,
                  "temp": m.temp_size_in_bytes, "peak": m.peak_memory_in_bytes,
                  "kind": type(b.compiled).__name__}
# another GPU description (compute capability 8.0 for 9.0), the same program
cc9 = "major: 9 feature_extension: ACCELERATED_FEATURES"
hopper = helpers.H100_SXM
helpers.H100_SXM = hopper.replace(cc9, "major: 8").replace("9.0a", "8.0")
b = helpers.compile_for("h100-8", grad, w, x)
seen["gpu, cc 8.0"] = {"hlo": b.hlo, "kind": type(b.compiled).__name__}
helpers.H100_SXM = hopper
# not in the record: compiled for real on demand
seen["tpu"]["out"] = str(builds["tpu"].compiled.output_shardings)
tl = helpers.gpu_timeline(grad, w, x)
seen["timeline"] = {"rows": [list(map(str, r)) for r in tl.rows], "total": tl.total}
print(json.dumps(seen))
"""


def run(env_extra):
    return json.loads(run_on_simulated_devices(PROGRAM, 8, **env_extra))


def test_a_recorded_build_reads_as_a_fresh_compile(tmp_path):
    record = {
        "PYTHONPATH": os.path.join(ROOT, "tests", "compile_cache"),
        "BOOK_COMPILE_CACHE": str(tmp_path),
    }
    first = run(record)  # each compiled for real, and recorded
    log = (tmp_path / "log.txt").read_text().split()
    # each program, option set and GPU description its own key
    assert log[::3] == ["compiled"] * 6, log
    second = run(record)
    log = (tmp_path / "log.txt").read_text().split()
    assert log[18::3] == ["read"] * 6, log
    kinds = {name: seen.pop("kind", None) for name, seen in second.items()}
    assert set(kinds.values()) == {"RecordedBuild", None}, kinds  # None: the timeline
    for build in first.values():
        build.pop("kind", None)
    assert first == second
    # where XLA is asked to log, nothing is read from the record or written to it
    logged = run({**record, "TF_CPP_MIN_LOG_LEVEL": "0"})
    assert (tmp_path / "log.txt").read_text().split() == log
    assert {name: seen.pop("kind", None) for name, seen in logged.items()} == {
        name: None if name == "timeline" else "Compiled" for name in logged
    }
    assert logged == first
