"""MXNet 1.9.1's RMSProp, AdaGrad and Ftrl kernels in their order of operations, product by
product (the SGD family's and Adam's are `gradxform.mxnet._kernels`).

As there: the pip ``libmxnet.so`` rounds every product (no FMA), so each product that an
addition reads is `rounded`. XLA also rewrites ``a / sqrt(b)`` into ``a * rsqrt(b)`` (up to
3 ulps off the kernel's quotient): the square root is `rounded` before the division. (Its
rewrite of ``x / c``, a per-parameter scalar ``c``, into ``x * (1 / c)`` does not fire in
Ftrl's two divisions by ``lr``: measured, tests/test_mxnet_kernel_order.py.)

Each piece keeps the state of the shared piece whose slot it takes (`gradxform.pieces`
``scale_by_rms``, ``scale_by_centered_rms``, ``trace``, ``scale_by_accumulated_squares``;
FTRL's own ``MXNetFtrlState`` stays in `gradxform.mxnet._adaptive`), so states,
checkpoints and fixtures written before load unchanged.

Sources (``src/operator/optimizer_op-inl.h``, 1.9.1): ``RMSPropUpdateKernel`` :2052-2077,
``RMSPropAlexUpdateKernel`` :1953-1984, ``FtrlUpdateKernel`` :2133-2155; ``AdaGrad.update`` in
``python/mxnet/optimizer/optimizer.py`` :1665-1688 (NDArray operations, each rounded on its own).
"""
from __future__ import annotations

from typing import cast

import jax
import jax.numpy as jnp

from .._base import GradientTransformation, StepContext, context_value, transformation
from .._hyper import hyper_scalar
from .._rounding import rounded
from .._spec import Fusion, LocalKey, declare
from .._tree import full_like_params, zeros_like_params as _zeros
from ..pieces.internal import CenteredRmsState, TraceState

__all__ = ["rms", "centered_rms", "rms_delta", "accumulated_squares", "ftrl_closed_form", "RMS_DENOMINATOR"]

RMS_DENOMINATOR = LocalKey("mxnet_rms_denominator",
                           "MXNet centered RMSProp's centered_rms (sqrt(n - g * g + epsilon))")


def _c(h, x):
    return h.astype(x.dtype)


def rms(gamma1: float, epsilon: float) -> GradientTransformation:
    """``RMSPropUpdateKernel``'s mean square, each product rounded::

        n = (1 - gamma1) * (g * g) + gamma1 * n;   emits g / sqrt(n + epsilon)

    (then ``scale_by_lr(rounded=True)``: ``w -= lr * (g / sqrt(n + epsilon))``). Its slot
    and state are `gradxform.pieces.scale_by_rms`' (``TraceState``, ``gamma1``, ``epsilon``)."""

    def init(params):
        return TraceState({"gamma1": hyper_scalar(gamma1), "epsilon": hyper_scalar(epsilon)}, _zeros(params))

    @declare(fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        d, eps = state.hyper["gamma1"], state.hyper["epsilon"]
        n = jax.tree.map(lambda n, u: rounded((1 - _c(d, u)) * rounded(u * u)) + rounded(_c(d, u) * n),
                         state.trace, updates)
        out = jax.tree.map(lambda u, n: u / rounded(jnp.sqrt(n + _c(eps, n))), updates, n)
        return out, TraceState(state.hyper, n)

    return transformation(init, update)


def centered_rms(gamma1: float, epsilon: float) -> GradientTransformation:
    """``RMSPropAlexUpdateKernel``'s moments, each product rounded::

        n = ((1 - gamma1) * g) * g + gamma1 * n;   gbar = (1 - gamma1) * g + gamma1 * gbar

    emits ``g`` and hands ``sqrt((n - gbar * gbar) + epsilon)`` to `rms_delta`
    (`RMS_DENOMINATOR`). Its slot and state are `gradxform.pieces.scale_by_centered_rms`'."""

    def init(params):
        return CenteredRmsState({"gamma1": hyper_scalar(gamma1), "epsilon": hyper_scalar(epsilon)},
                                _zeros(params), _zeros(params))

    @declare(provides=(RMS_DENOMINATOR,), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        del params
        d, eps = state.hyper["gamma1"], state.hyper["epsilon"]
        n = jax.tree.map(lambda n, u: rounded(rounded((1 - _c(d, u)) * u) * u) + rounded(_c(d, u) * n),
                         state.n, updates)
        g = jax.tree.map(lambda g, u: rounded((1 - _c(d, u)) * u) + rounded(_c(d, u) * g), state.g, updates)
        den = jax.tree.map(lambda n, g: rounded(jnp.sqrt((n - rounded(g * g)) + _c(eps, n))), n, g)
        cast(StepContext, StepContext.of(extra_args)).publish_local({RMS_DENOMINATOR: den})
        return updates, CenteredRmsState(state.hyper, n, g)

    return transformation(init, update)


def rms_delta(gamma2: float) -> GradientTransformation:
    """``RMSPropAlexUpdateKernel``'s step::

        delta = gamma2 * delta - (lr * g) / sqrt((n - gbar * gbar) + epsilon);   w += delta

    with ``-(lr * g)`` the update (``scale_by_lr(rounded=True)``) and the divisor from
    `centered_rms`; emits ``delta``. Its slot and state are `gradxform.pieces.trace`'s
    (``TraceState``, ``gamma2``)."""

    def init(params):
        return TraceState({"gamma2": hyper_scalar(gamma2)}, _zeros(params))

    @declare(needs=(RMS_DENOMINATOR,), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        del params
        den = context_value(extra_args, RMS_DENOMINATOR, update)
        g2 = state.hyper["gamma2"]
        delta = jax.tree.map(lambda t, u, s: rounded(_c(g2, t) * t) + u / s, state.trace, updates, den)
        return delta, TraceState(state.hyper, delta)

    return transformation(init, update)


def accumulated_squares(eps: float) -> GradientTransformation:
    """``AdaGrad.update``'s history and quotient, one NDArray operation each::

        history += g * g;   emits g / sqrt(history + eps)

    (then ``add_wd(rounded=True)``, ``scale_by_lr(rounded=True)``: ``w += (div + w * wd) * -lr``).
    Its slot and state are `gradxform.pieces.scale_by_accumulated_squares`' (``TraceState``,
    ``eps``)."""

    def init(params):
        return TraceState({"eps": hyper_scalar(eps)}, full_like_params(params, 0.0))

    @declare(fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        e = state.hyper["eps"]
        h = jax.tree.map(lambda h, u: h + rounded(u * u), state.trace, updates)
        out = jax.tree.map(lambda u, h: u / rounded(jnp.sqrt(h + _c(e, h))), updates, h)
        return out, TraceState(state.hyper, h)

    return transformation(init, update)


def ftrl_closed_form(g, w, z, n, lr, wd, lamda1, beta):
    """``FtrlUpdateKernel`` for one leaf, each product rounded; returns ``(w_new, z, n)``::

        z += g - ((sqrt(n + g * g) - sqrt(n)) * w) / lr
        n += g * g
        w_new = (sign(z) * lamda1 - z) / ((beta + sqrt(n)) / lr + wd) * (|z| > lamda1)"""
    c = lambda x: _c(x, g)  # noqa: E731
    l1, b, wd, w = c(lamda1), c(beta), c(wd), w.astype(g.dtype)
    sq = rounded(g * g)
    z = z + (g - ((jnp.sqrt(n + sq) - jnp.sqrt(n)) * w) / c(lr))
    n = n + sq
    den = (b + jnp.sqrt(n)) / c(lr) + wd
    w_new = (rounded(jnp.sign(z) * l1) - z) / den * (jnp.abs(z) > l1).astype(g.dtype)
    return w_new, z, n
