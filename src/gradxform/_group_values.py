"""Per-leaf numbers stored once per group of leaves that share them (`GroupValues`).

A per-parameter multiplier (MXNet ``lr_mult``/``wd_mult``) is one number per
parameter leaf, but a model has few distinct ones (1 for most leaves, 2 for
the biases, 0.1 for a head). Held as a vector with an entry per leaf, every
leaf's update reads its own entry: a distinct slice per leaf, so XLA compiles
one kernel per leaf where leaves of one shape would otherwise share one
(measured on CPU: MXNet Adam with multipliers at 300 leaves compiles in
11.7 s held per leaf, 2.5 s held per group; `benchmarks/bench_compile.py`). Held as one
value per group (``f32[n_groups]``) with each leaf's group fixed in the tree
structure, the update reads one slice per group. The same holds for Paddle's
group slots, rate ratios, decay flags and beta powers and MindSpore's group
slots and decay flags, several fields over one partition (`partition`), which
a step computes on per group (`per_group`, `stepped`).

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

from typing import Any, NamedTuple, Sequence

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jax.tree_util import GetAttrKey

__all__ = ["ValuesByGroup", "GroupValues", "group_by_value", "host_groups", "fitted", "in_groups", "expand_groups", "regroup_like", "per_leaf_list",
           "shared_groups", "by_group", "stepped_in_groups", "partition", "PerGroup", "per_group", "read_per_leaf",
           "stepped"]


class ValuesByGroup:
    """A pytree node of one leaf, ``values``, and a tuple of ints, ``groups``,
    kept in the tree structure (static): what `GroupValues` and
    `gradxform._group_hyper.GroupHyper` share. Each subclass registers itself."""
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


@jax.tree_util.register_pytree_with_keys_class
class GroupValues(ValuesByGroup):
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
    __slots__ = ()

    @property
    def shape(self) -> tuple[int]:
        return (len(self.groups),)

    @property
    def ndim(self) -> int:
        return 1

    @property
    def size(self) -> int:
        return len(self.groups)

    @property
    def dtype(self):
        return getattr(self.values, "dtype", None)

    def __len__(self) -> int:
        return len(self.groups)

    def __array__(self, dtype=None, copy=None):
        host = np.asarray(self.values)[np.asarray(self.groups, np.intp)]
        return host if dtype is None else host.astype(dtype)

    def __getitem__(self, index):
        if isinstance(index, (int, np.integer)):
            return self.values[self.groups[int(index)]]
        picked = np.asarray(index, np.intp).reshape(-1)
        return GroupValues(self.values, [self.groups[i] for i in picked])

    def __eq__(self, other):
        if not isinstance(other, GroupValues) or self.groups != other.groups:
            return False
        a, b = self.values, other.values
        if isinstance(a, (np.ndarray, jax.Array)):
            return isinstance(b, (np.ndarray, jax.Array)) and bool(np.array_equal(np.asarray(a), np.asarray(b)))
        return bool(a == b)  # what a tree map put there (shapes, dtypes, structs)

    __hash__ = None  # type: ignore[assignment]  # mutable-array holder, as a NumPy array

    def __repr__(self) -> str:
        return f"GroupValues({self.values!r}, groups={len(set(self.groups))} over {len(self.groups)} leaves)"


def host_groups(vector, dtype: Any = np.float32) -> tuple[np.ndarray, list[int]]:
    """(distinct values, each leaf's group) of a concrete per-leaf ``vector``:
    leaves with equal numbers share a group, numbered in order of their first leaf."""
    host = np.asarray(vector, dtype).reshape(-1)
    distinct, first, inverse = np.unique(host, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # group 0 is leaf 0's
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return distinct[order], rank[inverse.reshape(-1)].tolist()


def group_by_value(vector, dtype: Any = np.float32) -> GroupValues:
    """``vector`` (one number per leaf, concrete) as `GroupValues` (`host_groups`)."""
    values, groups = host_groups(vector, dtype)
    return GroupValues(jnp.asarray(values), groups)


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
    sharding = getattr(x.values, "sharding", None)
    if sharding is not None and getattr(sharding, "is_fully_replicated", False):
        return jax.device_put(np.asarray(x), sharding)  # where the grouped values live (a replicated scalar vector)
    return jnp.asarray(np.asarray(x))


def expand_groups(tree, *, abstract: bool = False):
    """``tree`` with every `GroupValues` as the per-leaf vector it stands for
    (the form files hold; a `jax.ShapeDtypeStruct` with ``abstract``, for
    comparing structures whatever the grouping)."""
    return jax.tree.map(lambda x: _expanded(x, abstract) if isinstance(x, GroupValues) else x, tree,
                        is_leaf=lambda x: isinstance(x, GroupValues))


def regroup_like(tree, like):
    """``tree`` (``expand_groups(like)``'s structure) with a `GroupValues`
    again wherever ``like`` holds one: in ``like``'s groups where the
    numbers fit them (one value per group), else grouped by its own values
    (a file's multipliers that group the leaves otherwise)."""
    mark_leaves = jax.tree.leaves(like, is_leaf=lambda x: isinstance(x, GroupValues))  # one per expanded leaf
    leaves, treedef = jax.tree.flatten(tree)
    if len(mark_leaves) != len(leaves):
        raise ValueError("regroup_like: the tree is not the expanded form of like.")
    return treedef.unflatten([_placed_like(fitted(x, m), x) if isinstance(m, GroupValues) else x
                              for x, m in zip(leaves, mark_leaves)])


def fitted(vector, template: GroupValues) -> GroupValues:
    """``vector`` (one number per leaf) in ``template``'s groups where it holds one
    number per group, else grouped by its own values."""
    host = np.asarray(vector)
    groups = np.asarray(template.groups, np.intp)
    if host.shape != groups.shape:
        return group_by_value(host, host.dtype)
    values = np.zeros(np.shape(template.values), host.dtype)
    values[groups] = host  # one of each group's leaves: they fit when every leaf then reads its own
    if np.array_equal(values[groups], host):
        return GroupValues(jnp.asarray(values), template.groups)
    return group_by_value(host, host.dtype)


def _placed_like(grouped: GroupValues, vector) -> GroupValues:
    """``grouped`` with its values on ``vector``'s devices (a replicated sharding), as a loaded leaf sits."""
    sharding = getattr(vector, "sharding", None)
    if sharding is not None and getattr(sharding, "is_fully_replicated", False):
        return GroupValues(jax.device_put(grouped.values, sharding), grouped.groups)
    return grouped


def shared_groups(*fields) -> tuple[int, ...] | None:
    """The groups every one of ``fields`` holds (all `GroupValues` over the
    same groups), else None: the per-group values of one partition can be
    computed on together, one entry per group."""
    if not fields or not all(isinstance(f, GroupValues) for f in fields):
        return None
    groups = fields[0].groups
    return groups if all(f.groups == groups for f in fields) else None


def by_group(leaves: Sequence, groups: Sequence[int]) -> list | None:
    """One object per group (index order) where the ``leaves`` of each group
    are one object (a rate computed once per group), else None."""
    out: dict[int, Any] = {}
    for x, g in zip(leaves, groups):
        if out.setdefault(g, x) is not x:
            return None
    return [out[g] for g in range(max(groups, default=-1) + 1)] if len(out) == max(groups, default=-1) + 1 \
        else None


def stepped_in_groups(state_cls, node) -> list[str]:
    """The fields of ``node`` that its class says a step rewrites
    (``stepped_fields``: Paddle's beta powers) and that it holds per group:
    a masked step must first write them out per leaf (its leaves part ways)."""
    return [f for f in getattr(state_cls, "stepped_fields", ()) if isinstance(getattr(node, f, None), GroupValues)]


def partition(*per_leaf, dtypes) -> tuple[GroupValues, ...]:
    """Each of the per-leaf host arrays ``per_leaf`` as `GroupValues` over one
    shared partition: leaves equal in every array share a group (numbered
    from leaf 0 on), so all of them can be computed on per group together."""
    rows = list(zip(*(np.asarray(a).tolist() for a in per_leaf)))
    ids: dict = {}
    groups = [ids.setdefault(r, len(ids)) for r in rows]
    firsts = _firsts(groups, len(ids))
    return tuple(GroupValues(jnp.asarray(np.asarray(a, d)[np.asarray(firsts, np.intp)], d), groups)
                 for a, d in zip(per_leaf, dtypes))


class PerGroup(NamedTuple):
    """Per-leaf fields, rate and mask of one step in the index space it runs
    in: ``values`` (each field as a vector over the groups, or over the
    leaves), ``lr`` and ``on`` (a scalar, or a vector over the same index),
    ``at`` (a tree shaped like the updates: each leaf's index into those
    vectors), ``groups`` (the partition, None when per leaf)."""
    values: dict
    lr: Any
    on: Any
    at: Any
    groups: tuple | None
    mask_parts_groups: bool  # a mask that parts a group of a field held per group (see `stepped`)


def per_group(fields: dict, lr, mask, updates, *, mask_dtype: Any = jnp.bool_) -> PerGroup:
    """``fields`` (per-leaf state fields) with the step's per-leaf ``lr`` and
    ``mask`` trees (``mask_dtype``: another per-leaf value, a count, in that
    dtype), per group where every field is `GroupValues` over one
    partition and the rate and the mask are one object per group (a rate
    computed once per group), else per leaf: the vector ops of a step on
    them then cost a slice per group, not per leaf."""
    treedef = jax.tree.structure(updates)
    groups = shared_groups(*fields.values())

    def squash(tree, dtype):
        leaves = treedef.flatten_up_to(tree)
        if not leaves:  # no parameters: vectors of no entries
            return jnp.zeros((0,), dtype)
        if all(x is leaves[0] for x in leaves):
            return jnp.asarray(leaves[0], dtype).reshape(())
        picks = by_group(leaves, groups) if groups is not None else None
        return None if picks is None else jnp.stack([jnp.asarray(x, dtype).reshape(()) for x in picks])

    if groups is not None:
        l, on = squash(lr, jnp.float32), squash(mask, mask_dtype)
        if l is not None and on is not None:
            return PerGroup({k: f.values for k, f in fields.items()}, l, on, treedef.unflatten(list(groups)), groups,
                            False)
    vals = {k: expand_groups(f) for k, f in fields.items()}
    l = squash(lr, jnp.float32)
    if l is None or (l.ndim and treedef.num_leaves):
        l = jnp.stack([jnp.asarray(x, jnp.float32).reshape(()) for x in treedef.flatten_up_to(lr)])
    on = squash(mask, mask_dtype)
    if on is None or (on.ndim and treedef.num_leaves):
        on = jnp.stack([jnp.asarray(x, mask_dtype).reshape(()) for x in treedef.flatten_up_to(mask)])
    mask_leaves = treedef.flatten_up_to(mask)
    parts = any(isinstance(f, GroupValues) and by_group(mask_leaves, f.groups) is None for f in fields.values())
    return PerGroup(vals, l, on, treedef.unflatten(list(range(treedef.num_leaves))), None, parts)


def read_per_leaf(vector, run: PerGroup):
    """A tree shaped like the updates whose leaf ``i`` is its entry of
    ``vector`` (in ``run``'s index space): one slice per entry, shared."""
    picked: dict[int, Any] = {}

    def at(i):
        if i not in picked:
            picked[i] = vector[i]
        return picked[i]
    return jax.tree.map(at, run.at)


def stepped(old, new, run: PerGroup):
    """A field a step rewrites (``new``: a vector in ``run``'s index space)
    in the form ``old`` had: per group, or per leaf."""
    if not isinstance(old, GroupValues):
        return new
    if run.groups is not None:
        return GroupValues(new, run.groups)
    return in_groups(old, new, run.mask_parts_groups)  # per leaf this step: a rate that differs inside a group


def in_groups(old: GroupValues, per_leaf: Sequence, mask_parts_groups: bool) -> GroupValues:
    """The new per-leaf values (a vector or a list of scalars) of a field that
    a step rewrites and ``old`` holds per group, in ``old``'s groups: each
    group's first leaf's. A group's leaves move alike (one beta, one mask);
    a mask that parts a group is refused (`per_leaf_counts` writes the
    field out per leaf before such a step)."""
    if mask_parts_groups:
        raise ValueError("a masked step parts a group of leaves whose state is held per group; write it out per "
                         "leaf first (gradxform.per_leaf_counts(state, params)).")
    firsts = _firsts(old.groups, len(old.values))
    if not firsts:
        return old
    return GroupValues(jnp.stack([jnp.asarray(per_leaf[i], old.values.dtype).reshape(()) for i in firsts]), old.groups)


def _firsts(groups: Sequence[int], n_groups: int) -> list[int]:
    """Each group's first leaf."""
    return [list(groups).index(g) for g in range(n_groups)]

