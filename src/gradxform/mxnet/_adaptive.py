"""MXNet 1.x adaptive rules: adam, adamax, nadam, adagrad, rmsprop, adadelta, ftml, ftrl.

Source: ``mxnet/optimizer/optimizer.py`` (1.9.1) and its kernels
(``adam_update``, ``rmsprop_update``, ``rmspropalex_update``,
``ftml_update``, ``ftrl_update``); the seed ``../shared/seeds/000_*.txt``.
Note where each rule adds ``wd * w``: before the clip for Adam, Adamax,
Nadam, FTML and RMSProp; after the division for AdaGrad; after the whole
step for AdaDelta; inside the closed form for FTRL.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._registry import Declaration
from .._base import GradientTransformation, chain, context_value, identity, transformation
from .._spec import Fusion, declare
from .._elementwise import fusable
from .._hyper import hyper_residual, hyper_scalar
from .._ranges import check_hyper
from .._tree import map_unzip, zeros_like_params as _zeros
from ..pieces.internal import one_minus_power
from ..pieces.internal import leaf_scan
from ..pieces import (bias_correction, lazy_rows, scale, scale_by_adamax,
                      scale_by_lr)
from ._common import check_unit, parse_options
from ._kernels import ADAM_DENOMINATOR, adam_moments, adam_step_size, rescaled
from ._kernels_adaptive import accumulated_squares, centered_rms, ftrl_closed_form, rms, rms_delta
from ..pieces.internal import divided_by
from .._types import Hyper, ParamTree
from .._domains import FINITE, NON_NEGATIVE_FINITE, POWER

__all__ = ["adam", "adamax", "nadam", "adagrad", "rmsprop", "adadelta", "ftml", "ftrl"]
DECLARED = (  # registered as 'mxnet.<name>' by the family's __init__ (gradxform._registry.Declaration)
    Declaration('adam', classes=('Adam',), migrates=True),
    Declaration('adamax', classes=('Adamax',), migrates=True),
    Declaration('nadam', classes=('Nadam',), migrates=True),
    Declaration('adagrad', classes=('AdaGrad',), migrates=True),
    Declaration('rmsprop', classes=('RMSProp',), migrates=True),
    Declaration('adadelta', classes=('AdaDelta',), migrates=True),
    Declaration('ftml', classes=('FTML',), migrates=True),
    Declaration('ftrl', classes=('Ftrl',), migrates=True),
)




def _check_eps(owner, **values):
    for name, v in values.items():
        check_hyper(owner, name, v)


def adam(learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, lazy_update=False, *, wd=0.0, rescale_grad=1.0,
         clip_gradient=None, lr_scheduler=None, multi_precision=False, begin_num_update=0, lr_mult=None, wd_mult=None,
         param_idx2name=None, skip_nonfinite=False, param_dict=None, aggregate_num=None,
         use_fused_step=None) -> GradientTransformation:
    """MXNet Adam (``Adam.update`` -> ``adam_update``, ``AdamUpdateKernel`` in
    optimizer_op-inl.h:1292-1316), in its order of operations, each product rounded::

        g = clip(grad * rescale_grad + w * wd, clip_gradient)
        m = beta1 * m + (1 - beta1) * g;   v = beta2 * v + ((1 - beta2) * g) * g
        lr_t = lr * (sqrt(1 - beta2^t) / (1 - beta1^t))     (MXNet: Python float64)
        w -= (lr_t * m) / (sqrt(v) + epsilon)

    ``t`` is the parameter's own update count. A jitted step is MXNet 1.9.1's to
    the last bit (tests/test_mxnet_kernel_order.py; ``lr_t`` as
    `gradxform.mxnet._kernels.adam_step_size` computes it). ``lazy_update`` as
    in `sgd` (default False: MXNet's True only acts on row_sparse gradients).
    """
    o = parse_options(adam, learning_rate, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient,
                      lr_scheduler=lr_scheduler, multi_precision=multi_precision, begin_num_update=begin_num_update,
                      lr_mult=lr_mult, wd_mult=wd_mult, param_idx2name=param_idx2name, skip_nonfinite=skip_nonfinite,
                      param_dict=param_dict, aggregate_num=aggregate_num, use_fused_step=use_fused_step)
    check_unit(o.owner, beta1=beta1, beta2=beta2)
    _check_eps(o.owner, epsilon=epsilon)
    body = chain(rescaled(o.rescale_grad), o.add_wd(rounded=True), o.clip(), adam_moments(beta1, beta2, epsilon),
                 adam_step_size(beta1, beta2, o.learning_rate), divided_by(ADAM_DENOMINATOR), needs=("lr", "count"))
    return o.build(lazy_rows(body) if lazy_update else body)


def adamax(learning_rate=0.002, beta1=0.9, beta2=0.999, *, wd=0.0, rescale_grad=1.0, clip_gradient=None,
           lr_scheduler=None, multi_precision=False, begin_num_update=0, lr_mult=None, wd_mult=None,
           param_idx2name=None, skip_nonfinite=False, param_dict=None, aggregate_num=None,
           use_fused_step=None) -> GradientTransformation:
    """MXNet Adamax (``Adamax.update``)::

        g = clip(rescale_grad * grad + wd * w, clip_gradient)
        m = beta1 m + (1 - beta1) g;   u = max(beta2 u, |g|)
        w -= lr / (1 - beta1^t) * m / u
    """
    o = parse_options(adamax, learning_rate, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient,
                      lr_scheduler=lr_scheduler, multi_precision=multi_precision, begin_num_update=begin_num_update,
                      lr_mult=lr_mult, wd_mult=wd_mult, param_idx2name=param_idx2name, skip_nonfinite=skip_nonfinite,
                      param_dict=param_dict, aggregate_num=aggregate_num, use_fused_step=use_fused_step)
    check_unit(o.owner, beta1=beta1, beta2=beta2)
    return o.build(o.rescale(), o.add_wd(), o.clip(), scale_by_adamax(beta1, beta2),
                   bias_correction(beta1, None), scale_by_lr())


class NadamState(NamedTuple):
    hyper: Hyper
    hyper_lo: Hyper
    mu: ParamTree
    nu: ParamTree
    m_schedule: jax.Array
    domains = {"mu": FINITE, "nu": NON_NEGATIVE_FINITE, "m_schedule": POWER}


def _nadam_direction(beta1, beta2, epsilon, schedule_decay):
    """Nadam's own piece. MXNet keeps ``m_schedule`` on the optimizer object,
    shared by all parameters, and multiplies it once per parameter update:
    within a step, parameter i sees it advanced i+1 times. Reproduced here
    with a running product over the leaves in MXNet's index order."""

    def init(params):
        return NadamState({"beta1": hyper_scalar(beta1), "beta2": hyper_scalar(beta2),
                           "epsilon": hyper_scalar(epsilon), "schedule_decay": hyper_scalar(schedule_decay)},
                          {"beta2": hyper_residual(beta2)},
                          _zeros(params), _zeros(params), jnp.ones((), jnp.float32))

    def momenta(h, t):
        t = t.astype(jnp.float32)
        mom_t = h["beta1"] * (1.0 - 0.5 * 0.96 ** (t * h["schedule_decay"]))
        mom_t1 = h["beta1"] * (1.0 - 0.5 * 0.96 ** ((t + 1) * h["schedule_decay"]))
        return t, mom_t, mom_t1

    def advance(sched, x):
        mom_t, _, on = x
        return jnp.where(on, sched * mom_t, sched)  # advanced once per parameter update

    def denominators(sched, x):
        return 1.0 - sched, 1.0 - sched * x[1]

    # fused: the shared schedule is one scalar per leaf, multiplied leaf by leaf in index
    # order as per leaf (`leaf_scan`), then spread over the buffers (per-leaf values per element)
    @declare(needs=("count", "mask"), fusion=Fusion(bit_exact=False, reductions=("leaf_scan",)))
    def update(updates, state, params=None, **extra_args):
        del params
        h, lo = state.hyper, state.hyper_lo
        count = context_value(extra_args, "count", update)
        mask = context_value(extra_args, "mask", update)
        leaves, treedef = jax.tree.flatten(updates)
        steps = [(*momenta(h, t)[1:], jnp.asarray(on).reshape(()))
                 for t, on in zip(treedef.flatten_up_to(count), treedef.flatten_up_to(mask))]
        sched, dens = leaf_scan(advance, denominators, state.m_schedule, steps, extra_args)
        mus, nus, outs = [], [], []
        for i, (g, m, v, t, on) in enumerate(zip(leaves, treedef.flatten_up_to(state.mu),
                                                 treedef.flatten_up_to(state.nu), treedef.flatten_up_to(count),
                                                 treedef.flatten_up_to(mask))):
            t, mom_t, mom_t1 = momenta(h, t)
            g_den, m_den = dens[i]
            c = lambda x: x.astype(g.dtype)  # noqa: E731
            m = c(h["beta1"]) * m + (1 - c(h["beta1"])) * g
            # MXNet's Python computes 1 - beta2 in float64 before the float32 multiply
            v = c(h["beta2"]) * v + c((1.0 - h["beta2"]) - lo["beta2"]) * g * g
            # x * (1 / d), not x / d: XLA:CPU turns a division by a broadcast
            # scalar into this, so writing it out keeps the per-leaf numbers and
            # gives a fused buffer (d per element) the same arithmetic.
            g_prime = g * (1 / c(g_den))
            m_prime = m * (1 / c(m_den))
            v_prime = v / c(one_minus_power(h["beta2"], lo["beta2"], t))
            m_bar = c(1.0 - mom_t) * g_prime + c(mom_t1) * m_prime
            outs.append(m_bar / (jnp.sqrt(v_prime) + c(h["epsilon"])))
            mus.append(m)
            nus.append(v)
        new = NadamState(h, lo, treedef.unflatten(mus), treedef.unflatten(nus), sched)
        return treedef.unflatten(outs), new

    return transformation(init, update)


def nadam(learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, schedule_decay=0.004, *, wd=0.0,
          rescale_grad=1.0, clip_gradient=None, lr_scheduler=None, multi_precision=False, begin_num_update=0,
          lr_mult=None, wd_mult=None, param_idx2name=None, skip_nonfinite=False, param_dict=None, aggregate_num=None,
          use_fused_step=None) -> GradientTransformation:
    """MXNet Nadam (``Nadam.update``)::

        g = clip(rescale_grad * grad + wd * w, clip_gradient)
        mu_t = beta1 (1 - 0.5 * 0.96^(t * schedule_decay)),  mu_t1 likewise at t + 1
        m_schedule *= mu_t  (shared by all parameters; see `_nadam_direction`)
        m = beta1 m + (1-beta1) g;  v = beta2 v + (1-beta2) g^2
        m_bar = (1 - mu_t) g / (1 - m_schedule) + mu_t1 m / (1 - m_schedule * mu_t1)
        w -= lr * m_bar / (sqrt(v / (1 - beta2^t)) + epsilon)
    """
    o = parse_options(nadam, learning_rate, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient,
                      lr_scheduler=lr_scheduler, multi_precision=multi_precision, begin_num_update=begin_num_update,
                      lr_mult=lr_mult, wd_mult=wd_mult, param_idx2name=param_idx2name, skip_nonfinite=skip_nonfinite,
                      param_dict=param_dict, aggregate_num=aggregate_num, use_fused_step=use_fused_step)
    check_unit(o.owner, beta1=beta1, beta2=beta2)
    _check_eps(o.owner, epsilon=epsilon)
    check_hyper(o.owner, "schedule_decay", schedule_decay)
    return o.build(o.rescale(), o.add_wd(), o.clip(),
                   _nadam_direction(beta1, beta2, epsilon, schedule_decay), scale_by_lr())


def adagrad(learning_rate=None, eps=1e-7, *, wd=0.0, rescale_grad=1.0, clip_gradient=None, lr_scheduler=None,
            multi_precision=False, begin_num_update=0, lr_mult=None, wd_mult=None, param_idx2name=None,
            skip_nonfinite=False, param_dict=None, aggregate_num=None, use_fused_step=None) -> GradientTransformation:
    """MXNet AdaGrad (``AdaGrad.update``, dense path, optimizer.py:1665-1688: NDArray
    operations, each rounded on its own)::

        g = clip(grad * rescale_grad, clip_gradient)
        history += g * g
        w += (g / sqrt(history + eps) + w * wd) * -lr

    A jitted step is MXNet 1.9.1's to the last bit (tests/test_mxnet_kernel_order.py).
    """
    o = parse_options(adagrad, learning_rate, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient,
                      lr_scheduler=lr_scheduler, multi_precision=multi_precision, begin_num_update=begin_num_update,
                      lr_mult=lr_mult, wd_mult=wd_mult, param_idx2name=param_idx2name, skip_nonfinite=skip_nonfinite,
                      param_dict=param_dict, aggregate_num=aggregate_num, use_fused_step=use_fused_step)
    check_hyper(o.owner, "eps", eps)
    # in the slots (and states) of rescale, clip, scale_by_accumulated_squares, add_wd, scale_by_lr
    return o.build(rescaled(o.rescale_grad), o.clip(), accumulated_squares(eps), o.add_wd(rounded=True),
                   scale_by_lr(rounded=True))


class WeightClipState(NamedTuple):
    hyper: Hyper


def _clip_weights(clip_weights):
    """RMSProp's own piece: the new weight is clipped to ``[-c, c]``."""
    if not clip_weights:
        return identity()

    def init(params):
        del params
        return WeightClipState({"clip_weights": hyper_scalar(clip_weights)})

    @fusable
    def update(updates, state, params=None, **extra_args):
        del extra_args
        c = state.hyper["clip_weights"]
        return jax.tree.map(lambda u, w: jnp.clip(w + u, -c.astype(u.dtype), c.astype(u.dtype)) - w,
                            updates, params), state

    return transformation(init, update)


def rmsprop(learning_rate=0.001, gamma1=0.9, gamma2=0.9, epsilon=1e-8, centered=False, clip_weights=None, *, wd=0.0,
            rescale_grad=1.0, clip_gradient=None, lr_scheduler=None, multi_precision=False, begin_num_update=0,
            lr_mult=None, wd_mult=None, param_idx2name=None, skip_nonfinite=False, param_dict=None,
            aggregate_num=None, use_fused_step=None) -> GradientTransformation:
    """MXNet RMSProp (``rmsprop_update``; ``rmspropalex_update`` when centered).

    In the kernels' order of operations, each product rounded. Tieleman & Hinton
    (``centered=False``, ``RMSPropUpdateKernel``, optimizer_op-inl.h:2052-2077)::

        g = clip(rescale_grad * grad + wd * w, clip_gradient)
        n = (1 - gamma1) * (g * g) + gamma1 * n
        w -= lr * (g / sqrt(n + epsilon))

    Graves 2013 (``centered=True``, ``RMSPropAlexUpdateKernel``, :1953-1984)::

        n = ((1 - gamma1) * g) * g + gamma1 * n;   gbar = (1 - gamma1) * g + gamma1 * gbar
        delta = gamma2 * delta - (lr * g) / sqrt((n - gbar * gbar) + epsilon);   w += delta

    then, with ``clip_weights``, ``w = clip(w, -clip_weights, clip_weights)``.
    ``centered`` is static. Without ``clip_weights`` a jitted step is MXNet 1.9.1's to the
    last bit (tests/test_mxnet_kernel_order.py).
    """
    o = parse_options(rmsprop, learning_rate, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient,
                      lr_scheduler=lr_scheduler, multi_precision=multi_precision, begin_num_update=begin_num_update,
                      lr_mult=lr_mult, wd_mult=wd_mult, param_idx2name=param_idx2name, skip_nonfinite=skip_nonfinite,
                      param_dict=param_dict, aggregate_num=aggregate_num, use_fused_step=use_fused_step)
    if clip_weights:
        check_hyper(o.owner, "clip_weights", clip_weights)  # the weight clip's range (None/0: no clip)
    check_unit(o.owner, gamma1=gamma1, gamma2=gamma2)
    _check_eps(o.owner, epsilon=epsilon)
    # in the slots (and states) of rescale, add_wd, clip, scale_by_(centered_)rms, scale_by_lr, trace
    if centered:
        direction = (centered_rms(gamma1, epsilon), scale_by_lr(rounded=True), rms_delta(gamma2))
    else:
        direction = (rms(gamma1, epsilon), scale_by_lr(rounded=True), identity())
    return o.build(rescaled(o.rescale_grad), o.add_wd(rounded=True), o.clip(), *direction,
                   _clip_weights(clip_weights))


class AdaDeltaState(NamedTuple):
    hyper: Hyper
    acc_g: ParamTree
    acc_delta: ParamTree
    domains = {"acc_g": NON_NEGATIVE_FINITE, "acc_delta": NON_NEGATIVE_FINITE}


def _adadelta_direction(rho, epsilon):
    """AdaDelta's own piece: emits ``delta`` (the step before the sign)."""

    def init(params):
        return AdaDeltaState({"rho": hyper_scalar(rho), "epsilon": hyper_scalar(epsilon)},
                             _zeros(params), _zeros(params))

    @fusable
    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        rho, eps = state.hyper["rho"], state.hyper["epsilon"]

        def one(g, ag, ad):
            r, e = rho.astype(g.dtype), eps.astype(g.dtype)
            ag = r * ag + (1 - r) * g * g
            delta = jnp.sqrt(ad + e) / jnp.sqrt(ag + e) * g
            ad = r * ad + (1 - r) * delta * delta
            return delta, ag, ad

        out, s1, s2 = map_unzip(one, 3, updates, state.acc_g, state.acc_delta)
        return out, AdaDeltaState(state.hyper, s1, s2)

    return transformation(init, update)


def adadelta(learning_rate=None, rho=0.90, epsilon=1e-5, *, wd=0.0, rescale_grad=1.0, clip_gradient=None,
             lr_scheduler=None, multi_precision=False, begin_num_update=0, lr_mult=None, wd_mult=None,
             param_idx2name=None, skip_nonfinite=False, param_dict=None, aggregate_num=None,
             use_fused_step=None) -> GradientTransformation:
    """MXNet AdaDelta (``AdaDelta.update``); no learning rate enters the rule::

        g = clip(rescale_grad * grad, clip_gradient)
        acc_g = rho acc_g + (1 - rho) g^2
        delta = sqrt(acc_delta + eps) / sqrt(acc_g + eps) * g
        acc_delta = rho acc_delta + (1 - rho) delta^2
        w -= delta + wd * w
    """
    o = parse_options(adadelta, learning_rate, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient,
                      lr_scheduler=lr_scheduler, multi_precision=multi_precision, begin_num_update=begin_num_update,
                      lr_mult=lr_mult, wd_mult=wd_mult, param_idx2name=param_idx2name, skip_nonfinite=skip_nonfinite,
                      param_dict=param_dict, aggregate_num=aggregate_num, use_fused_step=use_fused_step)
    check_unit(o.owner, rho=rho)
    _check_eps(o.owner, epsilon=epsilon)
    return o.build(o.rescale(), o.clip(), _adadelta_direction(rho, epsilon), o.add_wd(), scale(-1.0),
                   read_lr="before")


class FTMLState(NamedTuple):
    hyper: Hyper
    d: ParamTree
    v: ParamTree
    z: ParamTree
    domains = {"v": NON_NEGATIVE_FINITE, "z": FINITE}  # d: (1 - b1^t) / lr (...), +inf at lr 0: not declared


def _ftml_step(beta1, beta2, epsilon):
    """FTML's own piece: emits ``w_new - w`` from the closed form."""

    def init(params):
        return FTMLState({"beta1": hyper_scalar(beta1), "beta2": hyper_scalar(beta2),
                          "epsilon": hyper_scalar(epsilon)}, _zeros(params), _zeros(params), _zeros(params))

    @declare(needs=("lr", "count"), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        lr = context_value(extra_args, "lr", update)
        count = context_value(extra_args, "count", update)
        h = state.hyper

        def one(g, w, d, v, z, l, t):
            c = lambda x: x.astype(g.dtype)  # noqa: E731
            t = t.astype(jnp.float32)
            b1, b2 = c(h["beta1"]), c(h["beta2"])
            v = b2 * v + (1 - b2) * g * g
            d_t = c((1 - h["beta1"] ** t) / l) * (jnp.sqrt(v / c(1 - h["beta2"] ** t)) + c(h["epsilon"]))
            z = b1 * z + (1 - b1) * g - (d_t - b1 * d) * w
            return -z / d_t - w, d_t, v, z

        out, s1, s2, s3 = map_unzip(one, 4, updates, params, state.d, state.v, state.z, lr, count)
        return out, FTMLState(h, s1, s2, s3)

    return transformation(init, update)


def ftml(learning_rate=None, beta1=0.6, beta2=0.999, epsilon=1e-8, *, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         lr_scheduler=None, multi_precision=False, begin_num_update=0, lr_mult=None, wd_mult=None,
         param_idx2name=None, skip_nonfinite=False, param_dict=None, aggregate_num=None,
         use_fused_step=None) -> GradientTransformation:
    """MXNet FTML (Follow the Moving Leader, ``ftml_update``)::

        g = clip(rescale_grad * grad + wd * w, clip_gradient)
        v = beta2 v + (1 - beta2) g^2
        d_t = (1 - beta1^t) / lr * (sqrt(v / (1 - beta2^t)) + epsilon)
        z = beta1 z + (1 - beta1) g - (d_t - beta1 d_{t-1}) w
        w = -z / d_t
    """
    o = parse_options(ftml, learning_rate, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient,
                      lr_scheduler=lr_scheduler, multi_precision=multi_precision, begin_num_update=begin_num_update,
                      lr_mult=lr_mult, wd_mult=wd_mult, param_idx2name=param_idx2name, skip_nonfinite=skip_nonfinite,
                      param_dict=param_dict, aggregate_num=aggregate_num, use_fused_step=use_fused_step)
    check_unit(o.owner, beta1=beta1, beta2=beta2)
    _check_eps(o.owner, epsilon=epsilon)
    return o.build(o.rescale(), o.add_wd(), o.clip(), _ftml_step(beta1, beta2, epsilon))


class MXNetFtrlState(NamedTuple):
    hyper: Hyper
    z: ParamTree
    n: ParamTree
    domains = {"z": FINITE, "n": NON_NEGATIVE_FINITE}


def _ftrl_step(lamda1, beta):
    """FTRL-proximal's own piece: emits ``w_new - w`` from the closed form,
    with the learning rate and decay of the step context, in ``FtrlUpdateKernel``'s order
    of operations (`gradxform.mxnet._kernels_adaptive.ftrl_closed_form`)."""

    def init(params):
        return MXNetFtrlState({"lamda1": hyper_scalar(lamda1), "beta": hyper_scalar(beta)},
                         _zeros(params), _zeros(params))

    @declare(needs=("lr", "wd"), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        lr = context_value(extra_args, "lr", update)
        wd = context_value(extra_args, "wd", update)
        h = state.hyper

        def one(g, w, z, n, l, d):
            w_new, z, n = ftrl_closed_form(g, w, z, n, l, d, h["lamda1"], h["beta"])
            return w_new - w.astype(g.dtype), z, n

        out, s1, s2 = map_unzip(one, 3, updates, params, state.z, state.n, lr, wd)
        return out, MXNetFtrlState(h, s1, s2)

    return transformation(init, update)


def ftrl(learning_rate=0.1, lamda1=0.01, beta=1.0, *, wd=0.0, rescale_grad=1.0, clip_gradient=None, lr_scheduler=None,
         multi_precision=False, begin_num_update=0, lr_mult=None, wd_mult=None, param_idx2name=None,
         skip_nonfinite=False, param_dict=None, aggregate_num=None, use_fused_step=None) -> GradientTransformation:
    """MXNet Ftrl (FTRL-proximal, ``ftrl_update``, ``FtrlUpdateKernel`` in
    optimizer_op-inl.h:2133-2155), in its order of operations, each product rounded::

        g = clip(grad * rescale_grad, clip_gradient)
        z += g - ((sqrt(n + g * g) - sqrt(n)) * w) / lr
        n += g * g
        w = (sign(z) * lamda1 - z) / ((beta + sqrt(n)) / lr + wd) * (|z| > lamda1)

    The arithmetic is the kernel's to the last bit, and so are ``z`` and ``n``; the new
    weight comes back as ``w + (w_new - w)``, which is not ``w_new`` where no float32
    difference reaches it from ``w`` (tests/test_mxnet_kernel_order.py).
    """
    if lr_scheduler is not None:
        # MXNet's Ftrl keeps learning_rate to itself, so a scheduler runs from its own base_lr.
        learning_rate = None
    o = parse_options(ftrl, learning_rate, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient,
                      lr_scheduler=lr_scheduler, multi_precision=multi_precision, begin_num_update=begin_num_update,
                      lr_mult=lr_mult, wd_mult=wd_mult, param_idx2name=param_idx2name, skip_nonfinite=skip_nonfinite,
                      param_dict=param_dict, aggregate_num=aggregate_num, use_fused_step=use_fused_step)
    check_hyper(o.owner, "lamda1", lamda1)
    check_hyper(o.owner, "beta", beta)
    return o.build(o.provide_wd(), rescaled(o.rescale_grad), o.clip(), _ftrl_step(lamda1, beta))



# -- the framework's classes, in its positional order (each named in its `Declaration`) --

def AdaDelta(rho=0.90, epsilon=1e-5, *, rescale_grad=1.0, param_idx2name=None, wd=0.0, clip_gradient=None,
             learning_rate=None, lr_scheduler=None, begin_num_update=0, multi_precision=False, param_dict=None,
             lr_mult=None, wd_mult=None, skip_nonfinite=False, aggregate_num=None,
             use_fused_step=None) -> GradientTransformation:
    """``mx.optimizer.AdaDelta(rho, epsilon, **kwargs)``: `gradxform.mxnet.adadelta`."""
    return adadelta(rho=rho, epsilon=epsilon, rescale_grad=rescale_grad, param_idx2name=param_idx2name, wd=wd,
                    clip_gradient=clip_gradient, learning_rate=learning_rate, lr_scheduler=lr_scheduler,
                    begin_num_update=begin_num_update, multi_precision=multi_precision, param_dict=param_dict,
                    lr_mult=lr_mult, wd_mult=wd_mult, skip_nonfinite=skip_nonfinite, aggregate_num=aggregate_num,
                    use_fused_step=use_fused_step)


def AdaGrad(eps=1e-7, *, rescale_grad=1.0, param_idx2name=None, wd=0.0, clip_gradient=None, learning_rate=None,
            lr_scheduler=None, begin_num_update=0, multi_precision=False, param_dict=None, lr_mult=None,
            wd_mult=None, skip_nonfinite=False, aggregate_num=None, use_fused_step=None) -> GradientTransformation:
    """``mx.optimizer.AdaGrad(eps, **kwargs)``: `gradxform.mxnet.adagrad`."""
    return adagrad(eps=eps, rescale_grad=rescale_grad, param_idx2name=param_idx2name, wd=wd,
                   clip_gradient=clip_gradient, learning_rate=learning_rate, lr_scheduler=lr_scheduler,
                   begin_num_update=begin_num_update, multi_precision=multi_precision, param_dict=param_dict,
                   lr_mult=lr_mult, wd_mult=wd_mult, skip_nonfinite=skip_nonfinite, aggregate_num=aggregate_num,
                   use_fused_step=use_fused_step)


def FTML(beta1=0.6, beta2=0.999, epsilon=1e-8, *, rescale_grad=1.0, param_idx2name=None, wd=0.0,
         clip_gradient=None, learning_rate=None, lr_scheduler=None, begin_num_update=0, multi_precision=False,
         param_dict=None, lr_mult=None, wd_mult=None, skip_nonfinite=False, aggregate_num=None,
         use_fused_step=None) -> GradientTransformation:
    """``mx.optimizer.FTML(beta1, beta2, epsilon, **kwargs)``: `gradxform.mxnet.ftml`."""
    return ftml(beta1=beta1, beta2=beta2, epsilon=epsilon, rescale_grad=rescale_grad, param_idx2name=param_idx2name,
                wd=wd, clip_gradient=clip_gradient, learning_rate=learning_rate, lr_scheduler=lr_scheduler,
                begin_num_update=begin_num_update, multi_precision=multi_precision, param_dict=param_dict,
                lr_mult=lr_mult, wd_mult=wd_mult, skip_nonfinite=skip_nonfinite, aggregate_num=aggregate_num,
                use_fused_step=use_fused_step)


def Ftrl(lamda1=0.01, learning_rate=0.1, beta=1.0, *, rescale_grad=1.0, param_idx2name=None, wd=0.0,
         clip_gradient=None, lr_scheduler=None, begin_num_update=0, multi_precision=False, param_dict=None,
         lr_mult=None, wd_mult=None, skip_nonfinite=False, aggregate_num=None,
         use_fused_step=None) -> GradientTransformation:
    """``mx.optimizer.Ftrl(lamda1, learning_rate, beta, **kwargs)``: `gradxform.mxnet.ftrl`."""
    return ftrl(lamda1=lamda1, learning_rate=learning_rate, beta=beta, rescale_grad=rescale_grad,
                param_idx2name=param_idx2name, wd=wd, clip_gradient=clip_gradient, lr_scheduler=lr_scheduler,
                begin_num_update=begin_num_update, multi_precision=multi_precision, param_dict=param_dict,
                lr_mult=lr_mult, wd_mult=wd_mult, skip_nonfinite=skip_nonfinite, aggregate_num=aggregate_num,
                use_fused_step=use_fused_step)


Adam = adam


Adamax = adamax


Nadam = nadam


RMSProp = rmsprop
