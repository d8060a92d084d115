"""Moment tracking: momentum traces, EMAs of the gradient and its square, the
infinity norm, squared-gradient accumulators, and bias correction.

Moment buffers have the dtype of the incoming updates (float32 under master
weights); decay rates are float32 hyperparameters in the state.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._base import GradientTransformation, context_value, transformation
from .._spec import Fusion, declare
from .._elementwise import fusable
from .._hyper import hyper_residual, hyper_scalar
from .._ranges import UNIT_CLOSED, check_hyper, register_range
from .._tree import full_like_params, once_per_value, zeros_like_params as _zeros
from .._types import Hyper, ParamTree
from .._domains import FINITE, NON_NEGATIVE_FINITE, non_negative_if

__all__ = [
    "TraceState", "trace", "ema", "sign", "MomentsState", "scale_by_adam_moments",
    "scale_by_rms", "CenteredRmsState", "scale_by_centered_rms", "scale_by_adamax",
    "scale_by_accumulated_squares", "bias_correction", "one_minus_power", "adam_emas", "infinity_norm_moments",
    "LionState", "scale_by_lion",
]
PUBLIC = ("bias_correction", "ema", "scale_by_accumulated_squares", "scale_by_adam_moments",
          "scale_by_adamax", "scale_by_centered_rms", "scale_by_lion", "scale_by_rms", "sign",
          "trace")  # what gradxform.pieces re-exports

# the ranges of this module's own new hyperparameters (Lion's b1, b2: optax's names)
for _name in ("b1", "b2"):
    register_range(_name, UNIT_CLOSED)


def _c(h, x):
    return h.astype(x.dtype)


class TraceState(NamedTuple):
    hyper: Hyper
    trace: ParamTree
    domains = {"trace": non_negative_if("eps", "epsilon")}  # a sum of squares where it holds an epsilon, else a momentum


def trace(momentum: float, *, nesterov: bool = False, name: str = "momentum") -> GradientTransformation:
    """Heavy-ball momentum: ``m = momentum * m + u``; emits ``m``, or with
    ``nesterov=True`` (static) ``u + momentum * m`` (MXNet NAG)."""
    check_hyper("trace", "momentum", momentum, arg=name)

    def init(params):
        return TraceState({name: hyper_scalar(momentum)}, _zeros(params))

    @fusable
    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        mu = state.hyper[name]
        m = jax.tree.map(lambda t, u: _c(mu, u) * t + u, state.trace, updates)
        out = jax.tree.map(lambda u, t: u + _c(mu, u) * t, updates, m) if nesterov else m
        return out, TraceState(state.hyper, m)

    return transformation(init, update)


def ema(decay: float, *, name: str = "momentum") -> GradientTransformation:
    """Exponential moving average ``m = decay * m + (1 - decay) * u``; emits ``m``."""
    check_hyper("ema", "decay", decay, arg=name)

    def init(params):
        return TraceState({name: hyper_scalar(decay)}, _zeros(params))

    @fusable
    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        d = state.hyper[name]
        m = jax.tree.map(lambda t, u: _c(d, u) * t + (1 - _c(d, u)) * u, state.trace, updates)
        return m, TraceState(state.hyper, m)

    return transformation(init, update)


def sign() -> GradientTransformation:
    """``u -> sign(u)`` (signSGD / Signum)."""

    def init(params):
        del params
        return ()

    @fusable
    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        return jax.tree.map(jnp.sign, updates), state

    return transformation(init, update)


class LionState(NamedTuple):
    hyper: Hyper
    hyper_lo: Hyper  # b - float32(b) of b1, b2 (hyper_residual): 1 - b as optax's float64 gives it
    mu: ParamTree
    domains = {"mu": FINITE}


def _one_minus(b1, lo1, b2, lo2):
    """``1 - (b + lo)`` of both betas, each rounded once to float32 (``b`` in
    [0, 1], ``lo`` its residual): what optax's ``1.0 - b1`` in Python float64
    becomes when it meets a float32 array. For ``b >= 0.5``, ``1 - b`` is
    exact (Sterbenz); below, ``(1 - s) - b`` is the exact error of ``s = 1 - b``
    (Fast2Sum). With ``lo = 0`` (a traced `set_hyper`) it is ``float32(1 - b)``,
    as ``optax.inject_hyperparams`` computes it.

    A conditional, which XLA does not fuse: the coefficients enter each leaf's
    loop as optax's constants do. Computed inside the loop of a one-element
    leaf, XLA:CPU contracts the other product of ``c u + b m`` into its FMA
    than optax does (one bit off, in a scalar or shape-(1,) leaf)."""
    def exact(b, lo):
        return (1.0 - b) - lo

    def fast_two_sum(b, lo):
        s = 1.0 - b
        return s + (((1.0 - s) - b) - lo)

    def near_one(b1, lo1, b2, lo2):
        return exact(b1, lo1), exact(b2, lo2)

    def anywhere(b1, lo1, b2, lo2):
        return fast_two_sum(b1, lo1), fast_two_sum(b2, lo2)

    return jax.lax.cond(jnp.minimum(b1, b2) >= 0.5, near_one, anywhere, b1, lo1, b2, lo2)


def scale_by_lion(b1: float = 0.9, b2: float = 0.99, mu_dtype=None) -> GradientTransformation:
    """Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms";
    optax ``scale_by_lion``)::

        emits sign((1 - b1) u + b1 mu);   mu = (1 - b2) u + b2 mu

    in optax's order of operations, and ``1 - b`` rounded once from float64 as
    optax's Python floats are, so the numbers are optax's bit for bit on the
    same backend, for ``1 - b >= 1e-4`` (nearer 1, the float32 residual of
    ``b`` can leave ``1 - b`` one ulp off: 5 of 20,000 sampled ``b`` with
    ``1 - b`` in [1e-5, 1e-4]). ``mu`` has ``mu_dtype`` (static), or the
    parameters' dtype when None. The update keeps the incoming updates'
    dtype (a sign: exact in any float dtype)."""
    check_hyper("scale_by_lion", "b1", b1)
    check_hyper("scale_by_lion", "b2", b2)
    dtype = None if mu_dtype is None else jax.dtypes.canonicalize_dtype(mu_dtype)  # as optax

    def init(params):
        mu = _zeros(params) if dtype is None else \
            jax.tree.map(lambda p: jnp.full_like(p, 0, dtype=dtype), params)
        return LionState({"b1": hyper_scalar(b1), "b2": hyper_scalar(b2)},
                         {"b1": hyper_residual(b1), "b2": hyper_residual(b2)}, mu)

    @fusable
    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        h, lo = state.hyper, state.hyper_lo
        c1, c2 = _one_minus(h["b1"], lo["b1"], h["b2"], lo["b2"])
        out = jax.tree.map(lambda u, m: jnp.sign(_c(c1, u) * u + _c(h["b1"], m) * m).astype(u.dtype),
                           updates, state.mu)
        mu = jax.tree.map(lambda u, m: (_c(c2, u) * u + _c(h["b2"], m) * m).astype(m.dtype), updates, state.mu)
        return out, LionState(h, lo, mu)

    return transformation(init, update)


class MomentsState(NamedTuple):
    hyper: Hyper
    mu: ParamTree
    nu: ParamTree
    domains = {"mu": FINITE, "nu": NON_NEGATIVE_FINITE}  # nu: an EMA of u^2, or AdaMax's max(b2 s, |u|)


def adam_emas(mu, nu, updates, beta1, beta2):
    """Adam's two EMAs, ``m = b1 m + (1-b1) u`` and ``v = b2 v + (1-b2) u^2``, in
    the updates' dtype; shared by every Adam-like rule (MXNet's, MindSpore's
    Nesterov and AMSGrad variants). The scalars ``b`` and ``1 - b`` are traced
    once per dtype, not once per leaf (the same values: 2 of 18 traced
    operations per leaf of MXNet Adam's step, which optax folds as constants)."""
    @once_per_value
    def coefficients(dtype):
        b1, b2 = beta1.astype(dtype), beta2.astype(dtype)
        return b1, 1 - b1, b2, 1 - b2

    def m_of(m, u):
        b1, r1, _, _ = coefficients(u.dtype)
        return b1 * m + r1 * u

    def v_of(v, u):
        _, _, b2, r2 = coefficients(u.dtype)
        return b2 * v + r2 * u * u

    return jax.tree.map(m_of, mu, updates), jax.tree.map(v_of, nu, updates)


def scale_by_adam_moments(beta1: float = 0.9, beta2: float = 0.999,
                          epsilon: float = 1e-8) -> GradientTransformation:
    """``m = b1 m + (1-b1) u;  v = b2 v + (1-b2) u^2;  emits m / (sqrt(v) + eps)``.

    No bias correction here: MXNet folds it into the learning rate, so it is
    the separate `bias_correction` piece.
    """
    check_hyper("scale_by_adam_moments", "beta1", beta1)
    check_hyper("scale_by_adam_moments", "beta2", beta2)
    check_hyper("scale_by_adam_moments", "epsilon", epsilon)

    def init(params):
        return MomentsState({"beta1": hyper_scalar(beta1), "beta2": hyper_scalar(beta2),
                             "epsilon": hyper_scalar(epsilon)}, _zeros(params), _zeros(params))

    @fusable
    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        h = state.hyper
        mu, nu = adam_emas(state.mu, state.nu, updates, h["beta1"], h["beta2"])
        out = jax.tree.map(lambda m, v: m / (jnp.sqrt(v) + _c(h["epsilon"], v)), mu, nu)
        return out, MomentsState(h, mu, nu)

    return transformation(init, update)


def scale_by_rms(decay: float = 0.9, epsilon: float = 1e-8, *, name: str = "gamma1") -> GradientTransformation:
    """Tieleman & Hinton: ``n = (1-decay) u^2 + decay n;  emits u / sqrt(n + eps)``
    (epsilon inside the root)."""
    check_hyper("scale_by_rms", "decay", decay, arg=name)
    check_hyper("scale_by_rms", "epsilon", epsilon)

    def init(params):
        return TraceState({name: hyper_scalar(decay), "epsilon": hyper_scalar(epsilon)}, _zeros(params))

    @fusable
    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        d, eps = state.hyper[name], state.hyper["epsilon"]
        n = jax.tree.map(lambda n, u: (1 - _c(d, u)) * u * u + _c(d, u) * n, state.trace, updates)
        out = jax.tree.map(lambda u, n: u / jnp.sqrt(n + _c(eps, n)), updates, n)
        return out, TraceState(state.hyper, n)

    return transformation(init, update)


class CenteredRmsState(NamedTuple):
    hyper: Hyper
    n: ParamTree
    g: ParamTree
    domains = {"n": NON_NEGATIVE_FINITE, "g": FINITE}  # n: mean square; g: mean gradient (any sign)


def scale_by_centered_rms(decay: float = 0.9, epsilon: float = 1e-8, *,
                          name: str = "gamma1") -> GradientTransformation:
    """Graves (2013): ``n = (1-d) u^2 + d n;  g = (1-d) u + d g;
    emits u / sqrt(n - g^2 + eps)``."""
    check_hyper("scale_by_centered_rms", "decay", decay, arg=name)
    check_hyper("scale_by_centered_rms", "epsilon", epsilon)

    def init(params):
        return CenteredRmsState({name: hyper_scalar(decay), "epsilon": hyper_scalar(epsilon)},
                                _zeros(params), _zeros(params))

    @fusable
    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        d, eps = state.hyper[name], state.hyper["epsilon"]
        n = jax.tree.map(lambda n, u: (1 - _c(d, u)) * u * u + _c(d, u) * n, state.n, updates)
        g = jax.tree.map(lambda g, u: (1 - _c(d, u)) * u + _c(d, u) * g, state.g, updates)
        out = jax.tree.map(lambda u, n, g: u / jnp.sqrt(n - g * g + _c(eps, n)), updates, n, g)
        return out, CenteredRmsState(state.hyper, n, g)

    return transformation(init, update)


def infinity_norm_moments(state, updates):
    """``(b1 m + (1-b1) u, max(b2 s, |u|))`` of a `MomentsState` holding
    ``beta1``/``beta2``: the moments of AdaMax, whatever it divides by."""
    h = state.hyper
    mu = jax.tree.map(lambda m, u: _c(h["beta1"], u) * m + (1 - _c(h["beta1"], u)) * u, state.mu, updates)
    nu = jax.tree.map(lambda s, u: jnp.maximum(_c(h["beta2"], u) * s, jnp.abs(u)), state.nu, updates)
    return mu, nu


def scale_by_adamax(beta1: float = 0.9, beta2: float = 0.999) -> GradientTransformation:
    """Infinity norm: ``m = b1 m + (1-b1) u;  s = max(b2 s, |u|);  emits m / s``."""
    check_hyper("scale_by_adamax", "beta1", beta1)
    check_hyper("scale_by_adamax", "beta2", beta2)

    def init(params):
        return MomentsState({"beta1": hyper_scalar(beta1), "beta2": hyper_scalar(beta2)},
                            _zeros(params), _zeros(params))

    @fusable
    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        mu, nu = infinity_norm_moments(state, updates)
        return jax.tree.map(lambda m, s: m / s, mu, nu), MomentsState(state.hyper, mu, nu)

    return transformation(init, update)


def scale_by_accumulated_squares(eps: float = 1e-7, *, initial: float = 0.0,
                                 name: str = "eps") -> GradientTransformation:
    """AdaGrad accumulator: ``h += u^2;  emits u / sqrt(h + eps)``; ``h`` starts at ``initial``."""
    check_hyper("scale_by_accumulated_squares", "eps", eps, arg=name)

    def init(params):
        return TraceState({name: hyper_scalar(eps)},
                          full_like_params(params, initial))

    @fusable
    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        e = state.hyper[name]
        h = jax.tree.map(lambda h, u: h + u * u, state.trace, updates)
        return jax.tree.map(lambda u, h: u / jnp.sqrt(h + _c(e, h)), updates, h), TraceState(state.hyper, h)

    return transformation(init, update)


def one_minus_power(beta, beta_lo, t):
    """``1 - beta^t`` to float32 accuracy, ``beta = beta + beta_lo`` a float32
    pair: computed as ``-expm1(t * log1p(beta - 1 + beta_lo))``, since the
    direct form cancels catastrophically for beta near 1."""
    return -jnp.expm1(t * jnp.log1p((beta - 1.0) + beta_lo))


class BiasCorrectionState(NamedTuple):
    hyper: Hyper
    hyper_lo: Hyper


def bias_correction(beta1: float = 0.9, beta2: float | None = 0.999) -> GradientTransformation:
    """``u -> u * sqrt(1 - beta2^t) / (1 - beta1^t)`` (or ``u / (1 - beta1^t)``
    with ``beta2=None``, static), ``t`` each parameter's count from the step
    context. MXNet's Adam and Adamax apply this factor to the learning rate."""
    check_hyper("bias_correction", "beta1", beta1)
    check_hyper("bias_correction", "beta2", beta2, allow_none=True)

    def init(params):
        del params
        betas = {"beta1": beta1} if beta2 is None else {"beta1": beta1, "beta2": beta2}
        return BiasCorrectionState({k: hyper_scalar(v) for k, v in betas.items()},
                                   {k: hyper_residual(v) for k, v in betas.items()})

    @declare(who="bias_correction", needs=("count",), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        del params
        count = context_value(extra_args, "count", "bias_correction")
        h, lo = state.hyper, state.hyper_lo

        # the logs are per optimizer; only the power is per leaf
        log1 = jnp.log1p((h["beta1"] - 1.0) + lo["beta1"])
        log2 = jnp.log1p((h["beta2"] - 1.0) + lo["beta2"]) if beta2 is not None else None

        @once_per_value  # a shared count: one factor for every leaf
        def factor(t):
            t = t.astype(jnp.float32)
            f = -1.0 / jnp.expm1(t * log1)
            if log2 is not None:
                f = f * jnp.sqrt(-jnp.expm1(t * log2))
            return f

        return jax.tree.map(lambda u, t: u * factor(t).astype(u.dtype), updates, count), state

    return transformation(init, update)
