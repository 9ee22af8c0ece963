"""make test's shared record of compile-only builds (tests/compile_cache/): a build read
from the record is what a fresh compile of the same program gives, and anything else
changes the key."""

import json
import os
import subprocess
import sys

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
# not in the record: compiled for real on demand
seen["tpu"]["out"] = str(builds["tpu"].compiled.output_shardings)
tl = helpers.gpu_timeline(grad, w, x)
seen["timeline"] = {"rows": [list(map(str, r)) for r in tl.rows], "total": tl.total}
print(json.dumps(seen))
"""


def run(env_extra):
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "JAX_NUM_CPU_DEVICES": "8",
        **env_extra,
    }
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_recorded_build_reads_as_a_fresh_compile(tmp_path):
    record = {
        "PYTHONPATH": os.path.join(ROOT, "tests", "compile_cache"),
        "BOOK_COMPILE_CACHE": str(tmp_path),
    }
    first = run(record)  # each compiled for real, and recorded
    log = (tmp_path / "log.txt").read_text().split()
    assert log[::3] == ["compiled"] * 5, log  # each program and option set its own key
    second = run(record)
    log = (tmp_path / "log.txt").read_text().split()
    assert log[15::3] == ["read"] * 5, log
    kinds = {name: seen.pop("kind", None) for name, seen in second.items()}
    assert kinds == {
        "tpu": "RecordedBuild",
        "gpu": "RecordedBuild",
        "tpu, other options": "RecordedBuild",
        "tpu, other program": "RecordedBuild",
        "timeline": None,
    }
    for build in first.values():
        build.pop("kind", None)
    assert first == second
