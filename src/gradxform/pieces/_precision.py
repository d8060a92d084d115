"""Float32 master weights for float16/bfloat16 parameters (MXNet ``multi_precision``)."""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._base import GradientTransformation, run_inner, transformation
from .._spec import Fusion, declare
from .._types import ParamTree, InnerState
from .._domains import FINITE

__all__ = ["MasterWeightsState", "with_master_weights", "is_low_precision"]
PUBLIC = ("with_master_weights",)  # what gradxform.pieces re-exports

LOW_PRECISION = (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16))
FP16_WARNING = ("Accumulating with float16 in optimizer can lead to poor accuracy or slow "
                "convergence. Consider using multi_precision=True option of the optimizer")


def is_low_precision(x) -> bool:
    return jnp.asarray(x).dtype in LOW_PRECISION


class MasterWeightsState(NamedTuple):
    """``master``: a float32 copy of each low-precision leaf (an empty array for
    the others); ``inner``: the wrapped optimizer's state, built on the float32
    master values."""
    master: ParamTree
    inner: InnerState
    domains = {"master": FINITE}


def with_master_weights(inner: GradientTransformation) -> GradientTransformation:
    """Runs ``inner`` in float32 on master copies of low-precision parameters.

    For a float16/bfloat16 leaf: the gradient is cast to float32, ``inner``
    updates the float32 master copy, and the emitted update is
    ``cast(master) - w`` computed in float32, so `apply_updates` lands the
    parameter exactly on the cast of the master copy (the difference of two
    float16 values within a factor 2^13 of each other is exact in float32).
    Other leaves pass through ``inner`` unchanged.
    """

    def init(params):
        master = jax.tree.map(
            lambda p: p.astype(jnp.float32) if is_low_precision(p) else jnp.zeros((0,), jnp.float32), params)
        return MasterWeightsState(master, inner.init(_full(params, master)))

    @declare(inner=(inner,), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        if params is None:
            raise ValueError("with_master_weights: needs params; call update(grads, state, params).")
        full = _full(params, state.master)
        grads = jax.tree.map(lambda g, p: g.astype(jnp.float32) if is_low_precision(p) else g,
                             updates, params)
        inner_updates, inner_state = run_inner(inner, grads, state.inner, full, **extra_args)
        new_master = jax.tree.map(lambda p, m, u: (m + u) if is_low_precision(p) else m,
                                  params, full, inner_updates)
        out = jax.tree.map(
            lambda p, m, u: (m.astype(p.dtype).astype(jnp.float32) - p.astype(jnp.float32))
            if is_low_precision(p) else u, params, new_master, inner_updates)
        master = jax.tree.map(lambda p, m, old: m if is_low_precision(p) else old,
                              params, new_master, state.master)
        return out, MasterWeightsState(master, inner_state)

    return transformation(init, update)


def _full(params, master):
    return jax.tree.map(lambda p, m: m if is_low_precision(p) else p, params, master)
