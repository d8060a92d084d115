"""Paddle (3.x) SGD and Momentum (``paddle/optimizer/sgd.py``, ``momentum.py``
-> the ``sgd_`` / ``momentum_`` kernels, ``paddle/phi/kernels/impl/momentum_kernel_impl.h``).
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._registry import Declaration, registered_name
from .._base import GradientTransformation, context_value, transformation
from .._spec import Fusion, declare
from .._elementwise import fusable
from .._ranges import check_hyper
from .._group_values import group_by_value, partition
from .._tree import leaf_values, map_unzip, zeros_like_params
from ..pieces import scale_by_lr
from ._common import check_bool, check_float, group_keys, leaf_hyper, parse, with_groups
from .._types import Hyper, ParamTree, PerLeaf
from .._domains import FINITE
from .._rounding import rounded

__all__ = ["sgd", "momentum", "MomentumState"]
DECLARED = (  # registered as 'paddle.<name>' by the family's __init__ (gradxform._registry.Declaration)
    Declaration('sgd', classes=('SGD',), migrates=True),
    Declaration('momentum', classes=('Momentum',), migrates=True,
                group_keys=group_keys("momentum", "use_nesterov", "rescale_grad")),
)



class MomentumState(NamedTuple):
    """``velocity`` per parameter (Paddle's accumulator); ``group`` and
    ``nesterov`` (its group's ``use_nesterov``, 0/1) per leaf: int32 vectors,
    an entry per leaf in flatten order (one per buffer under `gradxform.fused`)."""
    hyper: Hyper
    velocity: ParamTree
    group: PerLeaf
    nesterov: PerLeaf
    per_leaf_fields = ("group", "nesterov")
    domains = {"velocity": FINITE}


def _group_rescale(o, rescale_grad):
    """``g *= rescale_grad`` (its group's own where the group sets one)."""
    groups = o.group_values(("rescale_grad",))

    def init(params):
        return MomentumState(with_groups({"rescale_grad": rescale_grad}, groups), (),
                             group_by_value(o.slots(params), np.int32), ())  # held and read once per group

    @fusable
    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        if not groups:  # no group sets its own: one value
            return jax.tree.map(lambda g: g * state.hyper["rescale_grad"].astype(g.dtype), updates), state
        return jax.tree.map(lambda g, k: g * leaf_hyper(state.hyper, k, groups)["rescale_grad"].astype(g.dtype),
                            updates, leaf_values(state.group, updates)), state

    return transformation(init, update)


def _momentum_rule(o, momentum, use_nesterov):
    """Paddle's ``momentum_`` kernel after the gradient is rescaled and L2-decayed::

        v = mu * v + g;   w -= lr * v   (nesterov: w -= (g + mu * v) * lr)

    each product rounded on its own, as the CPU kernel computes them (no
    fused multiply-add): a jitted step is that kernel's to the last bit.
    """
    groups = o.group_values(("momentum",))
    nesterov = o.group_extra("use_nesterov", use_nesterov)
    same_nesterov = all(bool(v) == bool(use_nesterov) for v in nesterov.values())

    def init(params):
        slot = o.slots(params)
        return MomentumState(with_groups({"momentum": momentum}, groups),
                             zeros_like_params(params),  # group and flag held and read once per group
                             *partition(slot, [bool(nesterov.get(int(k), use_nesterov)) for k in slot],
                                        dtypes=(np.int32, np.int32)))

    @declare(needs=("lr",), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        del params
        lr = context_value(extra_args, "lr", update)

        def one(g, v, k, nest, l):
            mu = (leaf_hyper(state.hyper, k, groups) if groups else state.hyper)["momentum"].astype(g.dtype)
            # the CPU kernel's roundings: no fused multiply-add (gradxform._rounding)
            v = rounded(v * mu) + g
            l = l.astype(g.dtype)
            if nest is None:  # every leaf's the same: known when the program is built
                return rounded(-((g + rounded(v * mu)) * l) if use_nesterov else -(l * v)), v
            return rounded(jnp.where(nest, -((g + rounded(v * mu)) * l), -(l * v))), v

        # a per-leaf read of a stored vector is a slice XLA:CPU compiles at about 8 ms: only where
        # the leaves differ (a group with its own momentum or use_nesterov)
        none = jax.tree.map(lambda _: None, updates)
        out, v = map_unzip(one, 2, updates, state.velocity,
                           leaf_values(state.group, updates) if groups else none,
                           none if same_nesterov else leaf_values(state.nesterov, updates), lr)
        return out, state._replace(velocity=v)

    return transformation(init, update)


def sgd(learning_rate=0.001, parameters=None, weight_decay=None, grad_clip=None, multi_precision=False,
        name=None, *, skip_nonfinite=False) -> GradientTransformation:
    """Paddle SGD (``paddle.optimizer.SGD`` -> ``sgd_``)::

        g = grad_clip(g) + regularizer(w)        (per group, Paddle's order)
        w -= lr * g

    Args (Paddle's, see `gradxform.paddle._common` for the shared ones):
      learning_rate: a number >= 0, a `gradxform.schedules` Paddle schedule
        or `PaddleReduceOnPlateau`. parameters: None, names, or Paddle group dicts.
      weight_decay: None, a float (L2), `L1Decay` / `L2Decay`.
      grad_clip: None or a `ClipGradByGlobalNorm` / `ClipGradByNorm` / `ClipGradByValue`.
      multi_precision: float32 master weights for float16/bfloat16 parameters
        (the regularizer is added to the low-precision gradient first, as
        Paddle), as Paddle's GPU kernel keeps them. Paddle 3.3.1's CPU ``sgd``
        kernel ignores its master weight (bfloat16 updated in bfloat16, with
        the lr rounded to bfloat16): a CPU run is ``multi_precision=False`` here.
      name: accepted (Paddle names its accumulators with it; see migration).
      skip_nonfinite: a step with a NaN/Inf gradient changes nothing.
    """
    del name
    o = parse(registered_name(sgd), learning_rate, parameters, weight_decay, grad_clip, multi_precision)
    return o.build(scale_by_lr(rounded=True), skip_nonfinite=skip_nonfinite)  # sgd_: w - round(lr * g)


def momentum(learning_rate=0.001, momentum=0.9, parameters=None, use_nesterov=False, weight_decay=None,
             grad_clip=None, multi_precision=False, rescale_grad=1.0, use_multi_tensor=False, name=None, *,
             skip_nonfinite=False) -> GradientTransformation:
    """Paddle Momentum (``paddle.optimizer.Momentum`` -> ``momentum_``)::

        g = grad_clip(g)  [+ regularizer(w) when it is not an L2Decay]
        g = rescale_grad * g  [+ coeff * w for an L2Decay or float weight_decay, in the kernel]
        v = momentum * v + g
        w -= lr * v                        (use_nesterov: w -= (g + momentum * v) * lr)

    Unlike MXNet's SGD, the learning rate stays out of the velocity ``v``
    (Paddle's ``velocity`` accumulator holds the raw sum), so a schedule
    changes the step at once.

    Paddle 3.3.1's CPU kernel ignores ``rescale_grad`` (``CPUDenseMomentumFunctor``
    has no such argument; its GPU kernel and its documentation apply it):
    here it is applied as on GPU. To reproduce a CPU run, pass
    ``rescale_grad=1.0`` (``tests/goldens/paddle/opt_momentum_rescale_grad.npz``
    shows the CPU behaviour).

    A group dict may set its own ``momentum``, ``use_nesterov`` and
    ``rescale_grad`` (Paddle's ``_update_param_group``).

    The other arguments are as `sgd`'s.

    Args:
      momentum: a number in [0, 1] (Paddle checks only that it is set;
        hyperparameter ``momentum``).
      use_nesterov: bool (static).
      rescale_grad: a number (hyperparameter).
      use_multi_tensor: accepted (Paddle's merged kernel computes the same
        numbers; see `gradxform.fused`).
    """
    owner = registered_name(globals()["momentum"])  # the argument momentum shadows the factory
    del name
    check_float(owner, "momentum", momentum)
    check_hyper(owner, "momentum", momentum)
    check_bool(owner, "use_nesterov", use_nesterov)
    check_bool(owner, "use_multi_tensor", use_multi_tensor)
    check_float(owner, "rescale_grad", rescale_grad)
    o = parse(owner, learning_rate, parameters, weight_decay, grad_clip, multi_precision)
    for k, vals in o.group_values(("momentum", "rescale_grad")).items():
        for n, v in vals.items():
            check_float(f"{owner}(parameters[{k}])", n, v)
    for k, v in o.group_extra("use_nesterov", use_nesterov).items():
        check_bool(f"{owner}(parameters[{k}])", "use_nesterov", v)
    # L1Decay goes through append_regularization_ops (before the kernel);
    # L2Decay / a float is the kernel's own regularization_method='l2_decay'
    return o.build(_group_rescale(o, rescale_grad), o.regularize(kinds=("l2",)),
                   _momentum_rule(o, momentum, use_nesterov), regularize_kinds=("l1",),
                   skip_nonfinite=skip_nonfinite)


# Paddle's class names (paddle.optimizer.AdamW): each factory already takes Paddle's positional order
SGD = sgd
Momentum = momentum
