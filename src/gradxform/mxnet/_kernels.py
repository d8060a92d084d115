"""MXNet 1.9.1's SGD, NAG-without-momentum, Signum and Adam kernels in their order of
operations, product by product (RMSProp's, AdaGrad's and Ftrl's: `gradxform.mxnet._kernels_adaptive`;
NAG's momentum kernel: `gradxform.mxnet._momentum`).

MXNet's pip ``libmxnet.so`` rounds every product of its optimizer kernels on its own (no FMA in
them), where XLA contracts a jitted ``a * b + c`` into one fused multiply-add: each product
below that an addition reads is `rounded` (`gradxform._rounding`). With that, a jitted step is
MXNet's to the last bit (tests/test_mxnet_kernel_order.py, fixture from MXNet's own Updater:
tools/mxnet_kernel_order_golden.py).

Each piece keeps the state of the shared piece whose slot it takes in the rule's chain
(`gradxform.pieces.rescale`, ``add_decayed_weights``, ``trace``, ``scale_by_adam_moments``,
``bias_correction``, ``scale_by_lr``), so states, checkpoints and fixtures written before
load unchanged. Values pass between the pieces of one chain by `LocalKey`.

Sources (``src/operator/optimizer_op-inl.h``, 1.9.1): ``MultiSGDKernel`` :225-256 (the
Gluon path, ``multi_sgd_update`` / ``multi_sgd_mom_update``), ``SGDKernel`` :381-398
(``sgd_update``: NAG with momentum 0), ``SignumKernel`` :2412-2432, ``AdamUpdateKernel`` :1292-1316,
and ``Adam.update`` in ``python/mxnet/optimizer/optimizer.py`` (the bias-corrected rate).
"""
from __future__ import annotations

from typing import cast

import jax
import jax.numpy as jnp
import numpy as np

from .._base import GradientTransformation, StepContext, context_value, needs_params, transformation
from .._hyper import hyper_residual, hyper_scalar
from .._rounding import rounded
from .._spec import Fusion, LocalKey, declare
from .._tree import map_unzip, zeros_like_params as _zeros
from ..pieces.internal import BiasCorrectionState, DecayState, HyperState, MomentsState, TraceState

__all__ = ["rescaled", "sgd_terms", "sgd_momentum", "sgd_update_step", "signum_momentum", "signum_decay",
           "adam_moments", "adam_step_size", "RESCALE", "SGD_DECAY", "ADAM_DENOMINATOR"]

RESCALE = LocalKey("mxnet_rescale_grad", "MXNet's rescaled (the kernel's rescale_grad)")
SGD_DECAY = LocalKey("mxnet_sgd_decay", "MXNet SGD's sgd_terms ((lr * wd) * w)")
ADAM_DENOMINATOR = LocalKey("mxnet_adam_denominator", "MXNet Adam's adam_moments (sqrt(v) + epsilon)")


def _c(h, x):
    return h.astype(x.dtype)


# -- the rescale and decay slots ------------------------------------------------------------

def rescaled(rescale_grad: float, *, deferred: bool = False) -> GradientTransformation:
    """``g -> g * rescale_grad``, the product rounded (its slot: `gradxform.pieces.rescale`,
    the same state). ``deferred``: the update passes unchanged and the factor goes to
    `sgd_terms` (`RESCALE`), for ``MultiSGDKernel``'s unclipped branch, which multiplies
    ``(lr * rescale_grad) * g``."""

    def init(params):
        del params
        return HyperState({"rescale_grad": hyper_scalar(rescale_grad)})

    @declare(provides=(RESCALE,) if deferred else (), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        del params
        f = state.hyper["rescale_grad"]
        if deferred:
            cast(StepContext, StepContext.of(extra_args)).publish_local({RESCALE: f})
            return updates, state
        return jax.tree.map(lambda g: rounded(g * _c(f, g)), updates), state

    return transformation(init, update)


# -- SGD: MultiSGDKernel ---------------------------------------------------------------------

def sgd_terms(*, deferred_rescale: bool, momentum: bool) -> GradientTransformation:
    """``MultiSGDKernel``'s two products, in the `gradxform.pieces.scale_by_lr` slot (no
    state)::

        decay = (lr * wd) * w
        grad  = (lr * rescale_grad) * g        (clip: lr * clip(g * rescale_grad, c))
        mom   = momentum * mom - decay - grad;   w = w + mom

    It emits ``(0 - decay) - grad`` (no momentum: ``multi_sgd_update`` is the same kernel
    with ``mom = 0``), or, for `sgd_momentum`, ``grad`` and hands it ``decay`` (`SGD_DECAY`).
    ``lr`` and ``wd`` are each parameter's (`track_step`, ``provide_weight_decay``);
    ``deferred_rescale``: ``rescale_grad`` comes from `rescaled` (`RESCALE`), else the
    updates arrive rescaled and clipped."""

    needs = ("lr", "wd") + ((RESCALE,) if deferred_rescale else ())

    def init(params):
        del params
        return ()

    @declare(needs=needs, provides=(SGD_DECAY,) if momentum else (), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        if params is None:
            raise needs_params(update)
        lr = context_value(extra_args, "lr", update)
        wd = context_value(extra_args, "wd", update)
        rg = context_value(extra_args, RESCALE, update) if deferred_rescale else None

        def one(g, w, l, d):
            l = _c(l, g)
            decay = rounded(l * _c(d, g) * w.astype(g.dtype))
            grad = rounded(l * _c(rg, g) * g) if deferred_rescale else rounded(l * g)
            return decay, grad

        decay, grad = map_unzip(one, 2, updates, params, lr, wd)
        if momentum:
            cast(StepContext, StepContext.of(extra_args)).publish_local({SGD_DECAY: decay})
            return grad, state
        return jax.tree.map(lambda a, b: (jnp.zeros_like(a) - a) - b, decay, grad), state

    return transformation(init, update)


def sgd_momentum(momentum: float) -> GradientTransformation:
    """``mom = momentum * mom - decay - grad``, each product rounded, with ``grad`` the
    update and ``decay`` from `sgd_terms`; emits ``mom`` (``w = w + mom``). Its slot and
    state are `gradxform.pieces.trace`'s (``TraceState``, hyperparameter ``momentum``)."""

    def init(params):
        return TraceState({"momentum": hyper_scalar(momentum)}, _zeros(params))

    @declare(needs=(SGD_DECAY,), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        del params
        decay = context_value(extra_args, SGD_DECAY, update)
        mu = state.hyper["momentum"]
        m = jax.tree.map(lambda t, g, d: (rounded(_c(mu, t) * t) - d) - g, state.trace, updates, decay)
        return m, TraceState(state.hyper, m)

    return transformation(init, update)


def sgd_update_step(*, deferred_rescale: bool) -> GradientTransformation:
    """``SGDKernel`` (optimizer_op-inl.h:381-398; ``sgd_update``, which MXNet's NAG runs
    when its momentum is 0), each product rounded::

        w = (1 - lr * wd) * w - (lr * rescale_grad) * g
            (clip: (1 - lr * wd) * w - lr * clip(rescale_grad * g, c))

    in the `gradxform.pieces.scale_by_lr` slot (no state); emits ``w_new - w``, and ``-grad``
    where ``lr * wd`` is 0 (``w + (-grad)`` is the kernel's difference then). ``lr`` and ``wd``
    are each parameter's; ``deferred_rescale`` as in `sgd_terms`."""

    needs = ("lr", "wd") + ((RESCALE,) if deferred_rescale else ())

    def init(params):
        del params
        return ()

    @declare(needs=needs, fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        if params is None:
            raise needs_params(update)
        lr = context_value(extra_args, "lr", update)
        wd = context_value(extra_args, "wd", update)
        rg = context_value(extra_args, RESCALE, update) if deferred_rescale else None

        def one(g, w, l, d):
            l, w = _c(l, g), w.astype(g.dtype)
            decay = rounded(l * _c(d, g))
            grad = rounded(rounded(l * _c(rg, g)) * g) if deferred_rescale else rounded(l * g)
            new = rounded(rounded(1 - decay) * w) - grad
            return jnp.where(decay == 0, -grad, new - w)

        return jax.tree.map(one, updates, params, lr, wd), state

    return transformation(init, update)


# -- Signum: SignumKernel ----------------------------------------------------------------------

def signum_momentum(momentum: float, *, deferred_rescale: bool) -> GradientTransformation:
    """``SignumKernel``'s momentum (optimizer_op-inl.h:2412-2432), each product rounded::

        mom = momentum * mom - ((1 - momentum) * wd) * w - ((1 - momentum) * rescale_grad) * g
              (clip: ... - (1 - momentum) * clip(rescale_grad * g, c))

    MXNet stores ``mom``, the negated moving average; the state here holds ``-mom`` (the
    average, as `gradxform.pieces.ema` holds it: its slot and state, ``TraceState``), which is
    the same arithmetic with the signs flipped, exactly. Emits the average (then ``sign``,
    ``scale_by_lr``: ``w + lr * sign(mom)``). ``wd`` is each parameter's;
    ``deferred_rescale``: ``rescale_grad`` from `rescaled` (`RESCALE`), else the updates
    arrive rescaled and clipped."""

    needs = ("wd",) + ((RESCALE,) if deferred_rescale else ())

    def init(params):
        return TraceState({"momentum": hyper_scalar(momentum)}, _zeros(params))

    @declare(needs=needs, fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        if params is None:
            raise needs_params(update)
        wd = context_value(extra_args, "wd", update)
        rg = context_value(extra_args, RESCALE, update) if deferred_rescale else None
        mu = state.hyper["momentum"]

        def one(avg, g, w, d):
            m, om = _c(mu, g), 1 - _c(mu, g)
            decay = rounded(rounded(om * _c(d, g)) * w.astype(g.dtype))
            grad = rounded(rounded(om * _c(rg, g)) * g) if deferred_rescale else rounded(om * g)
            return (rounded(m * avg) + decay) + grad  # -(mu * mom - decay - grad)

        avg = jax.tree.map(one, state.trace, updates, params, wd)
        return avg, TraceState(state.hyper, avg)

    return transformation(init, update)


def signum_decay(wd_lh: float) -> GradientTransformation:
    """``SignumKernel``'s weight: ``w = (1 - lr * wd_lh) * w + lr * sign(mom)``, each product
    rounded, with ``lr * sign(mom)`` the update; emits ``w_new - w``. Its slot and state are
    `gradxform.pieces.add_decoupled_weight_decay`'s (``DecayState``, ``wd_lh``)."""

    def init(params):
        del params
        return DecayState({"wd_lh": hyper_scalar(wd_lh)}, ())

    @declare(needs=("lr",), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        if params is None:
            raise needs_params(update)
        lr = context_value(extra_args, "lr", update)
        k = state.hyper["wd_lh"]

        def one(u, w, l):
            w = w.astype(u.dtype)
            decay = rounded(_c(l, u) * _c(k, u))
            return jnp.where(decay == 0, u, (rounded(rounded(1 - decay) * w) + u) - w)

        return jax.tree.map(one, updates, params, lr), state

    return transformation(init, update)


# -- Adam: AdamUpdateKernel and Adam.update ----------------------------------------------------

def adam_moments(beta1: float, beta2: float, epsilon: float) -> GradientTransformation:
    """``AdamUpdateKernel``'s moments, each product rounded::

        m = beta1 * m + (1 - beta1) * g;   v = beta2 * v + ((1 - beta2) * g) * g

    (``1 - beta`` in float32, as the kernel's ``1.f - beta1``); emits ``m`` and hands
    ``sqrt(v) + epsilon`` to the last piece, ``divided_by(ADAM_DENOMINATOR)``. Its slot and state are
    `gradxform.pieces.scale_by_adam_moments`'."""

    def init(params):
        return MomentsState({"beta1": hyper_scalar(beta1), "beta2": hyper_scalar(beta2),
                             "epsilon": hyper_scalar(epsilon)}, _zeros(params), _zeros(params))

    @declare(provides=(ADAM_DENOMINATOR,), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        del params
        h = state.hyper
        b1, b2, e = h["beta1"], h["beta2"], h["epsilon"]
        mu = jax.tree.map(lambda m, g: rounded(_c(b1, g) * m) + rounded((1 - _c(b1, g)) * g), state.mu, updates)
        nu = jax.tree.map(lambda v, g: rounded(_c(b2, g) * v) + rounded((1 - _c(b2, g)) * g * g), state.nu, updates)
        denominator = jax.tree.map(lambda v: jnp.sqrt(v) + _c(e, v), nu)
        cast(StepContext, StepContext.of(extra_args)).publish_local({ADAM_DENOMINATOR: denominator})
        return mu, MomentsState(h, mu, nu)

    return transformation(init, update)


def adam_step_size(beta1: float, beta2: float, learning_rate: float) -> GradientTransformation:
    """``u -> lr_t * u``, the product rounded, with MXNet's bias-corrected rate
    (``Adam.update``, Python's float64, rounded once to float32 by ``adam_update``)::

        lr_t = float32(lr * (sqrt(1 - beta2**t) / (1 - beta1**t)))

    computed in float32 pairs (`_bias_corrected_rate`, about 44 bits): over t = 1..100,000 it
    is MXNet's float32 number at every t for the settings measured (lr 3e-4..0.1, betas
    0.5..0.9999), but one t in 800,000; the float32 formula differs from it at 20-40% of the
    steps. ``lr`` is each parameter's float32 rate; where it is ``float32(learning_rate)`` (no
    schedule, no ``lr_mult``, the rate never changed) the rest of the float64
    ``learning_rate`` is added back, as MXNet multiplies its float64 rate. Its slot and state
    are `gradxform.pieces.bias_correction`'s (the betas with their float64 residuals)."""
    rate_hi = np.float32(learning_rate)
    rate_lo = np.float32(np.float64(learning_rate) - np.float64(rate_hi))

    def init(params):
        del params
        betas = {"beta1": beta1, "beta2": beta2}
        return BiasCorrectionState({k: hyper_scalar(v) for k, v in betas.items()},
                                   {k: hyper_residual(v) for k, v in betas.items()})

    @declare(needs=("lr", "count"), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        del params
        lr = context_value(extra_args, "lr", update)
        count = context_value(extra_args, "count", update)
        h, lo = state.hyper, state.hyper_lo

        def rates(l, t):  # l, t: one value, or a vector of them (one computation for all)
            l = l.astype(jnp.float32)
            l_lo = jnp.where(l == rate_hi, rate_lo, jnp.zeros_like(l))
            return _bias_corrected_rate((l, l_lo), (h["beta1"], lo["beta1"]), (h["beta2"], lo["beta2"]), t)

        leaves, treedef = jax.tree.flatten(updates)
        pairs = list(zip(treedef.flatten_up_to(lr), treedef.flatten_up_to(count)))
        # Each distinct (lr, count) pair once, and all of them in one vectorised computation: with
        # lr_mult or per-leaf counts, a loop per leaf would compile once per leaf.
        distinct = list({(id(l), id(t)): (l, t) for l, t in pairs}.values())
        if len(distinct) > 1 and all(jnp.ndim(l) == 0 and jnp.ndim(t) == 0 for l, t in distinct):
            vector = rates(jnp.stack([l for l, _ in distinct]), jnp.stack([t for _, t in distinct]))
            at = {(id(l), id(t)): vector[i] for i, (l, t) in enumerate(distinct)}
        else:
            at = {(id(l), id(t)): rates(l, t) for l, t in distinct}
        # lr_t * m feeds the division (divided_by): no multiply-add to stop, so not rounded
        out = [at[(id(l), id(t))].astype(u.dtype) * u for u, (l, t) in zip(leaves, pairs)]
        return treedef.unflatten(out), state

    return transformation(init, update)


# -- float32 pairs: MXNet's float64 scalar inside a float32 program ----------------------------
# A pair (hi, lo) holds hi + lo, |lo| <= ulp(hi) / 2. Every sum an error term is taken from
# is `rounded`: XLA would otherwise simplify ``(a + b) - a`` to ``b`` and lose the error.

def _two_sum(a, b):
    s = rounded(a + b)
    bb = rounded(s - a)
    return s, (a - rounded(s - bb)) + (b - bb)


def _fast_two_sum(a, b):  # |a| >= |b|
    s = rounded(a + b)
    return s, b - rounded(s - a)


def _split(a):  # Veltkamp: a = hi + lo, 12 bits each, so their products are exact
    c = rounded(jnp.float32(4097.0) * a)
    hi = c - rounded(c - a)
    return hi, a - hi


def _two_prod(a, b):
    p = rounded(a * b)
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _add(x, y):
    s, e = _two_sum(x[0], y[0])
    return _fast_two_sum(s, e + (x[1] + y[1]))


def _mul(x, y):
    p, e = _two_prod(x[0], y[0])
    return _fast_two_sum(p, e + (x[0] * y[1] + x[1] * y[0]))


def _neg(x):
    return -x[0], -x[1]


def _div(x, y):
    q = x[0] / y[0]
    r = _add(x, _neg(_mul((q, jnp.zeros_like(q)), y)))
    return _fast_two_sum(q, r[0] / y[0])


def _sqrt(x):
    s = jnp.sqrt(x[0])
    z = jnp.zeros_like(s)
    r = _add(x, _neg(_mul((s, z), (s, z))))
    return _fast_two_sum(s, r[0] / (2 * s))


def _one_minus_powers(betas, t):
    """``1 - beta**t`` for each pair ``beta`` in (0, 1) and int ``t >= 0``, all in one loop:
    ``y = 1 - beta**k`` by binary powering, ``1 - (1 - y)**2 = y * (2 - y)`` and ``1 - (1 - y) *
    beta = y + q * (1 - y)`` (``q = 1 - beta``): sums of positive terms, so no cancellation."""
    t = jnp.asarray(t).astype(jnp.int32)
    zero = jnp.zeros(jnp.shape(t), jnp.result_type(betas[0][0]))  # t's shape: one t, or a vector of them
    one, two = (zero + 1, zero), (zero + 2, zero)
    qs = [_add(one, _neg(beta)) for beta in betas]

    def body(i, ys):
        bit = ((t >> (30 - i)) & 1) == 1
        out = []
        for q, y in zip(qs, ys):
            y = _mul(y, _add(two, _neg(y)))
            stepped = _add(y, _mul(q, _add(one, _neg(y))))
            out.append((jnp.where(bit, stepped[0], y[0]), jnp.where(bit, stepped[1], y[1])))
        return tuple(out)

    return jax.lax.fori_loop(0, 31, body, tuple((zero, zero) for _ in betas))


def _bias_corrected_rate(lr, beta1, beta2, t):
    """``float32(lr * (sqrt(1 - beta2**t) / (1 - beta1**t)))`` from float32 pairs."""
    # Both powers in one loop (the loops are most of this computation's compile: 0.36 -> 0.23 s),
    # and the division last: XLA copies a cheap scalar computation into every fusion that reads
    # it, and a division is not cheap (the product last put its ~60 operations in each leaf's step).
    # The same float32 number as before at every t = 1..100,000 for 8 (lr, betas) settings.
    power2, power1 = _one_minus_powers((beta2, beta1), t)
    return _div(_mul(lr, _sqrt(power2)), power1)[0]
