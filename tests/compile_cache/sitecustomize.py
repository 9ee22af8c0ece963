"""make test's shared record of compile-only builds (tests/nbval_passes.sh puts this
folder on PYTHONPATH for the two passes that compile for TPU and GPU, with
BOOK_COMPILE_CACHE naming the record's folder; it is emptied when the passes start).

The strict pass at 8 devices and the pass at 4 compile many of the same programs for
the compile-only TPU and GPU targets (a target's mesh does not change with the number
of CPU devices). Compiling one program twice gives the same result (the stored
outputs, compared in every run, rely on that), so the second pass to reach a program
reads what the first one's compiler made of it instead of compiling it again. A build
is keyed by everything that goes into the compile: the lowered module as text, the
devices it is compiled for and their topology (an H100 target's description included),
the compiler options and the JAX settings that make compile options, XLA_FLAGS but for
its CPU-only and device-count flags, LIBTPU_INIT_ARGS. A pass that reaches a key
another is compiling waits for it (a lock per key). Compiles are not recorded where
XLA is asked to log its info or verbose lines (TF_CPP_MIN_LOG_LEVEL=0, TF_CPP_VMODULE,
TF_CPP_MAX_VLOG_LEVEL: a caller may read the log).

Read from the record: the compiled program's HLO text (as_text), its cost_analysis
and memory_analysis, and the files an XLA dump wrote (xla_dump_to: the schedule
gpu_timeline reads). Anything else asked of a recorded build (running it, its
shardings, another memory figure) compiles it for real first and answers from that,
so a chapter sees what it would see without the record. Programs for the CPU are never
recorded, nor any where a real accelerator is present. tests/test_compile_cache.py
checks a recorded build against the compile it records.
"""

import importlib.abc
import importlib.util
import os
import sys

FOLDER = os.environ.get("BOOK_COMPILE_CACHE")

MEMORY = (
    "alias_size_in_bytes",
    "argument_size_in_bytes",
    "generated_code_size_in_bytes",
    "host_alias_size_in_bytes",
    "host_argument_size_in_bytes",
    "host_generated_code_size_in_bytes",
    "host_output_size_in_bytes",
    "host_temp_size_in_bytes",
    "output_size_in_bytes",
    "peak_memory_in_bytes",
    "temp_size_in_bytes",
    "total_allocation_bytes",
)


def _flags(text):
    """XLA_FLAGS without the flags that touch XLA:CPU alone (the strict pass varies
    them) or the number of simulated CPU devices."""
    return " ".join(
        sorted(
            f
            for f in text.split()
            if not f.startswith(
                ("--xla_cpu_", "--xla_force_host_platform_device_count")
            )
        )
    )


def key_of(lowered, compiler_options):
    """The record's key for one compile, None where it is not recorded: not for the
    CPU, nor beside a real accelerator, nor where XLA is asked to log more than JAX's
    default (a caller may read what the compile logs)."""
    import hashlib
    import json

    import jax
    from jax._src import config
    from jax._src.lib import _jax

    lowering = lowered._lowering
    devices = getattr(lowering, "_device_list", None)
    backend = getattr(lowering, "compile_args", {}).get("backend")
    if (
        devices is None
        or backend is None
        or backend.platform == "cpu"
        or jax.default_backend() != "cpu"
        or os.environ.get("TF_CPP_VMODULE")
        or os.environ.get("TF_CPP_MAX_VLOG_LEVEL")
        or os.environ.get("TF_CPP_MIN_LOG_LEVEL", "1") == "0"  # JAX's default: 1
    ):
        return None
    try:  # the compile-only topology, the GPU's target description included
        topology = _jax.get_topology_for_devices(list(devices)).serialize().hex()
    except Exception:  # libtpu does not serialize a topology of several slices
        topology = repr(
            [
                (
                    d.device_kind,
                    getattr(d, "coords", None),
                    getattr(d, "slice_index", None),
                )
                for d in devices
            ]
        )
    options = dict(getattr(lowering, "_compiler_options_kvs", ()))
    options.update(compiler_options or {})
    dumped = options.pop("xla_dump_to", None) is not None
    settings = [  # what JAX's get_compile_options reads from its configuration
        c.value
        for c in (
            config.use_shardy_partitioner,
            config.optimization_level,
            config.memory_fitting_level,
            config.enable_remat_opt_pass,
            config.jax_xla_profile_version,
            config.compilation_cache_dir,
            config.persistent_cache_enable_xla_caches,
        )
    ]
    parts = [
        lowered.as_text(),
        json.dumps(sorted((k, repr(v)) for k, v in options.items())),
        str(dumped),
        backend.platform,
        repr(list(devices)),
        topology,
        repr(settings),
        _flags(os.environ.get("XLA_FLAGS", "")),
        os.environ.get("LIBTPU_INIT_ARGS", ""),
        jax.__version__,
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


class _Memory:
    """memory_analysis() of a recorded build: its figures, the rest from a real one."""

    def __init__(self, figures, build):
        self.__dict__.update(figures)
        self._build = build

    def __getattr__(self, name):
        return getattr(self._build().memory_analysis(), name)


class RecordedBuild:
    """A compiled program read from the record (see the module's docstring)."""

    def __init__(self, record, compile_now):
        self._record, self._compile_now, self._real = record, compile_now, None

    def _build(self):
        if self._real is None:
            self._real = self._compile_now()
        return self._real

    def as_text(self):
        return self._record["hlo"]

    def cost_analysis(self):
        cost = self._record["cost"]
        return None if cost is None else dict(cost)

    def memory_analysis(self):
        figures = self._record["memory"]
        return None if figures is None else _Memory(figures, self._build)

    def __call__(self, *args, **kwargs):
        return self._build()(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._build(), name)


def _record(compiled, dump):
    memory = compiled.memory_analysis()
    files = {}
    for root, _, names in os.walk(dump) if dump else ():
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                files[os.path.relpath(path, dump)] = f.read().decode("latin-1")
    return {
        "hlo": compiled.as_text(),
        "cost": compiled.cost_analysis(),
        "memory": None
        if memory is None
        else {name: getattr(memory, name) for name in MEMORY if hasattr(memory, name)},
        "files": files,
    }


def _install(stages):
    import fcntl
    import json

    compile_for_real = stages.Lowered.compile

    def compile(self, compiler_options=None, *, device_assignment=None):
        def now():
            return compile_for_real(
                self, compiler_options, device_assignment=device_assignment
            )

        key = None if device_assignment is not None else key_of(self, compiler_options)
        if key is None:
            return now()
        dump = (compiler_options or {}).get("xla_dump_to")
        path = os.path.join(FOLDER, key)
        os.makedirs(FOLDER, exist_ok=True)
        with open(path + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another pass compiling it: wait
            if os.path.exists(path + ".json"):
                with open(path + ".json") as f:
                    record = json.load(f)
                for name, text in record["files"].items():
                    target = os.path.join(dump, name)
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    with open(target, "wb") as f:
                        f.write(text.encode("latin-1"))
                _log(key, "read")
                return RecordedBuild(record, now)
            compiled = now()
            with open(path + ".tmp", "w") as f:
                json.dump(_record(compiled, dump), f)
            os.replace(path + ".tmp", path + ".json")
            _log(key, "compiled")
            return compiled

    stages.Lowered.compile = compile


def _log(key, what):
    with open(os.path.join(FOLDER, "log.txt"), "a") as f:
        f.write(f"{what} {key[:16]} {os.getpid()}\n")


class _Finder(importlib.abc.MetaPathFinder):
    """Patches jax._src.stages as it is first imported (JAX itself is not imported
    here: the bootstrap must see a fresh process)."""

    def find_spec(self, name, path=None, target=None):
        if name != "jax._src.stages":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _install(module)

        spec.loader.exec_module = exec_module
        return spec


if FOLDER:
    sys.meta_path.insert(0, _Finder())
