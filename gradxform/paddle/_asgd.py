"""Paddle (3.x) ASGD (``paddle/optimizer/asgd.py`` -> the ``asgd_`` kernel),
and the gradient clips and regularizers Paddle applies before it.

Paddle's ``Optimizer._apply_optimize`` runs ``grad_clip`` first, then adds
the regularization term to the clipped gradient, then the rule.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._base import GradientTransformation, chain, context_value, identity, transformation, uses_context
from .._elementwise import fusable, not_fusable
from .._hyper import hyper_scalar
from .._optimizer import finalize
from ..pieces import clip_by_value, scale_by_lr, track_step
from ..pieces._scaling import HyperState
from .._ranges import check_hyper
from ..schedules._common import DynamicLR, as_schedule, check_number
from ._plateau import ReduceOnPlateau

__all__ = ["asgd", "clip_grad_by_global_norm", "clip_grad_by_norm", "clip_grad_by_value", "l1_decay",
           "l2_decay", "ASGDState"]


def clip_grad_by_global_norm(clip_norm: float) -> GradientTransformation:
    """Paddle ``ClipGradByGlobalNorm``: ``g *= clip_norm / max(global_norm, clip_norm)``
    (hyperparameter ``clip_norm``; the norm accumulated in float32)."""
    check_number("paddle.clip_grad_by_global_norm", "clip_norm", clip_norm)
    check_hyper("paddle.clip_grad_by_global_norm", "clip_norm", clip_norm)

    def init(params):
        del params
        return HyperState({"clip_norm": hyper_scalar(clip_norm)})

    @fusable(bit_exact=False)  # fused: the norm of the buffers, summed in another order
    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        leaves = jax.tree.leaves(updates)
        norm = jnp.sqrt(sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in leaves)) if leaves else 0.0
        c = state.hyper["clip_norm"]
        f = c / jnp.maximum(norm, c)
        return jax.tree.map(lambda g: g * f.astype(g.dtype), updates), state

    return transformation(init, update)


def clip_grad_by_norm(clip_norm: float) -> GradientTransformation:
    """Paddle ``ClipGradByNorm``: each tensor ``g *= clip_norm / max(|g|, clip_norm)``."""
    check_number("paddle.clip_grad_by_norm", "clip_norm", clip_norm)
    check_hyper("paddle.clip_grad_by_norm", "clip_norm", clip_norm)

    def init(params):
        del params
        return HyperState({"clip_norm": hyper_scalar(clip_norm)})

    @not_fusable("paddle.clip_grad_by_norm needs a norm per parameter")
    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        c = state.hyper["clip_norm"]

        def one(g):
            n = jnp.sqrt(jnp.sum(jnp.square(g.astype(jnp.float32))))
            return g * (c / jnp.maximum(n, c)).astype(g.dtype)

        return jax.tree.map(one, updates), state

    return transformation(init, update)


def clip_grad_by_value(max: float, min: float | None = None) -> GradientTransformation:  # noqa: A002 (Paddle's names)
    """Paddle ``ClipGradByValue``: ``clip(g, min, max)``; ``min`` defaults to ``-max``."""
    check_number("paddle.clip_grad_by_value", "max", max)
    lo = -float(max) if min is None else float(min)
    if lo > max:
        raise ValueError(f"paddle.clip_grad_by_value(min=...): min must be <= max; got min={lo}, max={max}.")
    if min is None:
        return clip_by_value(float(max), name="clip_max")

    def init(params):
        del params
        return HyperState({"clip_min": hyper_scalar(lo), "clip_max": hyper_scalar(max)})

    @fusable
    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        a, b = state.hyper["clip_min"], state.hyper["clip_max"]
        return jax.tree.map(lambda g: jnp.clip(g, a.astype(g.dtype), b.astype(g.dtype)), updates), state

    return transformation(init, update)


def _regularizer(coeff: float, kind: str) -> GradientTransformation:
    name = f"{kind}_coeff"
    check_number(f"paddle.{kind}_decay", "coeff", coeff)
    check_hyper(f"paddle.{kind}_decay", name, coeff, arg="coeff")

    def init(params):
        del params
        return HyperState({name: hyper_scalar(coeff)})

    @fusable
    def update(updates, state, params=None, **extra_args):
        del extra_args
        if params is None:
            raise ValueError(f"paddle.{kind}_decay: needs params; call update(grads, state, params).")
        c = state.hyper[name]
        term = (lambda w: jnp.sign(w)) if kind == "l1" else (lambda w: w)
        return jax.tree.map(lambda g, w: g + c.astype(g.dtype) * term(w).astype(g.dtype), updates, params), state

    return transformation(init, update)


def l2_decay(coeff: float = 0.0) -> GradientTransformation:
    """Paddle ``L2Decay``: ``g += coeff * w`` (a float ``weight_decay`` means this)."""
    return _regularizer(coeff, "l2")


def l1_decay(coeff: float = 0.0) -> GradientTransformation:
    """Paddle ``L1Decay``: ``g += coeff * sign(w)``."""
    return _regularizer(coeff, "l1")


class ASGDState(NamedTuple):
    """``d``: the running sum of the stored gradients; ``y``: the last
    ``batch_num`` gradients, ``(batch_num, *shape)`` per parameter."""
    hyper: dict
    d: object
    y: object


def _ring_not_fusable(cells):
    # For gradxform.fused: the ring would have to be stored as (batch_num, group
    # size) buffers, which is what the chain's own init on flat buffers expects; the
    # layout only has params-shaped ones (batch_num == 1 included: (1, *shape) is not
    # params-shaped).
    n = cells.get("batch_num")
    return (f"paddle.asgd keeps its last batch_num={n} gradients per parameter as a "
            f"({n}, *shape) ring, which the flat layout (params-shaped buffers only) cannot hold")


def _asgd_average(batch_num: int) -> GradientTransformation:
    """Paddle's ``asgd_`` kernel, with ``m`` the parameter's update count ``t``::

        i = (t - 1) % batch_num;  d = d - y[i] + g;  y[i] = g;  emits d / min(t, batch_num)
    """

    def init(params):
        return ASGDState({}, jax.tree.map(jnp.zeros_like, params),
                         jax.tree.map(lambda p: jnp.zeros((batch_num,) + jnp.shape(p), jnp.result_type(p)), params))

    @not_fusable(_ring_not_fusable)
    @uses_context("paddle.asgd", needs=("count",))
    def update(updates, state, params=None, **extra_args):
        del params
        count = context_value(extra_args, "count", "paddle.asgd")

        def one(g, d, y, t):
            i = (t - 1) % batch_num
            d2 = d - y[i] + g
            n = jnp.minimum(t, batch_num).astype(g.dtype)
            return d2 / n, d2, y.at[i].set(g)

        leaves, treedef = jax.tree.flatten(updates)
        f = treedef.flatten_up_to
        res = [one(*a) for a in zip(leaves, f(state.d), f(state.y), f(count))]
        col = lambda k: treedef.unflatten([r[k] for r in res])  # noqa: E731
        return col(0), ASGDState(state.hyper, col(1), col(2))

    return transformation(init, update)


def asgd(learning_rate=0.001, batch_num=1, weight_decay=None, grad_clip=None, multi_precision=False, *,
         skip_nonfinite=False) -> GradientTransformation:
    """Paddle ASGD (``paddle.optimizer.ASGD``), stochastic average gradient::

        g = grad_clip(g);   g = g + regularization(w)     (Paddle's order)
        i = m % batch_num;  d = d - y[i] + g;  y[i] = g;  m += 1
        w -= lr * d / min(m, batch_num)

    The seed prints ``x -= lr (d / min(m+1, n) + lambda x)``; Paddle adds the
    decay to the gradient before the rule (so it also enters ``d``), as here.

    Args:
      learning_rate: a number >= 0, a list / 1-D array, a
        `gradxform.schedules` schedule (Paddle's ``paddle.optimizer.lr`` ones,
        indexed by updates completed, as Paddle's ``scheduler.step()`` after
        each ``optimizer.step()``), or a `gradxform.schedules.ReduceOnPlateau`
        (then ``update`` needs ``loss=``).
      batch_num: int > 0, the number of stored gradients (static).
      weight_decay: None, a float (L2 coefficient), or `l1_decay` / `l2_decay`.
      grad_clip: None, or `clip_grad_by_global_norm` / `clip_grad_by_norm` /
        `clip_grad_by_value` (any gradxform transformation).
      multi_precision: float32 master weights (and state) for float16/bfloat16
        parameters; without it such parameters warn, as Paddle does.
      skip_nonfinite: a step with a NaN/Inf gradient changes nothing.
    """
    owner = "paddle.asgd"
    if learning_rate is None:
        raise ValueError(f"{owner}(learning_rate=None): learning_rate should not be None.")
    if batch_num is None:
        raise ValueError(f"{owner}(batch_num=None): batch_num should not be None.")
    check_number(owner, "batch_num", batch_num, low=0, low_open=True, integer=True)
    plateau = None
    if isinstance(learning_rate, ReduceOnPlateau):
        plateau, base, sched = learning_rate, learning_rate.base_lr, None
    else:
        base, sched = as_schedule(owner, learning_rate, DynamicLR)
    if weight_decay is None:
        reg = identity()
    elif isinstance(weight_decay, (int, float)) and not isinstance(weight_decay, bool):
        check_hyper(owner, "weight_decay", weight_decay)
        reg = l2_decay(float(weight_decay))
    elif isinstance(weight_decay, tuple) and hasattr(weight_decay, "update"):
        reg = weight_decay
    else:
        raise TypeError(f"{owner}(weight_decay=...): must be None, a float, or paddle.l1_decay/l2_decay; "
                        f"got {weight_decay!r}.")
    if grad_clip is not None and not (isinstance(grad_clip, tuple) and hasattr(grad_clip, "update")):
        raise TypeError(f"{owner}(grad_clip=...): must be None or a clip such as paddle.clip_grad_by_global_norm; "
                        f"got {grad_clip!r}.")
    if not isinstance(multi_precision, bool):
        raise TypeError(f"{owner}(multi_precision=...): must be a bool; got {multi_precision!r}.")
    step = track_step(base, schedule=sched)
    tx = chain(step, plateau.piece() if plateau is not None else identity(),
               grad_clip if grad_clip is not None else identity(), reg, _asgd_average(batch_num), scale_by_lr())
    return finalize(tx, multi_precision=multi_precision, skip_nonfinite=skip_nonfinite, owner=owner)
