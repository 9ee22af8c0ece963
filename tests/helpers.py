"""The book's shared helpers: the one definition of each.

Chapters stay self-contained (Colab opens one notebook, not the repository), so a
chapter that needs one of these copies its definition into a code cell.
tests/test_sources.py checks that every copy is identical to the definition here, and
that no other name is defined two different ways across chapters. tests/test_helpers.py
tests the definitions themselves.
"""
import contextlib
import os
import platform
import re
import statistics
import time

import jax
from termcolor import colored

# Figures only the CPU compiler fixes (exact collective counts, replica-group text) are
# asserted when this holds; what must hold everywhere is asserted always.
ON_CPU = jax.default_backend() == "cpu"

COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "collective-permute",
               "all-to-all")


def count_collectives(compiled) -> dict:
    """How many of each collective a compiled program contains, zeros left out
    (an asynchronous start/done pair counts once)."""
    hlo = compiled.as_text()
    counts = {op: len(re.findall(rf"\b{op}(?:-start)?\(", hlo)) for op in COLLECTIVES}
    return {op: k for op, k in counts.items() if k}


@contextlib.contextmanager
def expect_error(*expected: type):
    """The block must raise one of `expected`: print it once as `Type: message`, the
    type in red (forced, so the stored bytes are the same on every machine and
    terminal), the message as JAX worded it, with the cell's temporary file shown as
    <cell> and installed files relative to site-packages."""
    try:
        yield
    except expected as err:
        message = re.sub(r"\S*ipykernel_\d+[/\\]\d+\.py", "<cell>", str(err))
        message = re.sub(r"\S*[/\\]site-packages[/\\]", "", message)
        print(f"{colored(type(err).__name__, 'red', force_color=True)}: {message}")
    else:
        names = " or ".join(e.__name__ for e in expected)
        raise AssertionError(f"expected {names}; nothing was raised")


def check_divides(what: str, size: int, axis: str, mesh) -> None:
    """Raise a ValueError naming the dimension and the mesh axis unless `size` splits
    evenly over it."""
    if size % mesh.shape[axis]:
        raise ValueError(f"{what} = {size} does not divide over mesh axis {axis!r} "
                         f"of size {mesh.shape[axis]}")


def median_ms(fn, *args, runs=7) -> float:
    """Median milliseconds of `runs` calls after a warm-up call (that also compiles)."""
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def cpu_model() -> str:
    """The processor's model name, as the operating system reports it."""
    try:
        with open("/proc/cpuinfo") as info:
            return next(line.split(":", 1)[1].strip() for line in info
                        if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "an unnamed CPU"


def hardware() -> str:
    """What timings ran on, in words: the accelerators, or the CPU the simulated devices
    share."""
    devices = jax.devices()
    if devices[0].platform != "cpu":
        return f"{len(devices)} x {devices[0].device_kind}"
    return (f"{len(devices)} simulated devices sharing {os.cpu_count()} cores "
            f"of {cpu_model()}")


def show_graph(graph):
    """Draw a graphviz graph as SVG; without Graphviz's `dot` program, say how to
    install it instead."""
    import graphviz
    from IPython.display import SVG, display
    try:
        display(SVG(graph.pipe(format="svg", encoding="utf-8")))
    except graphviz.ExecutableNotFound:
        print("This graph needs Graphviz's `dot` program, which is not installed: "
              "install Graphviz (`apt-get install graphviz`, `brew install graphviz` "
              "or `conda install graphviz`) to see it.")


# --- chapter 04 ---


def executed_collectives(compiled, mesh, axis: str = "model") -> dict:
    """Collectives a compiled program runs, a loop body's once per trip, zeros left out;
    permutes that shift every device one step along `axis` (the mesh's last) are also
    counted as "permute right" (to index + 1) or "permute left" (to index - 1)."""
    if mesh.axis_names[-1] != axis:
        raise ValueError(f"axis {axis!r} is not the last of mesh axes "
                         f"{mesh.axis_names} (mesh shape {dict(mesh.shape)})")
    k, hlo, counts = mesh.shape[axis], compiled.as_text(), {}
    shift = {s: {(i, i - i % k + (i + s) % k) for i in range(mesh.size)}
             for s in (1, -1)}
    trips = dict(re.findall(r'body=%([^,\s]+).*?"known_trip_count":\{"n":"(\d+)"', hlo))
    bodies = re.findall(r"^(?:ENTRY )?%(\S+) [^\n]*\{\n(.*?)^\}", hlo, re.M | re.S)
    for name, body in bodies:
        runs = int(trips.get(name, 1))
        for op in COLLECTIVES:
            if hits := len(re.findall(rf"\b{op}(?:-start)?\(", body)):
                counts[op] = counts.get(op, 0) + runs * hits
        for pairs in re.findall(r"collective-permute(?:-start)?\(.*?"
                                r"source_target_pairs=\{(.*?)\}\}", body):
            found = {tuple(map(int, p)) for p in re.findall(r"(\d+),(\d+)", pairs)}
            key = ("permute right" if found == shift[1] else
                   "permute left" if found == shift[-1] else "permute other")
            counts[key] = counts.get(key, 0) + runs
    return counts


# --- chapter 05 ---
# Readers of a compiled program's HLO text: its collectives, the JAX operation each one
# came from (its op_name metadata), and the sizes of what they communicate.


def collective_ops(compiled) -> list:
    """(kind, operand count, JAX op name) of every collective in the compiled program
    (an asynchronous start/done pair once)."""
    found = []
    for line in compiled.as_text().splitlines():
        kinds = "|".join(COLLECTIVES)
        if match := re.search(rf"\b({kinds})(?:-start)?\((.*?)\)(.*)$", line):
            kind, operands, rest = match.groups()
            origin = re.search(r'op_name="([^"]*)"', rest)
            found.append((kind, operands.count("%"), origin[1] if origin else "?"))
    return found


def array_origins(compiled) -> list:
    """(kind, JAX op name) of every array a collective sends. XLA's combiner merges
    collectives of one kind into one op, whose name lists its arrays' names as
    (a:b:...) after any shared prefix; an op that sends several arrays for one JAX
    operation has that one name."""
    found = []
    for kind, arrays, name in collective_ops(compiled):
        name = name.split("/", 1)[-1]                      # drop the jit(...) prefix
        combined = re.fullmatch(r"(.*/)?\((.*)\)", name) if arrays > 1 else None
        if combined:
            names = [(combined[1] or "") + part for part in combined[2].split(":")]
        else:
            names = [name] * arrays
        if len(names) != arrays:
            raise ValueError(f"{kind} sends {arrays} arrays but is named {name!r}")
        found += [(kind, part) for part in names]
    return found


def count_collective_arrays(compiled, backward=None) -> dict:
    """How many arrays each kind of collective sends: all of them, or only the
    backward pass's (backward=True: JAX names its operations transpose(...)) or only
    the rest (backward=False)."""
    counts = {}
    for kind, name in array_origins(compiled):
        if backward is None or name.startswith("transpose(") == backward:
            counts[kind] = counts.get(kind, 0) + 1
    return counts


def hlo_arrays(types: str) -> list:
    """(element type, element count) of every array in an HLO type, such as
    `(f32[4,8]{1,0}, bf16[])`."""
    found = []
    for dtype, dims in re.findall(r"(\w+)\[([\d,]*)\]", types):
        count = 1
        for size in filter(None, dims.split(",")):
            count *= int(size)
        found.append((dtype, count))
    return found


def collective_elements(compiled, kind) -> int:
    """Elements in the results of every `kind` collective: what each device ends up
    holding after them, over the whole program."""
    total = 0
    for line in compiled.as_text().splitlines():
        if match := re.search(rf"= (.*?) {kind}(?:-start)?\(", line):
            total += sum(count for _, count in hlo_arrays(match[1]))
    return total


def hlo_results(compiled, op, origin) -> list:
    """The result types (without layout) of every `op` in the compiled program whose
    JAX op name ends in /`origin`."""
    pattern = rf'= (\w+\[[\d,]*\])\S* {op}\(.*op_name="[^"]*/{re.escape(origin)}"'
    return re.findall(pattern, compiled.as_text())


def group_size(attributes: str) -> int:
    """The devices in each replica group of an HLO collective, read from its
    attributes: replica_groups=mesh[...] {axes}, [G,k]<=[...] or {{...},...}."""
    g = re.search(r"replica_groups=(?:mesh\[([^\]]*)\] \{([^}]*)\}"
                  r"|\[\d+,(\d+)\]<=|\{\{([\d,]*)\})", attributes)
    if g is None:
        raise ValueError(f"no replica groups in {attributes[:80]!r}")
    if g[1] is not None:
        sizes = dict(re.findall(r"'(\w+)'=(\d+)", g[1]))
        k = 1
        for axis in re.findall(r"'(\w+)'", g[2]):
            k *= int(sizes[axis])
        return k
    return int(g[3]) if g[3] else len(g[4].split(","))


def collective_bytes(compiled, kind) -> float:
    """Bytes each device sends in every (synchronous) `kind` collective, as a ring over
    its group of k: (k-1)/k of an all-gather's result, 2 (k-1)/k of an all-reduce's."""
    if kind not in ("all-gather", "all-reduce"):
        raise ValueError(f"kind = {kind!r}: only all-gather and all-reduce are read")
    element_bytes = {"f32": 4, "bf16": 2, "s32": 4, "pred": 1}
    total = 0.0
    for line in compiled.as_text().splitlines():
        if match := re.search(rf"= (.*?) {kind}\((.*)$", line):
            k = group_size(match[2])
            result = sum(element_bytes[t] * count for t, count in hlo_arrays(match[1]))
            total += (2 if kind == "all-reduce" else 1) * (k - 1) / k * result
    return total


# --- chapter 10 ---
# Chapters 7 and 10 count what a scanned program runs, loops' trips included.


def executed(compiled, op: str) -> int:
    """How many times one run of a compiled program executes `op`: once per appearance
    in the entry computation, once per trip in a while loop's body (XLA records the
    trip count of a scan). Raises where `op` sits elsewhere (a nested loop, a
    conditional's branch), which this count does not cover."""
    hlo = compiled.as_text()
    trips = {}  # loop body -> trip count (None: unknown)
    for line in hlo.splitlines():
        if " while(" in line:
            count = re.search(r'"known_trip_count":\{"n":"(\d+)"\}', line)
            body = re.search(r"body=%([\w.\-]+)", line).group(1)
            trips[body] = int(count.group(1)) if count else None
    total = 0
    for entry, name, text in re.findall(
            r"^(ENTRY )?%(\S+) .*?\{\n(.*?)^\}", hlo, re.M | re.S):
        k = len(re.findall(rf"\b{op}(?:-start)?\(", text))
        if k and not entry and trips.get(name) is None:
            raise ValueError(f"{op} in {name}, neither the entry nor a counted loop")
        total += k * (1 if entry else trips.get(name) or 0)
    return total


# --- chapter 01 ---


def lowered_collectives(lowered) -> dict:
    """How many of each collective a lowered program asks for, zeros left out: those
    its shard_map bodies call, as JAX lowers them for every backend, before XLA's
    passes (which may rewrite them) and before jit's partitioner adds its own."""
    hlo = lowered.as_text(dialect="hlo")
    counts = {op: len(re.findall(rf"\b{op}\(", hlo)) for op in COLLECTIVES}
    return {op: k for op, k in counts.items() if k}


# --- chapters 05 and 07 ---


def lowered_flops(lowered) -> float:
    """XLA's FLOP count of a lowered program, before optimisation and without
    compiling. Backends reached through PJRT's C API (TPU, GPU plugins) cannot count
    a lowered program (`Lowered.cost_analysis()` returns None): there, the compiled
    program's count."""
    cost = lowered.cost_analysis()
    return (cost if cost is not None else lowered.compile().cost_analysis())["flops"]
