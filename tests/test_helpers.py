"""The book's shared helpers (tests/helpers.py), whose exact copies the chapters
carry."""

import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import helpers

ROOT = os.path.dirname(os.path.dirname(__file__))


def run_on_simulated_devices(code: str, devices: int, **env_extra: str) -> str:
    """Run `code` in a fresh Python process with `devices` simulated CPU devices (JAX
    fixes the count when it starts) and `env_extra` added to its environment, and
    return what it printed; fail if it fails."""
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "JAX_NUM_CPU_DEVICES": str(devices),
        **env_extra,
    }
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_expect_error_prints_type_and_message_once(capsys):
    with helpers.expect_error(ValueError):
        raise ValueError("D = 65 does not divide over mesh axis 'model' of size 4")
    red = "\x1b[31mValueError\x1b[0m"  # forced: the same bytes on every terminal
    assert (
        capsys.readouterr().out
        == f"{red}: D = 65 does not divide over mesh axis 'model' of size 4\n"
    )


def test_expect_error_fails_when_nothing_is_raised():
    with pytest.raises(
        AssertionError, match="expected TypeError or ValueError; nothing was raised"
    ):
        with helpers.expect_error(TypeError, ValueError):
            pass


def test_expect_error_lets_other_errors_through():
    with pytest.raises(KeyError):
        with helpers.expect_error(ValueError):
            raise KeyError("not the expected kind")


def test_expect_error_hides_the_machines_paths(capsys):
    with helpers.expect_error(TypeError):
        raise TypeError(
            "error occurs at source:  /tmp/ipykernel_27969/1632427693.py:7:8 (f) "
            "in /home/me/.venv/lib/python3.12/site-packages/jax/_src/pjit.py:162"
        )
    assert capsys.readouterr().out == (
        "\x1b[31mTypeError\x1b[0m: error occurs at source:  <cell>:7:8 (f) "
        "in jax/_src/pjit.py:162\n"
    )


def test_check_divides_names_the_dimension_and_the_axis():
    mesh = jax.make_mesh((1,), ("model",))
    helpers.check_divides("D", 64, "model", mesh)
    with pytest.raises(
        ValueError, match="D = 3 does not divide over mesh axis 'model' of size 2"
    ):
        helpers.check_divides("D", 3, "model", FakeMesh())


class FakeMesh:
    """Only what check_divides reads: a mesh with a `model` axis of size 2 (this
    process has 1 device)."""

    shape = {"model": 2}


def test_count_collectives_leaves_zeros_out():
    """On 2 simulated devices (a fresh process: this one's devices are fixed once JAX
    starts)."""
    code = """
import jax, jax.numpy as jnp
from jax import P
from tests.helpers import count_collectives
mesh = jax.make_mesh((2,), ("data",))
x = jax.device_put(jnp.ones(4), jax.NamedSharding(mesh, P("data")))
summed = jax.jit(jax.shard_map(lambda x: jax.lax.psum(x, "data"), mesh=mesh,
                               in_specs=P("data"), out_specs=P()))
print(count_collectives(summed.lower(x).compile()),
      count_collectives(jax.jit(jnp.sin).lower(1.0).compile()))
"""
    stdout = run_on_simulated_devices(code, 2)
    assert stdout.strip() == "{'all-reduce': 1} {}"


def test_median_ms_and_hardware():
    assert helpers.median_ms(jax.jit(jnp.sin), np.float32(1.0), runs=3) >= 0
    assert (
        "simulated devices sharing" in helpers.hardware() or " x " in helpers.hardware()
    )


def test_show_graph_without_graphviz_says_how_to_install_it():
    """A reader without Graphviz's `dot` gets one sentence, not a traceback."""
    code = (
        "import graphviz; from tests.helpers import show_graph\n"
        "g = graphviz.Digraph(); g.edge('a', 'b'); show_graph(g)"
    )
    # JAX_PLATFORMS as a chapter's bootstrap leaves it (the helpers module asks JAX
    # for its backend when imported)
    env = {**os.environ, "PATH": "/nonexistent", "JAX_PLATFORMS": "cpu"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("\n") == 1 and "Traceback" not in out.stderr
    assert out.stdout.startswith(
        "This graph needs Graphviz's `dot` program, which is not installed"
    )
    assert "apt-get install graphviz" in out.stdout


def test_show_graph_with_graphviz_draws_svg():
    import shutil

    if not shutil.which("dot"):
        pytest.skip("Graphviz's dot is not installed here")
    code = (
        "import graphviz; from tests.helpers import show_graph\n"
        "g = graphviz.Digraph(); g.edge('a', 'b'); show_graph(g)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert out.returncode == 0 and "SVG object" in out.stdout, out.stderr


# --- chapter 04 ---


def test_executed_collectives_counts_loop_trips_and_directions():
    """On 8 simulated devices (a fresh process): a permute inside a 3-trip loop counts
    3 times, sorted by direction; inside that loop run twice by an outer loop, 6
    times; a plain psum once; a permute in a conditional's branch is refused (it may not
    run), as is a mesh whose last axis is not the one asked for, each with a
    ValueError naming what."""
    code = """
import jax, jax.numpy as jnp
from jax import P
from tests.helpers import executed_collectives
mesh = jax.make_mesh((2, 4), ("data", "model"))
x = jax.device_put(jnp.ones((2, 8)), jax.NamedSharding(mesh, P("data", "model")))
def ring(x, step):
    pairs = [(j, (j + step) % 4) for j in range(4)]
    body = lambda i, y: jax.lax.ppermute(y, "model", pairs)
    return jax.lax.fori_loop(0, 3, body, x)
def twice(x):
    return jax.lax.fori_loop(0, 2, lambda i, y: ring(y, 1) + i, x)
def maybe(x):
    shift = lambda y: jax.lax.ppermute(y, "model", [(j, (j + 1) % 4) for j in range(4)])
    return jax.lax.cond(x.sum() > 0, shift, lambda y: y, x)
def program(f):
    g = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("data", "model"),
                              out_specs=P("data", "model")))
    return g.lower(x).compile()
for f in (lambda x: ring(x, 1), lambda x: ring(x, -1), lambda x: ring(x, 2),
          twice, lambda x: jax.lax.psum(x, "model")):
    print(executed_collectives(program(f), mesh))
for f, axis in ((maybe, "model"), (f, "data")):
    try:
        executed_collectives(program(f), mesh, axis=axis)
    except ValueError as err:
        print(err)
"""
    stdout = run_on_simulated_devices(code, 8)
    assert stdout.splitlines() == [
        "{'collective-permute': 3, 'permute right': 3}",
        "{'collective-permute': 3, 'permute left': 3}",
        "{'collective-permute': 3, 'permute other': 3}",
        "{'collective-permute': 6, 'permute right': 6}",
        "{'all-reduce': 1}",
        stdout.splitlines()[5].split(" runs ")[0] + " runs collectives, and this count "
        "does not reach it (a loop of unknown trips, a conditional's branch, uncalled)",
        "axis 'data' is not the last of mesh axes ('data', 'model') "
        "(mesh shape {'data': 2, 'model': 4})",
    ]


LIBTPU_LOOP = """
import re
import jax, jax.numpy as jnp
from jax import P
from jax.sharding import NamedSharding
from tests.helpers import compile_for, executed, executed_collectives, target_mesh

mesh = jax.make_mesh((2, 4), ("data", "model"))
SPEC = P("data", "model")
x = jax.ShapeDtypeStruct((8, 512), jnp.float32, sharding=NamedSharding(mesh, SPEC))
PAIRS = [(j, (j + 1) % 4) for j in range(4)]
def ring(x_blk):
    step = lambda i, y: jax.lax.ppermute(y, "model", PAIRS)
    return jax.lax.fori_loop(1, 4, step, x_blk)
f = lambda x: jax.shard_map(ring, in_specs=SPEC, out_specs=SPEC)(x)
build = compile_for("tpu-v5e-8", f, x)
print("recorded" if "known_trip_count" in build.hlo else "not recorded")
tpu_mesh = target_mesh("tpu-v5e-8", {"data": 2, "model": 4})
print(executed_collectives(build.compiled, tpu_mesh))
print(executed(build.compiled, "collective-permute"))
def scaled(x_blk):  # a loop that uses its counter: libtpu's gradient copies it first
    step = lambda i, y: jax.lax.ppermute(y, "model", PAIRS) * i
    return jax.lax.fori_loop(1, 4, step, x_blk)
loss = lambda x: jnp.sum(jax.shard_map(scaled, in_specs=SPEC, out_specs=SPEC)(x) ** 2)
grad = compile_for("tpu-v5e-8", jax.grad(loss), x)
print(len(re.findall(r"add\\(%copy[\\w.]*, %constant", grad.hlo)))
print(executed_collectives(grad.compiled, tpu_mesh))
class Unreadable:  # the same program, its loop bound made a parameter of the condition
    def as_text(self):
        bound = r"(compare\\(%[\\w.\\-]+, )%[\\w.\\-]+"
        return re.sub(bound, r"\\1%nowhere", build.hlo)
try:
    executed_collectives(Unreadable(), mesh)
except ValueError as err:
    print(err)
"""


def test_loop_trips_read_from_libtpus_loop_which_records_none():
    """libtpu records no trip count on its loops (its while has no known_trip_count):
    executed_collectives and executed read the 3 trips of a fori_loop(1, 4) from the
    loop's counter, start and bound, and those of its gradient's two loops, whose
    counter libtpu copies before adding 1; a loop whose bound is not a constant is
    refused with a ValueError rather than counted once."""
    lines = run_on_simulated_devices(LIBTPU_LOOP, 8).splitlines()
    assert lines[0] == "not recorded"
    assert lines[1] == "{'collective-permute': 3, 'permute right': 3}"
    assert lines[2] == "3"
    assert int(lines[3]) >= 1  # the copied counter this test is about
    assert lines[4] == (
        "{'collective-permute': 6, 'permute right': 3, 'permute left': 3}"
    )
    assert lines[5].endswith(
        "runs collectives, and this count does not reach it (a "
        "loop of unknown trips, a conditional's branch, uncalled)"
    )


# --- chapter 05 ---
class FakeCompiled:
    """Only what the HLO readers read: as_text(). The lines are a CPU compilation's,
    cut short, in its entry computation."""

    def __init__(self, *lines):
        self.text = "ENTRY %main (p: f32[]) -> f32[] {\n" + "\n".join(lines) + "\n}\n"

    def as_text(self):
        return self.text


COMBINED = (
    "  %all-reduce.17 = (f32[], f32[64]{0}, /*index=2*/f32[3,4,16,64]{3,2,1,0}) "
    "all-reduce(%fusion, %ynn_fusion.17, %ynn_fusion.3), channel_id=1, "
    "replica_groups=mesh['data'=2,'model'=4] {'data','model'}, "
    "use_global_device_ids=true, to_apply=%region_17.18.clone, "
    'metadata={op_name="jit(loss)/(jvp()/reduce_sum:transpose(jvp())/reduce_sum:'
    'transpose(jvp(btd,dchk->cbthk))/dot_general)" stack_frame_id=62}'
)
GATHER = (
    "  %all-gather.2 = f32[64,3,4,16]{3,2,1,0} all-gather(%param.3), channel_id=3, "
    "replica_groups=mesh['data'=2,'model'=4] {'model'}, dimensions={0}, "
    "use_global_device_ids=true, metadata={op_name=\"params[\\'blocks\\'][0]\"}"
)
SUM = (
    "  %all-reduce = f32[32,16,64]{2,1,0} all-reduce(%bitcast.19), channel_id=6, "
    "replica_groups=[2,4]<=[8], use_global_device_ids=true, to_apply=%add.clone, "
    'metadata={op_name="jit(loss)/jvp(bthk,hkd->btd)/dot_general" stack_frame_id=30}'
)
SLICE = (
    "  %dynamic-slice.46 = f32[4,64]{1,0} dynamic-slice(%param_0.93, %multiply.54), "
    'dynamic_slice_sizes={4,64}, metadata={op_name="jit(loss)/jvp()/reshard"}'
)
ASYNC = (
    "  %all-gather-start = (f32[8]{0}, f32[32]{0}) all-gather-start(%p), "
    "replica_groups={{0,1,2,3}}, dimensions={0}"
)


def test_collective_ops_and_array_origins():
    program = FakeCompiled(COMBINED, GATHER, SUM, SLICE, "  %all-gather-done = f32[32]")
    assert helpers.collective_ops(program) == [
        ("all-reduce", 3, COMBINED.split('op_name="')[1].split('"')[0]),
        ("all-gather", 1, "params[\\'blocks\\'][0]"),
        ("all-reduce", 1, "jit(loss)/jvp(bthk,hkd->btd)/dot_general"),
    ]
    assert helpers.array_origins(program) == [
        ("all-reduce", "jvp()/reduce_sum"),
        ("all-reduce", "transpose(jvp())/reduce_sum"),
        ("all-reduce", "transpose(jvp(btd,dchk->cbthk))/dot_general"),
        ("all-gather", "params[\\'blocks\\'][0]"),
        ("all-reduce", "jvp(bthk,hkd->btd)/dot_general"),
    ]
    assert helpers.count_collective_arrays(program) == {
        "all-reduce": 4,
        "all-gather": 1,
    }
    assert helpers.count_collective_arrays(program, backward=True) == {"all-reduce": 2}
    assert helpers.count_collective_arrays(FakeCompiled(SLICE)) == {}


# XLA:GPU packs two combined all-reduces into one buffer (its concatenate), one operand
PACKED = (
    "  %all-reduce.21 = f32[33280]{0} all-reduce(%wrapped_concatenate), channel_id=10, "
    "replica_groups=mesh['data'=2,'model'=4] {'model'}, use_global_device_ids=true, "
    'to_apply=%region_18.19.clone, metadata={op_name="jit(<lambda>)/(transpose(jvp('
    'jit(log_softmax)))/reduce_sum:jvp()/gather)" stack_frame_id=62}'
)


def test_array_origins_counts_each_array_packed_into_one_buffer():
    assert helpers.collective_ops(FakeCompiled(PACKED))[0][:2] == ("all-reduce", 1)
    assert helpers.array_origins(FakeCompiled(PACKED)) == [
        ("all-reduce", "transpose(jvp(jit(log_softmax)))/reduce_sum"),
        ("all-reduce", "jvp()/gather"),
    ]
    assert helpers.count_collective_arrays(FakeCompiled(PACKED), backward=True) == {
        "all-reduce": 1
    }


def test_array_origins_refuses_a_name_that_does_not_list_every_array():
    two_names = COMBINED.replace("reduce_sum:transpose(jvp())/", "")
    with pytest.raises(ValueError, match="all-reduce sends 3 arrays"):
        helpers.array_origins(FakeCompiled(two_names))


def test_hlo_sizes_elements_and_results():
    assert helpers.hlo_arrays("(f32[], bf16[2,3]{1,0}, /*index=2*/s32[4])") == [
        ("f32", 1),
        ("bf16", 6),
        ("s32", 4),
    ]
    program = FakeCompiled(COMBINED, GATHER, SUM, SLICE, ASYNC)
    assert helpers.collective_elements(program, "all-reduce") == 1 + 64 + 12288 + 32768
    # the start of an asynchronous gather: its result f32[32], not its operand f32[8]
    assert helpers.collective_elements(program, "all-gather") == 12288 + 32
    assert helpers.collective_elements(program, "reduce-scatter") == 0
    assert helpers.hlo_results(program, "dynamic-slice", "reshard") == ["f32[4,64]"]
    assert helpers.hlo_results(
        program, "all-reduce", "jvp(bthk,hkd->btd)/dot_general"
    ) == ["f32[32,16,64]"]
    assert helpers.hlo_results(program, "dynamic-slice", "gather") == []


def test_group_size_and_collective_bytes():
    assert helpers.group_size(COMBINED) == 8
    assert helpers.group_size(GATHER) == 4
    assert helpers.group_size(SUM) == 4
    assert helpers.group_size(ASYNC) == 4
    with pytest.raises(ValueError, match="no replica groups"):
        helpers.group_size("all-reduce(%x), to_apply=%add")
    # A ring all-reduce sends 2 (k-1)/k of its result, an all-gather (k-1)/k.
    all_reduced = 2 * 7 / 8 * 4 * (1 + 64 + 12288) + 2 * 3 / 4 * 4 * 32768
    program = FakeCompiled(COMBINED, GATHER, SUM)
    assert helpers.collective_bytes(program, "all-reduce") == pytest.approx(all_reduced)
    assert helpers.collective_bytes(program, "all-gather") == 3 / 4 * 4 * 12288
    with pytest.raises(ValueError, match="'reduce-scatter'"):
        helpers.collective_bytes(program, "reduce-scatter")


def test_hlo_readers_on_a_compiled_program():
    """On 2 simulated devices (a fresh process): a psum is named for the JAX
    operation it came from, and read as one all-reduce of 4 floats, 16 bytes sent."""
    code = """
import jax, jax.numpy as jnp
from jax import P
from tests.helpers import array_origins, collective_bytes, collective_elements
mesh = jax.make_mesh((2,), ("data",))
x = jax.device_put(jnp.ones(8), jax.NamedSharding(mesh, P("data")))
f = jax.shard_map(lambda x: jax.lax.psum(x, "data"), mesh=mesh,
                  in_specs=P("data"), out_specs=P())
c = jax.jit(f).lower(x).compile()
print([(kind, "psum" in name) for kind, name in array_origins(c)],
      collective_elements(c, "all-reduce"),
      collective_bytes(c, "all-reduce"))
"""
    stdout = run_on_simulated_devices(code, 2)
    assert stdout.strip() == "[('all-reduce', True)] 4 16.0"


# --- chapter 10 ---


def test_executed_counts_scan_trips_and_refuses_a_branch():
    """On 4 simulated devices: a ppermute in a 3-step scan runs 3 times, a psum outside
    once; in a scan of 2 whose body scans 3, the inner ppermute runs 6 times and the
    outer psum 2 (and one after, 3); a psum inside a conditional's branch is refused
    with a ValueError."""
    code = """
import jax, jax.numpy as jnp
from jax import P
from tests.helpers import executed
mesh = jax.make_mesh((4,), ("data",))
x = jax.device_put(jnp.ones(8), jax.NamedSharding(mesh, P("data")))
ring = [(j, (j + 1) % 4) for j in range(4)]
def scanned(x):
    y, _ = jax.lax.scan(lambda y, _: (jax.lax.ppermute(y, "data", ring), None),
                        x, None, length=3)
    return jax.lax.psum(y, "data")
def branched(x, flag):  # flag: the same on every device, so a real conditional
    return jax.lax.cond(flag > 0, lambda y: jax.lax.psum(y, "data"),
                        lambda y: jax.lax.psum(2 * y, "data"), x)
def nested(x):  # 2 outer trips, each an inner scan of 3 permutes and a psum
    def outer(y, _):
        y, _ = jax.lax.scan(lambda z, _: (jax.lax.ppermute(z, "data", ring), None),
                            y, None, length=3)
        return y + jax.lax.psum(y, "data"), None
    return jax.lax.psum(jax.lax.scan(outer, x, None, length=2)[0], "data")
for f, op in ((scanned, "collective-permute"), (scanned, "all-reduce"),
              (nested, "collective-permute"), (nested, "all-reduce")):
    g = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("data"), out_specs=P()))
    print(executed(g.lower(x).compile(), op))
g = jax.jit(jax.shard_map(branched, mesh=mesh, in_specs=(P("data"), P()),
                          out_specs=P()))
try:
    executed(g.lower(x, jnp.float32(1)).compile(), "all-reduce")
except ValueError as err:
    print("ValueError")
"""
    stdout = run_on_simulated_devices(code, 4)
    assert stdout.splitlines() == ["3", "1", "6", "3", "ValueError"]


# --- chapter 01 ---


def test_lowered_collectives_counts_what_the_body_calls_before_compiling():
    """On 4 simulated devices: a psum over a tuple of axes is one all-reduce in the
    lowered program, a psum_scatter one reduce-scatter; jit's own partitioning is not
    there yet (no collective before compiling, one after)."""
    code = """
import jax, jax.numpy as jnp
from jax import P
from tests.helpers import count_collectives, lowered_collectives
mesh = jax.make_mesh((2, 2), ("data", "model"))
x = jax.device_put(jnp.ones((4, 4)), jax.NamedSharding(mesh, P("data", "model")))
def body(b):
    return jax.lax.psum(b, ("data", "model")), jax.lax.psum_scatter(
        b, "model", tiled=True)
f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("data", "model"),
                          out_specs=(P(), P("data", "model"))))
print(lowered_collectives(f.lower(x)))
summed = jax.jit(lambda v: jnp.sum(v, axis=0)).lower(x)
print(lowered_collectives(summed), bool(count_collectives(summed.compile())))
"""
    stdout = run_on_simulated_devices(code, 4)
    assert stdout.splitlines() == ["{'all-reduce': 1, 'reduce-scatter': 1}", "{} True"]


# --- chapters 05 and 07 ---


def test_lowered_flops_counts_before_compiling_or_falls_back(monkeypatch):
    """On CPU the lowered program is counted; where JAX reaches the backend through
    PJRT's C API (TPU, GPU: simulated by patching the check pxla.py makes),
    Lowered.cost_analysis() returns None and the compiled program is counted."""
    from jax._src import xla_bridge

    lowered = jax.jit(lambda a: a @ a).lower(jnp.ones((8, 8)))
    assert helpers.lowered_flops(lowered) == lowered.cost_analysis()["flops"] == 1024
    monkeypatch.setattr(xla_bridge, "using_pjrt_c_api", lambda backend=None: True)
    assert lowered.cost_analysis() is None
    assert helpers.lowered_flops(lowered) == lowered.compile().cost_analysis()["flops"]


# --- compilers ---

COMPILE_EVERY_TARGET = """
import re
import jax, jax.numpy as jnp
from jax import P
from jax.sharding import NamedSharding
from tests.helpers import TARGETS, compile_for

mesh = jax.make_mesh((2, 4), ("data", "model"))
x = jax.ShapeDtypeStruct((64, 512), jnp.float32,
                         sharding=NamedSharding(mesh, P("data")))
w = jax.ShapeDtypeStruct((512, 1024), jnp.float32,
                         sharding=NamedSharding(mesh, P(None, "model")))
grad = jax.grad(lambda x, w: jnp.sum(jnp.tanh(x @ w) ** 2), argnums=1)
AXES = {"tpu-v5p-64": {"data": 8, "model": 8}, "h100-2x8": {"data": 4, "model": 4}}
for target in TARGETS:
    build = compile_for(target, grad, x, w, axes=AXES.get(target))
    assert build is not None, f"{target}: its compiler is not installed"
    devices = build.compiled.input_shardings[0][1].mesh.devices
    kinds = {d.device_kind for d in devices.flat}
    out = build.compiled.output_shardings
    # the gradient keeps w's sharding on every target; the shard over model is the same
    assert out.spec == P(None, "model"), (target, out.spec)
    local = 1024 // dict(out.mesh.shape)["model"]
    assert re.search(rf"\\[\\d+,{local}\\]", build.hlo), target
    print(target, devices.size, sorted(kinds)[0], build.collectives,
          build.memory.temp_size_in_bytes >= 0, build.flops is not None)
"""


def test_compile_for_every_target():
    """Every target compiles the gradient of a sharded layer: the CPU devices, six TPU
    topologies (one of two slices over DCN) and H100s on one, two and four hosts. Its
    compilers must be installed (make installs them): a missing one fails here."""
    found = {
        line.split()[0]: line.split(" ", 1)[1]
        for line in run_on_simulated_devices(COMPILE_EVERY_TARGET, 8).splitlines()
    }
    assert list(found) == list(helpers.TARGETS)
    assert found["cpu"].startswith("8 cpu {'all-reduce': 1}")
    assert found["tpu-v5e-8"].startswith("8 TPU v5 lite {'all-reduce': 1}")
    assert found["tpu-v5p-64"].startswith("64 TPU v5 {'all-reduce': 1}")
    # across two slices the reduction over data goes over DCN: host sends, no all-reduce
    assert found["tpu-v5e-2x4"].startswith("8 TPU v5 lite {'dcn send': 1}")
    assert found["h100-8"].startswith("8 NVIDIA H100 80GB HBM3 {'all-reduce': 1}")
    assert found["h100-2x8"].startswith("16 NVIDIA H100 80GB HBM3 {'all-reduce': 1}")
    # XLA:GPU compiled without a GPU reports no cost analysis; the others count FLOPs
    assert found["h100-8"].endswith("True False")
    assert found["tpu-v5e-8"].endswith("True True")


def test_target_mesh_crosses_slices_and_hosts_on_its_first_axis():
    code = """
from tests.helpers import target_mesh
for target in ("tpu-v5e-2x4", "h100-2x8"):
    n = 8 if target.startswith("tpu") else 16
    mesh = target_mesh(target, {"data": 2, "model": n // 2})
    key = (lambda d: d.slice_index) if target.startswith("tpu") else (
        lambda d: d.process_index)
    rows = [{key(d) for d in row} for row in mesh.devices]
    print(target, rows)
"""
    out = run_on_simulated_devices(code, 8)
    # each row (one index along data) sits in one slice or host; the rows differ
    assert "tpu-v5e-2x4 [{0}, {1}]" in out
    assert "h100-2x8 [{0}, {1}]" in out


def test_compile_helpers_refuse_bad_input():
    with pytest.raises(ValueError, match="unknown target 'tpu-v9'; known: cpu, "):
        helpers.target_devices("tpu-v9")
    with pytest.raises(ValueError, match=r"needs 6 devices; target 'tpu-v5e-8' has 8"):
        helpers.target_mesh("tpu-v5e-8", {"data": 2, "model": 3})
    with pytest.raises(ValueError, match="'data' of size 1 does not divide over the 2"):
        helpers.target_mesh("tpu-v5e-2x4", {"data": 1, "model": 8})
    x = jax.ShapeDtypeStruct((8,), jnp.float32)
    with pytest.raises(ValueError, match="sharded over 0 meshes"):
        helpers.compile_for("cpu", jnp.sin, x)


@pytest.mark.parametrize(
    "target, module, line",
    [
        (
            "tpu-v5e-8",
            "libtpu",
            "skipped tpu-v5e-8 (TPU v5e, one 2x4 slice): its "
            "compiler is not installed (pip install libtpu==0.0.51)",
        ),
        (
            "h100-8",
            "jax_plugins.xla_cuda13",
            "skipped h100-8 (8 H100 SXM, one host): its compiler is not installed "
            "(pip install --no-deps jax-cuda13-pjrt==0.12.0.1)",
        ),
    ],
)
def test_a_missing_compiler_is_one_line(capsys, monkeypatch, target, module, line):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == module else real(name, *a),
    )
    assert helpers.target_devices(target) is None
    assert capsys.readouterr().out == line + "\n"


def test_the_gpu_compiler_comes_in_the_package_the_skip_line_names():
    """XLA:GPU (jax_plugins.xla_cuda13) comes in jax-cuda13-pjrt, at the version the
    skip line pins; jax-cuda13-plugin holds only JAX's own CUDA kernels."""
    import importlib.metadata

    files = {
        package: {str(f) for f in importlib.metadata.files(package)}
        for package in ("jax-cuda13-pjrt", "jax-cuda13-plugin")
    }
    compiler = "jax_plugins/xla_cuda13/__init__.py"
    assert compiler in files["jax-cuda13-pjrt"]
    assert compiler not in files["jax-cuda13-plugin"]
    assert helpers.TARGETS["h100-8"][1] == "jax-cuda13-pjrt"
    assert importlib.metadata.version("jax-cuda13-pjrt") == "0.12.0.1"


def test_the_h100_description_is_the_documented_one():
    """The helper carries the H100 target description inline (Colab opens one
    notebook); tests/targets/h100_sxm.txtpb documents each figure: same fields, same
    values."""

    def fields(text):
        text = "\n".join(line.split("#")[0] for line in text.splitlines())
        return sorted(re.findall(r"(\w+)\s*(?::\s*(\"[^\"]*\"|\S+)|\{)", text))

    import re

    documented = open(os.path.join(ROOT, "tests", "targets", "h100_sxm.txtpb")).read()
    assert fields(helpers.H100_SXM) == fields(documented)


def test_compare_compilers_prints_a_row_per_target_and_scales_the_mesh():
    code = """
import jax, jax.numpy as jnp
from jax import P
from jax.sharding import NamedSharding
from tests.helpers import compare_compilers
mesh = jax.make_mesh((1, 4), ("data", "model"))  # 4 CPU devices; targets have 8 or 64
x = jax.ShapeDtypeStruct((64, 512), jnp.float32,
                         sharding=NamedSharding(mesh, P("data")))
w = jax.ShapeDtypeStruct((512, 1024), jnp.float32,
                         sharding=NamedSharding(mesh, P(None, "model")))
grad = jax.grad(lambda x, w: jnp.sum(jnp.tanh(x @ w) ** 2), argnums=1)
builds = compare_compilers(grad, x, w, targets=("cpu", "tpu-v5p-64", "h100-8"))
print({t: dict(b.compiled.output_shardings.mesh.shape) for t, b in builds.items()})
"""
    out = run_on_simulated_devices(code, 4).splitlines()
    # one data row on 4 CPU devices: no reduction over data is needed there
    assert out[0] == "cpu         no collective"
    assert out[1] == "tpu-v5p-64  all-reduce 1"
    assert out[2] == "h100-8      all-reduce 1 (asynchronous)"  # a fusion-start
    assert out[3] == (
        "{'cpu': {'data': 1, 'model': 4}, 'tpu-v5p-64': {'data': 16, 'model': 4}, "
        "'h100-8': {'data': 2, 'model': 4}}"
    )


def test_parse_textproto_nests_messages_and_repeats_fields():
    text = 'a { b: 1 b: 2 c { name: "x y" } } d: "}" e: 3.5\nf { }'
    assert helpers.parse_textproto(text) == {
        "a": [{"b": ["1", "2"], "c": [{"name": ["x y"]}]}],
        "d": ["}"],
        "e": ["3.5"],
        "f": [{}],
    }


GPU_TIMELINE = """
import jax, jax.numpy as jnp
from jax import P
from jax.sharding import NamedSharding
from tests.helpers import gpu_timeline
mesh = jax.make_mesh((8,), ("fsdp",))
D, F, T = 1024, 4096, 8192
spec = NamedSharding(mesh, P("fsdp"))
x = jax.ShapeDtypeStruct((T, D), jnp.bfloat16, sharding=spec)
w1 = jax.ShapeDtypeStruct((D, F), jnp.bfloat16, sharding=spec)
w2 = jax.ShapeDtypeStruct((F, D), jnp.bfloat16, sharding=spec)
def loss(w1, w2, x):
    return jnp.mean((jax.nn.relu(x @ w1) @ w2).astype(jnp.float32) ** 2)
tl = gpu_timeline(jax.grad(loss, argnums=(0, 1)), w1, w2, x)
for row in tl.rows:
    print(*row)
print("total", tl.total, tl.compute, tl.exposed)
names = [name for name, kind, *_ in tl.rows if kind == "compute"]
print("build", tl.build.target, all(f"%{name} = " in tl.build.hlo for name in names))
"""


def test_gpu_timeline_of_an_fsdp_gradient_is_consistent():
    """XLA:GPU's schedule of the FSDP gradient of a 2-layer MLP on 8 H100s: kernels
    and asynchronous collectives with starts before ends, the weights' all-gathers
    and gradients' reduce-scatters paired start to done (an unpaired one raises),
    the step as long as its last end, and compute plus exposed communication no
    longer than the step; the timeline carries the Build its rows come from."""
    lines = run_on_simulated_devices(GPU_TIMELINE, 8).splitlines()
    # the compiled program comes with the timeline: each kernel row names one of its
    # instructions
    assert lines.pop() == "build h100-8 True"
    rows = [line.split() for line in lines[:-1]]
    total, compute, exposed = map(float, lines[-1].split()[1:])
    assert rows and all(float(start) <= float(end) for *_, start, end in rows)
    kinds = [kind for _, kind, *_ in rows]
    # FSDP: weights gathered before use, gradients scattered after (XLA may combine
    # the two weights' collectives into one)
    assert kinds.count("all-gather") >= 1 and kinds.count("reduce-scatter") >= 1
    # four GEMMs of the forward and backward passes at least (one per matmul use)
    assert kinds.count("compute") >= 4
    assert total == max(float(end) for *_, end in rows)
    assert 0 < compute <= total and 0 <= exposed and compute + exposed <= total + 1e-6
    # the first all-gather has nothing to hide under: the step starts exposed
    first = min(rows, key=lambda r: float(r[2]))
    assert first[1] == "all-gather" and exposed > 0


def test_ragged_all_to_all_is_not_counted_as_an_all_to_all():
    program = FakeCompiled(
        "  %r = f32[8]{0} ragged-all-to-all(%x, %y, %o), replica_groups={}",
        "  %a = f32[8]{0} all-to-all(%x), replica_groups={}",
        "  ROOT %s = (f32[8]{0}) all-reduce-start(%a), to_apply=%add",
    )
    assert helpers.count_collectives(program) == {"all-to-all": 1, "all-reduce": 1}


TPU_FSDP_STEP = """
import re
import jax, jax.numpy as jnp
from jax import P
from jax.sharding import NamedSharding
from tests.helpers import COLLECTIVES, compile_for

mesh = jax.make_mesh((8,), ("x",))
shard = lambda shape, spec: jax.ShapeDtypeStruct(
    shape, jnp.bfloat16, sharding=NamedSharding(mesh, spec))
w_up, w_down = shard((1024, 4096), P("x", None)), shard((4096, 1024), P("x", None))
x = shard((512, 1024), P("x"))


def loss(p, x):
    h = jax.nn.relu(x @ jax.reshard(p[0], P()))
    return ((h @ jax.reshard(p[1], P())).astype(jnp.float32) ** 2).mean()


def step(p, x):
    return jax.tree.map(lambda a, g: a - 0.1 * g, p, jax.grad(loss)(p, x))


build = compile_for("tpu-v5e-8", step, (w_up, w_down), x)
kinds = "|".join(COLLECTIVES)
raw = re.findall(rf" (?:{kinds})(?:-start)?\\(.*?channel_id=(\\d+)", build.hlo)
issued = re.findall(rf" (?:{kinds})(?:-start)?\\(.*?channel_id=(\\d+)", build.issued)
print(len(raw), len(set(raw)), len(issued), len(set(issued)))
print(build.collectives, build.asynchronous)
print("async-collective-start" in build.hlo, "calls=%all-reduce-scatter" in build.hlo)
named = ["op_name=" in line for line in build.issued.splitlines()
         if re.search(rf" (?:{kinds})(?:-start)?\\(", line)]
print(len(named), all(named))
"""


def test_issued_hlo_reads_libtpus_own_forms_once_each():
    """libtpu writes an asynchronous all-gather as a chain of fusions whose every body
    repeats it, and a reduce-scatter as a fusion calling %all-reduce-scatter: in the
    raw text an FSDP step's collectives appear more often than it has channels, in
    issued_hlo once per channel, the chain as an asynchronous all-gather and the
    fusion as a reduce-scatter, each with its JAX op name."""
    raw, issued, channels, named = run_on_simulated_devices(
        TPU_FSDP_STEP, 8
    ).splitlines()
    raw_hits, raw_channels, issued_hits, issued_channels = map(int, raw.split())
    assert channels == "True True"  # libtpu made both of its own forms here
    assert raw_hits > raw_channels  # the raw text repeats a collective
    assert issued_hits == issued_channels == raw_channels  # each channel once
    assert issued == ("{'all-gather': 2, 'all-reduce': 1, 'reduce-scatter': 1} True")
    assert named == "4 True"  # each keeps its JAX op name, the rewritten ones included


TIMELINE_OF_A_LOOP = """
import jax, jax.numpy as jnp
from jax import P
from jax.sharding import NamedSharding
from tests.helpers import gpu_timeline

mesh = jax.make_mesh((8,), ("x",))
sd = lambda shape, spec: jax.ShapeDtypeStruct(
    shape, jnp.bfloat16, sharding=NamedSharding(mesh, spec))
x, w0 = sd((1024, 1024), P("x", None)), sd((1024, 1024), P("x", None))


def loss(w0, w, x):
    if w0 is not None:                     # a gather outside the loop, in the entry
        x = jnp.tanh(x @ jax.reshard(w0, P()))
    layer = lambda h, wl: (jnp.tanh(h @ jax.reshard(wl, P())), None)
    return jax.lax.scan(layer, x, w)[0].astype(jnp.float32).sum()


for layers in (2, 3):
    w = sd((layers, 1024, 1024), P(None, "x", None))
    t = gpu_timeline(jax.grad(loss, argnums=(0, 1)), w0, w, x)
    kinds = [kind for _, kind, *_ in t.rows]
    ends = sorted(end for *_, end in t.rows)
    print(layers, kinds.count("all-gather"), kinds.count("reduce-scatter"),
          t.total == ends[-1], 0 < t.compute <= t.total)
try:
    gpu_timeline(jax.grad(lambda w, x: loss(None, w, x)), w, x)
except ValueError as err:
    print(str(err).split(",")[0])
"""


def test_gpu_timeline_unrolls_loops_and_refuses_a_missing_entry():
    """A scanned FSDP stack's gradient: each trip of the loops appears in the timeline
    (one weight gather and one gradient reduce-scatter per layer, plus the entry's own
    pair); a program whose work all sits in loops has no scheduled entry to read, and
    says so."""
    out = run_on_simulated_devices(TIMELINE_OF_A_LOOP, 8).splitlines()
    assert out[0] == "2 3 3 True True"
    assert out[1] == "3 4 4 True True"
    assert out[2].startswith("XLA scheduled no entry computation for this program")


GPU_ASYNC_FUSION = """
import jax, jax.numpy as jnp
from jax import P
from jax.sharding import NamedSharding
from tests.helpers import compile_for

mesh = jax.make_mesh((8,), ("x",))
w = jax.ShapeDtypeStruct((512, 512), jnp.float32, sharding=NamedSharding(mesh, P()))
x = jax.ShapeDtypeStruct((4, 64, 512), jnp.float32,
                         sharding=NamedSharding(mesh, P(None, "x")))


def step(w, x):                        # gradient accumulation, the mean taken per step
    def body(acc, xb):
        g = jax.grad(lambda w: jnp.sum(jnp.tanh(xb @ w) ** 2))(w)
        return acc + g / 4, None
    return w - 0.1 * jax.lax.scan(body, jnp.zeros_like(w), x)[0]


build = compile_for("h100-8", step, w, x)
print("fusion-start(" in build.hlo and "calls=%fused_all-reduce" in build.hlo)
print(build.collectives, build.asynchronous)
"""


def test_issued_hlo_reads_xla_gpus_asynchronous_fusion():
    """XLA:GPU issues the accumulation loop's all-reduce as an asynchronous fusion
    (fusion-start calling a computation that holds the all-reduce): one all-reduce,
    asynchronous."""
    form, counted = run_on_simulated_devices(GPU_ASYNC_FUSION, 8).splitlines()
    assert form == "True"
    assert counted == "{'all-reduce': 1} True"


START_RESULTS = """
import re, jax, jax.numpy as jnp
from jax import P
from jax.sharding import NamedSharding
from tests.helpers import compile_for, collective_elements

mesh = jax.make_mesh((8,), ("x",))


def f(a):
    def blk(a):
        g = jax.lax.all_gather(a, "x", tiled=True)
        s = jax.lax.psum_scatter(g * g, "x", tiled=True)
        p = jax.lax.ppermute(a, "x", [(i, (i + 1) % 8) for i in range(8)])
        return s + p
    return jax.shard_map(blk, mesh=jax.sharding.get_abstract_mesh(), in_specs=P("x"),
                         out_specs=P("x"))(a)


a = jax.ShapeDtypeStruct((64, 256), jnp.float32, sharding=NamedSharding(mesh, P("x")))
for target in ("h100-8", "tpu-v5e-8"):
    build = compile_for(target, f, a)
    starts = re.findall(r"= (\\(.*?) (\\S+)-start\\(", build.hlo)
    print(target, sorted(k for k, _ in build.asynchronous.items()) if isinstance(
        build.asynchronous, dict) else build.asynchronous, sorted(set(
            kind for _, kind in starts)), collective_elements(build.compiled,
        "reduce-scatter"), collective_elements(build.compiled, "collective-permute"))
"""


def test_issued_hlo_writes_a_starts_result_alone():
    """XLA writes an asynchronous start's type as (operands, result, context), such as
    XLA:GPU's reduce-scatter-start ((f32[64,256]), f32[8,256]) or libtpu's
    collective-permute-start (f32[8,256], f32[8,256], u32[], u32[]) (both compilers
    make the permute asynchronous here). issued_hlo writes the result alone, so
    what a collective produces is read the same from a start as from a synchronous
    one: 8 x 256 elements each, not the operands' too."""
    lines = run_on_simulated_devices(START_RESULTS, 8).splitlines()
    for line in lines:  # each compiler wrote a start with a tuple type, read right
        assert "True [" in line and "[]" not in line, line
        assert line.split()[-2:] == ["2048", "2048"], line


def test_issued_hlo_reads_every_start_form_as_its_result():
    """Each asynchronous start's type, as XLA writes it, becomes its result: the
    async-wrapper form ((operands), result) of any kind, all-reduce's included; the
    older all-gather-start (operand, result) and collective-permute-start (operand,
    result, context...); an all-reduce-start's own form, already its results, stays."""
    program = FakeCompiled(
        "  %a = ((f32[289]{0}), f32[289]{0}) all-reduce-start(%x), channel_id=1",
        "  %b = (f32[2]{0}, f32[3]{0}) all-reduce-start(%x, %y), channel_id=2",
        "  %c = ((f32[64,256]{1,0}), f32[8,256]{1,0}) reduce-scatter-start(%g)",
        "  %d = (f32[8]{0}, f32[32]{0}) all-gather-start(%p), dimensions={0}",
        "  %e = (f32[8,256]{1,0}, f32[8,256]{1,0}, u32[]{:S(2)}, u32[]{:S(2)}) "
        "collective-permute-start(%q)",
    )
    assert helpers.collective_elements(program, "all-reduce") == 289 + 2 + 3
    assert helpers.collective_elements(program, "reduce-scatter") == 8 * 256
    assert helpers.collective_elements(program, "all-gather") == 32
    assert helpers.collective_elements(program, "collective-permute") == 8 * 256


def test_timeline_names_the_estimators_placeholder_as_unpriced():
    """A collective that lasts XLA's placeholder (or longer) is listed as unpriced; a
    priced one and a kernel of any length are not."""
    from tests.helpers import PLACEHOLDER_US, Timeline

    timeline = Timeline(
        [
            ("ar.1", "all-reduce", 10.0, 10.0 + PLACEHOLDER_US + 1),
            ("cp.1", "collective-permute", 0.0, 36.0),
            ("fusion.1", "compute", 0.0, 2 * PLACEHOLDER_US),
        ]
    )
    assert timeline.unpriced() == ["ar.1"]
    assert timeline.total == 2 * PLACEHOLDER_US


CROSS_HOST_TIMELINE = """
import jax, jax.numpy as jnp
from jax import P
from jax.sharding import NamedSharding
from tests.helpers import gpu_timeline

mesh = jax.make_mesh((2, 4), ("data", "fsdp"))
s = lambda shape, spec: jax.ShapeDtypeStruct(shape, jnp.bfloat16,
                                             sharding=NamedSharding(mesh, spec))
p = {"ln": s((256,), P("fsdp")), "up": s((256, 1024), P("fsdp", None))}
x = s((16, 64, 256), P(("data", "fsdp")))


def loss(p, x):
    p = {k: jax.sharding.reshard(v, P()) for k, v in p.items()}
    u = jnp.einsum("btd,df->btf", x * p["ln"], p["up"],
                   out_sharding=P(("data", "fsdp")))
    return jnp.mean(u.astype(jnp.float32) ** 2)


tl = gpu_timeline(jax.grad(loss), p, x, target="h100-2x8", axes={"data": 2, "fsdp": 8})
spans = {kind: end - start for _, kind, start, end in tl.rows if kind != "compute"}
print(tl.unpriced(), sorted(spans), int(spans["all-gather"]), int(spans["all-reduce"]))
"""


def test_gpu_timeline_prices_the_cross_host_all_reduce_with_the_network_model():
    """On two H100 hosts (two NVLink domains) XLA's model prices the gradient's
    all-reduce over all 16 GPUs with its model of the network, at several times the
    in-host gather's price from the NCCL table, and under its placeholder."""
    out = run_on_simulated_devices(CROSS_HOST_TIMELINE, 8)
    assert out.startswith("[] ['all-gather', 'all-reduce'] "), out
    gather, reduce = map(int, out.split()[-2:])
    assert gather < 50 and 100 < reduce < 5000 and reduce > 4 * gather, out


GEMM_PRICES = """
import jax, jax.numpy as jnp
from jax import P
from tests.helpers import gpu_timeline

mesh = jax.make_mesh((8,), ("x",))
prices = {}
for name, dtype, kept in (("bf16", jnp.bfloat16, None), ("f16", jnp.float16, None),
                          ("bf16 -> f32", jnp.bfloat16, jnp.float32)):
    a = jax.ShapeDtypeStruct((8 * 4096, 4096), dtype,
                             sharding=jax.NamedSharding(mesh, P("x")))
    b = jax.ShapeDtypeStruct((4096, 4096), dtype,
                             sharding=jax.NamedSharding(mesh, P("x")))
    f = lambda a, b: jnp.dot(a, jax.reshard(b, P()), preferred_element_type=kept)
    tl = gpu_timeline(f, a, b)
    (gemm,) = [end - start for _, kind, start, end in tl.rows if kind == "compute"]
    prices[name] = gemm
peak_us = 2 * 4096**3 / 989e12 * 1e6  # the H100 SXM's dense bf16 peak
print(prices["bf16"] < 2 * peak_us, prices["f16"] > 4 * prices["bf16"],
      prices["bf16 -> f32"] > 4 * prices["bf16"])
"""


def test_gpu_timeline_prices_some_gemm_types_far_over_bf16():
    """What the Timeline docstring warns of: XLA:GPU's GEMM table prices a 4096^3
    matmul near the H100's bf16 peak in bf16, but several times slower in f16 or
    with a bf16 product kept in f32 (measured 8x and 64x at the pinned plugin)."""
    out = run_on_simulated_devices(GEMM_PRICES, 8)
    assert out == "True True True\n", out


TOKEN_PRICED = """
import jax, jax.numpy as jnp
from jax import P
from tests.helpers import gpu_timeline

mesh = jax.make_mesh((8,), ("x",))
put = lambda shape, dtype, spec: jax.ShapeDtypeStruct(
    shape, dtype, sharding=jax.NamedSharding(mesh, spec))
a = put((8 * 4096, 4096), jnp.bfloat16, P("x"))
b = put((4096, 4096), jnp.bfloat16, P("x"))
g = put((4096,), jnp.float32, P())


def loss(b, a, g):
    y = jnp.dot(a, jax.reshard(b, P()))
    return jnp.mean(jax.nn.softmax(y.astype(jnp.float32), -1) * g)


tl = gpu_timeline(jax.grad(loss), b, a, g)
span = {name: end - start for name, kind, start, end in tl.rows if kind == "compute"}
(token,) = tl.token_priced()
print(sum(name.startswith("gemm") for name in span), span[token] < 1,
      "kind=kCustom" in tl.build.hlo.split(f"%{token} = ")[1].split("\\n")[0])
"""


def test_token_priced_names_the_softmax_fusion_priced_at_nothing():
    """A softmax over a 4096 x 4096 matmul's output (64 MiB in bf16) becomes one custom
    fusion that XLA's model prices under a microsecond (20 us at least at HBM speed);
    token_priced names it, and not the two GEMMs priced from the table."""
    assert run_on_simulated_devices(TOKEN_PRICED, 8) == "2 True True\n"


def test_token_priced_needs_the_build():
    with pytest.raises(ValueError, match="needs the timeline's build"):
        helpers.Timeline([("f", "compute", 0.0, 1.0)]).token_priced()


NO_SCHEDULE = """
import jax, jax.numpy as jnp
from jax import P
from tests.helpers import gpu_timeline

mesh = jax.make_mesh((8,), ("x",))
a = jax.ShapeDtypeStruct((8 * 256, 256), jnp.bfloat16,
                         sharding=jax.NamedSharding(mesh, P("x")))
try:
    gpu_timeline(lambda a: jnp.tanh(a) * 2, a)  # no collective at all
except ValueError as err:
    print(str(err).startswith("XLA:GPU wrote no schedule for this program"))
"""


def test_gpu_timeline_says_when_xla_wrote_no_schedule():
    """A program with no asynchronous collective gets no schedule dump: one clear
    ValueError, not an unpacking error."""
    assert run_on_simulated_devices(NO_SCHEDULE, 8) == "True\n"


NETWORK_PRICES = """
import jax, jax.numpy as jnp
from jax import P
from tests.helpers import gpu_timeline, xla_net_us

for axes, cpu in (({"x": 16}, (8,)), ({"h": 2, "g": 8}, (1, 8)), ({"x": 32}, (8,)),
                  ({"h": 4, "g": 8}, (1, 8))):
    ax, per_host = next(iter(axes)), 8 if len(axes) == 1 else 1
    hosts = axes.get("x", 8 * axes.get("h", 0)) // 8
    target, spec, n = f"h100-{hosts}x8", P(tuple(axes)), hosts * per_host
    bodies = {
        "all-reduce": lambda a: jax.lax.psum(a, ax),
        "all-to-all": lambda a: jax.lax.all_to_all(a, ax, 0, 0, tiled=True),
        "collective-permute": lambda a: jax.lax.ppermute(a, ax, [(0, n - 1)]),
        "reduce-scatter": lambda a: jax.lax.psum_scatter(a, ax, tiled=True),
        "all-gather": lambda a: jax.lax.all_gather(a, ax, tiled=True),
    }
    out = {"all-gather": n, "reduce-scatter": 1 / n}
    for mib in (1, 40) if hosts == 2 else (8,):
        mesh = jax.make_mesh(cpu, tuple(axes))
        a = jax.ShapeDtypeStruct((8 * hosts * mib * 512, 1024), jnp.bfloat16,
                                 sharding=jax.NamedSharding(mesh, spec))
        for kind, body in bodies.items():
            f = lambda a, body=body: jax.shard_map(body, in_specs=spec, out_specs=spec,
                                                   check_vma=False)(a)
            tl = gpu_timeline(f, a, target=target, axes=axes)
            (row,) = [e - s for _, k, s, e in tl.rows if k == kind]
            b = mib * 2**20
            model = xla_net_us(kind, b, out_bytes=int(b * out.get(kind, 1)),
                               hosts=hosts, per_host=per_host)
            print(hosts, per_host, mib, kind, round(row - 1 - model, 1))
"""


def test_xla_net_us_is_xla_gpus_price_of_each_collective_across_hosts():
    """The formula and figures of xla_net_terms give XLA:GPU's own price of every
    collective its network model prices, for a group of every GPU of two hosts and
    for groups of one GPU per host, to within 1 us (a reduction's kernel) at 1 and
    40 MiB (ten 4 MiB chunks), and at 8 MiB on four hosts (a topology "4x1x8")."""
    for line in run_on_simulated_devices(NETWORK_PRICES, 8).splitlines():
        *_, kind, diff = line.split()
        assert (
            0 <= float(diff) < (1 if kind in ("all-reduce", "reduce-scatter") else 0.1)
        ), line


def test_xla_net_terms_refuses_what_it_does_not_model():
    """Its HBM figure is the compiled-for H100's; a group it does not model raises."""
    hbm = int(re.search(r"memory_bandwidth: (\d+)", helpers.H100_SXM)[1])
    assert helpers.XLA_H100_NET["hbm"] == hbm
    for bad in (
        dict(kind="all-reduce", hosts=1),
        dict(kind="all-gather", per_host=4),
        dict(kind="send"),
    ):
        with pytest.raises(ValueError):
            helpers.xla_net_terms(nbytes=2**20, **bad)
    terms = helpers.xla_net_terms("all-to-all", 8 * 2**20)  # 8 remote peers
    assert terms["round trips"] == 8 * 31.0005 and terms["chunks"] == 8 * 6.003


UNKNOWN_GPU = """
import jax, jax.numpy as jnp
from jax import P
from tests import helpers
from tests.helpers import XLA_H100_NET, gpu_timeline, xla_net_us

helpers.H100_SXM = helpers.H100_SXM.replace("NVIDIA H100 80GB HBM3", "NVIDIA Other GPU")
mesh = jax.make_mesh((8,), ("x",))
a = jax.ShapeDtypeStruct((16 * 8 * 512, 1024), jnp.bfloat16,
                         sharding=jax.NamedSharding(mesh, P("x")))
f = lambda a: jax.shard_map(lambda b: jax.lax.ppermute(b, "x", [(0, 15)]),
                            in_specs=P("x"), out_specs=P("x"))(a)
tl = gpu_timeline(f, a, target="h100-2x8", axes={"x": 16})
(row,) = [e - s for _, k, s, e in tl.rows if k == "collective-permute"]
for nic in (XLA_H100_NET["nic"], 50.004e9):
    net = {**XLA_H100_NET, "nic": nic}
    print(round(row - 1 - xla_net_us("collective-permute", 8 * 2**20, net=net), 1))
"""


def test_a_gpu_xla_has_no_entry_for_gets_another_nic():
    """What XLA_H100_NET's comment says: the figures are XLA's entry for the H100 by
    its device name; a GPU it has no entry for is priced with a 50.004 GB/s NIC
    (111.12 x 0.45), its other figures the H100's."""
    h100, other = run_on_simulated_devices(UNKNOWN_GPU, 8).split()
    assert float(h100) < -100 and abs(float(other)) < 0.1, (h100, other)


def test_timeline_label_names_the_model_its_release_and_the_target():
    """What every figure drawn from a timeline says it is: XLA:GPU's speed-of-light
    model, of the installed compiler's release, on which target; never measured."""
    from importlib.metadata import version
    from types import SimpleNamespace

    label = helpers.Timeline([], SimpleNamespace(target="h100-2x8")).label
    assert label.startswith("XLA:GPU's speed-of-light model on h100-2x8 (")
    assert f"jax-cuda13-pjrt {version('jax-cuda13-pjrt')}," in label
    assert "H100 SXM config from XLA's specs" in label
    assert label.endswith("a prediction, not a measurement") and label.count("\n") == 1
    assert "on " not in helpers.Timeline([]).label.split("(")[0]


def test_timeline_exposed_spans_sum_to_exposed():
    """exposed_spans: the parts of collectives no kernel runs under, in order; they
    sum to `exposed` (random schedules of kernels and collectives)."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        rows = []
        for i in range(int(rng.integers(1, 12))):
            start = float(rng.integers(0, 100))
            kind = ("compute", "all-gather", "collective-permute")[i % 3]
            rows.append((f"r{i}", kind, start, start + float(rng.integers(0, 30))))
        timeline = helpers.Timeline(rows)
        spans = timeline.exposed_spans()
        assert all(a < b for a, b in spans)
        assert all(b <= a for (_, b), (a, _) in zip(spans, spans[1:]))
        assert abs(sum(b - a for a, b in spans) - timeline.exposed) < 1e-9
    timeline = helpers.Timeline(
        [("k", "compute", 10.0, 20.0), ("g", "all-gather", 5.0, 30.0)]
    )
    assert timeline.exposed_spans() == [(5.0, 10.0), (20.0, 30.0)]


def _memory(peak, temp, args=100, out=40, alias=20, host_temp=0, host_args=0):
    """A stand-in for a compiled program's memory_analysis() (bytes)."""
    from types import SimpleNamespace

    return SimpleNamespace(
        argument_size_in_bytes=args,
        output_size_in_bytes=out,
        alias_size_in_bytes=alias,
        temp_size_in_bytes=temp,
        peak_memory_in_bytes=peak,
        host_temp_size_in_bytes=host_temp,
        host_argument_size_in_bytes=host_args,
    )


def test_device_figure_reads_each_compiler_as_chapter_7_does():
    # buffers: 100 + 40 - 20 = 120; with 50 of temporaries the device total is 170
    assert helpers.device_total(_memory(peak=0, temp=50)) == 170
    assert helpers.device_figure("cpu", _memory(peak=120, temp=0)) == 120
    assert helpers.device_figure("h100-8", _memory(peak=160, temp=50)) == 170
    assert helpers.device_figure("tpu-v5e-8", _memory(peak=150, temp=500)) == 150
    for target, stats in (
        ("cpu", _memory(peak=120 + 2048, temp=0)),  # XLA:CPU's peak past its buffers
        ("h100-8", _memory(peak=170 + 2048, temp=50)),  # XLA:GPU's past the total
        ("tpu-v5e-8", _memory(peak=100, temp=50)),  # libtpu's under its buffers
    ):
        with pytest.raises(AssertionError):
            helpers.device_figure(target, stats)
