"""Paddle (3.x) ASGD (``paddle/optimizer/asgd.py`` -> the ``asgd_`` kernel).

Paddle's ``Optimizer._apply_optimize`` runs ``grad_clip`` first, then adds
the regularization term to the clipped gradient, then the rule
(`gradxform.paddle._common`).
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._registry import Declaration, registered_name
from .._base import GradientTransformation, context_value, transformation
from .._spec import Fusion, declare
from .._tree import zeros_like_params
from ..pieces import scale_by_lr
from ..schedules.internal import check_number
from ._common import parse
from .._types import Hyper, ParamTree
from .._domains import FINITE

__all__ = ["asgd", "ASGDState"]
DECLARED = (  # registered as 'paddle.<name>' by the family's __init__ (gradxform._registry.Declaration)
    Declaration('asgd', classes=('ASGD',), migrates=True),
)



class ASGDState(NamedTuple):
    """``d``: the running sum of the stored gradients; ``y``: the last
    ``batch_num`` gradients, ``(batch_num, *shape)`` per parameter."""
    hyper: Hyper
    d: ParamTree
    y: ParamTree
    domains = {"d": FINITE, "y": FINITE}


def _ring_not_fusable(n: int) -> str:
    # For gradxform.fused: the ring would have to be stored as (batch_num, group
    # size) buffers, which is what the chain's own init on flat buffers expects; the
    # layout only has params-shaped ones (batch_num == 1 included: (1, *shape) is not
    # params-shaped).
    return (f"Paddle ASGD keeps its last batch_num={n} gradients per parameter as a "
            f"({n}, *shape) ring, which the flat layout (params-shaped buffers only) cannot hold")


def _asgd_average(batch_num: int) -> GradientTransformation:
    """Paddle's ``asgd_`` kernel, with ``m`` the parameter's update count ``t``::

        i = (t - 1) % batch_num;  d = d - y[i] + g;  y[i] = g;  emits d / min(t, batch_num)
    """

    def init(params):
        return ASGDState({}, zeros_like_params(params),
                         jax.tree.map(lambda z: jnp.broadcast_to(z[None], (batch_num,) + z.shape), zeros_like_params(params)))

    @declare(needs=("count",), fusion=Fusion(refuse=_ring_not_fusable(batch_num)))
    def update(updates, state, params=None, **extra_args):
        del params
        count = context_value(extra_args, "count", update)

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


def asgd(learning_rate=0.001, batch_num=1, parameters=None, weight_decay=None, grad_clip=None,
         multi_precision=False, name=None, *, skip_nonfinite=False) -> GradientTransformation:
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
        each ``optimizer.step()``), or a `gradxform.schedules.PaddleReduceOnPlateau`
        (then ``update`` needs ``loss=``).
      batch_num: int > 0, the number of stored gradients (static).
      parameters: Paddle's (see `gradxform.paddle._common`).
      weight_decay: None, a float (L2) or `L1Decay` / `L2Decay`.
      grad_clip: a `ClipGradByGlobalNorm` / `ClipGradByNorm` / `ClipGradByValue`.
      multi_precision: float32 master weights (and state) for
        float16/bfloat16 parameters; without it such parameters warn, as
        Paddle does.
      name: Paddle's (unused).
      skip_nonfinite: a step with a NaN/Inf gradient changes nothing.
    """
    owner = registered_name(asgd)
    del name
    if learning_rate is None:
        raise ValueError(f"{owner}(learning_rate=None): learning_rate should not be None.")
    if batch_num is None:
        raise ValueError(f"{owner}(batch_num=None): batch_num should not be None.")
    check_number(owner, "batch_num", batch_num, low=0, low_open=True, integer=True)
    if not isinstance(multi_precision, bool):
        raise TypeError(f"{owner}(multi_precision=...): must be a bool; got {multi_precision!r}.")
    o = parse(owner, learning_rate, parameters, weight_decay, grad_clip, multi_precision)
    return o.build(_asgd_average(batch_num), scale_by_lr(), skip_nonfinite=skip_nonfinite)


# Paddle's class names (paddle.optimizer.AdamW): each factory already takes Paddle's positional order
ASGD = asgd
