"""The Trainer's optimizer state sharded over its devices: ZeRO stage 1,
Gluon's ``update_on_kvstore=True``.

MXNet's answer to an optimizer state too large for every device was to run
the optimizer on the kvstore servers, each holding a slice of the
parameters. Here the devices of the mesh are the servers. The state is
held in the fused layout (`gradxform.fused`: a few flat buffers per
chain), and every flat buffer of it is cut into one contiguous shard per
device: ``ceil(length / N)`` elements each, the last shard padded by
repeating the buffer's last element. Which leaves are buffers comes from
the layout (`gradxform._fused.buffer_lengths`), never from recognising an
optimizer, so any chain that runs on flat buffers shards; per-group values
(step counts, multipliers) and hyperparameters stay whole on every device.

A step, inside the same `jax.shard_map` program as the all-reduce:

1. the gradients are summed over all devices, and each device keeps its
   shard of the sum: a reduce-scatter (ZeRO-2's: no device holds the
   whole sum; on XLA:CPU bit-identical to the all-reduce's slice, tested),
   or with compression the all-reduce of the quantized gradients as
   before; each device takes its shard of the parameters too;
2. the chain runs on the shards, with `ShardedSegments` in the step
   context: a per-leaf or global reduction (LARS, LAMB, a global-norm
   clip) gathers the buffer whole and reduces it in the unsharded order,
   and the finite-check of the guards is and-ed over all devices;
3. each device adds its shard of the updates to its shard of the
   parameters, and the new parameters are all-gathered.

Every element therefore goes through the same arithmetic as in the
unsharded fused step, and every sum is taken in the same order. The two
are different XLA programs, though, and XLA:CPU may contract a product
and a sum into an FMA in one and not the other: measured, they agree
bit for bit for SGD, LAMB and LARS and to within one float32 eps of each
leaf's largest value for MXNet Adam and Nadam (tests/test_trainer_zero.py).
A padding element computes exactly what the element it copies computes,
so it is finite when that one is, and it never reaches the parameters.

Memory per device: the state's buffers divided by N (plus at most N - 1
padding elements per buffer); parameters, and each device's own
gradients, whole (ZeRO-1).
Checkpoints are written per leaf from the gathered state, so they load
on any number of devices, sharded or not.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from .._base import CONTEXT_KEY, StepContext, apply_updates
from .._fused import FlatTree, FusedState, buffer_lengths
from .._hyper import set_hyper
from .._state_paths import with_optional_like
from ..pieces.internal import ShardedSegments, layout_segments, shard_of
from . import _allreduce as ar

__all__ = ["ShardedState"]


class ShardedState:
    """How a Trainer's fused optimizer state is split over its mesh (static).

    ``chain`` is the optimizer as it runs on flat buffers (the guarded
    chain, not wrapped in `gradxform.fused`); ``devices`` the Trainer's."""

    def __init__(self, chain, devices):
        self.chain = chain
        self.mesh = ar.mesh_of(devices)
        self.num_shards = int(self.mesh.size)
        self._lengths: dict = {}

    def lengths(self, layout):
        """`buffer_lengths` of the chain for ``layout`` (cached)."""
        if layout not in self._lengths:
            self._lengths[layout] = buffer_lengths(self.chain, layout)
        return self._lengths[layout]

    def lengths_of(self, state: FusedState):
        """`lengths` shaped like ``state.inner``: a state loaded with step counts
        per leaf (a checkpoint written after a stale gradient) holds them per
        group where ``init`` shares one; those are per-group values (-1), never
        buffers."""
        lengths = self.lengths(state.layout)
        if jax.tree.structure(lengths) == jax.tree.structure(state.inner):
            return lengths
        groups = tuple(range(len(state.layout.groups)))  # the fused chain's params: one buffer per group
        # -1 for every written-out field, whatever its declared fill (lr_mult's is 1.0)
        written = with_optional_like(lengths, state.inner, groups, fill=-1)
        return jax.tree.map(lambda m: -1 if hasattr(m, "shape") else m, written)  # a per-leaf vector: one leaf

    # -- host side ------------------------------------------------------------------
    def put(self, state: FusedState, place: ar.Placement) -> FusedState:
        """A whole fused ``state`` (one copy, as ``init`` or a checkpoint gives
        it) placed as the Trainer keeps it: each flat buffer a global array
        of shape ``(N, chunk)`` with row i on device i, everything else one
        copy per device (``place.put``)."""
        if not isinstance(state, FusedState):
            raise TypeError("ShardedState.put: the state is not in the fused layout.")
        leaves, treedef = jax.tree.flatten(state.inner)
        lengths = treedef.flatten_up_to(self.lengths_of(state))
        whole = iter(place.put([x for x, n in zip(leaves, lengths) if n < 0]))
        sharding = NamedSharding(self.mesh, P(ar.AXIS))
        out = [next(whole) if n < 0 else self._split(x, sharding) for x, n in zip(leaves, lengths)]
        return FusedState(treedef.unflatten(out), state.layout)

    def _split(self, x, sharding):
        x = np.asarray(x)
        n, num = x.shape[0], self.num_shards
        chunk = -(-n // num)
        if n and chunk * num != n:
            x = np.pad(x, (0, chunk * num - n), mode="edge")
        rows = x.reshape(num, chunk)
        return jax.make_array_from_callback((num, chunk), sharding, lambda index: rows[index])

    # -- inside the per-device program ------------------------------------------------
    def gather_state(self, state: FusedState) -> FusedState:
        """The whole fused state on every device (for checkpoints and ``trainer.state``)."""
        lengths = self.lengths_of(state)
        # a zero-length buffer (a group of zero-size leaves) is whole on every device, and XLA
        # refuses to all-gather a zero-length axis
        inner = jax.tree.map(lambda x, n: x if n <= 0 else jax.lax.all_gather(x, ar.AXIS, tiled=True)[:n],
                             state.inner, lengths)
        return FusedState(inner, state.layout)

    def reduce_scatter(self, g_buffers) -> tuple:
        """This device's shard of the sum over all devices of each gradient
        buffer (ZeRO-2's reduce-scatter: no device holds the whole sum).
        Each device pads its buffer as `shard_of` does, so the padding of
        the sum is the copy of its last element that `shard_of` would make."""
        out = []
        for g in g_buffers:
            n = g.shape[0]
            chunk = -(-n // self.num_shards)
            if n == 0:
                out.append(g)
                continue
            if chunk * self.num_shards != n:
                g = jnp.pad(g, (0, chunk * self.num_shards - n), mode="edge")
            out.append(jax.lax.psum_scatter(g, ar.AXIS, tiled=True))
        return tuple(out)

    def apply(self, params: FlatTree, state: FusedState, g_buffers, rescale, *, has_rescale: bool,
              scattered: bool = False):
        """One update from the summed gradient buffers (whole, the same on
        every device; or with ``scattered`` already this device's shards,
        from `reduce_scatter`): this device updates its shards, the
        parameters are all-gathered. Returns (new params, new state), as `ar.apply_step`."""
        layout, num = params.layout, self.num_shards
        segs = tuple(ShardedSegments(s, ar.AXIS, num) for s in layout_segments(layout))
        p_local = tuple(shard_of(b, ar.AXIS, num) for b in params.buffers)
        g_local = tuple(g_buffers) if scattered else tuple(shard_of(g, ar.AXIS, num) for g in g_buffers)
        inner = state.inner
        if has_rescale:  # Gluon: optimizer.rescale_grad = scale / batch_size
            inner = set_hyper(inner, rescale_grad=rescale, where="*")
        else:
            g_local = tuple(g * rescale.astype(g.dtype) for g in g_local)
        ctx = StepContext.on_buffers(segs)
        with ctx.running(self.chain):
            updates, inner = self.chain.update(g_local, inner, p_local, **{CONTEXT_KEY: ctx})
        new_local = apply_updates(p_local, updates)
        new = tuple(s.gather(x) for s, x in zip(segs, new_local))
        return FlatTree(new, layout), FusedState(inner, layout)
