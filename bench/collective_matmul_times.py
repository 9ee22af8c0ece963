"""Time chapter 4's matmul programs side by side, with the cost model's inputs.

Usage: python bench/collective_matmul_times.py [--model 4] [--shape B D F] [--runs 7]

For A[B_data, D_model] @ W[D, F_model] (the all-gather form) and H[B_data, F_model] @
W_out[F_model, D] (the reduce-scatter form) on a mesh of (devices / model) x model, it
prints one line per program: the median time of `runs` calls after a warm-up call (that
also compiles), each ending in `block_until_ready`, and next to it what chapter 4's cost
model needs: the FLOPs and the bytes one device sends. The programs are copies of the
chapter's (the chapter is the reference; keep them in step).

What the numbers can show depends on the devices:
- On accelerators (4, 8, ... GPUs or TPU chips) the collective rows fall below the
  "then matmul" rows by up to the exposed communication, once F/model is past the
  chapter's threshold, and if the compiler overlaps the permutes (on GPU, the
  latency-hiding scheduler: XLA_FLAGS=--xla_gpu_enable_latency_hiding_scheduler=true).
- On simulated CPU devices (JAX_NUM_CPU_DEVICES=8, the default here when no accelerator
  is found) the devices are threads sharing the host's cores, a "transfer" is a memory
  copy, and there is no interconnect to hide: every program does about the same FLOPs at
  the same rate, the collective ones with more, smaller matmuls and a loop. Which comes
  out ahead changes from run to run with the load; such a run shows only that the script
  works.
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")

import jax  # noqa: E402  (after the device count is set)
import jax.numpy as jnp  # noqa: E402
from jax import P  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402

# Chapter 4's programs, copied from book/04_collective_matmul.md (tests/test_bench.py
# checks that each parses to the chapter's code); matmul_rs_blk is the plain form.
TO_RIGHT = lambda k: [(j, (j + 1) % k) for j in range(k)]  # device j sends to j + 1
TO_LEFT = lambda k: [(j, (j - 1) % k) for j in range(k)]  # device j sends to j - 1
from_left = lambda idx, s, k: (idx - s) % k  # chunk at idx after s hops right
from_right = lambda idx, s, k: (idx + s) % k  # chunk at idx after s hops left


def w_rows(w_blk, start, size):
    """Rows [start, start + size) of W's block: those one chunk of A's columns meets."""
    return jax.lax.dynamic_slice_in_dim(w_blk, start, size, axis=0)


def matmul_ag_blk(a_blk, w_blk):  # f32[B/r, D] @ f32[D, F/k]
    return jax.lax.all_gather(a_blk, "model", axis=1, tiled=True) @ w_blk


def matmul_cm_blk(a_blk, w_blk):
    """A @ W, A's column chunks passed round the `model` ring, each multiplied."""
    # a_blk: f32[B/r, D/k], w_blk: f32[D, F/k]
    k, idx = jax.lax.axis_size("model"), jax.lax.axis_index("model")
    c = a_blk.shape[1]  # D/k columns per chunk

    def step(s, carry):
        acc, chunk = carry  # chunk idx - s of A
        travelling = jax.lax.ppermute(chunk, "model", TO_RIGHT(k))  # send it on...
        acc = acc + chunk @ w_rows(w_blk, from_left(idx, s, k) * c, c)  # ...multiply
        return acc, travelling

    acc = jnp.zeros((a_blk.shape[0], w_blk.shape[1]), a_blk.dtype)  # f32[B/r, F/k]
    acc = jax.lax.pcast(acc, ("data", "model"), to="varying")  # differs per device
    acc, chunk = jax.lax.fori_loop(0, k - 1, step, (acc, a_blk))
    return acc + chunk @ w_rows(w_blk, from_left(idx, k - 1, k) * c, c)  # the last


def matmul_cm_bidi_blk(a_blk, w_blk, keep_apart=True):
    """Like matmul_cm_blk, but each chunk's first half goes right, its second left."""
    k, idx = jax.lax.axis_size("model"), jax.lax.axis_index("model")
    c, half = a_blk.shape[1], a_blk.shape[1] // 2  # a chunk's columns, a half's

    def multiply(s, lo, hi):  # lo: 1st half of chunk idx - s, hi: 2nd of idx + s
        if keep_apart:  # for the backward: see "Does the backward overlap?"
            lo, hi = jax.lax.optimization_barrier((lo, hi))
        return lo @ w_rows(w_blk, from_left(idx, s, k) * c, half) + hi @ w_rows(
            w_blk, from_right(idx, s, k) * c + half, c - half
        )

    def step(s, carry):
        acc, lo, hi = carry
        next_lo = jax.lax.ppermute(lo, "model", TO_RIGHT(k))  # both halves set off...
        next_hi = jax.lax.ppermute(hi, "model", TO_LEFT(k))
        return acc + multiply(s, lo, hi), next_lo, next_hi  # ...while these multiply

    acc = jnp.zeros((a_blk.shape[0], w_blk.shape[1]), a_blk.dtype)
    acc = jax.lax.pcast(acc, ("data", "model"), to="varying")
    acc, lo, hi = jax.lax.fori_loop(
        0, k - 1, step, (acc, a_blk[:, :half], a_blk[:, half:])
    )
    return acc + multiply(k - 1, lo, hi)


def matmul_rs_blk(h_blk, w_out_blk):
    return jax.lax.psum_scatter(
        h_blk @ w_out_blk, "model", scatter_dimension=1, tiled=True
    )


def matmul_rs_cm_blk(h_blk, w_out_blk, keep_apart=True):
    """H @ W_out, scattered over `model`: running sums travel right, gaining a term."""
    # h_blk: f32[B/r, F/k], w_out_blk: f32[F/k, D] -> f32[B/r, D/k]
    k, idx = jax.lax.axis_size("model"), jax.lax.axis_index("model")
    c = w_out_blk.shape[1] // k  # D/k columns per chunk

    def term(j):  # our term of chunk j
        return h_blk @ jax.lax.dynamic_slice_in_dim(w_out_blk, j * c, c, axis=1)

    def step(s, acc):
        t = term(from_left(idx - 1, s, k))  # our term of the chunk...
        if keep_apart:  # (not fused with the add)
            t = jax.lax.optimization_barrier(t)
        arrived = jax.lax.ppermute(acc, "model", TO_RIGHT(k))  # ...that arrives now
        return arrived + t

    return jax.lax.fori_loop(1, k, step, term(from_left(idx - 1, 0, k)))  # ends: idx


def median_us(fn, *args, runs=7) -> float:
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return 1e6 * statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=int, default=4, help="ring size")
    parser.add_argument("--shape", type=int, nargs=3, metavar=("B", "D", "F"))
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    on_cpu = jax.default_backend() == "cpu"
    n, k = jax.device_count(), args.model
    if n % k:
        raise SystemExit(f"{n} devices do not split into rings of {k}")
    B, D, F = args.shape or ((256, 512, 1024) if on_cpu else (8192, 8192, 32768))
    dtype = jnp.float32 if on_cpu else jnp.bfloat16
    mesh = jax.make_mesh((n // k, k), ("data", "model"))
    r, e = n // k, jnp.dtype(dtype).itemsize
    key = jax.random.split(jax.random.key(0), 4)

    def random_on(k, shape, spec):
        x = jax.random.normal(k, shape, dtype)
        return jax.device_put(x, NamedSharding(mesh, spec))

    a = random_on(key[0], (B, D), P("data", "model"))
    w = random_on(key[1], (D, F), P(None, "model"))
    h = random_on(key[2], (B, F), P("data", "model"))
    w_out = random_on(key[3], (F, D), P("model", None))
    ag = dict(in_specs=(P("data", "model"), P(None, "model")))
    rs = dict(in_specs=(P("data", "model"), P("model", None)))
    programs = [
        ("all-gather, then matmul", matmul_ag_blk, ag, (a, w)),
        ("collective, one way", matmul_cm_blk, ag, (a, w)),
        ("collective, both ways", matmul_cm_bidi_blk, ag, (a, w)),
        ("matmul, then reduce-scatter", matmul_rs_blk, rs, (h, w_out)),
        ("reduce-scatter, collective", matmul_rs_cm_blk, rs, (h, w_out)),
    ]
    out = NamedSharding(mesh, P("data", "model"))
    devices = jax.devices()
    kind = f"{n} x {devices[0].device_kind}"
    if on_cpu:
        kind = f"{n} simulated CPU devices sharing {os.cpu_count()} cores"
    flops = 2 * (B // r) * D * (F // k)
    sent = (k - 1) * (B // r) * (D // k) * e
    print(f"# {kind}, JAX {jax.__version__}")
    print(f"# A[{B}, {D}] @ W[{D}, {F}] in {jnp.dtype(dtype).name}, mesh {r} x {k}")
    print(f"# per device: {flops:.3g} FLOPs; {sent:.3g} bytes sent by either form")
    for name, body, specs, operands in programs:
        f = jax.jit(
            jax.shard_map(body, mesh=mesh, out_specs=P("data", "model"), **specs)
        )
        reference = jax.jit(lambda x, y: jnp.dot(x, y, out_sharding=out))(*operands)
        error = float(jnp.max(jnp.abs(f(*operands) - reference)))
        assert error <= 1e-2 * float(jnp.max(jnp.abs(reference))), (name, error)
        print(f"{name}: {median_us(f, *operands, runs=args.runs):.1f} us")
    if on_cpu:
        print("# simulated CPU devices: these times show nothing about overlap")


if __name__ == "__main__":
    main()
