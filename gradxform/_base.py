"""The optax-compatible protocol, `chain` with a step context, and `apply_updates`.

A gradxform transformation *is* an optax `GradientTransformationExtraArgs`: a
NamedTuple of two pure functions, ``init(params) -> state`` and
``update(updates, state, params=None, **extra_args) -> (updates, state)``.
gradxform pieces therefore go into `optax.chain` and optax pieces go into
`gradxform.chain` unchanged.

What `gradxform.chain` adds is a *step context*: a dict created once per
`update` call and handed to every piece as the extra argument ``gx_context``.
A piece that owns a shared quantity (the step counter and per-parameter
learning rate, the per-parameter weight decay) writes it there, and later
pieces in the same chain read it. This is how one chain keeps exactly one step
counter while several of its pieces need the count (MXNet's Adam needs it for
bias correction, its LBSGD for warmup), and how a framework rule that uses the
learning rate inside its formula (FTRL, FTML) gets the same learning rate the
rest of the chain uses.
"""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from ._elementwise import fusable
from ._tree import distinct_buffers

__all__ = [
    "GradientTransformation",
    "transformation",
    "identity",
    "chain",
    "apply_updates",
    "context_value",
    "CONTEXT_KEY",
]

GradientTransformation = optax.GradientTransformationExtraArgs
CONTEXT_KEY = "gx_context"


def transformation(init: Callable, update: Callable) -> GradientTransformation:
    """Wraps an ``(init, update)`` pair as an optax-compatible transformation."""
    return optax.GradientTransformationExtraArgs(init, update)


class EmptyState(tuple):
    """State of a piece that keeps nothing (an empty pytree)."""

    __slots__ = ()

    def __new__(cls):
        return super().__new__(cls, ())


jax.tree_util.register_pytree_node(EmptyState, lambda s: ((), None), lambda _, __: EmptyState())


def identity() -> GradientTransformation:
    """A piece that passes updates through; fills a disabled slot of a chain so
    that the state's structure does not depend on options."""

    def init(params):
        del params
        return EmptyState()

    @fusable
    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        return updates, state

    return transformation(init, update)


def chain(*pieces: optax.GradientTransformation) -> GradientTransformation:
    """Applies pieces in order; the state is the tuple of their states.

    Unlike `optax.chain`, the pieces share one step context (see the module
    docstring): a chain nested in a chain shares its parent's context.
    Extra keyword arguments given to `update` reach every piece that accepts
    extra arguments, as in optax.
    """
    pieces = tuple(optax.with_extra_args_support(p) for p in pieces)

    def init(params):
        # pieces may hand out one cached array twice (a zero, a hyperparameter):
        # copies keep the state donatable
        return distinct_buffers(tuple(p.init(params) for p in pieces))

    @fusable
    def update(updates, state, params=None, **extra_args):
        if not isinstance(state, tuple) or len(state) != len(pieces):
            raise ValueError(
                f"chain.update: expected a state of {len(pieces)} pieces (from this "
                f"chain's init), got {type(state).__name__} of length "
                f"{len(state) if isinstance(state, tuple) else '?'}; was the state "
                "made by another optimizer?")
        if CONTEXT_KEY not in extra_args:
            extra_args = {**extra_args, CONTEXT_KEY: {}}
        new_state = []
        for piece, s in zip(pieces, state):
            updates, s = piece.update(updates, s, params, **extra_args)
            new_state.append(s)
        return updates, tuple(new_state)

    return transformation(init, update)


def context_value(extra_args: dict, key: str, who: str) -> Any:
    """Reads ``key`` from the step context, with an error that says which piece
    has to come earlier in the chain."""
    ctx = extra_args.get(CONTEXT_KEY)
    if ctx is None or key not in ctx:
        provider = {"lr": "track_step", "count": "track_step", "num_update": "track_step",
                    "wd": "add_decayed_weights or provide_weight_decay"}.get(key, "a piece")
        raise ValueError(
            f"{who} needs '{key}' from {provider} earlier in the same gradxform.chain; "
            "put that piece before it (optax.chain does not carry the step context).")
    return ctx[key]


def apply_updates(params, updates):
    """Returns ``params + updates`` leaf by leaf, computed in the wider of the
    two dtypes and cast back to the parameter's dtype.

    With master weights (``multi_precision=True``) the updates of a float16
    leaf are float32, so the addition happens in float32 and the result is the
    cast of the float32 master copy. Leaves whose update is None are kept.
    """
    def add(p, u):
        if u is None:
            return p
        p = jnp.asarray(p)
        return (p.astype(jnp.result_type(p, u)) + u).astype(p.dtype)

    return jax.tree.map(add, params, updates, is_leaf=lambda x: x is None)
