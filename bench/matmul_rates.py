"""Re-measure the matmul rates that chapter 4's cost model uses, on whatever accelerator JAX finds.

Usage: python bench/matmul_rates.py [--runs 7] [--calls 50] [--quick]

Prints one line per shape and dtype in the format of bench/h100-matmul.txt:
    MxK @ KxN dtype: <median µs per call> us, <TFLOP/s> TFLOP/s
Method (as for the stored H100 figures): jit(a @ b) on jax.random.normal inputs; one warm-up call,
then `runs` timings of `calls` back-to-back calls ending in block_until_ready; the median per call
is reported; FLOPs counted as 2 M K N. On a CPU, --quick (the default there) uses shapes 8 times
smaller on every side, so the script finishes in seconds; the format is the same.
"""
import argparse
import statistics
import time

import jax
import jax.numpy as jnp

SHAPES = [  # (M, K, N): the stored H100 shapes, plus the unchunked partner of the Pallas chunk
    (8192, 8192, 8192), (1024, 4096, 4096), (1024, 4096, 512), (8192, 4096, 4096),
    (2048, 2048, 1024), (512, 2048, 8192), (8192, 4096, 512),
]
DTYPES = ("bfloat16", "float16", "float32")


def per_call_seconds(f, a, b, runs: int, calls: int) -> float:
    jax.block_until_ready(f(a, b))                       # warm-up (and compile)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(calls):
            out = f(a, b)
        jax.block_until_ready(out)
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="shapes / 8 (default on CPU)")
    args = parser.parse_args()
    quick = args.quick or jax.default_backend() == "cpu"
    runs, calls = (3, 3) if quick and jax.default_backend() == "cpu" else (args.runs, args.calls)
    f = jax.jit(lambda a, b: a @ b)
    key_a, key_b = jax.random.split(jax.random.key(0))
    print(f"# {jax.devices()[0].device_kind}, JAX {jax.__version__}{', shapes / 8' if quick else ''}")
    for M, K, N in SHAPES:
        if quick:
            M, K, N = M // 8, K // 8, N // 8
        for dtype in DTYPES:
            a = jax.random.normal(key_a, (M, K), dtype)
            b = jax.random.normal(key_b, (K, N), dtype)
            s = per_call_seconds(f, a, b, runs, calls)
            print(f"{M}x{K} @ {K}x{N} {dtype}: {s * 1e6:.1f} us, {2 * M * K * N / s / 1e12:.3g} TFLOP/s",
                  flush=True)


if __name__ == "__main__":
    main()
