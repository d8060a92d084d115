"""The per-device programs behind the Trainer, and helpers to get per-device gradients.

Everything here is `jax.jit` of `jax.shard_map` over a one-axis device mesh
(axis ``AXIS``; `spmap`: on one device in one process, a `jax.jit` on one
copy instead). No `jax.pmap` (in maintenance mode since jax 0.8), but
Gluon's model is kept: each device holds a replica, gradients come with a
leading device axis (global arrays, one slice per device), and a
`jax.lax.psum` over ``AXIS`` sums over *every* device of the mesh, those of
other processes included once `jax.distributed.initialize` has run (each
process passes its local slices; `_global` builds the global array).

Gradients per device: `per_device_grads` / ``Trainer.grads`` give them; so
does a user's own ``jax.pmap(jax.grad(loss_fn))(replicated_params,
split_batch(batch, jax.local_device_count()))``, taken as it is.
"""
from __future__ import annotations

import weakref
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from ..pieces.internal import per_leaf_counts, scale_loss

from .._base import apply_updates
from .._fused import FlatTree, bit_exact, why_not_fused
from .._ranges import check_flag
from .._hyper import set_hyper
from .._tree import select_tree

__all__ = ["AXIS", "split_batch", "replicate", "unreplicate", "shard_leading", "per_device_grads"]

AXIS = "gx_devices"


def split_batch(batch, num_devices: int):
    """Reshapes every leaf of ``batch`` from ``(B, ...)`` to ``(num_devices, B // num_devices, ...)``.

    Raises ValueError naming the leaf when ``B`` is not a multiple of ``num_devices``.
    """
    def split(path, x):
        shape = np.shape(x)
        if not shape or shape[0] % num_devices:
            raise ValueError(f"split_batch: batch{jax.tree_util.keystr(path)} has shape {shape}; its "
                             f"leading (batch) axis must be a multiple of the {num_devices} devices.")
        return x.reshape((num_devices, shape[0] // num_devices) + tuple(shape[1:]))

    return jax.tree_util.tree_map_with_path(split, batch)


STORED = "stored"  # an axis spec: the Trainer's own arrays (see `Placement`)


def single_device(devices) -> bool:
    """One local device in one process: programs are `jax.jit`, not `jax.pmap`."""
    local = [d for d in devices if d.process_index == jax.process_index()] if devices is not None \
        else jax.local_devices()
    return len(local) == 1 and jax.process_count() == 1


def mesh_of(devices=None) -> Mesh:
    """The one-axis device mesh (axis ``AXIS``) over ``devices``, or over
    every device of every process (`jax.devices()`)."""
    key = _devices_key(devices)
    if key not in _MESHES:
        _MESHES[key] = Mesh(np.asarray(list(devices) if devices is not None else jax.devices()), (AXIS,))
    return _MESHES[key]


_MESHES: dict = {}


def spmap(body, *, in_axes: tuple, out_axes: int | str | tuple | None = 0, donate_argnums=(), devices=None):
    """``body`` once per device of a one-axis mesh, as ``jax.jit`` of
    ``jax.shard_map``: ``in_axes`` holds one axis spec per argument,
    ``out_axes`` one per result or one for all; arguments and results with axis spec 0 or `STORED`
    (the Trainer's parameters, state and residuals) are stacked along a
    leading device axis, sharded one slice per device (each call of
    ``body`` sees its slice without that axis); ``None`` means one value,
    the same on every device. On one device in one process, ``jax.jit`` of
    the body on a single copy instead: `STORED` arguments and results have
    no device axis there, axis-0 ones (gradients, batches) lose and regain
    their axis of size 1 by reshapes.

    Why not ``jax.pmap``: it is in maintenance mode since jax 0.8, and on
    XLA CPU it copied donated buffers at entry (benchmarks/README.md).
    Why not a device axis on one device: measured on XLA CPU (jax 0.10.2),
    jit over arrays that keep a leading axis of 1 copied every donated
    parameter and moment (36 MiB for an 8.4 M-parameter MLP; one copy:
    9 MiB); jit(vmap) over that axis avoided the copies but ran the matmuls
    as batched dots, 1.7x slower."""
    if single_device(devices):
        return jax.jit(_on_one_copy(body, in_axes, out_axes), donate_argnums=donate_argnums)
    mesh = mesh_of(devices)
    spec = lambda a: P() if a is None else P(AXIS)  # noqa: E731
    in_specs = tuple(map(spec, in_axes))
    out_specs = tuple(map(spec, out_axes)) if isinstance(out_axes, tuple) else spec(out_axes)

    def per_device(*args):
        args = [a if ax is None else jax.tree.map(_drop_axis, a) for a, ax in zip(args, in_axes)]
        outs = body(*args)
        if not isinstance(out_axes, tuple):
            return outs if out_axes is None else jax.tree.map(_add_axis, outs)
        return tuple(o if ax is None else jax.tree.map(_add_axis, o) for o, ax in zip(outs, out_axes))

    mapped = jax.shard_map(per_device, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)
    jitted = jax.jit(mapped, donate_argnums=donate_argnums)
    sharding = NamedSharding(mesh, P(AXIS))

    def as_global(args):
        return [a if ax is None else _global(a, sharding) for a, ax in zip(args, in_axes)]

    run = lambda *args: jitted(*as_global(args))  # noqa: E731
    run.lower = lambda *args: jitted.lower(*as_global(args))  # pyright: ignore[reportFunctionMemberAccess]  # jax.jit's lower, on the global arrays
    return run


def _drop_axis(x):
    return jnp.reshape(x, jnp.shape(x)[1:])


def _add_axis(x):
    return jnp.reshape(x, (1,) + jnp.shape(x))


def _global(tree, sharding: NamedSharding):
    """``tree``'s leaves as global arrays with one leading-axis slice per
    device of the mesh: arrays already laid out so (the Trainer's own, or a
    user's ``jax.pmap`` / sharded ``jax.grad`` output) pass through untouched
    (no copy, so donation holds); a process's local stack (NumPy, or arrays
    on one device) becomes its slices of the global array."""
    def one(x):
        if isinstance(x, jax.Array) and x.sharding == sharding:
            return x
        if isinstance(x, jax.Array) and jax.process_count() == 1 and x.is_fully_addressable:
            return jax.device_put(x, sharding)
        return jax.make_array_from_process_local_data(sharding, np.asarray(x))
    return jax.tree.map(one, tree)


def _on_one_copy(body, in_axes, out_axes):
    """``body`` on one copy, inside a size-1 `jax.vmap` whose only job is to
    provide ``AXIS`` to its collectives (nothing is batched, so a matmul
    stays a plain matmul; a `psum` over one copy is that copy)."""
    def run(*args):
        args = [jax.tree.map(_drop_axis, a) if ax == 0 else a for a, ax in zip(args, in_axes)]
        outs = jax.vmap(body, in_axes=(None,) * len(args), out_axes=None, axis_name=AXIS,
                        axis_size=1)(*args)
        if not isinstance(out_axes, tuple):
            return jax.tree.map(_add_axis, outs) if out_axes == 0 else outs
        return tuple(jax.tree.map(_add_axis, o) if ax == 0 else o for o, ax in zip(outs, out_axes))
    return run


class Placement:
    """Where a Trainer keeps its parameters, state and residuals: stacked
    along a leading device axis (pmap), or one copy on the one device."""

    def __init__(self, num_devices: int, devices):
        self.n, self.devices = num_devices, devices
        self.single = single_device(devices)
        if self.single:
            self.device = devices[0] if devices is not None else jax.local_devices()[0]
            # a copy: the Trainer donates its arrays, never the caller's
            copy = jax.jit(lambda t: jax.tree.map(jnp.copy, t))
            self._copy = lambda t: copy(jax.tree.map(self._to_device, t))

    def _to_device(self, x):
        """``x`` on the one device, in the memory it is in (host-offloaded
        optimizer state, e.g. mindspore.adam_offload's moments, stays in host memory)."""
        kind = x.sharding.memory_kind if isinstance(x, jax.Array) else None
        return jax.device_put(x, jax.sharding.SingleDeviceSharding(self.device, memory_kind=kind))

    def put(self, tree):
        """One copy per device of ``tree``. On one device, NumPy leaves (a
        checkpoint's) are only transferred: the copy of the caller's arrays is a
        program with an input per leaf, compiled again for each new tree."""
        if self.single and all(isinstance(x, np.ndarray) for x in jax.tree.leaves(tree)):
            return jax.tree.map(self._to_device, tree)
        return self._copy(tree) if self.single else replicate(tree, self.n, self.devices)

    def put_per_device(self, tree):
        """``tree``'s leaves have a leading device axis (one slice per device)."""
        if self.single:
            return self._copy(jax.tree.map(lambda x: np.reshape(x, np.shape(x)[1:]), tree))
        return shard_leading(tree, self.devices)

    def one(self, tree):
        """The first device's copy."""
        return tree if self.single else unreplicate(tree)

    def per_device(self, tree):
        """With the leading device axis (as ``put_per_device`` takes it)."""
        return jax.tree.map(lambda x: jnp.reshape(x, (1,) + jnp.shape(x)), tree) if self.single else tree


def _devices_key(devices):
    return None if devices is None else tuple(devices)


def replicate(tree, num_devices: int, devices=None):
    """One copy of ``tree`` on every device of the mesh, stacked along a new
    leading axis and sharded one copy per device (the layout every Trainer
    program takes, so donation never reshards). ``num_devices`` is the
    number of local devices (this process's copies)."""
    sharding = NamedSharding(mesh_of(devices), P(AXIS))
    return jax.tree.map(lambda x: jax.make_array_from_process_local_data(
        sharding, np.broadcast_to(np.asarray(x)[None], (num_devices,) + np.shape(x))), tree)


def shard_leading(tree, devices=None):
    """Puts slice ``i`` of every leaf's leading axis on local device ``i``
    (the Trainer's layout; see `_global`)."""
    return _global(tree, NamedSharding(mesh_of(devices), P(AXIS)))


def _first_copy(x):
    if isinstance(x, jax.Array) and len(x.addressable_shards) > 1:
        shard = x.addressable_shards[0]
        if shard.data.shape[:1] == (1,):  # sharded along the device axis: free, no computation
            return shard.data[0]
    return x[0]


def unreplicate(tree):
    """The first local device's copy of every leaf (an array on that device)."""
    return jax.tree.map(_first_copy, tree)


_GRAD_PROGRAMS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def grad_program(loss_fn: Callable, params_mapped: bool, devices=None, *, with_state: bool = False,
                 has_aux: bool = False):
    """``value_and_grad(loss_fn, has_aux=has_aux)`` once per device, cached per
    loss function. Given `FlatTree` parameters, the loss sees
    ``params.unravel()`` and the gradients come back as an ordinary tree
    (taken with respect to that tree, so no buffer is sliced into leaves).
    ``params_mapped``: the params are a Trainer's own (`STORED`);
    ``with_state``: a third argument, the Trainer's optimizer state, reaches
    the loss as ``loss_fn(p, (batch, state))``. With ``has_aux`` the loss
    function returns ``(loss, aux)`` and each device's aux comes back
    stacked on a leading axis."""
    programs = _GRAD_PROGRAMS.setdefault(loss_fn, {})
    key = (params_mapped, with_state, has_aux, _devices_key(devices))
    if key not in programs:
        grad_fn = jax.value_and_grad(loss_fn, has_aux=has_aux)

        def body(params, batch, *state):
            p = params.unravel() if isinstance(params, FlatTree) else params
            return grad_fn(p, (batch, state[0]) if with_state else batch)

        axes = (STORED if params_mapped else None, 0) + ((STORED,) if with_state else ())
        programs[key] = spmap(body, in_axes=axes, devices=devices)
    return programs[key]


def per_device_grads(loss_fn: Callable, params, batch, *, devices=None, with_loss: bool = False):
    """Per-device gradients of ``loss_fn(params, batch_shard)`` for a batch split over the devices.

    ``params`` is one copy (broadcast to every device); ``batch`` is this
    process's batch, whose leading axis is split evenly over the local
    devices (`split_batch`). Returns ``grads`` with a leading device axis
    (what `Trainer.step` and `Trainer.allreduce_grads` take), or
    ``(losses, grads)`` with ``with_loss=True`` (``losses[i]`` is device i's).

    As in Gluon, where ``loss.backward()`` sums per-example losses, let
    ``loss_fn`` return the *sum* over its shard and pass the global batch size
    to ``step``; a mean per shard needs ``batch_size=`` the number of devices.
    """
    n = len([d for d in devices if d.process_index == jax.process_index()]) if devices else \
        jax.local_device_count()
    loss, grads = grad_program(loss_fn, False, devices)(params, split_batch(batch, n))
    return (loss, grads) if with_loss else grads


# -- the traced pieces every program shares ------------------------------------------

def in_params_form(params, g_leaves):
    """Gradient leaves in the parameters' form: the group buffers when the
    Trainer holds `FlatTree` parameters (one concatenation inside the
    program; the all-reduce then sums a few large buffers, as MXNet's and
    Horovod's gradient bucketing do), else the leaves themselves."""
    if isinstance(params, FlatTree):
        return list(params.layout.ravel_leaves(g_leaves))
    return list(g_leaves)


def reduce_leaves(g_leaves, r_leaves, compression):
    """Inside pmap: (summed gradient leaves, new residual leaves).

    With compression every device quantizes ``g + r`` and the quantized
    values are summed. If any device's raw gradient is non-finite, the sum
    is NaN everywhere and no residual changes (so a skipped step loses
    nothing).
    """
    if compression is None:
        if jax.lax.axis_size(AXIS) == 1:
            # one device in all: the sum is the gradient itself, and XLA CPU's
            # all-reduce would copy it (measured: 33 ms for 33 MB, twice
            # the rest of an 8-layer MLP's training step)
            return list(g_leaves), list(r_leaves)
        return list(jax.lax.psum(list(g_leaves), AXIS)), list(r_leaves)
    pairs = [compression.quantize(g, r) for g, r in zip(g_leaves, r_leaves)]
    q_leaves = [q for q, _ in pairs]
    finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(g)) for g in g_leaves])) if g_leaves else True
    total, bad = jax.lax.psum((list(q_leaves), 1 - jnp.asarray(finite, jnp.int32)), AXIS)
    ok = bad == 0
    summed = [jnp.where(ok, s, jnp.asarray(jnp.nan, s.dtype)) for s in total]
    residual = [jnp.where(ok, new, old) for (_, new), old in zip(pairs, r_leaves)]
    return summed, residual


def apply_step(tx, params, state, g_leaves, present, rescale, *, has_rescale: bool, zero=None):
    """Inside pmap: one optimizer update with the (summed) gradient leaves of
    the ``present`` parameters; stale parameters and their state stay. With
    ``zero`` (a `gradxform.trainer._zero.ShardedState`) the state is this
    device's shards and every parameter is present."""
    if zero is not None:
        return zero.apply(params, state, g_leaves, rescale, has_rescale=has_rescale)
    p_leaves, treedef = jax.tree.flatten(params)
    it = iter(g_leaves)
    full = [next(it) if here else jnp.zeros_like(p) for here, p in zip(present, p_leaves)]
    grads = treedef.unflatten(full)
    if has_rescale:  # Gluon: optimizer.rescale_grad = scale / batch_size
        state = set_hyper(state, rescale_grad=rescale, where="*")  # every optimizer: the batch is one
    else:
        grads = jax.tree.map(lambda g: g * rescale.astype(g.dtype), grads)
    extra = {}
    stale = not all(present)
    mask = None  # set where stale
    if stale:
        mask = treedef.unflatten([jnp.asarray(here) for here in present])
        extra["update_mask"] = mask
        state = per_leaf_counts(state, params)
    updates, new_state = tx.update(grads, state, params, **extra)
    new_leaves = treedef.flatten_up_to(apply_updates(params, updates))
    if stale:
        new_leaves = [n if here else p for here, n, p in zip(present, new_leaves, p_leaves)]
        new_state = select_tree(mask, new_state, state)
    return treedef.unflatten(new_leaves), new_state


# -- program builders (each result is cached by the Trainer) -------------------------

def build_reduce(compression, devices, layout=None):
    """``allreduce_grads``; with a fused ``layout`` the residuals are flat and
    the sums are sliced back into leaves."""
    def body(g_leaves, r_leaves):
        if layout is None:
            return reduce_leaves(g_leaves, r_leaves, compression)
        summed, r_leaves = reduce_leaves(list(layout.ravel_leaves(g_leaves)), r_leaves, compression)
        return layout.unravel_leaves(summed), r_leaves

    return spmap(body, in_axes=(0, STORED), out_axes=(0, STORED), devices=devices)


def build_update(tx, present, grads_mapped, *, has_rescale, devices, zero=None):
    def body(params, state, g_leaves, rescale):
        return apply_step(tx, params, state, in_params_form(params, g_leaves), present, rescale,
                          has_rescale=has_rescale, zero=zero)

    return spmap(body, in_axes=(STORED, STORED, 0 if grads_mapped else None, None),
                 out_axes=(STORED, STORED), donate_argnums=(0, 1), devices=devices)


def reduce_then_apply(tx, params, state, g_leaves, r_leaves, compression, present, rescale, *,
                      has_rescale: bool, zero=None):
    """Inside pmap: the all-reduce of `reduce_leaves`, then `apply_step`.
    With a sharded state and no compression, a reduce-scatter instead: each
    device receives only its shard of the sum (on XLA:CPU the same numbers
    as the all-reduce's, bit for bit: tests/test_trainer_zero.py)."""
    if zero is not None and compression is None:
        params, state = zero.apply(params, state, zero.reduce_scatter(g_leaves), rescale,
                                   has_rescale=has_rescale, scattered=True)
        return params, state, r_leaves
    summed, r_leaves = reduce_leaves(g_leaves, r_leaves, compression)
    params, state = apply_step(tx, params, state, summed, present, rescale, has_rescale=has_rescale, zero=zero)
    return params, state, r_leaves


def choose_fused(fused, tx, num_leaves: int, sharded: bool) -> bool:
    """The Trainer's ``fused=`` choice: None fuses when the chain runs on flat
    buffers with the same arithmetic (`gradxform.fused.bit_exact`)."""
    check_flag("Trainer", "fused", fused)
    if fused is False:
        return False
    reasons = why_not_fused(tx) if num_leaves >= 2 else ["a single parameter has nothing to fuse"]
    if fused and reasons:
        what = "update_on_kvstore=True: the sharded state needs flat buffers, but" if sharded else \
            "fused=True:"
        raise ValueError(f"Trainer({what} this optimizer cannot run on flat buffers exactly: "
                         + "; ".join(reasons) + (")" if sharded else ""))
    return not reasons and (fused is True or bit_exact(tx))


HOST_PACK_LEAVES = 10_000


def packs_on_host(choice: bool | None, n_leaves: int, devices) -> bool:
    """Whether ``Trainer.step`` packs the gradients into the fused group buffers
    on the host (`gradxform.fused.Layout.pack_host`; ``choice``: the Trainer's
    ``pack_grads_on_host``). None: from `HOST_PACK_LEAVES` leaves, on CPU
    devices of one process. A concatenation inside the program makes its
    compile time grow with the operands; on the host each step pays for it
    instead (leaves of 16 floats, measured: 10,000 leaves, first call 24.5 s
    -> 3.7 s, step 24.5 -> 53 ms; 20,000, first call 95.6 s -> 9.2 s)."""
    flag = check_flag("Trainer", "pack_grads_on_host", choice)
    if flag is not None:
        return flag
    return n_leaves >= HOST_PACK_LEAVES and jax.process_count() == 1 and all(d.platform == "cpu" for d in devices)


def build_step(tx, present, compression, *, has_rescale, devices, zero, packed):
    """all-reduce + update in one program (``Trainer.step``). ``packed``: the
    gradients come as the fused layout's group buffers already
    (`gradxform.fused.Layout.pack_host`), a leaf of its own unreshaped."""
    def body(params, state, g_leaves, r_leaves, rescale):
        grads = [jnp.reshape(g, (-1,)) for g in g_leaves] if packed else in_params_form(params, g_leaves)
        return reduce_then_apply(tx, params, state, grads, r_leaves, compression,
                                 present, rescale, has_rescale=has_rescale, zero=zero)

    return spmap(body, in_axes=(STORED, STORED, 0, STORED, None), out_axes=(STORED, STORED, STORED),
                 donate_argnums=(0, 1, 3), devices=devices)


def build_compiled(tx, loss_fn, compression, *, has_rescale, devices, loss_scaled, has_aux, zero, reduce_aux):
    """forward, backward, all-reduce and update in one program; parameters,
    state and residuals are donated. Returns the loss summed over all devices
    (with ``has_aux``: and each device's aux, stacked on a leading axis, or
    with ``reduce_aux`` 'mean' / 'sum' its mean / sum over all devices).
    With ``loss_scaled`` the loss is multiplied by the state's dynamic loss
    scale before the backward pass (the optimizer divides it out). Given
    `FlatTree` parameters the loss function reads ``params.unravel()`` (views
    of the buffers) and the gradient comes back as flat buffers."""
    def body(params, state, r_leaves, batch, rescale):
        def loss_of(p):
            out = loss_fn(p.unravel() if isinstance(p, FlatTree) else p, batch)
            loss, aux = out if has_aux else (out, None)
            return (scale_loss(loss, state) if loss_scaled else loss), (loss, aux)

        (_, (loss, aux)), grads = jax.value_and_grad(loss_of, has_aux=True)(params)
        g_leaves = jax.tree.leaves(grads)
        params, state, r_leaves = reduce_then_apply(tx, params, state, g_leaves, r_leaves, compression,
                                                    (True,) * len(g_leaves), rescale, has_rescale=has_rescale,
                                                    zero=zero)
        if reduce_aux is not None:
            aux = (jax.lax.pmean if reduce_aux == "mean" else jax.lax.psum)(aux, AXIS)
        return params, state, r_leaves, jax.lax.psum(loss, AXIS), aux

    return spmap(body, in_axes=(STORED, STORED, STORED, 0, None),
                 out_axes=(STORED, STORED, STORED, None, None if reduce_aux else 0), donate_argnums=(0, 1, 2),
                 devices=devices)


def build_set_hyper(names, devices):
    def body(state, values):
        return set_hyper(state, **values)

    del names
    return spmap(body, in_axes=(STORED, None), out_axes=STORED, donate_argnums=(0,), devices=devices)
