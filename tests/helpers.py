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

# One palette for every figure (Okabe and Ito, "Color Universal Design", 2008): its
# colours stay apart for readers with the common colour-vision deficiencies, and in
# grey print by their lightness. Figures cycle through it in this order.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00",
           "#F0E442", "#000000")

COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "collective-permute",
               "all-to-all")


def issued_hlo(compiled) -> str:
    """A compiled program's HLO text with each collective it issues written once, as
    `kind(` or, asynchronous, `kind-start(`, whichever compiler made it: the book's
    readers of collectives read this. Compilers' own forms are rewritten. libtpu: an
    asynchronous collective is a chain of fusions (the first starts it, custom-call
    AsyncCollectiveStart; the last ends it), each body repeating the collective, and
    becomes one `kind-start`; a reduce-scatter is a fusion calling %all-reduce-scatter
    (an all-reduce of which each device keeps its slice) and becomes a
    `reduce-scatter`. XLA:GPU: a collective in an asynchronous fusion (`fusion-start`)
    becomes a `kind-start`. Any other fusion whose body holds a collective issues it
    once, synchronously. Fusion bodies are left out: the instruction that calls one
    stands for it. A `kind-start` line's type is its result alone (XLA writes an
    asynchronous start's type as operands, result and context), as a `-done`'s is."""
    hlo = compiled.as_text()
    computations = re.findall(r"^((?:ENTRY )?%(\S+) [^\n]*\{\n)(.*?^\}[^\n]*\n)", hlo,
                              re.M | re.S)
    bodies = {name: text for _, name, text in computations}
    fused = set(re.findall(r" fusion(?:-start)?\(.*?calls=%([\w.\-]+)", hlo))
    kinds = "|".join(COLLECTIVES)
    inner = re.compile(rf"^\s*(?:ROOT )?%\S+ = (.*?) ({kinds})(?:-start)?\("
                       r"[^)]*\)(.*)$", re.M)

    def result_alone(line):      # ((operands), result, context...) -> result
        start = re.match(rf"(\s*(?:ROOT )?%\S+ = )\((.*?)\) ({kinds})(-start\(.*)$",
                         line, re.S)
        if not start:
            return line
        parts, depth = [""], 0
        for char in re.sub(r"/\*index=\d+\*/", "", start[2]):
            depth += (char in "([{") - (char in ")]}")
            if char == "," and depth == 0:
                parts.append("")
            else:
                parts[-1] += char
        if start[3] == "all-reduce" and not parts[0].strip().startswith("("):
            return line            # all-reduce-start's own form: a tuple of results
        return f"{start[1]}{parts[1].strip()} {start[3]}{start[4]}"
    channel = lambda text: re.search(r"channel_id=(\d+)", text or "")
    started = {channel(op[0])[1] for text in bodies.values()   # libtpu's chains
               if 'custom_call_target="AsyncCollectiveStart"' in text
               and (op := inner.search(text)) and channel(op[0])}
    kept = []
    for header, name, text in computations:
        if name in fused:
            continue
        lines = []
        for line in text.splitlines(keepends=True):
            call = re.match(r"(\s*(?:ROOT )?%\S+ = )(.*?) fusion(-start)?\(([^)]*)\).*?"
                            r"calls=%([\w.\-]+)", line)
            body = bodies.get(call[5], "") if call else ""
            op = inner.search(body)
            # the rewritten line keeps the JAX op name: the body's, else the fusion's
            named = re.search(r", metadata=\{[^}]*\}", line)
            rest = op[3] if op else ""
            if named and "metadata=" not in rest:
                rest += named[0]
            if not call:
                line = result_alone(line)
            elif not op:
                pass
            elif call[5].startswith("all-reduce-scatter"):
                line = f"{call[1]}{call[2]} reduce-scatter({call[4]}){rest}\n"
            elif call[3] or 'custom_call_target="AsyncCollectiveStart"' in body:
                line = f"{call[1]}{op[1]} {op[2]}-start({call[4]}){rest}\n"
            elif not (channel(op[0]) and channel(op[0])[1] in started):
                line = f"{call[1]}{op[1]} {op[2]}({call[4]}){rest}\n"
            lines.append(line)                # else: a chain's later link: nothing new
        kept.append(header + "".join(lines))
    return "\n".join(kept)


def count_collectives(compiled) -> dict:
    """How many of each collective a compiled program issues, zeros left out (an
    asynchronous start/done pair counts once; see issued_hlo)."""
    hlo = issued_hlo(compiled)
    counts = {op: len(re.findall(rf" {op}(?:-start)?\(", hlo)) for op in COLLECTIVES}
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


def loop_trips(computations: dict, caller: str, line: str) -> int | None:
    """Trips of the while loop on `line`, an instruction of computation `caller`
    (computations: name -> text): the count XLA recorded (`known_trip_count`), or where
    the compiler recorded none (libtpu's loops) the count read from the loop itself
    when it has the form a scan or fori_loop lowers to: a counter in the loop's tuple
    that starts from a constant, the body adds 1 to (through copies: libtpu copies
    the counter of a gradient's loops first), and the condition compares LT a
    constant. None where neither holds."""
    if trips := re.search(r'"known_trip_count":\{"n":"(\d+)"\}', line):
        return int(trips[1])
    loop = re.search(r"while\(%([\w.\-]+)\), condition=%([\w.\-]+), "
                     r"body=%([\w.\-]+)", line)
    if not loop or loop[2] not in computations or loop[3] not in computations:
        return None
    here, cond, body = (computations[c] for c in (caller, loop[2], loop[3]))

    def defined(text, name):  # (op, operand names) of the instruction %name
        found = re.search(rf"^ *(?:ROOT )?%{re.escape(name)} = .*? ([\w\-]+)\((.*?)\)"
                          r"(?=$|, )", text, re.M)
        return (found[1], found[2]) if found else (None, "")

    def source(text, name):  # the instruction a chain of copies starts from
        while (found := defined(text, name))[0] == "copy":
            name = found[1].lstrip("%")
        return name

    def constant(text, name):  # its value, through copies; None if not a constant
        op, args = defined(text, source(text, name))
        return int(args) if op == "constant" and re.fullmatch(r"-?\d+", args) else None

    def names(args):
        return re.findall(r"%([\w.\-]+)", args)

    def element(text, name):  # i where %name is get-tuple-element(param), index=i
        found = re.search(rf"^ *%{re.escape(name)} = \S+ get-tuple-element\(%\S+\), "
                          r"index=(\d+)", text, re.M)
        return int(found[1]) if found else None

    compare = re.search(r"ROOT %\S+ = \S+ compare\(%([\w.\-]+), %([\w.\-]+)\), "
                        r"direction=LT", cond)
    root = re.search(r"ROOT %\S+ = .*? tuple\((.*?)\)(?=$|, )", body, re.M)
    if not compare or not root or (i := element(cond, compare[1])) is None:
        return None
    start, out = names(defined(here, loop[1])[1]), names(root[1])
    op, step = defined(body, source(body, out[i])) if i < len(out) else (None, "")
    step = names(step)
    if (op != "add" or len(step) != 2 or element(body, source(body, step[0])) != i
            or constant(body, step[1]) != 1):
        return None
    first, bound = constant(here, start[i]) if i < len(start) else None, \
        constant(cond, compare[2])
    return None if first is None or bound is None else max(bound - first, 0)


def executed_collectives(compiled, mesh, axis: str = "model") -> dict:
    """Collectives a compiled program runs, each as often as one run of it runs the
    computation it sits in (computation_runs: a loop body once per trip, nested loops
    multiplied; raises where that count does not reach), zeros left out; permutes that
    shift every device one step along `axis` (the mesh's last) are also counted as
    "permute right" (to index + 1) or "permute left" (to index - 1)."""
    if mesh.axis_names[-1] != axis:
        raise ValueError(f"axis {axis!r} is not the last of mesh axes "
                         f"{mesh.axis_names} (mesh shape {dict(mesh.shape)})")
    k, counts = mesh.shape[axis], {}
    shift = {s: {(i, i - i % k + (i + s) % k) for i in range(mesh.size)}
             for s in (1, -1)}
    texts, runs, uncounted = computation_runs(issued_hlo(compiled))
    for name, body in texts.items():
        hits = {op: len(re.findall(rf" {op}(?:-start)?\(", body)) for op in COLLECTIVES}
        if any(hits.values()) and name in uncounted:
            raise ValueError(f"{name} runs collectives, and this count does not reach "
                             "it (a loop of unknown trips, a conditional's branch, "
                             "uncalled)")
        for op, n in hits.items():
            if n:
                counts[op] = counts.get(op, 0) + runs[name] * n
        for pairs in re.findall(r"collective-permute(?:-start)?\(.*?"
                                r"source_target_pairs=\{(.*?)\}\}", body):
            found = {tuple(map(int, p)) for p in re.findall(r"(\d+),(\d+)", pairs)}
            key = ("permute right" if found == shift[1] else
                   "permute left" if found == shift[-1] else "permute other")
            counts[key] = counts.get(key, 0) + runs[name]
    return counts


# --- chapter 05 ---
# Readers of a compiled program's HLO text: its collectives, the JAX operation each one
# came from (its op_name metadata), and the sizes of what they communicate.


def collective_ops(compiled) -> list:
    """(kind, operand count, JAX op name) of every collective in the compiled program
    (an asynchronous start/done pair once)."""
    found = []
    for line in issued_hlo(compiled).splitlines():
        kinds = "|".join(COLLECTIVES)
        if match := re.search(rf" ({kinds})(?:-start)?\((.*?)\)(.*)$", line):
            kind, operands, rest = match.groups()
            origin = re.search(r'op_name="([^"]*)"', rest)
            found.append((kind, operands.count("%"), origin[1] if origin else "?"))
    return found


def array_origins(compiled) -> list:
    """(kind, JAX op name) of every array a collective sends. XLA's combiner merges
    collectives of one kind into one op, whose name lists its arrays' names as
    (a:b:...) after any shared prefix; an op that sends several arrays for one JAX
    operation has that one name. XLA:GPU may also pack combined arrays into one
    buffer: one operand named (a:b:...) counts as one array per name; one packed
    under a plain name (the arrays of one JAX operation) counts as one array."""
    found = []
    for kind, arrays, name in collective_ops(compiled):
        name = name.split("/", 1)[-1]                      # drop the jit(...) prefix
        combined = re.fullmatch(r"(.*/)?\((.*:.*)\)", name)
        if combined:
            names = [(combined[1] or "") + part for part in combined[2].split(":")]
        else:
            names = [name] * arrays
        if arrays > 1 and len(names) != arrays:
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
    for line in issued_hlo(compiled).splitlines():
        if match := re.search(rf"= (.*?) {kind}(?:-start)?\(", line):
            total += sum(count for _, count in hlo_arrays(match[1]))
    return total


def hlo_results(compiled, op, origin) -> list:
    """The result types (without layout) of every `op` in the compiled program whose
    JAX op name ends in /`origin`: a collective as issued (see issued_hlo), any other
    op wherever it sits, in fusion bodies too."""
    pattern = rf'= (\w+\[[\d,]*\])\S* {op}\(.*op_name="[^"]*/{re.escape(origin)}"'
    text = issued_hlo(compiled) if op in COLLECTIVES else compiled.as_text()
    return re.findall(pattern, text)


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
    for line in issued_hlo(compiled).splitlines():
        if match := re.search(rf"= (.*?) {kind}\((.*)$", line):
            k = group_size(match[2])
            result = sum(element_bytes[t] * count for t, count in hlo_arrays(match[1]))
            total += (2 if kind == "all-reduce" else 1) * (k - 1) / k * result
    return total


# --- chapter 10 ---
# Chapters 7 and 10 count what a scanned program runs, loops' trips included.


def computation_runs(hlo: str) -> tuple[dict, dict, set]:
    """The computations of a program's HLO text (name -> text), how many times one
    run of the program runs each, from the entry down (a while loop's body once per
    trip, read by loop_trips; loops nested in loops multiplied; a computation called
    from another, by call, fusion or async wrapper, once per call), and the names
    that count does not reach: under a loop whose trips XLA did not record and
    loop_trips cannot read, in a conditional's branch, or called by nothing."""
    computations = {name: (entry, text) for entry, name, text in re.findall(
        r"^(ENTRY )?%(\S+) [^\n]*\{\n(.*?)^\}", hlo, re.M | re.S)}
    texts = {name: text for name, (_, text) in computations.items()}
    runs, uncounted = dict.fromkeys(computations, 0), set()

    def visit(name, times, counted):  # every path from the entry: runs add up
        runs[name] += times
        if not counted:
            uncounted.add(name)
        for line in texts[name].splitlines():
            if (loop := re.search(r" while\(.*body=%([\w.\-]+)", line)):
                trips = loop_trips(texts, name, line)
                callees = [(loop[1], trips or 0, trips is not None)]
            else:
                branch = re.search(r"(?:branch_computations|true_computation)=", line)
                callees = [(c, 1, not branch) for c in re.findall(
                    r"(?:calls|to_apply|_computations?)=\{?%([\w.\-]+)", line)]
                callees += [(c, 1, False) for c in re.findall(r", %([\w.\-]+)", line)
                            if branch and c in computations]
            for callee, n, known in callees:
                if callee in computations:
                    visit(callee, times * n, counted and known)

    for name, (entry, _) in computations.items():
        if entry:
            visit(name, 1, True)
    return texts, runs, uncounted | {name for name, n in runs.items() if not n}


def executed(compiled, op: str) -> int:
    """How many times one run of a compiled program executes the collective `op` (as
    issued: see issued_hlo): each computation's count times the runs of it that one
    run makes (computation_runs). Raises where `op` sits where that count does not
    reach: a loop whose trips XLA did not record, a conditional's branch, a
    computation nothing calls."""
    texts, runs, uncounted = computation_runs(issued_hlo(compiled))
    total = 0
    for name, text in texts.items():
        k = len(re.findall(rf" {op}(?:-start)?\(", text))
        if k and name in uncounted:
            raise ValueError(f"{op} in {name}, which this count does not reach (a "
                             "loop of unknown trips, a conditional's branch, uncalled)")
        total += k * runs[name]
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


# --- compilers: every chapter ---
# The real TPU compiler (libtpu) and GPU compiler (the CUDA PJRT plugin) compile for
# named topologies without the hardware: nothing is allocated or run, so a chapter
# checks what each accelerator's compiler makes of its program, next to XLA:CPU's.

# Each target: (what it is, the package its compiler comes in, (slices or hosts, the
# topology)). A CUDA topology reads slices x hosts per slice x GPUs per host, a slice
# being one NVLink domain: an HGX H100 host of 8 is one, so two such hosts are "2x1x8"
# ("1x2x8" would be one NVLink domain spanning both hosts, as a GB200 NVL72 rack's 18
# trays of 4 GPUs are one).
TARGETS = {
    # Names count chips or GPUs. Cloud TPU names a v5p slice by its TensorCores, two a
    # chip: "tpu-v5p-8" is what Cloud TPU calls a v5p-16, "tpu-v5p-64" a v5p-128.
    "cpu": ("the CPU devices the bootstrap made (XLA:CPU)", None, None),
    "tpu-v5e-8": ("TPU v5e, one 2x4 slice", "libtpu", (1, "v5e:2x4")),
    "tpu-v5p-64": ("TPU v5p, 64 chips in one 4x4x4 slice (v5p-128)", "libtpu",
                   (1, "v5p:4x4x4")),
    "tpu-v5e-2x4": ("TPU v5e, two 2x2 slices over DCN", "libtpu", (2, "v5e:2x2")),
    "h100-8": ("8 H100 SXM, one host", "jax-cuda13-pjrt", (1, "1x1x8")),
    "h100-2x8": ("2 hosts of 8 H100 SXM, each its own NVLink domain",
                 "jax-cuda13-pjrt", (2, "2x1x8")),
    # other slice sizes, for the chapters that ask whether a choice is the chip count's
    "tpu-v5e-4": ("TPU v5e, one 2x2 slice", "libtpu", (1, "v5e:2x2")),
    "tpu-v5e-16": ("TPU v5e, one 4x4 slice", "libtpu", (1, "v5e:4x4")),
    "tpu-v5p-8": ("TPU v5p, 8 chips in one 2x2x2 slice (v5p-16)", "libtpu",
                  (1, "v5p:2x2x2")),
    "h100-4x8": ("4 hosts of 8 H100 SXM", "jax-cuda13-pjrt", (4, "4x1x8")),
}
# What the CUDA plugin compiles for: the H100 SXM 80GB as XLA describes it, a
# GpuTargetConfigProto (figures from XLA's xla/backends/gpu/target_config/specs/
# h100_sxm.txtpb, explained in tests/targets/h100_sxm.txtpb of the book's repository).
H100_SXM = """gpu_device_info { threads_per_block_limit: 1024 threads_per_warp: 32
  shared_memory_per_block: 49152 shared_memory_per_core: 233472
  threads_per_core_limit: 2048 core_count: 132 fpus_per_core: 128
  block_dim_limit_x: 2147483647 block_dim_limit_y: 65535 block_dim_limit_z: 65535
  memory_bandwidth: 3352320000000 l2_cache_size: 52428800 clock_rate_ghz: 1.98
  device_memory_size: 84942979072 shared_memory_per_block_optin: 232448
  cuda_compute_capability { major: 9 feature_extension: ACCELERATED_FEATURES }
  registers_per_core_limit: 65536 registers_per_block_limit: 65536
  thread_dim_limit_x: 1024 thread_dim_limit_y: 1024 thread_dim_limit_z: 64
  device_vendor: "NVIDIA Corporation" platform_version: "Compute Capability 9.0a"
  device_address_bits: 64 pcie_bandwidth: 34359738368 ecc_enabled: true
  name: "NVIDIA H100 80GB HBM3" driver_version: "13.0.0" runtime_version: "12.8.0"
  compile_time_toolkit_version: "12.8.0" dnn_version: "9.10.0" cub_version: "3.1.2"
  device_interconnect_info { active_links: 18 } collective_memory_granularity: 2097152 }
platform_name: "CUDA" dnn_version_info { major: 8 minor: 9 patch: 4 }
device_description_str: "NVIDIA H100 80GB HBM3"
"""


def device_total(stats) -> int:
    """Bytes of device memory a compiled program's buffers take on one device, from its
    memory_analysis(): arguments, outputs not written into an argument, temporaries."""
    return (stats.argument_size_in_bytes + stats.output_size_in_bytes
            - stats.alias_size_in_bytes + stats.temp_size_in_bytes)


def device_figure(target: str, stats) -> int:
    """The bytes one device holds for a compiled program, read from each compiler's own
    memory_analysis() as chapter 7 reads them (its accumulation section says why):
    libtpu's peak on a TPU, device_total elsewhere. Fails where a compiler's peak is
    not what chapter 7 says it is."""
    buffers = device_total(stats) - stats.temp_size_in_bytes  # args + out - aliases
    peak = stats.peak_memory_in_bytes
    if target == "cpu":  # XLA:CPU: the buffers alone (within a KiB), no temporaries
        assert 0 <= peak - buffers <= 1024, (target, peak, buffers)
    elif target.startswith("h100"):  # XLA:GPU: temporaries in, and host memory too:
        # up to device_total, or the host temporaries beside the buffers where larger
        # (an offloaded program), plus what it reads from host memory
        host = stats.host_temp_size_in_bytes + buffers
        limit = max(device_total(stats), host) + stats.host_argument_size_in_bytes
        assert buffers < peak <= limit + 1024, (target, peak, buffers, limit)
    else:  # libtpu: its own figure, above the buffers
        assert peak > buffers, (target, peak, buffers)
        return peak
    return device_total(stats)


def target_devices(target: str) -> list | None:
    """The devices of a compile target: the CPU devices JAX runs on, or compile-only
    TPU or H100 devices (None, after one line saying what to install, when the
    target's compiler is not installed)."""
    import importlib.util

    from jax.experimental import topologies
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; known: {', '.join(TARGETS)}")
    what, package, shape = TARGETS[target]
    if package is None:  # also beside real accelerators: the bootstrap starts the CPU
        return jax.devices("cpu")
    module = "libtpu" if package == "libtpu" else "jax_plugins.xla_cuda13"
    if importlib.util.find_spec(module) is None:
        version = "0.0.51" if package == "libtpu" else "0.12.0.1"
        extra = " --no-deps" if package != "libtpu" else ""
        print(f"skipped {target} ({what}): its compiler is not installed "
              f"(pip install{extra} {package}=={version})")
        return None
    slices, topology = shape
    if package == "libtpu":
        if jax.default_backend() != "tpu":  # no TPU here: libtpu need not look for one
            # nor lock one against other processes (compiling needs no lock)
            for name, value in (("TPU_SKIP_MDS_QUERY", "1"),
                                ("ALLOW_MULTIPLE_LIBTPU_LOAD", "1"),
                                ("TPU_ACCELERATOR_TYPE", "v5litepod-8"),
                                ("TPU_WORKER_HOSTNAMES", "localhost"),
                                ("TPU_WORKER_ID", "0")):
                os.environ.setdefault(name, value)
        return topologies.get_topology_desc(topology, "tpu", num_slices=slices).devices
    return topologies.get_topology_desc("", "cuda", target_config=H100_SXM,
                                        topology=topology).devices


def target_mesh(target: str, axes: dict, axis_types=None):
    """A mesh with `axes` (name -> size, outermost first) over a target's devices (None
    where its compiler is missing). On a target of several slices or hosts the first
    axis crosses them (its size a multiple of their number), the rest stay inside one
    (ICI, NVLink): the hybrid mesh of chapter 8."""
    import math

    import numpy as np
    from jax.experimental import mesh_utils
    devices = target_devices(target)
    if devices is None:
        return None
    names, shape = tuple(axes), tuple(axes.values())
    if math.prod(shape) != len(devices):
        raise ValueError(f"mesh {axes} needs {math.prod(shape)} devices; target "
                         f"{target!r} has {len(devices)}")
    granules = TARGETS[target][2][0] if TARGETS[target][2] else 1
    if shape[0] % granules:
        raise ValueError(f"axis {names[0]!r} of size {shape[0]} does not divide over "
                         f"the {granules} slices or hosts of {target!r}")
    if granules > 1:
        ici = (shape[0] // granules, *shape[1:])
        dcn = (granules,) + (1,) * (len(shape) - 1)
        grid = mesh_utils.create_hybrid_device_mesh(
            ici, dcn, devices=devices, process_is_granule=target.startswith("h100"))
    elif target == "cpu":
        grid = np.array(devices).reshape(shape)
    else:
        grid = mesh_utils.create_device_mesh(shape, devices=devices,
                                             allow_split_physical_axes=True)
    types = axis_types or (jax.sharding.AxisType.Explicit,) * len(shape)
    return jax.sharding.Mesh(grid, names, axis_types=types)


class Build:
    """What one compiler made of a program: its HLO text, collectives, memory and
    FLOPs (None where that compiler reports none: XLA:GPU compiled without a GPU)."""

    def __init__(self, target, compiled):
        self.target, self.compiled, self.hlo = target, compiled, compiled.as_text()
        self.issued = issued_hlo(compiled)  # each collective once, in XLA's usual form
        self.memory = compiled.memory_analysis()
        cost = compiled.cost_analysis()
        self.flops = cost.get("flops") if cost else None

    @property
    def collectives(self) -> dict:
        """Each collective's count (an asynchronous start/done pair once), zeros left
        out; on TPU slices, transfers over DCN: the host sends of XLA's megascale
        runtime, as "dcn send"."""
        counts = {op: len(re.findall(rf" {op}(?:-start)?\(", self.issued))
                  for op in COLLECTIVES}
        counts["dcn send"] = len(re.findall(
            r"\bsend\(.*is_host_transfer=true.*megascale", self.issued))
        return {op: k for op, k in counts.items() if k}

    @property
    def asynchronous(self) -> bool:
        """Whether any collective is in the start/done form, which lets the schedule
        put other work between its start and its done: that the program can overlap a
        collective, not that it does (a start with nothing before its done overlaps
        nothing; XLA:GPU's predicted timeline shows what runs under each)."""
        return bool(re.search(rf"\b(?:{'|'.join(COLLECTIVES)})-start\(", self.issued))


def compile_for(target: str, fn, *args, axes=None, compiler_options=None,
                **jit_options) -> Build | None:
    """Compile jax.jit(fn, **jit_options) for a target without running it (None where
    its compiler is missing). Each argument sharded over the chapter's mesh becomes a
    ShapeDtypeStruct with the same shape, dtype and PartitionSpec over a mesh with the
    same axis names and types on the target's devices: of sizes `axes`, by default
    the chapter mesh's with the first axis grown or shrunk to the target's device
    count; unsharded ones are replicated. `fn` is traced under jax.set_mesh(that
    mesh), so code that takes its mesh from the context (jax.reshard, constraints
    given as P) needs no change; but a jax.shard_map made without mesh= keeps the
    first context mesh it ran under: make it inside `fn`, fresh for each target.
    compiler_options: XLA debug options for this compile alone."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P
    leaves = jax.tree.leaves(args)
    meshes = {leaf.sharding.mesh for leaf in leaves
              if isinstance(getattr(leaf, "sharding", None), NamedSharding)}
    if len(meshes) != 1:
        raise ValueError(f"the arguments are sharded over {len(meshes)} meshes; "
                         "compile_for needs exactly one (the chapter's)")
    (mesh,) = meshes
    if axes is None:  # the chapter's mesh; its first axis absorbs another device count
        devices = target_devices(target)
        if devices is None:
            return None
        axes, rest = dict(mesh.shape), mesh.size // mesh.shape[mesh.axis_names[0]]
        if len(devices) % rest:
            raise ValueError(f"mesh {axes} does not fit the {len(devices)} devices "
                             f"of {target!r}: pass axes=")
        axes[mesh.axis_names[0]] = len(devices) // rest
    mesh_t = target_mesh(target, axes, mesh.axis_types)
    if mesh_t is None:
        return None

    def on_target(leaf):
        if not hasattr(leaf, "shape"):
            return leaf
        sharding = getattr(leaf, "sharding", None)
        if isinstance(sharding, NamedSharding):
            sharding = NamedSharding(mesh_t, sharding.spec,
                                     memory_kind=sharding.memory_kind)
        else:
            sharding = NamedSharding(mesh_t, P())
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding)

    with jax.set_mesh(mesh_t):
        compiled = jax.jit(fn, **jit_options).lower(
            *jax.tree.map(on_target, args)).compile(compiler_options)
    return Build(target, compiled)


def compare_compilers(fn, *args, targets=("cpu", "tpu-v5e-8", "h100-8"),
                      **options) -> dict:
    """Compile one program for several targets (compile_for's options) and print one
    row per target: its collectives and whether any is asynchronous (in start/done
    form: see Build.asynchronous; not that anything overlaps it). Returns
    target -> Build; a target whose compiler is missing is left out (after its line)."""
    builds = {}
    for target in targets:
        if (build := compile_for(target, fn, *args, **options)) is not None:
            builds[target] = build
    width = max(map(len, builds), default=0)
    for target, build in builds.items():
        found = ", ".join(f"{op} {k}" for op, k in build.collectives.items())
        mode = " (asynchronous)" if build.asynchronous else ""
        print(f"{target:<{width}}  {found or 'no collective'}{mode}")
    return builds


# --- XLA:GPU's predicted timeline: chapters with a cost model ---


def parse_textproto(text: str) -> dict:
    """Protocol-buffer text format as nested dicts: each field name -> list of values
    (strings) or of messages (dicts). Enough for XLA's dumps; no type checking."""
    tokens = re.findall(r'"(?:[^"\\]|\\.)*"|[{}]|[^\s{}:]+:?', text)
    node, stack, i = {}, [], 0
    root = node
    while i < len(tokens):
        token = tokens[i]
        if token == "}":
            node = stack.pop()
        elif tokens[i + 1] == "{" or (token.endswith(":") and tokens[i + 1] == "{"):
            child = {}
            node.setdefault(token.rstrip(":"), []).append(child)
            stack.append(node)
            node, i = child, i + 1
        else:
            value = tokens[i + 1]
            node.setdefault(token.rstrip(":"), []).append(value.strip('"'))
            i += 1
        i += 1
    return root


PLACEHOLDER_US = 5000.0


class Timeline:
    """XLA:GPU's schedule of a compiled program's entry computation (its loops
    unrolled), in microseconds of its latency model: rows (name, kind, start, end),
    kind "compute" for a kernel (fusion, library call), the collective's name for an
    asynchronous collective from its start to its done, and the op's name for other
    asynchronous work. The model prices a matmul the CUDA plugin's table of GEMM
    timings measured on H100s covers from that table (MatmulInterpolator; for some
    types its price is many times the bf16 one, 8 for f16 and 64 for a bf16 product
    kept in f32 at 4096^3: set a row against its FLOPs at the chip's peak before
    quoting it), loop and input fusions with XLA's GPU cost model, other kernels
    (custom fusions such as Triton's normalisations, library calls) at a token cost,
    the rows `token_priced` names; a collective inside one NVLink domain (one H100
    host) from its table of NCCL timings measured on H100s (CollectiveInterpolator),
    looked up by collective and pattern of devices; a collective that leaves one
    (here: across hosts) with its speed-of-light model of NCCL over the network
    (from the message's bytes, the number of hosts, two for any permute however many
    of its pairs cross, and XLA's network figures for the H100, its table's values
    times one coefficient, 0.45: a NIC of 25 GB/s per GPU, a 31 us round trip, a 45
    us launch; a model, not a measurement; the book's helper xla_net_terms, in the
    chapters that price across hosts, gives it term by term); and what none of these
    covers at a placeholder of PLACEHOLDER_US (`unpriced` names every row that long,
    a placeholder or not). Which collectives leave an NVLink domain XLA tells from
    their partition ids (positions in the mesh's device order) in groups of the
    domain's GPUs, as XLA's partition_size option sets them, else the topology (8 on
    h100-2x8, all 16 on "1x2x8"), not from the devices' hosts: the two agree for a
    mesh in device order, as target_mesh makes (XLA:GPU warns that it supports no
    other). Each collective is priced alone: the model does not know whether two
    that overlap share a link or a stream. `build`: the compiled program the rows
    come from (gpu_timeline's Build), to look a row's instruction up by name."""

    def __init__(self, rows, build=None):
        self.rows, self.build = rows, build
        self.total = max((end for *_, end in rows), default=0.0)

    def busy(self, compute: bool) -> list:
        """The merged intervals in which compute (or communication: a collective) runs;
        other asynchronous work (an async fusion) is neither."""
        wanted = ("compute",) if compute else COLLECTIVES
        spans = sorted((s, e) for _, kind, s, e in self.rows
                       if kind in wanted and e > s)
        merged = []
        for start, end in spans:
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        return merged

    @property
    def compute(self) -> float:
        return sum(end - start for start, end in self.busy(True))

    @property
    def exposed(self) -> float:
        """Communication no kernel runs under: collectives' time outside compute."""
        hidden = 0.0
        for c_start, c_end in self.busy(False):
            for k_start, k_end in self.busy(True):
                hidden += max(0.0, min(c_end, k_end) - max(c_start, k_start))
        return sum(e - s for s, e in self.busy(False)) - hidden

    def exposed_spans(self) -> list:
        """The intervals (start, end) in which a collective runs and no kernel does,
        in order: what `exposed` sums, for a figure's "exposed" lane."""
        out, kernels = [], self.busy(True)
        for c_start, c_end in self.busy(False):
            at = c_start
            for k_start, k_end in kernels:
                if k_end > at and k_start < c_end:
                    out += [(at, k_start)] if k_start > at else []
                    at = max(at, k_end)
            out += [(at, c_end)] if at < c_end else []
        return out

    def token_priced(self) -> list:
        """Names of the kernels (compute rows) XLA's model prices at a token cost:
        neither a matmul (a GEMM fusion or library call) nor a loop or input fusion.
        Their rows understate them; bound such a kernel below by its bytes at the
        chip's memory bandwidth. A matmul its GEMM table does not cover is priced at
        a token cost too but is not named: check a GEMM row against its FLOPs. Needs
        `build`."""
        if self.build is None:
            raise ValueError("token_priced needs the timeline's build (gpu_timeline's)")
        lines = {m.group(1): m.group(2) for m in re.finditer(
            r"^\s*(?:ROOT )?%?([\w.-]+) = (.*)$", self.build.hlo, re.M)}
        matmul = r'"kind":"[^"]*gemm|custom_call_target="[^"]*(?:gemm|matmul)'
        token = []
        for name, kind, *_ in self.rows:
            line = lines.get(name, "")
            if kind != "compute" or re.search(r"kind=k(?:Loop|Input)\b", line):
                continue
            if not re.search(matmul, line, re.I):
                token.append(name)
        return token

    def unpriced(self) -> list:
        """Names of the asynchronous rows that last PLACEHOLDER_US or longer: the
        estimator's placeholder, a span the scheduler stretched over kernels, or a
        price that large (a big collective across hosts): not to be quoted before
        looking at which. An empty list means no row is a placeholder."""
        return [name for name, kind, start, end in self.rows
                if kind != "compute" and end - start >= PLACEHOLDER_US]

    @property
    def label(self) -> str:
        """What a figure or number drawn from this timeline says it is (two lines, for a
        figure's title): whose model, of which compiler release and hardware, on which
        target; a prediction, never a measurement."""
        from importlib.metadata import version
        on = f" on {self.build.target}" if self.build is not None else ""
        return (f"XLA:GPU's speed-of-light model{on} (jax-cuda13-pjrt "
                f"{version('jax-cuda13-pjrt')},\nH100 SXM config from XLA's specs): a "
                "prediction, not a measurement")


def gpu_timeline(fn, *args, target="h100-8", compiler_options=None,
                 **options) -> Timeline | None:
    """Compile for an H100 target (compile_for's arguments) with XLA:GPU's analytical
    latency estimator (its flag's "sol", speed of light, names the estimator; what
    prices what: see Timeline) and read the latency-hiding scheduler's timeline of the
    entry computation from its dump, each while loop in it replaced by its body's
    timeline repeated its known trip count. A model, not a measurement. Raises where
    XLA scheduled no entry computation: it may schedule only the loops' bodies of a
    program that starts no collective outside them (give it one after its loop; that
    fails too where XLA:GPU wraps those in asynchronous fusions). `compiler_options`
    are added to the ones it sets (for example to compile faster); on a clash its own
    win."""
    import glob
    import shutil
    import tempfile
    dump = tempfile.mkdtemp(prefix="xla-schedule-")
    try:
        build = compile_for(target, fn, *args, compiler_options={
            **(compiler_options or {}), "xla_dump_to": dump,
            "xla_dump_latency_hiding_schedule": True,
            "xla_gpu_enable_analytical_sol_latency_estimator": True}, **options)
        if build is None:
            return None
        paths = glob.glob(f"{dump}/*.schedule.txt")
        if not paths:
            raise ValueError(
                "XLA:GPU wrote no schedule for this program, nothing to read (seen "
                "for a program with no asynchronous collective, and for one with a "
                "ragged-all-to-all, for which XLA turns its analytical estimator off)")
        (path,) = paths
        proto = parse_textproto(open(path).read())
    finally:
        shutil.rmtree(dump, ignore_errors=True)
    module = proto["hlo_module"][0]
    computations = {c["id"][0]: c for c in module["computations"]}
    ops = {i["id"][0]: i for c in module["computations"] for i in c["instructions"]}
    names = {c["id"][0]: c["name"][0] for c in module["computations"]}
    schedules = {s["computation_id"][0]: s["instructions"]
                 for s in proto["computation_schedules"]}
    entry = module["entry_computation_id"][0]
    if entry not in schedules:
        raise ValueError("XLA scheduled no entry computation for this program, only "
                         f"{sorted(names[c] for c in schedules)}: no step to read")

    def kind_of(op):
        """A -start op's kind: the collective it starts, or the one an async op
        wraps (XLA:GPU wraps some in fusions), else its name without the number."""
        if op["opcode"][0] != "async-start":
            return op["opcode"][0].removesuffix("-start")
        inner = [i["opcode"][0].removesuffix("-start")
                 for c in op.get("called_computation_ids", []) for i in calls(c)]
        wrapped = [kind for kind in inner if kind in COLLECTIVES]
        return wrapped[0] if wrapped else re.sub(r"\.\d+$", "",
                                                 op["name"][0].replace("-start", ""))

    def calls(computation):
        """Every instruction in a computation and in those it calls."""
        for i in computations[computation]["instructions"]:
            yield i
            for c in i.get("called_computation_ids", []):
                yield from calls(c)

    def rows_of(computation, offset):
        """Its rows shifted by `offset`, loops unrolled, and where it ends."""
        rows, started, shift, last = [], {}, 0.0, offset
        for ins in schedules[computation]:
            op = ops[ins["id"][0]]
            name, opcode = op["name"][0], op["opcode"][0]
            start = float(ins.get("start_timestamp_cycles", ["0"])[0]) + offset + shift
            end = float(ins.get("end_timestamp_cycles", ["0"])[0]) + offset + shift
            if opcode == "while":
                trips = re.search(r'known_trip_count\\?":\{\\?"n\\?":\\?"(\d+)',
                                  op.get("backend_config", [""])[0])
                body = op["called_computation_ids"][0]
                if trips is None or body not in schedules:
                    raise ValueError(f"{name}: no known trip count or no schedule of "
                                     f"its body {names[body]}")
                at = start
                for _ in range(int(trips[1])):
                    inner, at = rows_of(body, at)
                    rows += inner
                shift += at - end                         # the loop's time, inserted
                end = at
            elif opcode.endswith("-start"):     # a collective's kind from its opcode
                started[ins["id"][0]] = (name.replace("-start", ""), start,
                                         kind_of(op))
            elif opcode.endswith("-done"):
                base, began, kind = started.pop(op["operand_ids"][0])
                rows.append((base, kind, began, end))
            elif end > start and opcode in ("fusion", "custom-call", "call"):
                rows.append((name, "compute", start, end))
            last = max(last, end)
        if started:
            raise ValueError(f"collectives started and never done: {sorted(started)}")
        return rows, last

    rows, _ = rows_of(entry, 0.0)
    return Timeline(rows, build)


# XLA:GPU's network figures for the H100, as its log prints them at the pinned version
# (TF_CPP_VMODULE=sol_gpu_cost_model=2): its entry for "NVIDIA H100 80GB HBM3" in
# sol_gpu_cost_model.cc, each base figure (100 us, 68.89 us, 13.34 us, 55.56 GB/s)
# times its one coefficient 0.45; a model's inputs, not measurements. A GPU it has no
# entry for gets a 50.004 GB/s NIC. `hbm`: the H100's memory bandwidth in H100_SXM, B/s.
XLA_H100_NET = {"launch_us": 45.0, "rtt_us": 31.0005, "chunk_us": 6.003,
                "chunk_bytes": 2**22, "nic": 25.002e9, "headers": 0.025,
                "hbm": 3.35232e12}


def xla_net_terms(kind: str, nbytes: int, hosts: int = 2, per_host: int = 8,
                  out_bytes: int | None = None, net: dict = XLA_H100_NET) -> dict:
    """XLA:GPU's price, in us term by term, of one collective its speed-of-light
    model prices (one that leaves an NVLink domain; see Timeline): the terms add up
    to its row in gpu_timeline less 1 us (the row ends with the done, which XLA
    starts at the price and prices at 1 us) and less, for an all-reduce or a
    reduce-scatter, the reduction's kernel (under 1 us to 40 MiB). `nbytes`: each
    GPU's buffer (what a permute sends, the input of the others); `out_bytes`: an
    all-gather's or a reduce-scatter's result per GPU (default: nbytes). The group
    is `per_host` GPUs in each of `hosts` hosts of 8: 8 (every GPU of its hosts) or
    1 (one per host, as an axis across hosts makes); XLA prices other groups by
    other rules, not modelled here. A permute is priced as two GPUs on two hosts,
    whatever its pairs. `net`: the figures (XLA_H100_NET; change one to see what it
    moves). A collective XLA combined from several arrays is priced on their bytes
    together. Each peer's piece pays a round trip, chunk preparation per started
    chunk and its bytes plus headers at the NIC; a ring (all-gather, reduce-scatter,
    all-reduce: two rounds) sends n - 1 pieces of buffer/n over per_host NICs; an
    all-to-all sends buffer/(n - 1) to each of its remote peers in turn; then one
    launch, and the bytes XLA's cost analysis counts in HBM: 3 x the larger of input
    and output less the smaller (2 x the buffer where they are equal)."""
    rings = {"all-gather": 1, "reduce-scatter": 1, "all-reduce": 2}
    if kind not in (*rings, "all-to-all", "collective-permute"):
        raise ValueError(f"kind {kind!r}: XLA's network model prices all-gather, "
                         "reduce-scatter, all-reduce, all-to-all, collective-permute")
    if per_host not in (1, 8) or hosts < 2:
        raise ValueError(f"{hosts} hosts x {per_host} GPUs each: modelled are groups "
                         "of 1 or 8 GPUs in each of 2 or more hosts")
    out = nbytes if out_bytes is None else out_bytes
    if kind == "collective-permute":
        hosts, per_host = 2, 1
    n = hosts * per_host
    if kind == "all-gather":
        piece, steps = out // n, (n - 1) / per_host
    elif kind == "all-to-all":
        piece, steps = nbytes // (n - 1), per_host * (hosts - 1)
    else:
        piece, steps = nbytes // n if kind in rings else nbytes, (n - 1) / per_host
    steps *= rings.get(kind, 1)
    chunks = -(-piece // net["chunk_bytes"])
    return {"launch": net["launch_us"],
            "round trips": steps * net["rtt_us"],
            "chunks": steps * chunks * net["chunk_us"],
            "nic": steps * 1e6 * piece * (1 + net["headers"]) / net["nic"],
            "hbm": 1e6 * (3 * max(nbytes, out) - min(nbytes, out)) / net["hbm"]}


def xla_net_us(kind: str, nbytes: int, **options) -> float:
    """xla_net_terms' sum: XLA:GPU's price of one collective across hosts, in us."""
    return sum(xla_net_terms(kind, nbytes, **options).values())
