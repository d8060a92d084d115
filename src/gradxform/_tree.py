"""Parameter names and per-leaf selection of state (choosing parameters by name: `gradxform._selectors`).

A parameter's name is its pytree key path joined by ``/``: dict keys and
attribute names as they are, list and tuple positions as their index, e.g.
``encoder/dense/kernel`` or ``0``. Leaf order is JAX's flatten order (dict
keys sorted level by level). Gluon's Trainer numbers parameters by their
sorted full names instead (``dense10_weight`` before ``dense1_weight``), so a
Gluon file's index ``i`` is found by name, not by leaf position
(`gradxform.migrate._gluon.gluon_order`).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

import numpy as np

from ._group_values import GroupValues, by_group, per_leaf_list, stepped_in_groups
from ._state_paths import get_path, leaf_vector_fields, map_param_trees, map_states

__all__ = ["key_name", "once_per_value", "param_names", "select_tree", "zeros_like_params", "full_like_params",
           "leaf_vector", "leaf_values", "host_leaf_vector", "shared_value"]


def host_leaf_vector(values, dtype) -> jax.Array:
    """One number per parameter leaf (flatten order) as the 1-D array a state's
    ``per_leaf_fields`` hold: one state array however many leaves there are."""
    return jnp.asarray(np.asarray(list(values), dtype).reshape(-1))


def leaf_vector(tree, dtype=None) -> jax.Array:
    """The leaves of ``tree`` (one scalar each, computed in an update) stacked
    into a per-leaf vector (`host_leaf_vector`'s form)."""
    raw = jax.tree.leaves(tree)
    shared = shared_value(tree)
    if shared is not None:  # one value at every leaf (a shared rate): no stack of N
        out = jnp.broadcast_to(jnp.asarray(shared).reshape(()), (len(raw),))
        return out if dtype is None else out.astype(dtype)
    leaves = [jnp.asarray(x).reshape(()) for x in raw]
    if not leaves:
        return jnp.zeros((0,), dtype or jnp.float32)
    out = jnp.stack(leaves)
    return out if dtype is None else out.astype(dtype)


def shared_value(tree):
    """The one value at every leaf of ``tree`` (one object: a shared rate or
    count, as `track_step` publishes it), else None."""
    leaves = jax.tree.leaves(tree)
    return leaves[0] if leaves and all(x is leaves[0] for x in leaves) else None


def leaf_values(vector, like):
    """A tree shaped like ``like`` (the updates) whose leaf ``i`` is
    ``vector[i]``: a per-leaf vector read inside an update, leaf by leaf, or
    `GroupValues` read once per group (the leaves of a group share the read)."""
    treedef = jax.tree.structure(like)
    return treedef.unflatten(per_leaf_list(vector, treedef.num_leaves))


def key_name(key) -> str:
    """One path entry as it appears in a parameter name."""
    for attr in ("key", "name", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def param_names(tree) -> list[str]:
    """Names of the leaves of ``tree`` in flatten order: each leaf's path
    joined by ``/``. A Flax nnx Variable flattens to its array under the
    attribute ``value``; that last step is left out (``l1/bias``, the name nnx
    users see, not ``l1/bias/value``)."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    return ["/".join(key_name(k) for k in _without_variable_value(path)) for path, _ in leaves]


def is_variable(x) -> bool:
    """Whether ``x`` is a Flax nnx Variable (``Param``, ``OptArray``, ...): a pytree
    node around one array, told by its ``get_value`` method (flax is not imported)."""
    return not isinstance(x, (jax.Array, np.ndarray)) and callable(getattr(x, "get_value", None))


def variable_value(x):
    """The array inside an nnx Variable (``nnx.Optimizer`` holds its state so), else ``x``."""
    return x.get_value() if is_variable(x) else x


def without_variables(tree):
    """``tree`` with each nnx Variable replaced by the array it holds, as
    ``nnx.as_pure`` gives it (``nnx.Optimizer`` calls ``init`` on Variables and
    ``update`` on their arrays); any other tree is returned as it is."""
    if not any(map(is_variable, jax.tree.leaves(tree, is_leaf=is_variable))):
        return tree
    return jax.tree.map(variable_value, tree, is_leaf=is_variable)


def _without_variable_value(path):
    last = path[-1] if path else None
    # jax types GetAttrKey as Any, so isinstance does not narrow ``last``
    if isinstance(last, jax.tree_util.GetAttrKey) and last.name == "value" and len(path) > 1:  # pyright: ignore[reportOptionalMemberAccess]
        return path[:-1]
    return path


def once_per_value(fn):
    """``fn`` computed once per distinct tuple of argument objects, for the
    per-leaf values of one update: a shared step count or learning rate is one
    traced scalar at every leaf, so its bias correction (or ``-lr``) is traced
    once, not once per leaf. The arguments are kept alive with the result, so
    an ``id`` is never reused for another value while the cache lives."""
    cache: dict = {}

    def call(*args):
        key = tuple(map(id, args))
        if key not in cache:
            cache[key] = (args, fn(*args))
        return cache[key][1]

    return call


def select_tree(mask, new, old):
    """``new`` where the per-leaf boolean ``mask`` is True, else ``old``.

    ``mask`` has the structure of the parameters. Every subtree of the states
    ``new``/``old`` that has the parameters' structure, and every per-leaf
    vector a state class declares (``per_leaf_fields``), is selected leaf by
    leaf; anything else (scalars, per-optimizer counters) is taken from ``new``.
    """
    mask_def = jax.tree.structure(mask)
    mask_leaves = mask_def.flatten_up_to(mask)
    flags = None

    def pick_vectors(path, node):
        nonlocal flags
        # values held per group that a step does not write (multipliers, group slots): new and
        # old hold the same; those it writes were written out per leaf (`per_leaf_counts`)
        before = get_path(old, path)
        grouped = {}
        for f in stepped_in_groups(type(node), node):
            x = getattr(node, f)
            if not x.groups:  # no leaves (a label of optax.multi_transform that gets none): nothing to select
                continue
            picks = by_group(mask_leaves, x.groups)  # one flag object per group: the mask never parts one
            if picks is None:
                raise ValueError(f"select_tree: {type(node).__name__}.{f} is held per group and this mask parts a "
                                 "group; write it out per leaf first (gradxform.per_leaf_counts).")
            grouped[f] = GroupValues(jnp.where(jnp.stack([jnp.asarray(m, bool).reshape(()) for m in picks]),
                                               x.values, getattr(before, f).values), x.groups)
        fields = [f for f in leaf_vector_fields(node) if getattr(node, f).shape[0] == mask_def.num_leaves
                  and not isinstance(getattr(node, f), GroupValues)]
        if not fields:
            return node._replace(**grouped) if grouped else node
        if flags is None:
            flags = leaf_vector(mask_leaves, bool)
        return node._replace(**grouped, **{f: jnp.where(flags, getattr(node, f), getattr(before, f)) for f in fields})

    new = map_states(pick_vectors, new)

    def pick(n, o):
        nl, ol = mask_def.flatten_up_to(n), mask_def.flatten_up_to(o)
        return mask_def.unflatten([a if isinstance(a, tuple) else jnp.where(m, a, b)  # (): a slot holding nothing
                                   for m, a, b in zip(mask_leaves, nl, ol)])

    return map_param_trees(pick, mask_def, new, old)


def map_unzip(fn, n: int, tree, *rest):
    """``jax.tree.map`` for a ``fn`` returning an ``n``-tuple per leaf; returns
    ``n`` trees shaped like ``tree`` (an optimizer rule's update and its new
    state buffers, computed together leaf by leaf)."""
    out = jax.tree.map(fn, tree, *rest)
    outer = jax.tree.structure(tree)
    if outer.num_leaves == 0:  # an empty tree ({}): transpose cannot tell the n outputs apart
        return tuple(outer.unflatten([]) for _ in range(n))
    return jax.tree.transpose(outer, jax.tree.structure((0,) * n), out)


def distinct_buffers(tree):
    """``tree`` with every array that appears more than once replaced by a
    copy after its first use. An init that reuses one zero for many leaves
    (or one hyperparameter for two fields) gives a state that ``jax.jit(...,
    donate_argnums=...)`` refuses ("donate the same buffer twice")."""
    seen: set[int] = set()

    def own(x):
        if not isinstance(x, jax.Array):
            return x
        if id(x) in seen:
            return jnp.array(x, copy=True)
        seen.add(id(x))
        return x

    return jax.tree.map(own, tree)


def full_like_params(params, value):
    """A tree of ``value`` shaped like ``params``, each leaf with its parameter's
    dtype *and sharding*: state built this way follows a user's own
    `NamedSharding` (FSDP, tensor parallel) under their jit, explicit mesh axes
    included, where ``jnp.full(shape, ...)`` would be replicated on every device."""
    return jax.tree.map(lambda p: jnp.full_like(p, value, dtype=jnp.result_type(p)), params)


def zeros_like_params(params):
    """`full_like_params` with zeros (the moments of every optimizer)."""
    return full_like_params(params, 0)
