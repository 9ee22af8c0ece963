"""The book's shared helpers (tests/helpers.py), whose exact copies the chapters
carry."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import helpers


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
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": "2"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=os.path.dirname(os.path.dirname(__file__)),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "{'all-reduce': 1} {}"


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
    env = {**os.environ, "PATH": "/nonexistent"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=os.path.dirname(os.path.dirname(__file__)),
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
        cwd=os.path.dirname(os.path.dirname(__file__)),
    )
    assert out.returncode == 0 and "SVG object" in out.stdout, out.stderr


# --- chapter 04 ---


def test_executed_collectives_counts_loop_trips_and_directions():
    """On 8 simulated devices (a fresh process): a permute inside a 3-trip loop counts
    3 times, sorted by direction; a plain psum once; a mesh whose last axis is not the
    one asked for is refused with a ValueError naming the axes."""
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
for f in (lambda x: ring(x, 1), lambda x: ring(x, -1), lambda x: ring(x, 2),
          lambda x: jax.lax.psum(x, "model")):
    g = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("data", "model"),
                              out_specs=P("data", "model")))
    print(executed_collectives(g.lower(x).compile(), mesh))
try:
    executed_collectives(g.lower(x).compile(), mesh, axis="data")
except ValueError as err:
    print(err)
"""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": "8"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=os.path.dirname(os.path.dirname(__file__)),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "{'collective-permute': 3, 'permute right': 3}",
        "{'collective-permute': 3, 'permute left': 3}",
        "{'collective-permute': 3, 'permute other': 3}",
        "{'all-reduce': 1}",
        "axis 'data' is not the last of mesh axes ('data', 'model') "
        "(mesh shape {'data': 2, 'model': 4})",
    ]
