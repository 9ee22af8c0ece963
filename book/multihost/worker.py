# worker.py: one process of a multi-process JAX program (chapter 7). It joins the others over
# loopback, runs the tasks named in its JSON argument, and prints one JSON line per result.
import json
import os
import re
import sys
import threading

import jax
import jax.numpy as jnp
import numpy as np
from jax import P
from jax.experimental import mesh_utils, multihost_utils
from jax.sharding import NamedSharding

args = json.loads(sys.argv[1])       # port, processes, process_id, local_devices, join_timeout, ...
jax.config.update("jax_num_cpu_devices", args["local_devices"])  # simulated devices of this process
jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU collectives across processes
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{args['port']}",  # process 0 serves here
                           coordinator_bind_address=f"127.0.0.1:{args['port']}",  # loopback only
                           num_processes=args["processes"], process_id=args["process_id"],
                           initialization_timeout=args["join_timeout"])
STATE = {}                           # what one task leaves for the next


def report(task, **values):
    """One JSON line per result; every process reports, the notebook compares them."""
    print(json.dumps(dict(task=task, process=jax.process_index(), **values)), flush=True)


def task_devices():
    report("devices", process_count=jax.process_count(),
           global_ids=[d.id for d in jax.devices()], local_ids=[d.id for d in jax.local_devices()])


def rows_of_this_process(n_rows):
    """The global row numbers this process loads: its devices' rows on a 1-D `data` mesh."""
    per_process = n_rows // jax.process_count()
    return np.arange(jax.process_index() * per_process, (jax.process_index() + 1) * per_process)


def task_global_array():
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    rows = rows_of_this_process(2 * jax.device_count())        # B = 2 rows per device
    x_local = (rows[:, None] * 3 + np.arange(3)).astype(np.float32)   # x[i, j] = 3 i + j
    x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("data")), x_local)
    col_sums = jax.jit(lambda x: jnp.sum(x * x, axis=0))(x)      # over every process's rows
    report("global_array", shape=list(x.shape), local_shape=list(x_local.shape),
           fully_addressable=x.is_fully_addressable, result=np.asarray(col_sums).tolist(),
           shards=[[s.device.id, s.index[0].start, s.index[0].stop] for s in x.addressable_shards])


def task_hybrid():
    mesh = jax.make_mesh((jax.process_count(), jax.local_device_count()), ("data", "model"))
    hybrid = mesh_utils.create_hybrid_device_mesh(   # (within a process, across processes)
        (1, jax.local_device_count()), (jax.process_count(), 1), process_is_granule=True)
    assert (hybrid == mesh.devices).all(), "make_mesh and the hybrid mesh disagree"
    sds = lambda shape, spec: jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, spec))
    x, w1, w2 = sds((8, 16), P("data", None)), sds((16, 32), P(None, "model")), sds((32, 16), P("model", None))

    def loss_tp(w1, w2, x):                          # Megatron MLP: one reduction over `model`
        h = jnp.tanh(x @ w1)
        return jnp.mean(jnp.matmul(h, w2, out_sharding=NamedSharding(mesh, P("data", None))) ** 2)

    compiled = jax.jit(jax.grad(loss_tp, argnums=(0, 1))).lower(w1, w2, x).compile()
    found = [[op, *group_span(line, mesh)] for line in compiled.as_text().splitlines()
             for op in re.findall(r"\b(all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute)"
                                  r"(?:-start)?\(.*(?:replica_groups|source_target_pairs)=", line)]
    report("hybrid", processes=[[d.process_index for d in row] for row in mesh.devices], collectives=found)


def group_span(line, mesh):
    """For one collective in HLO text: devices per group, and whether a group spans processes."""
    spec = re.search(r"(?:replica_groups|source_target_pairs)=(mesh\[.*?\] \{.*?\}|"
                     r"\[[\d,]+\]<=\[[\d,]+\](?:T\([\d,]+\))?|\{[\d,{}]*\})", line).group(1)
    positions = np.arange(mesh.size).reshape(mesh.devices.shape)
    if spec.startswith("mesh"):                      # mesh['data'=2,'model'=4] {'data'}
        axes = [mesh.axis_names.index(a) for a in re.findall(r"'(\w+)'", spec.split("{")[1])]
        size = int(np.prod([mesh.devices.shape[a] for a in axes]))
        groups = np.moveaxis(positions, axes, range(-len(axes), 0)).reshape(-1, size).tolist()
    elif spec.startswith("["):                       # [groups, size]<=[dims]T(permutation)
        shape, dims, *perm = [[int(d) for d in g.split(",")] for g in re.findall(r"[\[(]([\d,]+)[\])]", spec)]
        groups = np.arange(np.prod(dims)).reshape(dims).transpose(*perm).reshape(shape).tolist()
    else:                                            # {{0,1},{2,3}}
        groups = [[int(d) for d in g.split(",")] for g in re.findall(r"\{([\d,]+)\}", spec)]
    return len(groups[0]), any(len({mesh.devices.flat[i].process_index for i in g}) > 1 for g in groups)


def batch_rows(step, rows):
    """Rows of one step's batch, each drawn from its own seed: any process can load any rows."""
    x = np.stack([np.random.default_rng([step, r]).standard_normal(8) for r in rows]).astype(np.float32)
    return x, np.tanh(x[:, :4].sum(axis=1, keepdims=True) / 2).astype(np.float32)


def task_train():
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    rng = np.random.default_rng(0)                   # every process draws the same initial weights
    params = [rng.standard_normal((8, 32)).astype(np.float32) / 8 ** 0.5,
              rng.standard_normal((32, 1)).astype(np.float32) / 32 ** 0.5]
    params = jax.device_put(params, NamedSharding(mesh, P()))      # replicated on every device

    def loss(params, x, y):
        w1, w2 = params
        return jnp.mean((jnp.tanh(x @ w1) @ w2 - y) ** 2)

    @jax.jit
    def sgd_update(params, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)    # grads: all-reduced over `data`
        return [w - 0.2 * g for w, g in zip(params, grads)], value

    losses = []
    for i in range(10):
        x, y = batch_rows(i, rows_of_this_process(32))          # this process's rows only
        x, y = (jax.make_array_from_process_local_data(NamedSharding(mesh, P("data")), a) for a in (x, y))
        params, value = sgd_update(params, x, y)
        losses.append(float(value))
    STATE["params"] = params
    report("train", losses=losses, w2=np.asarray(params[1]).ravel().tolist())


def task_save():
    import orbax.checkpoint as ocp
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    rows = rows_of_this_process(16)
    x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("data")),
                                               (rows[:, None] * 3 + np.arange(3)).astype(np.float32))
    checkpointer = ocp.StandardCheckpointer()        # every process writes the shards it holds
    checkpointer.save(os.path.join(args["ckpt_dir"], "trained"), dict(params=STATE["params"], x=x))
    checkpointer.wait_until_finished()
    report("save", saved=True)


def task_restore():
    import orbax.checkpoint as ocp
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    sds = lambda shape, spec: jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, spec))
    target = dict(params=[sds((8, 32), P()), sds((32, 1), P())], x=sds((16, 3), P("data")))
    restored = ocp.StandardCheckpointer().restore(os.path.join(args["ckpt_dir"], "trained"), target)
    report("restore", w2=np.asarray(restored["params"][1]).ravel().tolist(),
           rows={s.index[0].start: np.asarray(s.data).tolist() for s in restored["x"].addressable_shards})


def task_mismatch():
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    rows = rows_of_this_process(16)[: 8 - jax.process_index()]   # process 1 loads one row short
    try:
        jax.make_array_from_process_local_data(NamedSharding(mesh, P("data")),
                                               np.zeros((len(rows), 3), np.float32), (16, 3))
        report("mismatch", error=None)
    except ValueError as err:
        report("mismatch", error=f"{type(err).__name__}: {err}")


def task_one_sided():
    mine = np.array([jax.process_index()])
    everyone = multihost_utils.process_allgather(mine)   # safe: every process calls the collective
    if jax.process_index() == 0:                         # ... and one of them prints
        report("one_sided", gathered=everyone.ravel().tolist())
    if jax.process_index() == 0:                         # the bug: a collective on one process only
        watchdog = threading.Timer(args["watchdog"], lambda: (report("one_sided", stuck=True), os._exit(3)))
        watchdog.start()
        multihost_utils.process_allgather(mine)           # waits for peers that never come
        watchdog.cancel()


for task in args["tasks"]:
    globals()[f"task_{task}"]()
