"""Hyperparameters as state: read and change them between steps without a recompile.

Every piece keeps its numeric hyperparameters in a ``hyper`` dict field of its
state, as float32 scalars whatever the parameter dtype (a bfloat16 model keeps
``beta2=0.999`` as 0.999, not 1.0). Changing one with `set_hyper` swaps an
array of the same shape and dtype, so a jitted step never retraces. Values
are checked here, on the host, never inside the step.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ._ranges import HyperName, Range, check_value, declared_range, owner_of, register_range

__all__ = [
    "hyper_scalar", "hyper_residual", "get_hyper", "set_hyper", "hyper_names",
    "get_learning_rate", "set_learning_rate", "check_range", "tag_owner",
]

HYPER_FIELDS = ("hyper", "hyperparams")  # ours, and optax.inject_hyperparams'
RESIDUAL_FIELD = "hyper_lo"  # optional float32 residuals of some hyperparameters
READ_ONLY = ("scheduled", "current_lr")


def hyper_scalar(value) -> jax.Array:
    return jnp.asarray(value, dtype=jnp.float32)


def hyper_residual(value) -> jax.Array:
    """``value - float32(value)`` as float32: with the float32 hyperparameter it
    carries about float64 precision, for the few rules that MXNet evaluates in
    float64 on the host (``1 - beta2**t`` loses 1e-5 relative in float32)."""
    v = np.float64(value)
    return jnp.asarray(np.float32(v - np.float64(np.float32(v))), dtype=jnp.float32)


def check_range(owner: str, name: str, value, *, low=None, high=None, low_open=False,
                high_open=False, allow_none=False) -> None:
    """Raises a ValueError that names the argument, the allowed range and the
    value, judged as the float32 it is stored as (`gradxform._ranges.check_value`)."""
    check_value(owner, name, value, Range(low, high, low_open, high_open), allow_none=allow_none)


def register_check(name: str, **range_kwargs) -> None:
    """Declares the generic range of hyperparameter ``name`` (`gradxform._ranges`)."""
    register_range(name, Range(**range_kwargs))


def _walk(state, visit):
    """Calls visit(hyper_dict, path) for every hyperparameter dict in ``state``."""
    def go(node, path):
        if isinstance(node, tuple) and hasattr(node, "_fields"):
            for f in node._fields:
                child = getattr(node, f)
                if f in HYPER_FIELDS and isinstance(child, dict):
                    visit(child, path + (f,))
                else:
                    go(child, path + (f,))
        elif isinstance(node, (tuple, list)):
            for i, c in enumerate(node):
                go(c, path + (i,))
        elif isinstance(node, dict):
            for k, c in node.items():
                go(c, path + (k,))
    go(state, ())


def hyper_names(state) -> list[str]:
    """The names of every hyperparameter held in ``state``."""
    names: list[str] = []
    _walk(state, lambda d, _: names.extend(str(k) for k in d if k not in names))
    return names


def get_hyper(state, name: str):
    """The current value of hyperparameter ``name`` in ``state`` (a float32 array).

    Raises KeyError listing the known names when the state holds no such value.
    """
    found = []
    _walk(state, lambda d, _: found.append(d[name]) if name in d else None)
    if not found:
        raise KeyError(f"get_hyper: no hyperparameter {name!r} in this state; "
                       f"it holds {hyper_names(state)}.")
    return found[0]


def set_hyper(state, **values):
    """Returns ``state`` with the named hyperparameters replaced (every piece that
    holds one of these names gets the new value). Values are range-checked
    here; the jitted step does not retrace, because shapes and dtypes stay."""
    known = hyper_names(state)
    owners: dict[str, list] = {}   # name -> the owner of every slot holding it
    _walk(state, lambda d, _: [owners.setdefault(k, []).append(owner_of(k))
                               for k in d if owner_of(k) not in owners.get(k, ())])
    for name, value in values.items():
        if name in READ_ONLY:
            raise KeyError(f"set_hyper: {name!r} is derived by the optimizer and cannot be set.")
        if name not in known:
            raise KeyError(f"set_hyper: no hyperparameter {name!r} in this state; "
                           f"it holds {known}.")
        if isinstance(value, (jax.Array, np.ndarray)) and np.ndim(value) != 0:
            raise ValueError(f"set_hyper({name}=...): expected a scalar; got shape {np.shape(value)}.")
        if not isinstance(value, jax.core.Tracer):
            for owner in owners[name]:
                rng = declared_range(owner, name) or Range()  # undeclared (optax): finite
                check_value("set_hyper", name, value, rng,
                            suffix=f" (the range of {owner})" if owner else "")

    def rebuild(node):
        if isinstance(node, tuple) and hasattr(node, "_fields"):
            kids = {}
            for f in node._fields:
                child = getattr(node, f)
                if f in HYPER_FIELDS and isinstance(child, dict):
                    child = {k: (jnp.asarray(values[k], dtype=jnp.asarray(v).dtype).reshape(jnp.shape(v))
                                 if k in values else v) for k, v in child.items()}
                elif f == RESIDUAL_FIELD and isinstance(child, dict):
                    child = {k: (hyper_residual(values[k]) if k in values else v) for k, v in child.items()}
                else:
                    child = rebuild(child)
                kids[f] = child
            return type(node)(**kids)
        if isinstance(node, (tuple, list)) and not hasattr(node, "shape"):
            kids = [rebuild(c) for c in node]
            return type(node)(kids) if len(node) else node
        if isinstance(node, dict):
            return type(node)({k: rebuild(c) for k, c in node.items()})
        return node

    return rebuild(state)


def tag_owner(state, owner: str):
    """Returns ``state`` with the keys of its ``hyper`` dicts marked as made by
    ``owner`` (`gradxform._ranges.HyperName`), so that `set_hyper` checks them
    against ``owner``'s declared ranges. Keys that already have an owner (an
    optimizer wrapped by another) keep it. Called by `gradxform._optimizer.finalize`."""
    def rebuild(node):
        if isinstance(node, tuple) and hasattr(node, "_fields"):
            kids = {}
            for f in node._fields:
                child = getattr(node, f)
                if f in HYPER_FIELDS and isinstance(child, dict):
                    child = {(k if owner_of(k) or not isinstance(k, str) else HyperName(k, owner)): v
                             for k, v in child.items()}
                else:
                    child = rebuild(child)
                kids[f] = child
            return type(node)(**kids)
        if isinstance(node, (tuple, list)) and not hasattr(node, "shape"):
            kids = [rebuild(c) for c in node]
            return type(node)(kids) if len(node) else node
        if isinstance(node, dict):
            return type(node)({k: rebuild(c) for k, c in node.items()})
        return node

    return rebuild(state)


def _scheduled(state) -> bool:
    flags = []
    _walk(state, lambda d, _: flags.append(bool(d["scheduled"])) if "scheduled" in d else None)
    return any(flags)


def get_learning_rate(state) -> float:
    """The learning rate the optimizer uses now, schedule included.

    Without a schedule this is the ``learning_rate`` hyperparameter; with one it
    is the schedule's value at the current update count (MXNet's
    ``optimizer.learning_rate``). Per-parameter ``lr_mult`` is not applied.
    """
    if _scheduled(state):
        return float(get_hyper(state, "current_lr"))
    return float(get_hyper(state, "learning_rate"))


def set_learning_rate(state, learning_rate: float):
    """Returns ``state`` with a new base learning rate (no recompile).

    As in MXNet, this is refused when the learning rate comes from a schedule.
    """
    if _scheduled(state):
        raise UserWarning("LRScheduler of the optimizer has already been defined. Note that "
                          "set_learning_rate can mutate the value of the learning rate of the "
                          "optimizer only when the LRScheduler of the optimizer is undefined.")
    return set_hyper(state, learning_rate=learning_rate)
