"""Per-leaf numbers stored once per group of leaves that share them (`GroupValues`).

A per-parameter multiplier (MXNet ``lr_mult``/``wd_mult``) is one number per
parameter leaf, but a model has few distinct ones (1 for most leaves, 2 for
the biases, 0.1 for a head). Held as a vector with an entry per leaf, every
leaf's update reads its own entry: a distinct slice per leaf, so XLA compiles
one kernel per leaf where leaves of one shape would otherwise share one
(measured on CPU: MXNet Adam with multipliers at 300 leaves, 11.1 s to
compile against 1.8 s without; `benchmarks/README.md`). Held as one value per
group (``f32[n_groups]``) with each leaf's group fixed in the tree structure,
the update reads one slice per group.

Which leaves form a group is static: it is part of the state's tree
structure (pytree auxiliary data), made on the host from the values when a
state is built (`group_by_value`: leaves with equal numbers share a group),
so changing a group's value under ``jax.jit`` never recompiles, and
regrouping (one parameter's multiplier set to a value no other leaf has) is a
new structure, traced once. Every writer of a per-leaf value makes a
consistent state by construction: a group holds one value.

Files keep the per-leaf vector (`expand_groups` before saving,
`regroup_like` after loading), so checkpoints are the same whatever the
grouping.
"""
from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.tree_util import GetAttrKey

__all__ = ["GroupValues", "group_by_value", "expand_groups", "regroup_like", "per_leaf_list"]


@jax.tree_util.register_pytree_with_keys_class
class GroupValues:
    """One number per parameter leaf, held as ``values[groups[i]]``.

    ``values``: an array of shape ``(n_groups,)``, the state's only leaf here
    (``.values`` in a key path); ``groups``: for each leaf in flatten order the
    index of its group, a tuple of ints kept in the tree structure (static).
    It answers ``shape`` (``(n_leaves,)``), ``dtype``, ``np.asarray`` (the
    per-leaf vector, on the host) and indexing (an int: that leaf's value; an
    index array: the `GroupValues` of those leaves, as `gradxform.fused`
    takes one leaf per buffer), so walkers written for per-leaf vectors read
    it as one.
    """
    __slots__ = ("values", "groups")

    def __init__(self, values, groups: Sequence[int]):
        self.values = values
        self.groups = tuple(int(g) for g in groups)

    def tree_flatten_with_keys(self):
        return ((GetAttrKey("values"), self.values),), self.groups

    def tree_flatten(self):
        return (self.values,), self.groups

    @classmethod
    def tree_unflatten(cls, groups, children):
        out = object.__new__(cls)
        out.values, out.groups = children[0], groups
        return out

    @property
    def shape(self) -> tuple[int]:
        return (len(self.groups),)

    @property
    def ndim(self) -> int:
        return 1

    @property
    def dtype(self):
        return getattr(self.values, "dtype", None)

    def __len__(self) -> int:
        return len(self.groups)

    def __array__(self, dtype=None, copy=None):
        host = np.asarray(self.values)[np.asarray(self.groups, np.intp)].reshape(-1)
        return host if dtype is None else host.astype(dtype)

    def __getitem__(self, index):
        if isinstance(index, (int, np.integer)):
            return self.values[self.groups[int(index)]]
        picked = np.asarray(index, np.intp).reshape(-1)
        return GroupValues(self.values, [self.groups[i] for i in picked])

    def __eq__(self, other):
        return isinstance(other, GroupValues) and self.groups == other.groups and \
            np.array_equal(np.asarray(self.values), np.asarray(other.values))

    __hash__ = None  # type: ignore[assignment]  # mutable-array holder, as a NumPy array

    def __repr__(self) -> str:
        return f"GroupValues({self.values!r}, groups={len(set(self.groups))} over {len(self.groups)} leaves)"


def group_by_value(vector, dtype=np.float32) -> GroupValues:
    """``vector`` (one number per leaf, concrete) as `GroupValues`: leaves with
    equal numbers share a group, groups numbered in order of their first leaf."""
    host = np.asarray(vector, dtype).reshape(-1)
    distinct, first, inverse = np.unique(host, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # group 0 is leaf 0's
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return GroupValues(jnp.asarray(distinct[order]), rank[inverse.reshape(-1)].tolist())


def per_leaf_list(vector, n: int) -> list:
    """Leaf ``i``'s entry of a per-leaf ``vector`` (an array or `GroupValues`)
    for ``i < n``, each group's one object shared by its leaves (a slice per
    group, not per leaf)."""
    if np.shape(vector) != (n,):
        raise ValueError(f"a per-leaf state vector has shape {np.shape(vector)}; the updates have "
                         f"{n} leaves (was the state made by init on another tree?).")
    if isinstance(vector, GroupValues):
        picked: dict[int, Any] = {}
        for g in vector.groups:
            if g not in picked:
                picked[g] = vector.values[g]
        return [picked[g] for g in vector.groups]
    return [vector[i] for i in range(n)]


def _expanded(x: GroupValues, abstract: bool):
    if abstract or isinstance(x.values, jax.ShapeDtypeStruct):
        return jax.ShapeDtypeStruct((len(x.groups),), x.values.dtype)
    if isinstance(x.values, jax.core.Tracer):
        return x.values[jnp.asarray(x.groups, jnp.int32)]
    return jnp.asarray(np.asarray(x))


def expand_groups(tree, *, abstract: bool = False):
    """``tree`` with every `GroupValues` as the per-leaf vector it stands for
    (the form files hold; a `jax.ShapeDtypeStruct` with ``abstract``, for
    comparing structures whatever the grouping)."""
    return jax.tree.map(lambda x: _expanded(x, abstract) if isinstance(x, GroupValues) else x, tree,
                        is_leaf=lambda x: isinstance(x, GroupValues))


def regroup_like(tree, like):
    """``tree`` (``expand_groups(like)``'s structure) with a `GroupValues`
    again wherever ``like`` holds one, grouped by its own values (which may
    group the leaves otherwise than ``like``: a file's multipliers)."""
    marks = jax.tree.map(lambda x: isinstance(x, GroupValues), like, is_leaf=lambda x: isinstance(x, GroupValues))
    mark_leaves = jax.tree.leaves(marks)
    leaves, treedef = jax.tree.flatten(tree)
    if len(mark_leaves) != len(leaves):
        raise ValueError("regroup_like: the tree is not the expanded form of like.")
    return treedef.unflatten([_placed_like(group_by_value(x, np.asarray(x).dtype), x) if m else x
                              for x, m in zip(leaves, mark_leaves)])


def _placed_like(grouped: GroupValues, vector) -> GroupValues:
    """``grouped`` with its values on ``vector``'s devices (a replicated sharding), as a loaded leaf sits."""
    sharding = getattr(vector, "sharding", None)
    if sharding is not None and getattr(sharding, "is_fully_replicated", False):
        return GroupValues(jax.device_put(grouped.values, sharding), grouped.groups)
    return grouped
