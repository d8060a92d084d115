"""The Trainer's stored arrays read per leaf on the host: for checkpoints,
``trainer.params`` and ``trainer.state``.

Why on the host: the fused layout keeps parameters and state in a few flat
buffers, and cutting them into N leaves on the device is a program of N
outputs, compiled for each Trainer; its compile grew faster than the leaves
(500 leaves of 16 floats: 6.6 s and +450 MB for the first ``save_states``;
past 10 GB at 10,000). Copying the few buffers to the host once and cutting
them into NumPy views costs a pass over the bytes and no program at all
(benchmarks/bench_checkpoint_scale.py). The bytes are the stored ones, so a
checkpoint is the same bit for bit.

Every copy leaves the host with its own memory (``np.array(x, copy=True)``):
a NumPy view of a device buffer would hold a reference that stops the next
step from donating that buffer.
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from .._fused import FlatTree, FusedState, unflatten_state
from . import _allreduce as ar

__all__ = ["first_copy", "per_device", "params_of", "params_on_device", "state_of", "residual_of", "gathers_on_host",
           "hand_out"]


def _is_key(x) -> bool:
    return isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def first_copy(x, single: bool):
    """The first local device's copy of a stored leaf, in NumPy (a PRNG key
    stays a key: NumPy has no such dtype; there are a few at most)."""
    if not isinstance(x, jax.Array):
        return np.asarray(x)
    if _is_key(x):
        return x if single else ar.unreplicate(x)
    if single:
        return np.array(x, copy=True)
    shard = min(x.addressable_shards, key=_row)
    if shard.data.shape[:1] == (1,):  # sharded along the device axis (the Trainer's layout)
        return np.array(shard.data, copy=True)[0]
    return np.array(x[0], copy=True)


def _row(shard) -> int:
    return (shard.index[0].start or 0) if shard.index else 0


def per_device(x, single: bool) -> np.ndarray:
    """This process's copies of a stored per-device leaf (a residual), stacked
    on a leading axis in local device order."""
    if single:
        return np.array(x, copy=True)[None]
    if x.is_fully_addressable:
        return np.array(x, copy=True)
    return np.concatenate([np.array(s.data, copy=True) for s in sorted(x.addressable_shards, key=_row)])


def gathers_on_host(state, zero) -> bool:
    """Whether a sharded state's shards are all in this process (then the
    host joins them; else only an all-gather inside a program can)."""
    return zero is None or all(x.is_fully_addressable for x in jax.tree.leaves(state) if isinstance(x, jax.Array))


def _gather(state: FusedState, zero) -> FusedState:
    """The whole fused state from its shards (`ShardedState`: each buffer a
    ``(N, chunk)`` array whose tail pads): the rows joined, the padding cut."""
    def whole(x, n):
        if n < 0:  # a per-group value or hyperparameter: whole on every device
            return first_copy(x, False)
        return np.array(x, copy=True).reshape(-1)[:n]
    return FusedState(jax.tree.map(whole, state.inner, zero.lengths_of(state)), state.layout)


def params_of(params, single: bool):
    """The parameters per leaf in NumPy, one copy, from a Trainer's stored
    ones (a `FlatTree` of the fused layout, or per leaf)."""
    if isinstance(params, FlatTree):
        layout = params.layout
        return layout.treedef.unflatten(layout._slice_leaves([first_copy(b, single) for b in params.buffers]))
    return jax.tree.map(lambda x: first_copy(x, single), params)


def state_of(state, *, leaf_tx, zero, single: bool):
    """The optimizer state per leaf in NumPy, one copy: ``state`` as stored
    (sharded when ``zero`` is given; see `gathers_on_host`), or already per leaf."""
    if isinstance(state, FusedState) and zero is not None:
        state = _gather(state, zero)
    else:
        state = jax.tree.map(lambda x: first_copy(x, single), state)
    return unflatten_state(leaf_tx, state)


def residual_of(residual, layout, single: bool) -> list:
    """The compression residuals per leaf in NumPy, each with a leading axis
    of this process's devices (``layout``: the fused one, or None)."""
    local = [per_device(r, single) for r in residual]
    return layout._slice_leaves(local) if layout is not None and local else local


def hand_out(tree, device):
    """``tree``'s leaves (NumPy, or a few keys) on ``device`` in fresh buffers,
    no program compiled: the caller's arrays, which later steps (that donate
    the stored ones) leave alone."""
    leaves, treedef = jax.tree.flatten(tree)
    return treedef.unflatten(jax.device_put(leaves, device, may_alias=False))


_MAX_TAKES = 32  # distinct (buffer, leaf shape) programs one hand-out may compile; above: the host path


@functools.partial(jax.jit, static_argnums=(2,))
def _take(buf, start, shape):
    return jax.lax.dynamic_slice(jax.numpy.reshape(buf, (-1,)), (start,), (math.prod(shape),)).reshape(shape)


def params_on_device(params, single: bool):
    """The parameters per leaf in fresh buffers on the first local device, each
    cut from its stored buffer by one small program per (buffer length, leaf
    shape, dtype), compiled once and shared by every Trainer; None when there
    are more than ``_MAX_TAKES`` such kinds (then `params_of` and `hand_out`).

    Why not the host path for every read: a fresh device array made from
    NumPy costs ~100 us per leaf (jax's ``device_put``), a cached program's
    dispatch ~25 us (benchmarks/README.md, "Checkpoints at scale"), and
    ``trainer.params`` may be read every step."""
    row = lambda b: b if single else min(b.addressable_shards, key=_row).data  # noqa: E731
    if isinstance(params, FlatTree):
        layout = params.layout
        treedef = layout.treedef
        buffers, shapes, groups = [row(b) for b in params.buffers], layout.shapes, layout.groups
    else:
        leaves, treedef = jax.tree.flatten(params)
        buffers, shapes = [row(x) for x in leaves], [tuple(np.shape(x))[0 if single else 1:] for x in leaves]
        groups = [(i,) for i in range(len(leaves))]
    kinds = {(b.shape, b.dtype, shapes[i]) for b, g in zip(buffers, groups) for i in g}
    if len(kinds) > _MAX_TAKES or any(b.size >= 2**31 or _is_key(b) for b in buffers):
        return None
    out: list = [None] * len(shapes)
    for b, g in zip(buffers, groups):
        start = 0
        for i in g:
            out[i] = _take(b, np.int32(start), tuple(shapes[i]))
            start += math.prod(shapes[i])
    return treedef.unflatten(out)
