"""Per-element rules with slots of their own: the infinity norm with epsilon,
Adadelta's unit-correcting ratio, resilient propagation (Rprop), averaged
SGD (ASGD), a running-product first-moment correction, and row-wise AdaGrad.

Each emits a direction (or ``w_new - w`` where the rule writes the weight
itself) in the dtype of the incoming updates; hyperparameters are float32
scalars in the state.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._base import GradientTransformation, context_value, transformation
from .._spec import Fusion, declare
from .._elementwise import fusable
from .._hyper import check_range, hyper_scalar
from .._ranges import NON_NEGATIVE, UNIT_CLOSED, UNIT_OPEN, Range, check_hyper, register_ranges
from .._tree import leaf_values, leaf_vector, map_unzip, zeros_like_params as _zeros
from ._moments import MomentsState, TraceState, infinity_norm_moments
from .._types import Hyper, ParamTree
from .._domains import FINITE, NON_NEGATIVE_FINITE, POWER

__all__ = ["scale_by_infinity_norm", "RunningPowerState", "running_bias_correction", "AdadeltaState",
           "scale_by_adadelta", "RpropState", "scale_by_rprop", "AveragedState", "averaged_sgd_step",
           "scale_by_row_accumulated_squares"]
PUBLIC = ("averaged_sgd_step", "running_bias_correction", "scale_by_adadelta", "scale_by_infinity_norm",
          "scale_by_rprop", "scale_by_row_accumulated_squares")  # what gradxform.pieces re-exports

# the pieces' own ranges where a name has none, or another, in `gradxform._ranges.GENERIC`
register_ranges("scale_by_adadelta", {"rho": UNIT_CLOSED, "epsilon": NON_NEGATIVE})
register_ranges("scale_by_rprop", {"etaminus": UNIT_OPEN, "etaplus": Range(low=1.0, low_open=True),
                                   "step_size_min": NON_NEGATIVE})
register_ranges("averaged_sgd_step", {"lambd": NON_NEGATIVE, "alpha": NON_NEGATIVE, "t0": NON_NEGATIVE})


def _c(h, x):
    return h.astype(x.dtype)


def scale_by_infinity_norm(beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8) -> GradientTransformation:
    """``m = b1 m + (1-b1) u;  s = max(b2 s, |u|);  emits m / (s + eps)``
    (``ApplyAdaMax``; `scale_by_adamax` is the same without ``eps``)."""
    check_hyper("scale_by_infinity_norm", "beta1", beta1)
    check_hyper("scale_by_infinity_norm", "beta2", beta2)
    check_hyper("scale_by_infinity_norm", "eps", eps)

    def init(params):
        return MomentsState({"beta1": hyper_scalar(beta1), "beta2": hyper_scalar(beta2), "eps": hyper_scalar(eps)},
                            _zeros(params), _zeros(params))

    @fusable
    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        mu, nu = infinity_norm_moments(state, updates)
        out = jax.tree.map(lambda m, s: m / (s + _c(state.hyper["eps"], s)), mu, nu)
        return out, MomentsState(state.hyper, mu, nu)

    return transformation(init, update)


class RunningPowerState(NamedTuple):
    hyper: Hyper
    beta1_power: jax.Array  # a float32 scalar shared by all parameters, starting at 1
    domains = {"beta1_power": POWER}


def running_bias_correction(beta1: float) -> GradientTransformation:
    """``beta1_power *= beta1;  u -> u / (1 - beta1_power)``: the first
    moment's bias correction from a float32 running product, as kept by
    kernels that take ``beta1_power`` as an input (``ApplyAdaMax``), not the
    exact ``beta1^t`` of `bias_correction`. Shared by all parameters and
    advanced on every update."""
    check_hyper("running_bias_correction", "beta1", beta1)

    def init(params):
        del params
        return RunningPowerState({"beta1": hyper_scalar(beta1)}, jnp.ones((), jnp.float32))

    @fusable
    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        p1 = state.beta1_power * state.hyper["beta1"]
        factor = 1.0 / (1.0 - p1)
        return jax.tree.map(lambda u: u * factor.astype(u.dtype), updates), RunningPowerState(state.hyper, p1)

    return transformation(init, update)


class AdadeltaState(NamedTuple):
    hyper: Hyper
    accum: ParamTree
    accum_update: ParamTree
    domains = {"accum": NON_NEGATIVE_FINITE, "accum_update": NON_NEGATIVE_FINITE}  # EMAs of squares (rho in [0, 1])


def scale_by_adadelta(rho: float = 0.9, epsilon: float = 1e-6) -> GradientTransformation:
    """Adadelta's direction (``ApplyAdadelta``, Zeiler 2012), before the learning rate::

        accum = rho accum + (1 - rho) u^2
        d = sqrt(accum_update + eps) / sqrt(accum + eps) * u;   emits d
        accum_update = rho accum_update + (1 - rho) d^2
    """
    check_hyper("scale_by_adadelta", "rho", rho)
    check_hyper("scale_by_adadelta", "epsilon", epsilon)

    def init(params):
        return AdadeltaState({"rho": hyper_scalar(rho), "epsilon": hyper_scalar(epsilon)},
                             _zeros(params), _zeros(params))

    @fusable
    def update(updates, state, params=None, **extra_args):
        del params, extra_args

        def one(g, a, au):
            r, e = _c(state.hyper["rho"], g), _c(state.hyper["epsilon"], g)
            a = r * a + (1 - r) * g * g
            d = jnp.sqrt(au + e) / jnp.sqrt(a + e) * g
            return d, a, r * au + (1 - r) * d * d

        out, a, au = map_unzip(one, 3, updates, state.accum, state.accum_update)
        return out, AdadeltaState(state.hyper, a, au)

    return transformation(init, update)


class RpropState(NamedTuple):
    hyper: Hyper
    prev: ParamTree       # the last gradient taken (0 where its sign flipped)
    step_size: ParamTree  # per element
    domains = {"prev": FINITE, "step_size": NON_NEGATIVE_FINITE}  # step sizes: clipped to [min, max], min >= 0


def scale_by_rprop(etaminus: float = 0.5, etaplus: float = 1.2, step_size_min: float = 1e-6,
                   step_size_max: float = 50.0) -> GradientTransformation:
    """Resilient propagation with the first step size from the learning rate::

        t == 1:  step = lr                       (per element; t, lr from the step context)
        s = sign(u * prev):  eta = etaplus (s > 0), etaminus (s < 0), 1 (s == 0)
        step = clip(step * eta, step_size_min, step_size_max)
        u = 0 where s < 0;   emits -sign(u) * step;   prev = u

    (MindSpore ``nn.Rprop``; the learning rate is read only on the first update.)"""
    check_hyper("scale_by_rprop", "etaminus", etaminus)
    check_hyper("scale_by_rprop", "etaplus", etaplus)
    check_hyper("scale_by_rprop", "step_size_min", step_size_min)
    # not a range of its own: bounded by the other argument
    check_range("scale_by_rprop", "step_size_max", step_size_max, low=step_size_min)

    def init(params):
        return RpropState({"etaminus": hyper_scalar(etaminus), "etaplus": hyper_scalar(etaplus),
                           "step_size_min": hyper_scalar(step_size_min),
                           "step_size_max": hyper_scalar(step_size_max)}, _zeros(params), _zeros(params))

    @declare(who="scale_by_rprop", needs=("lr", "count"), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        del params
        h = state.hyper
        lr = context_value(extra_args, "lr", "scale_by_rprop")
        count = context_value(extra_args, "count", "scale_by_rprop")

        def one(g, prev, step, l, t):
            c = lambda x: _c(x, g)  # noqa: E731
            step = jnp.where(t == 1, c(l), step)
            s = jnp.sign(g * prev)
            eta = jnp.where(s > 0, c(h["etaplus"]), jnp.where(s < 0, c(h["etaminus"]), jnp.ones_like(g)))
            step = jnp.clip(step * eta, c(h["step_size_min"]), c(h["step_size_max"]))
            g = jnp.where(s < 0, jnp.zeros_like(g), g)
            return -jnp.sign(g) * step, g, step

        out, prev, step = map_unzip(one, 3, updates, state.prev, state.step_size, lr, count)
        return out, RpropState(h, prev, step)

    return transformation(init, update)


class AveragedState(NamedTuple):
    """``eta``, ``mu``: per-leaf float32 vectors (an entry per leaf, flatten
    order); ``ax``: the running average of the weights."""
    hyper: Hyper
    eta: ParamTree
    mu: ParamTree
    ax: ParamTree
    per_leaf_fields = ("eta", "mu")
    domains = {"eta": NON_NEGATIVE_FINITE, "mu": POWER, "ax": FINITE}  # eta in [0, lr]; mu = 1 / max(1, t - t0)


def averaged_sgd_step(lambd: float = 1e-4, alpha: float = 0.75, t0: float = 1e6) -> GradientTransformation:
    """Averaged SGD (Polyak-Juditsky, as MindSpore ``nn.ASGD``), with ``t``
    and ``lr`` from the step context; emits ``w_new - w``::

        t == 1:  eta = lr
        w_new = w (1 - lambd eta) - eta u
        ax = ax + (w_new - ax) mu   if mu != 1,   else ax = w_new
        eta = lr / (1 + lambd lr t)^alpha;    mu = 1 / max(1, t - t0)

    ``eta`` and ``mu`` start at 0 and 1, per parameter. ``ax`` (the averaged
    weights, for evaluation) is in the state; the training weights are ``w``.
    """
    check_hyper("averaged_sgd_step", "lambd", lambd)
    check_hyper("averaged_sgd_step", "alpha", alpha)
    check_hyper("averaged_sgd_step", "t0", t0)

    def init(params):
        n = jax.tree.structure(params).num_leaves
        return AveragedState({"lambd": hyper_scalar(lambd), "alpha": hyper_scalar(alpha), "t0": hyper_scalar(t0)},
                             jnp.zeros((n,), jnp.float32), jnp.ones((n,), jnp.float32), _zeros(params))

    @declare(who="averaged_sgd_step", needs=("lr", "count"), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        if params is None:
            raise ValueError("averaged_sgd_step: needs params; call update(grads, state, params).")
        h = state.hyper
        lr = context_value(extra_args, "lr", "averaged_sgd_step")
        count = context_value(extra_args, "count", "averaged_sgd_step")

        def one(g, w, eta, mu, ax, l, t):
            t = t.astype(jnp.float32)
            eta = jnp.where(t == 1, l, eta)
            w32 = w.astype(jnp.float32)
            w_new = w32 * (1.0 - h["lambd"] * eta) - eta * g.astype(jnp.float32)
            ax = jnp.where(mu != 1, ax + ((w_new - ax.astype(jnp.float32)) * mu).astype(ax.dtype),
                           w_new.astype(ax.dtype))
            eta = l / jnp.power(1.0 + h["lambd"] * l * t, h["alpha"])
            mu = 1.0 / jnp.maximum(1.0, t - h["t0"])
            return (w_new - w32).astype(g.dtype), eta, mu, ax

        out, eta, mu, ax = map_unzip(one, 4, updates, params, leaf_values(state.eta, updates),
                                     leaf_values(state.mu, updates), state.ax, lr, count)
        return out, AveragedState(h, leaf_vector(eta, jnp.float32), leaf_vector(mu, jnp.float32), ax)

    return transformation(init, update)



def _row_zeros(p):
    """The row history at 0, typed (sharding too) by the row reduction that updates it."""
    p = jnp.asarray(p)
    axes = tuple(range(1, p.ndim))
    return jnp.zeros_like(jnp.mean(p, axis=axes, keepdims=True) if axes else p, dtype=jnp.result_type(p))


def scale_by_row_accumulated_squares(eps: float = 1e-5) -> GradientTransformation:
    """Row-wise AdaGrad (one accumulator per row, axis 0)::

        h += mean(u^2 over every axis but 0)        (h shaped (rows, 1, ...))
        emits u / sqrt(h + eps)

    A 1-D parameter has one row per element, a 0-d one a single row. The
    accumulator is not shaped like the parameter, so this piece is not
    elementwise (no `gradxform.fused`). (MXNet ``contrib.GroupAdaGrad``.)"""
    check_hyper("scale_by_row_accumulated_squares", "eps", eps)

    def init(params):
        return TraceState({"eps": hyper_scalar(eps)},
                          jax.tree.map(_row_zeros, params))

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        e = state.hyper["eps"]

        def one(u, h):
            axes = tuple(range(1, u.ndim))
            if not axes:
                h = h + u * u
            elif all(u.shape[1:]):
                h = h + jnp.mean(u * u, axis=axes, keepdims=True)
            # rows with no elements (shape (n, 0)): nothing to average, the history stays
            return u / jnp.sqrt(h + _c(e, h)), h

        out, h = map_unzip(one, 2, updates, state.trace)
        return out, TraceState(state.hyper, h)

    return transformation(init, update)
