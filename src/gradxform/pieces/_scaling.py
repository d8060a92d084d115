"""Rescaling gradients by a hyperparameter or a constant."""
from __future__ import annotations

from typing import NamedTuple

import jax

from .._base import GradientTransformation, context_value, transformation
from .._elementwise import fusable
from .._spec import Fusion, LocalKey, declare
from .._hyper import hyper_scalar
from .._ranges import check_hyper
from .._types import Hyper

__all__ = ["HyperState", "rescale", "scale", "unscale", "divided_by"]
PUBLIC = ("rescale", "scale", "unscale",)  # what gradxform.pieces re-exports


class HyperState(NamedTuple):
    """State of a piece that holds only hyperparameters."""
    hyper: Hyper


def rescale(rescale_grad: float = 1.0, *, name: str = "rescale_grad") -> GradientTransformation:
    """``u -> rescale_grad * u`` (MXNet ``rescale_grad``, e.g. ``1/batch_size``).

    The factor is a hyperparameter named ``name`` in the state, so the Trainer
    (or `set_hyper`) changes it between steps without a recompile.
    """
    check_hyper("rescale", "rescale_grad", rescale_grad, arg=name)

    def init(params):
        del params
        return HyperState({name: hyper_scalar(rescale_grad)})

    @fusable
    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        f = state.hyper[name]
        return jax.tree.map(lambda u: u * f.astype(u.dtype), updates), state

    return transformation(init, update)


def unscale(loss_scale: float = 1.0, *, name: str = "loss_scale") -> GradientTransformation:
    """``u -> u / loss_scale`` (MindSpore's static ``loss_scale`` division)."""
    check_hyper("unscale", "loss_scale", loss_scale, arg=name)

    def init(params):
        del params
        return HyperState({name: hyper_scalar(loss_scale)})

    @fusable
    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        f = state.hyper[name]
        return jax.tree.map(lambda u: u / f.astype(u.dtype), updates), state

    return transformation(init, update)


def scale(factor: float) -> GradientTransformation:
    """``u -> factor * u`` with a fixed constant (a sign flip, a 1/2); for a
    factor a user may want to change, use `rescale`."""

    def init(params):
        del params
        return ()

    @fusable
    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        return jax.tree.map(lambda u: u * jax.numpy.asarray(factor, u.dtype), updates), state

    return transformation(init, update)


def divided_by(key: LocalKey) -> GradientTransformation:
    """``u -> -(u / d)``, with ``d`` the per-leaf divisor an earlier piece of
    the chain hands on under ``key``: the last operation of a kernel that
    divides last, ``w -= (lr_t * m) / (sqrt(v) + eps)`` (MXNet's and
    MindSpore's Adam; the divisor from their moments piece). No state (the
    `scale_by_lr` slot)."""

    def init(params):
        del params
        return ()

    @declare(who=f"divided_by({key.name})", needs=(key,), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        del params
        divisor = context_value(extra_args, key, update)
        return jax.tree.map(lambda u, d: -(u / d), updates, divisor), state

    return transformation(init, update)
