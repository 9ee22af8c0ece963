"""Re-measure the matmul rates that chapter 4's cost model uses, on whatever accelerator
JAX finds.

Usage: python bench/matmul_rates.py [--runs 7] [--steps 10 30] [--quick]

Prints one line per shape and dtype in the format of bench/h100-matmul.txt:
    MxK @ KxN dtype: <µs per matmul> us, <TFLOP/s> TFLOP/s

Method (not the one of the stored H100 figures, see bench/README.md). Timing one jitted
`a @ b` per call measures the host's dispatch as much as the matmul: small shapes then
sit at a floor of some tens of µs whatever their FLOPs. So here each timed call runs ONE
compiled program that does `n` matmuls in a row:

- `jax.lax.fori_loop(0, n, step, ..., unroll=True)`: straight-line code, no
  per-iteration loop control on the device;
- each step computes `c = a @ b`, adds it to a running sum `acc` (returned, so every
  element of every product is needed) and writes one element of `acc` into `a`
  (`dynamic_update_slice`, in place): the next matmul depends on the previous one, so
  XLA can neither hoist the loop-invariant product out of the loop nor drop or merge
  steps;
- the program is timed at two step counts, n1 and n2 (median of `runs` calls after a
  warm-up); the slope (T(n2) - T(n1)) / (n2 - n1) removes everything paid once per call
  (dispatch, launch, the copy-in of the carries);
- the same is done for a program whose steps do everything but the matmul (the add into
  `acc` of a product's worth of values and the one-element write), and that slope is
  subtracted: what is left is the time of one matmul inside a program, where the
  accumulate may be fused into it.

FLOPs are counted as 2 M K N. float32 runs at JAX's default matmul precision for the
backend (on an H100 that is TF32 tensor cores). On a CPU, --quick (the default there)
uses shapes 16 times smaller on every side and fewer steps, so the script finishes in
seconds; those figures only show that the script works (`tests/test_bench.py` runs it
so).
"""

import argparse
import statistics
import time

import jax
import jax.numpy as jnp

# (M, K, N): the stored H100 shapes, plus the unchunked partner of the Pallas chunk
SHAPES = [
    (8192, 8192, 8192),
    (1024, 4096, 4096),
    (1024, 4096, 512),
    (8192, 4096, 4096),
    (2048, 2048, 1024),
    (512, 2048, 8192),
    (8192, 4096, 512),
]
DTYPES = ("bfloat16", "float16", "float32")


def chain(n: int, with_matmul: bool):
    """A jitted program of n dependent steps; each step is one matmul (or, without it,
    the rest)."""

    def program(a, b, acc):
        def step(_, carry):
            a, acc = carry
            if with_matmul:
                acc = acc + a @ b  # one M x K @ K x N matmul
            else:
                acc = acc + acc[:1, :1]  # the same add, no matmul
            # next step waits
            a = jax.lax.dynamic_update_slice(a, acc[:1, :1].astype(a.dtype), (0, 0))
            return a, acc

        return jax.lax.fori_loop(0, n, step, (a, acc), unroll=True)[1]

    return jax.jit(program)


def median_seconds(f, args, runs: int) -> float:
    jax.block_until_ready(f(*args))  # warm-up (and compile)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        jax.block_until_ready(f(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def seconds_per_step(with_matmul: bool, args, steps, runs: int) -> float:
    n1, n2 = steps
    t1, t2 = (median_seconds(chain(n, with_matmul), args, runs) for n in (n1, n2))
    return (t2 - t1) / (n2 - n1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument(
        "--steps", type=int, nargs=2, default=(10, 30), metavar=("N1", "N2")
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="shapes / 16, steps 2 and 4 (default on CPU)",
    )
    args = parser.parse_args()
    quick = args.quick or jax.default_backend() == "cpu"
    runs, steps = (3, (2, 4)) if quick else (args.runs, tuple(args.steps))
    key_a, key_b = jax.random.split(jax.random.key(0))
    print(
        f"# {jax.devices()[0].device_kind}, JAX {jax.__version__}, one program of n "
        f"dependent matmuls, slope over n = {steps[0]}, {steps[1]}"
        f"{', shapes / 16' if quick else ''}"
    )
    for M, K, N in SHAPES:
        if quick:
            M, K, N = M // 16, K // 16, N // 16
        for dtype in DTYPES:
            a = jax.random.normal(key_a, (M, K), dtype)
            b = jax.random.normal(key_b, (K, N), dtype)
            acc = jnp.zeros((M, N), dtype)
            s = seconds_per_step(True, (a, b, acc), steps, runs) - seconds_per_step(
                False, (a, b, acc), steps, runs
            )
            rate = (
                f"{2 * M * K * N / s / 1e12:.3g} TFLOP/s"
                if s > 0
                else "below the noise"
            )
            print(f"{M}x{K} @ {K}x{N} {dtype}: {s * 1e6:.1f} us, {rate}", flush=True)


if __name__ == "__main__":
    main()
