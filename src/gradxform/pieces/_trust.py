"""Layer-wise trust ratios (LAMB, LARS) and the bias-corrected Adam direction LAMB scales.

Each parameter (leaf) is one layer: its norms are per leaf, so under
`gradxform.fused` they are segment sums over a buffer (`leaf_sq_norm`),
summed in another order than per leaf (a few ulp: ``bit_exact=False``).
"""
from __future__ import annotations

from typing import NamedTuple, Optional, cast

import jax
import jax.numpy as jnp

from .._base import GradientTransformation, LocalKey, StepContext, context_value, transformation
from .._spec import Fusion, declare
from .._elementwise import fusable
from .._hyper import hyper_residual, hyper_scalar
from ._moments import adam_emas, one_minus_power
from .._tree import leaf_values, leaf_vector, map_unzip, zeros_like_params as _zeros
from ._segments import leaf_sq_norm
from ._step import Multiplier, per_leaf_multipliers
from .._ranges import NON_NEGATIVE, check_hyper, register_range
from .._types import Hyper, ParamTree, PerLeaf
from .._domains import FINITE, NON_NEGATIVE_FINITE

__all__ = ["CorrectedMomentsState", "scale_by_corrected_moments", "TrustRatioState", "scale_by_trust_ratio",
           "LarsRatioState", "provide_lars_ratio", "LrRatioTraceState", "trace_with_lr_ratio"]
PUBLIC = ("scale_by_corrected_moments", "scale_by_trust_ratio", "provide_lars_ratio",
          "trace_with_lr_ratio")  # what gradxform.pieces re-exports

# the ranges of this module's own hyperparameters (the trust-ratio bounds, LARS's eta)
for _name in ("lower_bound", "upper_bound", "eta"):
    register_range(_name, NON_NEGATIVE)


def _c(h, x):
    return h.astype(x.dtype)


class CorrectedMomentsState(NamedTuple):
    hyper: Hyper
    hyper_lo: Hyper
    mu: ParamTree
    nu: ParamTree
    domains = {"mu": FINITE, "nu": NON_NEGATIVE_FINITE}


def scale_by_corrected_moments(beta1: float = 0.9, beta2: float = 0.999,
                               epsilon: float = 1e-6) -> GradientTransformation:
    """Adam's direction from the bias-corrected moments (epsilon outside the root)::

        m = b1 m + (1-b1) u;   v = b2 v + (1-b2) u^2
        emits (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)

    ``t`` is each parameter's count from the step context. Not
    `scale_by_adam_moments` followed by `bias_correction`: the correction
    divides ``v`` before ``eps`` is added, so the two differ where ``sqrt(v)``
    is comparable to ``eps`` (MXNet ``lamb_update_phase1``)."""
    check_hyper("scale_by_corrected_moments", "beta1", beta1)
    check_hyper("scale_by_corrected_moments", "beta2", beta2)
    check_hyper("scale_by_corrected_moments", "epsilon", epsilon)

    def init(params):
        return CorrectedMomentsState({"beta1": hyper_scalar(beta1), "beta2": hyper_scalar(beta2),
                                      "epsilon": hyper_scalar(epsilon)},
                                     {"beta1": hyper_residual(beta1), "beta2": hyper_residual(beta2)},
                                     _zeros(params), _zeros(params))

    @declare(who="scale_by_corrected_moments", needs=("count",), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        del params
        count = context_value(extra_args, "count", "scale_by_corrected_moments")
        h, lo = state.hyper, state.hyper_lo
        mu, nu = adam_emas(state.mu, state.nu, updates, h["beta1"], h["beta2"])

        def one(m, v, t):
            t = t.astype(jnp.float32)
            c1, c2 = one_minus_power(h["beta1"], lo["beta1"], t), one_minus_power(h["beta2"], lo["beta2"], t)
            return (m / _c(c1, m)) / (jnp.sqrt(v / _c(c2, v)) + _c(h["epsilon"], v))

        return jax.tree.map(one, mu, nu, count), CorrectedMomentsState(h, lo, mu, nu)

    return transformation(init, update)


class TrustRatioState(NamedTuple):
    hyper: Hyper


def scale_by_trust_ratio(lower_bound: float | None = None,
                         upper_bound: float | None = None) -> GradientTransformation:
    """LAMB's layer-wise trust ratio on the incoming direction ``u``::

        r1 = |w| (clamped to [lower_bound, upper_bound] where given);  r2 = |u|
        emits u * r1 / r2        (u unchanged where r1 or r2 is 0)

    Norms are L2 over each parameter, in float32 (MXNet ``lamb_update_phase2``
    with ``r1 = weight.norm()``, ``r2 = g.norm()``). A bound of None leaves
    that side open (static); a given bound is a hyperparameter."""
    bounds = {k: v for k, v in (("lower_bound", lower_bound), ("upper_bound", upper_bound)) if v is not None}
    for k, v in bounds.items():
        check_hyper("scale_by_trust_ratio", k, v)

    def init(params):
        del params
        return TrustRatioState({k: hyper_scalar(v) for k, v in bounds.items()})

    @fusable(bit_exact=False, reductions=("leaf_sum",))  # fused: per-leaf norms as segment sums (another order)
    def update(updates, state, params=None, **extra_args):
        if params is None:
            raise ValueError("scale_by_trust_ratio: needs params; call update(grads, state, params).")
        h = state.hyper
        w_sq, u_sq = leaf_sq_norm(params, extra_args), leaf_sq_norm(updates, extra_args)

        def one(u, ws, us):
            r1, r2 = jnp.sqrt(ws), jnp.sqrt(us)
            if "lower_bound" in h:
                r1 = jnp.maximum(r1, h["lower_bound"])
            if "upper_bound" in h:
                r1 = jnp.minimum(r1, h["upper_bound"])
            ratio = jnp.where((r1 == 0) | (r2 == 0), 1.0, r1 / jnp.where(r2 == 0, 1.0, r2))
            return u * ratio.astype(u.dtype)

        return jax.tree.map(one, updates, w_sq, u_sq), state

    return transformation(init, update)


class LarsRatioState(NamedTuple):
    """``layers``: per-leaf float32 flags (1: the layer takes the ratio), a
    vector with an entry per leaf, or None when every leaf does."""
    hyper: Hyper
    layers: Optional[PerLeaf]
    per_leaf_fields = ("layers",)
    optional_fields = {"layers": 1.0}
    domains = {"layers": FINITE}


def provide_lars_ratio(eta: float = 0.001, eps: float = 0.0, *, key: LocalKey,
                       layers: Multiplier = None) -> GradientTransformation:
    """LARS's layer-wise learning-rate factor, published under ``key`` (a
    `gradxform.LocalKey`) for a later ``scale_by_lr(factor_key=key)``;
    updates pass through::

        ratio = eta |w| / (|u| + wd |w| + eps)     where |w| > 0 and |u| > 0, else 1

    ``u`` is the incoming update, ``wd`` each parameter's decay from the step
    context (`provide_weight_decay`). ``layers``: which parameters take the
    ratio (a multiplier spec resolved on the names at ``init``, 0 = no ratio;
    None: all). MXNet ``LARS`` (``multi_lars``) and You et al. 2017."""
    check_hyper("provide_lars_ratio", "eta", eta)
    check_hyper("provide_lars_ratio", "eps", eps)

    def init(params):
        return LarsRatioState({"eta": hyper_scalar(eta), "eps": hyper_scalar(eps)},
                              per_leaf_multipliers(layers, params, "layers"))

    # fused: per-leaf norms as segment sums (another order)
    @declare(who="provide_lars_ratio", needs=("wd",), provides=(key,),
             fusion=Fusion(bit_exact=False, reductions=("leaf_sum",)))
    def update(updates, state, params=None, **extra_args):
        if params is None:
            raise ValueError("provide_lars_ratio: needs params; call update(grads, state, params).")
        h = state.hyper
        wd = context_value(extra_args, "wd", "provide_lars_ratio")
        w_sq, g_sq = leaf_sq_norm(params, extra_args), leaf_sq_norm(updates, extra_args)

        def one(ws, gs, d, on=None):
            w, g = jnp.sqrt(ws), jnp.sqrt(gs)
            valid = (w > 0) & (g > 0)
            ratio = jnp.where(valid, h["eta"] * w / jnp.where(valid, g + d * w + h["eps"], 1.0), 1.0)
            return ratio if on is None else jnp.where(on != 0, ratio, 1.0)

        if state.layers is None:
            ratio = jax.tree.map(one, w_sq, g_sq, wd)
        else:
            ratio = jax.tree.map(one, w_sq, g_sq, wd, leaf_values(state.layers, updates))
        cast(StepContext, StepContext.of(extra_args)).publish_local({key: ratio})
        return updates, state

    return transformation(init, update)


class LrRatioTraceState(NamedTuple):
    """``last_lr``: each parameter's learning rate at its previous update
    (a float32 vector, an entry per leaf, 0 before the first)."""
    hyper: Hyper
    trace: ParamTree
    last_lr: ParamTree
    per_leaf_fields = ("last_lr",)
    domains = {"trace": FINITE, "last_lr": NON_NEGATIVE_FINITE}  # last_lr: a learning rate, divided by


def trace_with_lr_ratio(momentum: float) -> GradientTransformation:
    """Heavy-ball momentum corrected for a changing learning rate (Goyal et
    al. 2017, "momentum correction")::

        m = momentum * lr / last_lr * m + u       (momentum * m where last_lr is 0)

    ``lr`` is each parameter's learning rate from the step context; emits ``m``
    (MXNet ``LARS`` with ``momentum_correction``)."""
    check_hyper("trace_with_lr_ratio", "momentum", momentum)

    def init(params):
        return LrRatioTraceState({"momentum": hyper_scalar(momentum)}, _zeros(params),
                                 jnp.zeros((jax.tree.structure(params).num_leaves,), jnp.float32))

    @declare(who="trace_with_lr_ratio", needs=("lr",), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        del params
        lr = context_value(extra_args, "lr", "trace_with_lr_ratio")
        mu = state.hyper["momentum"]

        def one(u, m, l, last):
            l = jnp.asarray(l, jnp.float32)
            factor = jnp.where(last != 0, mu * (l / jnp.where(last != 0, last, 1.0)), mu)
            return _c(factor, u) * m + u, l

        m, last = map_unzip(one, 2, updates, state.trace, lr, leaf_values(state.last_lr, updates))
        return m, LrRatioTraceState(state.hyper, m, leaf_vector(last, jnp.float32))

    return transformation(init, update)
