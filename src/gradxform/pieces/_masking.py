"""Applying a transformation to part of the parameters and keeping the rest as they were."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from .._base import GradientTransformation, context_value, run_inner, transformation
from .._spec import Fusion, check_key, declare
from .._state_paths import map_param_trees
from .._tree import leaf_values, once_per_value, select_tree
from ._segments import present_rows
from ._step import per_leaf_counts

__all__ = ["gated", "lazy_rows", "masked_by_update_mask", "only_slotted"]
PUBLIC = ("gated", "lazy_rows",)  # what gradxform.pieces re-exports


def only_slotted(inner: GradientTransformation, read_slots) -> GradientTransformation:
    """Runs ``inner``; every leaf whose group slot is negative (no parameter
    group names it) gets a zero update and keeps ``inner``'s state.
    ``read_slots(state)`` gives the per-leaf slots (an int vector with an
    entry per leaf, or a tree of int scalars; one per buffer under fused), read from a state
    rather than from names: under `gradxform.fused` updates have none."""

    @declare(inner=(inner,), fusion=Fusion())  # the slots are per leaf, hence per group
    def update(updates, state, params=None, **extra_args):
        treedef = jax.tree.structure(updates)
        slots = read_slots(state)
        if hasattr(slots, "shape"):  # a per-leaf vector (the state's form now)
            slots = leaf_values(slots, updates)
        optimized = once_per_value(lambda s: s >= 0)  # one flag per slot object: a group's leaves share it
        selected = treedef.unflatten([optimized(s) for s in treedef.flatten_up_to(slots)])
        out, new_state = run_inner(inner, updates, state, params, **extra_args)
        out = jax.tree.map(lambda u, m: jnp.where(m, u, jnp.zeros_like(u)), out, selected)
        return out, select_tree(selected, new_state, state)

    return transformation(inner.init, update)


def gated(inner: GradientTransformation, key) -> GradientTransformation:
    """Runs ``inner``; for every leaf whose per-leaf boolean ``key`` in the step
    context is False, the update is zero and ``inner``'s per-parameter state
    is kept as it was (MXNet LBSGD's non-update steps while gradients
    accumulate). ``key``: a `gradxform.LocalKey` or a context field, which
    `gradxform.chain` checks."""
    check_key(key, "gated(key=...)")

    # its mask is per leaf, hence per group
    @declare(who="gated", needs=(key,), inner=(inner,), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        mask = context_value(extra_args, key, "gated")
        out, new_state = run_inner(inner, updates, state, params, **extra_args)
        out = jax.tree.map(lambda u, m: jnp.where(m, u, jnp.zeros_like(u)), out, mask)
        return out, select_tree(mask, new_state, state)

    return transformation(inner.init, update)


def masked_by_update_mask(inner: GradientTransformation) -> GradientTransformation:
    """Runs ``inner``; with an ``update_mask`` extra argument (a per-leaf bool
    tree, as the Trainer passes for stale gradients), a leaf whose flag is
    False gets an update of exactly zero and keeps its per-parameter state
    as it was; without one, ``inner`` is unchanged. Every framework optimizer
    has this around its chain (`gradxform._optimizer.finalize`), so
    ``tx.update(g, s, p, update_mask=m)`` outside the Trainer is safe: a
    masked leaf's step count is not bumped (`track_step`), and the update
    computed for it anyway (e.g. Adam's bias correction at t = 0, a NaN) is
    dropped. Scalars shared by all leaves (the step counter's ``num_update``)
    are the new ones, as `gradxform._tree.select_tree` does."""

    # its mask is per leaf, hence per group (gradxform.fused passes one per buffer)
    @declare(inner=(inner,), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        mask = extra_args.get("update_mask")
        if mask is None:
            return run_inner(inner, updates, state, params, **extra_args)
        state = per_leaf_counts(state, updates)  # old and new state of one structure, to select between
        out, new_state = run_inner(inner, updates, state, params, **extra_args)
        treedef = jax.tree.structure(updates)
        flags = treedef.unflatten([jnp.asarray(m, bool).reshape(()) for m in treedef.flatten_up_to(mask)])
        out = jax.tree.map(lambda u, m: jnp.where(m, u, jnp.zeros_like(u)), out, flags)
        return out, select_tree(flags, new_state, state)

    return transformation(inner.init, update)


def lazy_rows(inner: GradientTransformation) -> GradientTransformation:
    """Row-sparse ("lazy") semantics over dense gradients: rows (first axis)
    whose incoming gradient is all zero are treated as absent, so the
    parameter row and every per-parameter state row stay as they were (MXNet
    ``lazy_update`` with a ``row_sparse`` gradient; MindSpore LazyAdam). Each
    element of a 1-D parameter is a row, and a 0-d parameter is one row: its
    state stays too, as that of a parameter of shape (1,)."""

    # fused: row flags from integer counts of nonzeros per row (exact in any order),
    # applied per element
    @declare(inner=(inner,), fusion=Fusion(bit_exact=False, reductions=("row_sums",)))
    def update(updates, state, params=None, **extra_args):
        rows = present_rows(updates, extra_args)
        out, new_state = run_inner(inner, updates, state, params, **extra_args)

        def expand(r, x):
            return r.reshape(r.shape + (1,) * (jnp.ndim(x) - r.ndim)) if jnp.ndim(x) else r

        out = jax.tree.map(lambda u, r: jnp.where(expand(r, u), u, jnp.zeros_like(u)), out, rows)
        pdef = jax.tree.structure(updates)

        def pick(n, o):
            nl, ol, rl = pdef.flatten_up_to(n), pdef.flatten_up_to(o), pdef.flatten_up_to(rows)
            return pdef.unflatten([
                # a state leaf with the rows' leading shape is per row (a 0-d one of a 0-d
                # parameter included); anything else (a per-leaf scalar of a matrix) is not
                jnp.where(expand(r, a), a, b) if not isinstance(a, tuple) and jnp.shape(a) == jnp.shape(b)
                and jnp.shape(a)[:r.ndim] == r.shape else a for a, b, r in zip(nl, ol, rl)])

        return out, map_param_trees(pick, pdef, new_state, state)

    return transformation(inner.init, update)
