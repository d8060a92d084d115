"""Packing inside the step: a plain transformation's small leaves run as flat buffers.

`packed(tx)` keeps ``tx``'s per-leaf state (what `gradxform.create` and
``tx.init`` make, what checkpoints hold) and, when its ``update`` is fed
ordinary trees, packs the leaves of at most ``max_leaf_size`` elements into
flat buffers inside the step, in `gradxform.fused`'s groups (dtype and
per-leaf numbers), runs the chain once per buffer and slices the results
back; larger leaves are buffers of their own and keep their shape. Only
chains that `fused` runs with the same arithmetic (`bit_exact`) pack.
Public as ``gradxform.fused.packed`` (the per-leaf reference is ``tx`` itself); see
``benchmarks/README.md`` for what it costs and gains.
"""
from __future__ import annotations

import dataclasses
import warnings

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from ._base import CONTEXT_KEY, GradientTransformation, StepContext, transformation
from ._spec import Fusion, declare
from ._state_paths import map_param_shaped
from ._flat import FlatTree, Layout, _flatten_state, _inspect, _layout_for, _unflatten_state
from .pieces.internal import buffer_segments, layout_segments

__all__ = ["packed"]


def _per_leaf_values(state, treedef) -> list[list]:
    """The raw per-leaf field values of ``state`` (one list per field, leaf order)."""
    found: list[list] = []

    def leaf_fn(_, x):
        found.append([x[i] for i in range(treedef.num_leaves)] if hasattr(x, "shape")
                     else list(treedef.flatten_up_to(x)))
        return x

    map_param_shaped(state, treedef, per_leaf=leaf_fn, param_tree=lambda t: t)
    return found


def _diverged(pred) -> None:
    if not np.all(np.asarray(pred)):
        raise ValueError(
            "gradxform: this optimizer packs small leaves into flat buffers inside its step, one "
            "buffer per group of leaves with the same per-leaf numbers at init (update counts, "
            "lr_mult, wd_mult); this state's per-leaf numbers differ inside a group (a state made "
            "elsewhere, e.g. migrated with diverged update counts). Run this state unpacked: with the "
            "transformation given to gradxform.fused.packed itself, or pass update_mask.")


@dataclasses.dataclass(frozen=True)
class _ShapedLayout(Layout):
    """`Layout` whose one-leaf buffers keep the leaf's own shape (no reshape
    in or out: a donated N-d leaf reshaped to 1-d and back made XLA:CPU copy
    it at the output). Used inside `packed` steps only."""

    def ravel_leaves(self, leaves) -> tuple:
        return tuple(leaves[g[0]] if len(g) == 1 else jnp.concatenate([jnp.reshape(leaves[i], (-1,)) for i in g])
                     for g in self.groups)

    def _slice_leaves(self, buffers, shapes=None) -> list:
        shapes = self.shapes if shapes is None else shapes
        out = Layout._slice_leaves(self, buffers, shapes)
        for buf, g in zip(buffers, self.groups):
            if len(g) == 1:
                out[g[0]] = buf if tuple(np.shape(buf)) == tuple(shapes[g[0]]) else jnp.reshape(buf, shapes[g[0]])
        return out


def _shaped(layout: Layout) -> _ShapedLayout:
    return _ShapedLayout(layout.treedef, layout.shapes, layout.dtypes, layout.groups)


def packed(tx: GradientTransformation, *, max_leaf_size: int = 1 << 16) -> GradientTransformation:
    """``tx`` with its per-leaf state, whose ``update`` on ordinary trees packs
    the small leaves (at most ``max_leaf_size`` elements) into flat buffers
    inside the step and runs the chain fused (`fused`'s grouping: by dtype and
    per-leaf numbers); larger leaves are buffers of their own (a reshape).
    Only chains that `fused` runs with the same arithmetic (`bit_exact`) pack;
    anything else, an ``update_mask``, or a tree with fewer than two small
    leaves keeps the per-leaf path.

    Not the default of `gradxform.create` (yet): this is a third compiled
    program next to the per-leaf and the fused ones, and XLA:CPU may contract
    a multiply-add into an FMA differently in it; measured, MindSpore Adam and
    MXNet RMSProp then differ from the per-leaf chain by 1 float32 ulp on some
    elements (MXNet Adam and SGD were bit-identical), see
    ``benchmarks/README.md``.

    The groups come from the state's per-leaf numbers when they are concrete;
    under ``jit`` (traced) from those a fresh ``init`` makes, and the step
    checks that the state agrees (a `jax.debug.callback` raises inside a
    `lax.cond` that runs only when it does not)."""
    reasons, facts = _inspect(tx)
    enabled = not reasons and facts["bit_exact"]
    facts = dict(facts, max_leaf_size=max_leaf_size)
    probes: dict = {}

    def init(params):
        return tx.init(params)

    def probe_layout(ref, treedef):
        key = (treedef, tuple((tuple(np.shape(x)), str(jnp.result_type(x))) for x in treedef.flatten_up_to(ref)))
        if key not in probes:
            probe = jax.tree.map(lambda x: np.zeros((1,), jnp.result_type(x)), ref)
            with warnings.catch_warnings(), jax.ensure_compile_time_eval():
                warnings.simplefilter("ignore")
                probes[key] = _shaped(_layout_for(ref, tx.init(probe), facts))
        return probes[key]

    @declare(inner=(tx,), fusion=Fusion())  # under `fused` (flat buffers in): the inner chain as it is
    def update(updates, state, params=None, **extra_args):
        if (not enabled or isinstance(updates, FlatTree)
                or extra_args.get("update_mask") is not None or buffer_segments(extra_args) is not None):
            return tx.update(updates, state, params, **extra_args)  # pyright: ignore[reportArgumentType]  # a FlatTree is a pytree; optax's Updates alias does not say so
        ref = updates if params is None else params
        leaves, treedef = jax.tree.flatten(ref)
        if sum(np.size(x) <= max_leaf_size for x in leaves) < 2 or jax.tree.structure(updates) != treedef:
            return tx.update(updates, state, params, **extra_args)
        values = _per_leaf_values(state, treedef)
        traced = any(isinstance(v, jax.core.Tracer) for vs in values for v in vs)
        layout = probe_layout(ref, treedef) if traced else _shaped(_layout_for(ref, state, facts))
        if all(len(g) == 1 for g in layout.groups):
            return tx.update(updates, state, params, **extra_args)
        if traced:
            same = [jnp.asarray(vs[i]) == jnp.asarray(vs[g[0]]) for vs in values
                    for g in layout.groups if len(g) > 1 for i in g[1:]]
            if same:
                pred = jnp.all(jnp.stack(same))
                jax.lax.cond(pred, lambda p: None, lambda p: jax.debug.callback(_diverged, p), pred)
        u = layout.ravel(updates)
        p = None if params is None else layout.ravel(params)
        flat_state = _flatten_state(state, layout)
        ctx = StepContext.on_buffers(layout_segments(layout))
        with ctx.running(tx):
            out, inner = tx.update(u, flat_state, p, **{**extra_args, CONTEXT_KEY: ctx})
        return treedef.unflatten(layout._slice_leaves(out)), _unflatten_state(inner, state, layout)

    return transformation(init, update)


