"""Parameter names and per-leaf selection of state (choosing parameters by name: `gradxform._selectors`).

A parameter's name is its pytree key path joined by ``/``: dict keys and
attribute names as they are, list and tuple positions as their index, e.g.
``encoder/dense/kernel`` or ``0``. Leaf order is JAX's flatten order (dict
keys sorted), which is also the order in which Gluon's Trainer numbers the
parameters of a dict (it sorts the keys), so leaf ``i`` is MXNet index ``i``.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from ._state_paths import map_param_trees

__all__ = ["key_name", "once_per_value", "param_names", "select_tree", "zeros_like_params", "full_like_params"]


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
    ``new``/``old`` that has the parameters' structure is selected leaf by leaf;
    anything else (scalars, per-optimizer counters) is taken from ``new``.
    """
    mask_def = jax.tree.structure(mask)
    mask_leaves = mask_def.flatten_up_to(mask)

    def pick(n, o):
        nl, ol = mask_def.flatten_up_to(n), mask_def.flatten_up_to(o)
        return mask_def.unflatten([jnp.where(m, a, b) for m, a, b in zip(mask_leaves, nl, ol)])

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
