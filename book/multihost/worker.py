# worker.py: one process of a multi-process JAX program (chapter 8). It joins the
# others, runs the tasks named in its JSON argument, prints one JSON line per result.
import json
import os
import re
import signal
import sys
import threading
import time

# CPU (gloo) only: SIGTERM (a preemption notice, see below) is kept away from the
# threads that run gloo's collectives: blocked here, in every thread JAX will start
GLOO = os.environ.get("JAX_PLATFORMS") == "cpu"     # as our launcher sets it
if GLOO:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

import jax
import jax.numpy as jnp
import numpy as np
from jax import P
from jax._src import cloud_tpu_init
from jax.experimental import mesh_utils, multihost_utils
from jax.sharding import AxisType, Mesh, NamedSharding

NEEDS = ("processes", "process_id", "local_devices", "port", "tasks", "ckpt_dir",
         "watchdog", "options")      # the launcher's JSON argument: see Job below
try:
    args = json.loads(sys.argv[1])
except (IndexError, ValueError):
    args = {}
if not isinstance(args, dict) or set(NEEDS) - args.keys():
    sys.exit(f"usage: python worker.py JSON, a JSON object with {', '.join(NEEDS)}, "
             "as chapter 8's launcher (Job) writes it")
jax.config.update("jax_num_cpu_devices", args["local_devices"])
jax.config.update("jax_cpu_collectives_implementation", "gloo")  # across processes
hold_until = time.monotonic() + 300  # the launcher says when to join (see Run 1)
while args.get("hold") and not os.path.exists(args["hold"]):
    if time.monotonic() > hold_until:
        sys.exit("never told to join")
    time.sleep(0.05)
print(json.dumps(dict(task="joining", t=time.time())), flush=True)
if args["port"]:                     # everything named: address, count, index
    address = f"127.0.0.1:{args['port']}"       # loopback: serve and connect only here
    jax.distributed.initialize(**{
        "coordinator_address": address, "coordinator_bind_address": address,
        "num_processes": args["processes"], "process_id": args["process_id"],
        # no cluster detector: under SLURM or Open MPI (5 through mpi4py) it would
        # still pin this process to the GPU of its rank on the node, and under Open
        # MPI 5 without mpi4py raise; options may turn it back on
        "cluster_detection_method": "deactivate",
        **args["options"]})          # timeouts, certificates
else:                                # on a cluster: JAX reads the scheduler's variables
    jax.distributed.initialize(**args["options"])


def take_sigterm():
    """The one thread that receives SIGTERM: it does nothing else (gloo only)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    threading.Event().wait()


if GLOO:
    threading.Thread(target=take_sigterm, daemon=True).start()
STATE = {}                           # what one task leaves for the next


def report(task, **values):
    """One JSON line per result; every process reports, the notebook compares them."""
    values = dict(task=task, process=jax.process_index(), **values)
    print(json.dumps(values), flush=True)


def task_devices():
    report("devices", process_count=jax.process_count(),
           global_ids=[d.id for d in jax.devices()],
           local_ids=[d.id for d in jax.local_devices()],
           owners=[d.process_index for d in jax.devices()],
           slices=[getattr(d, "slice_index", None) for d in jax.devices()],
           visible=jax.config.values["jax_cuda_visible_devices"],
           tpu_vm=cloud_tpu_init.running_in_cloud_tpu_vm)   # see run 2


# our processes share one machine (one boot id), so every CPU device says slice_index
# 0: on CPU a process stands in for a group of fast-linked devices; TPUs and GPUs group
# by slice_index (the default). CPUs on several machines could group by slice_index
# too; by process, as here, is the same with one process per host
BY_PROCESS = jax.devices()[0].platform == "cpu"


def n_groups():
    """How many groups of fast-linked devices: slices (TPU), hosts (GPU), processes.
    Devices of one TPU slice may have no slice_index (compile-only ones have none):
    one group, as JAX's make_mesh treats them."""
    key = "process_index" if BY_PROCESS else "slice_index"
    return len({getattr(d, key, 0) for d in jax.devices()})


def data_mesh():
    """A 1-D `data` mesh over every device, group by group."""
    devices = mesh_utils.create_hybrid_device_mesh(
        (jax.device_count() // n_groups(),), (n_groups(),),
        process_is_granule=BY_PROCESS)
    return Mesh(devices, ("data",), axis_types=(AxisType.Explicit,))


def rows_of_this_process(sharding, n_rows):
    """The global rows this process loads for a row-sharded array of n_rows rows,
    ascending, as make_array_from_process_local_data stacks them."""
    where = sharding.addressable_devices_indices_map((n_rows,)).values()
    return np.unique(np.concatenate([np.arange(n_rows)[i[0]] for i in where]))


def rows_x(sharding, n_rows=16):
    """x[i, j] = 3 i + j, built from this process's rows only."""
    rows = rows_of_this_process(sharding, n_rows)
    x_local = (rows[:, None] * 3 + np.arange(3)).astype(np.float32)
    global_x = jax.make_array_from_process_local_data(sharding, x_local, (n_rows, 3))
    return global_x, rows


def task_global_array():
    interleaved = np.array(sorted(jax.devices(), key=lambda d: (  # p0 p1 p0 p1 ...
        jax.local_devices(d.process_index).index(d), d.process_index)))
    for name, devices in (("data", data_mesh().devices), ("interleaved", interleaved)):
        mesh = Mesh(devices, ("data",), axis_types=(AxisType.Explicit,))
        x, rows = rows_x(NamedSharding(mesh, P("data")))
        # row i weighted by i: the result depends on where every row landed
        weighted = jax.jit(lambda x: jnp.sum(jnp.arange(16.0)[:, None] * x, axis=0))(x)
        shards = [[s.device.id, s.index[0].start, s.index[0].stop,
                   np.asarray(s.data).tolist()] for s in x.addressable_shards]
        report("global_array", mesh=name, shape=list(x.shape), rows=rows.tolist(),
               fully_addressable=x.is_fully_addressable, shards=shards,
               result=np.asarray(weighted).tolist())


def host_of_each_process():
    """The host of every process: SLURM_NODEID where SLURM launched it, else its own."""
    mine = int(os.environ.get("SLURM_NODEID", jax.process_index()))
    return multihost_utils.process_allgather(np.array([mine])).ravel().tolist()


def task_hybrid():
    """`model` inside a group of fast-linked devices, `data` across the groups."""
    n = n_groups()                     # on CPU: processes; TPU: slices; GPU: hosts
    devices = mesh_utils.create_hybrid_device_mesh(   # (ICI shape, DCN shape)
        (1, jax.device_count() // n), (n, 1), process_is_granule=BY_PROCESS)
    mesh = Mesh(devices, ("data", "model"), axis_types=(AxisType.Explicit,) * 2)
    try:                        # across TPU slices or GPU hosts make_mesh raises
        plain = jax.make_mesh(devices.shape, mesh.axis_names).devices
        same = bool((devices == plain).all())
    except ValueError:
        same = None
    run_tp("hybrid", mesh, same_as_make_mesh=same)


def task_hybrid_per_device():
    """One process per device: group by host, as slice_index does on GPUs."""
    try:
        mesh_utils.create_hybrid_device_mesh((1, 2), (2, 1), process_is_granule=True)
        error = None
    except ValueError as err:
        error = f"ValueError: {err}"
    host = host_of_each_process()
    devices = sorted(jax.devices(), key=lambda d: (host[d.process_index], d.id))
    per_host = jax.device_count() // len(set(host))
    mesh = Mesh(np.reshape(devices, (-1, per_host)), ("data", "model"),
                axis_types=(AxisType.Explicit,) * 2)
    run_tp("hybrid_per_device", mesh, error=error)


def tp_inputs():
    """w1, w2 and x of a Megatron MLP: the same numbers in every process (one seed)."""
    rng = np.random.default_rng(1)
    return [rng.standard_normal(shape).astype(np.float32) / 4
            for shape in ((16, 32), (32, 16), (8, 16))]


def run_tp(task, mesh, **values):
    """Run a Megatron MLP's gradient on `mesh`; report the gradients, and each
    collective's group size and how many processes and hosts a group spans."""
    specs = (P(None, "model"), P("model", None), P("data", None))      # w1, w2, x
    w1, w2, x = (jax.make_array_from_callback(  # each device takes its block
                     a.shape, NamedSharding(mesh, spec), lambda index, a=a: a[index])
                 for a, spec in zip(tp_inputs(), specs))

    def loss_tp(w1, w2, x):                          # one reduction over `model`
        h = jnp.tanh(x @ w1)
        y = jnp.matmul(h, w2, out_sharding=NamedSharding(mesh, P("data", None)))
        return jnp.mean(y ** 2)

    grad = jax.jit(jax.grad(loss_tp, argnums=(0, 1))).lower(w1, w2, x).compile()
    grads = [multihost_utils.process_allgather(g, tiled=True).tolist()
             for g in grad(w1, w2, x)]                  # whole, in every process
    hlo = grad.as_text()
    host = host_of_each_process()
    found = []
    for line in hlo.splitlines():
        kinds = r"all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute"
        if op := re.search(rf"\b({kinds})(?:-start)?\(.*(?:groups|pairs)=", line):
            groups = device_groups(line, mesh)
            spans = [[len({mesh.devices.flat[i].process_index for i in g}),
                      len({host[mesh.devices.flat[i].process_index] for i in g})]
                     for g in groups]
            found.append([op.group(1), len(groups[0]), *np.max(spans, axis=0).tolist()])
    rows = mesh.devices.tolist()
    report(task, collectives=found, grads=grads,
           owners=[[d.process_index for d in row] for row in rows],
           hosts=[[host[d.process_index] for d in row] for row in rows], **values)


def device_groups(line, mesh):
    """The device groups of one collective in HLO text, as positions in the mesh."""
    spec = re.search(r"(?:replica_groups|source_target_pairs)=(mesh\[.*?\] \{.*?\}|"
                     r"\[[\d,]+\]<=\[[\d,]+\](?:T\([\d,]+\))?|\{[\d,{}]*\})", line)[1]
    positions = np.arange(mesh.size).reshape(mesh.devices.shape)
    if spec.startswith("mesh"):                      # mesh['data'=2,'model'=4] {'data'}
        names = re.findall(r"'(\w+)'", spec.split("{")[1])
        axes = [mesh.axis_names.index(a) for a in names]
        size = int(np.prod([mesh.devices.shape[a] for a in axes]))
        moved = np.moveaxis(positions, axes, range(-len(axes), 0))
        return moved.reshape(-1, size).tolist()
    if spec.startswith("["):                         # [groups,size]<=[dims]T(perm)
        numbers = re.findall(r"[\[(]([\d,]+)[\])]", spec)
        shape, dims, *perm = [[int(d) for d in g.split(",")] for g in numbers]
        iota = np.arange(np.prod(dims)).reshape(dims).transpose(*perm)
        return iota.reshape(shape).tolist()
    return [[int(d) for d in g.split(",")]           # {{0,1},{2,3}}
            for g in re.findall(r"\{([\d,]+)\}", spec)]


def batch_rows(step, rows):
    """Rows of one step's batch, each from its own seed: any process loads any rows."""
    x = np.stack([np.random.default_rng([step, r]).standard_normal(8) for r in rows])
    y = np.tanh(x[:, :4].sum(axis=1, keepdims=True) / 2)
    return x.astype(np.float32), y.astype(np.float32)


def loss(params, x, y):
    w1, w2 = params
    return jnp.mean((jnp.tanh(x @ w1) @ w2 - y) ** 2)


@jax.jit
def sgd_update(params, x, y):
    value, grads = jax.value_and_grad(loss)(params, x, y)   # grads all-reduced: `data`
    return [w - 0.2 * g for w, g in zip(params, grads)], value


def draw_params(key):
    w1_key, w2_key = jax.random.split(key)
    return [jax.random.normal(w1_key, (8, 32)) / 8 ** 0.5,
            jax.random.normal(w2_key, (32, 1)) / 32 ** 0.5]


def first_params(seed=0):
    """The same seed in every process, drawn inside jit: each device computes the
    block out_shardings gives it (replicated here: all of it), nothing crosses
    processes, and no process ever holds a weight its devices do not."""
    replicated = NamedSharding(data_mesh(), P())
    return jax.jit(lambda: draw_params(jax.random.key(seed)),
                   out_shardings=[replicated, replicated])()


def train(params, steps, after_step=lambda step, params: None):
    losses, sharding = [], NamedSharding(data_mesh(), P("data"))
    for step in steps:
        rows = rows_of_this_process(sharding, 32)       # this process's rows only
        x, y = (jax.make_array_from_process_local_data(sharding, a, (32, a.shape[1]))
                for a in batch_rows(step, rows))              # the global shape
        params, value = sgd_update(params, x, y)
        losses.append(float(value))
        after_step(step, params)
    return params, losses


def task_train():
    STATE["params"], losses = train(first_params(), range(10))
    report("train", losses=losses, w2=np.asarray(STATE["params"][1]).ravel().tolist())


def save(path, tree):
    import orbax.checkpoint as ocp
    checkpointer = ocp.StandardCheckpointer()    # every process writes what it holds
    checkpointer.save(path, tree)
    checkpointer.wait_until_finished()


def restore(path, tree):
    import orbax.checkpoint as ocp
    return ocp.StandardCheckpointer().restore(path, tree)


def placed(shape, spec):
    return jax.ShapeDtypeStruct(shape, jnp.float32,
                                sharding=NamedSharding(data_mesh(), spec))


def manager(folder):
    """A run's numbered checkpoints: called every step, `save` saves every 3rd step
    (and one into an empty folder, and one at a preemption sync point), keeps all it
    saved (`max_to_keep=None`); `latest_step()` is the last complete one."""
    import orbax.checkpoint as ocp
    return ocp.CheckpointManager(folder, options=ocp.CheckpointManagerOptions(
        save_interval_steps=3, enable_async_checkpointing=False))


def restore_latest(checkpoints):
    """The last complete step of a run and its parameters, restored onto this job's
    mesh; every process must have read the same step (checked)."""
    import orbax.checkpoint as ocp
    done = checkpoints.latest_step()
    multihost_utils.assert_equal(done, "processes resumed from different steps")
    target = [placed((8, 32), P()), placed((32, 1), P())]
    return done, checkpoints.restore(done, args=ocp.args.StandardRestore(target))


def task_save():
    x, _ = rows_x(NamedSharding(data_mesh(), P("data")))
    save(os.path.join(args["ckpt_dir"], "trained"), dict(params=STATE["params"], x=x))
    report("save", files=sorted(os.listdir(os.path.join(args["ckpt_dir"], "trained"))))


def task_restore():
    target = dict(params=[placed((8, 32), P()), placed((32, 1), P())],
                  x=placed((16, 3), P("data")))
    restored = restore(os.path.join(args["ckpt_dir"], "trained"), target)
    rows = {s.index[0].start: np.asarray(s.data).tolist()
            for s in restored["x"].addressable_shards}
    report("restore", w2=np.asarray(restored["params"][1]).ravel().tolist(), rows=rows)


def task_fault():
    import orbax.checkpoint as ocp
    checkpoints = manager(os.path.join(args["ckpt_dir"], "fault"))

    def after_step(step, params):                    # numbered by steps done
        checkpoints.save(step + 1, args=ocp.args.StandardSave(params))
        if step == 6:
            report("fault", steps_done=7, t=time.time())
            if jax.process_index() == 1:
                sharding = NamedSharding(data_mesh(), P("data"))   # its rows, step 7
                batch_rows(7, rows_of_this_process(sharding, 32))  # are loaded ...
                os._exit(1)                          # ... dies before the all-reduce

    try:
        train(first_params(), range(10), after_step)
    except Exception:        # gloo may raise "connection closed by peer": we make
        threading.Event().wait()   # process 0 wait, as one stuck on a GPU or TPU would
    report("fault", finished=True)                   # never reached


def task_resume():
    """Restore the last complete checkpoint of the faulty run and train to step 10."""
    checkpoints = manager(os.path.join(args["ckpt_dir"], "fault"))
    done, params = restore_latest(checkpoints)
    _, losses = train(params, range(done, 10))
    report("resume", first_step=done, steps=checkpoints.all_steps(), losses=losses)


def task_share():
    mine = np.array([os.getpid()])                        # differs on every process
    shared = multihost_utils.broadcast_one_to_all(mine)   # process 0's, everywhere
    x, _ = rows_x(NamedSharding(data_mesh(), P("data")))
    try:
        np.asarray(x)                                     # rows on other processes
        refused = None
    except RuntimeError as err:
        refused = f"{type(err).__name__}: {err}"
    whole = multihost_utils.process_allgather(x, tiled=True)   # every row, every host
    try:                              # a host value onto devices of every process:
        jax.device_put(mine, NamedSharding(data_mesh(), P()))   # compared first
        put = None
    except AssertionError as err:
        put = f"{type(err).__name__}: {str(err).split('. Expected')[0]}"
    report("share", mine=mine.tolist(), shared=shared.tolist(), refused=refused,
           whole=whole.tolist(), put=put)


def task_barrier():
    note = os.path.join(args["ckpt_dir"], "note.json")
    if jax.process_index() == 0:                          # one process writes, slowly
        time.sleep(0.5)
        os.makedirs(args["ckpt_dir"], exist_ok=True)
        with open(note, "w") as f:
            json.dump(dict(written_by=0, t=time.time()), f)
    multihost_utils.sync_global_devices("note written")   # nobody passes before it
    passed = time.time()
    with open(note) as f:                                 # so every process finds it
        found = json.load(f)
    try:                                                  # names that differ
        multihost_utils.sync_global_devices(f"process {jax.process_index()}")
        error = None
    except AssertionError as err:
        error = f"{type(err).__name__}: {str(err).split('. Expected')[0]}"
    report("barrier", passed=passed, found=found, error=error)


def preemptible(folder, first):
    """orbax's CheckpointManager, but asking JAX for the preemption sync point with
    the step's index in this run (`step - first`: 0, 1, ...), not the step itself."""
    import orbax.checkpoint as ocp

    class RunManager(ocp.CheckpointManager):
        last, lock = -1, threading.Lock()

        def reached_preemption(self, step):
            # save() asks; so does the thread that finishes an asynchronous save,
            # for the step it saved: never move the sync manager's count back
            with self.lock:
                if step - first < self.last:
                    return False
                self.last = step - first
                return super().reached_preemption(step - first)

    return RunManager(folder, options=ocp.CheckpointManagerOptions(   # saves in the
        save_interval_steps=5))                                       # background


def task_preempt():
    import orbax.checkpoint as ocp
    report("preempt_ready")                  # the notebook now sends SIGTERM to one
    time.sleep(3)                            # as a resumed job restores and compiles
    # the book's check, not a loop's: is the sync point already index 1? (had the
    # notice not been handled yet, this call would move the sync point by one)
    probe = multihost_utils.reached_preemption_sync_point(1)
    start, step_ends = 10, []                # this run resumes after 10 steps
    checkpoints = preemptible(os.path.join(args["ckpt_dir"], "preempt"), start + 1)

    def after_step(step, params):            # numbered by steps done, as in task_fault
        step_ends.append(time.time())
        time.sleep(0.05)                     # a step takes a while
        checkpoints.save(step + 1, args=ocp.args.StandardSave(params))  # every step
        if checkpoints.reached_preemption(step + 1):   # as save asked: saved, leave
            STATE["stop"] = step + 1

    steps = (s for s in range(start, start + 200) if "stop" not in STATE)
    _, losses = train(STATE["params"], steps, after_step)
    checkpoints.wait_until_finished()        # an asynchronous save must end first
    report("preempt", steps_done=STATE.get("stop"), saved=checkpoints.all_steps(),
           probe=probe, losses=losses, step_ends=step_ends)


def task_resume_preempted():
    """Restore the checkpoint taken at the preemption; train 3 more steps."""
    done, params = restore_latest(manager(os.path.join(args["ckpt_dir"], "preempt")))
    _, losses = train(params, range(done, done + 3))
    report("resume_preempted", first_step=done, losses=losses)


def leave():
    """After the last task: wait for every process, then leave the job."""
    process = jax.process_index()
    time.sleep(args.get("linger", 0))
    entered = time.time()
    jax.distributed.shutdown()               # returns when every process is here
    print(json.dumps(dict(task="leave", process=process, entered=entered,
                          left=time.time())), flush=True)


def task_mismatch():
    sharding = NamedSharding(data_mesh(), P("data"))
    rows = rows_of_this_process(sharding, 16)
    # without the global shape, process 1 loads half its rows: each process infers
    # its own global shape and compiles the same function for it: two programs
    half = rows[: len(rows) // (1 + jax.process_index())]
    x_local = (half[:, None] * 3 + np.arange(3)).astype(np.float32)
    x = jax.make_array_from_process_local_data(sharding, x_local)     # no shape
    report("mismatch", inferred=list(x.shape), mean=float(jax.jit(jnp.mean)(x)))
    rows = rows[: len(rows) - jax.process_index()]      # process 1: a row short
    try:
        jax.make_array_from_process_local_data(
            sharding, np.zeros((len(rows), 3), np.float32), (16, 3))
        report("mismatch", error=None)
    except ValueError as err:
        report("mismatch", error=f"{type(err).__name__}: {err}")


def task_one_sided():
    mine = np.array([jax.process_index()])
    everyone = multihost_utils.process_allgather(mine)  # safe: every process calls it
    if jax.process_index() == 0:                        # ... and one of them prints
        report("one_sided", gathered=everyone.ravel().tolist())
    if jax.process_index() == 1:                        # the bug: one process only
        began = time.monotonic()

        def stuck():                                    # a step timeout would do this
            report("one_sided", stuck=time.monotonic() - began)
            jax.distributed.shutdown()                  # leave: the others, waiting in
            os._exit(3)                                 # theirs, are free to go
        watchdog = threading.Timer(args["watchdog"], stuck)
        watchdog.start()
        multihost_utils.process_allgather(mine)         # waits for absent peers
        watchdog.cancel()


def task_timeout():
    """one_sided again, in a job whose process 1 sets XLA:CPU's collective timeout."""
    mine = np.array([jax.process_index()])
    multihost_utils.process_allgather(mine)             # safe: every process calls it
    if jax.process_index() == 1:                        # the bug: one process only
        began = time.monotonic()
        try:
            multihost_utils.process_allgather(mine)     # waits for absent peers
            error = None
        except Exception as err:                        # ended by the timeout
            error = f"{type(err).__name__}: {err}"
        report("timeout", waited=time.monotonic() - began, error=error)


for task in args["tasks"]:
    globals()[f"task_{task}"]()
leave()
