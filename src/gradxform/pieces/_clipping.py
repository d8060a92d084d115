"""Clipping: elementwise (MXNet ``clip_gradient``) and by global norm."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from .._base import GradientTransformation, identity, transformation
from .._elementwise import fusable
from .._hyper import hyper_scalar
from .._ranges import check_hyper
from ._scaling import HyperState
from ._segments import whole_buffers

__all__ = ["clip_by_value", "clip_by_global_norm", "global_norm"]
PUBLIC = ("clip_by_global_norm", "clip_by_value", "global_norm",)  # what gradxform.pieces re-exports


def clip_by_value(clip_gradient: float | None, *, name: str = "clip_gradient") -> GradientTransformation:
    """``u -> clip(u, -clip_gradient, clip_gradient)``.

    ``None`` (or 0, which MXNet also treats as "no clip") gives `identity`, a
    structural choice fixed at construction; a positive value is a
    hyperparameter in the state.
    """
    if clip_gradient is None or clip_gradient == 0:
        return identity()
    check_hyper("clip_by_value", "clip_gradient", clip_gradient, arg=name)

    def init(params):
        del params
        return HyperState({name: hyper_scalar(clip_gradient)})

    @fusable
    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        c = state.hyper[name]
        return jax.tree.map(lambda u: jnp.clip(u, -c.astype(u.dtype), c.astype(u.dtype)), updates), state

    return transformation(init, update)


def global_norm(tree, extra_args: dict | None = None) -> jax.Array:
    """The L2 norm of all leaves together, accumulated in float32 (under a
    sharded step, given its ``extra_args``: of the whole buffers)."""
    leaves = whole_buffers(tree, extra_args) if extra_args else jax.tree.leaves(tree)
    if not leaves:
        return jnp.zeros((), jnp.float32)
    return jnp.sqrt(sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in leaves))


def clip_by_global_norm(max_norm: float, *, name: str = "max_norm") -> GradientTransformation:
    """Scales all updates by ``min(1, max_norm / (norm + 1e-8))``, ``norm`` the
    global L2 norm (as ``mxnet.gluon.utils.clip_global_norm``)."""
    check_hyper("clip_by_global_norm", "max_norm", max_norm, arg=name)

    def init(params):
        del params
        return HyperState({name: hyper_scalar(max_norm)})

    @fusable(bit_exact=False, reductions=("whole",))  # fused: the norm of the buffers, summed in another order
    def update(updates, state, params=None, **extra_args):
        del params
        norm = global_norm(updates, extra_args)
        factor = jnp.minimum(1.0, state.hyper[name] / (norm + 1e-8))
        return jax.tree.map(lambda u: u * factor.astype(u.dtype), updates), state

    return transformation(init, update)
