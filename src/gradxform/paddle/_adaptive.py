"""Paddle (3.x) Adagrad, Adadelta, RMSProp, NAdam, RAdam and Rprop
(``paddle/optimizer/*.py`` -> the CPU kernels in ``paddle/phi/kernels/impl/``
``adagrad_kernel_impl.h``, ``adadelta_kernel_impl.h``, ``rmsprop_kernel_impl.h``,
``nadam_kernel_impl.h``, ``radam_kernel_impl.h``, ``cpu/rprop_kernel.cc``).
None of them has ``multi_precision`` in Paddle except Rprop.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._registry import Declaration, registered_name
from .._base import GradientTransformation, context_value, transformation
from .._spec import Fusion, declare
from .._domains import FINITE, NON_NEGATIVE_FINITE, POWER, non_negative_if
from .._rounding import rounded
from .._ranges import NON_NEGATIVE, POSITIVE, UNIT_CLOSED, UNIT_OPEN, Range, check_hyper
from .._types import Hyper, ParamTree
from .._group_values import GroupValues, by_group, group_by_value, in_groups, shared_groups
from .._tree import full_like_params, leaf_values, leaf_vector, map_unzip
from ._adam import _c, _check_betas, _zeros
from ._common import check_bool, check_float, group_keys, leaf_hyper, parse, with_groups

__all__ = ["adagrad", "adadelta", "rmsprop", "nadam", "radam", "rprop", "AdagradState", "AdadeltaState",
           "RMSPropState", "NAdamState", "RAdamState", "RpropState"]
# Paddle's own checks where they differ from the generic ranges: ``0 <= epsilon``; RMSProp's
# rho and momentum >= 0 (no upper bound) and a group's own ``centered`` (0 or 1, where the
# groups disagree); NAdam's momentum_decay >= 0; Rprop's 0 < etas[0] < 1 < etas[1] and rates
# > 0; Adadelta's rho in [0, 1], which Paddle does not check
DECLARED = (  # registered as 'paddle.<name>' by the family's __init__ (gradxform._registry.Declaration)
    Declaration('adagrad', classes=('Adagrad',), ranges={"epsilon": NON_NEGATIVE}, migrates=True,
                group_keys=group_keys("epsilon", "initial_accumulator_value")),
    Declaration('adadelta', classes=('Adadelta',), ranges={"epsilon": NON_NEGATIVE, "rho": UNIT_CLOSED},
                migrates=True, group_keys=group_keys("epsilon", "rho")),
    Declaration('rmsprop', classes=('RMSProp',), migrates=True,
                ranges={"epsilon": NON_NEGATIVE, "rho": NON_NEGATIVE, "momentum": NON_NEGATIVE,
                        "centered": UNIT_CLOSED},
                group_keys=group_keys("rho", "epsilon", "momentum", "centered")),
    Declaration('nadam', classes=('NAdam',), ranges={"epsilon": NON_NEGATIVE, "momentum_decay": NON_NEGATIVE},
                migrates=True, group_keys=group_keys("epsilon", "beta1", "beta2", "momentum_decay")),
    Declaration('radam', classes=('RAdam',), ranges={"epsilon": NON_NEGATIVE}, migrates=True,
                group_keys=group_keys("epsilon", "beta1", "beta2")),
    Declaration('rprop', classes=('Rprop',), migrates=True,
                ranges={"eta_negative": UNIT_OPEN, "eta_positive": Range(low=1.0, low_open=True), "lr_min": POSITIVE,
                        "lr_max": POSITIVE}),
)



def _state(name: str, acc: tuple, pows: tuple = (), domains: dict | None = None):
    """A state class named for Paddle's accumulators: ``hyper``, the
    per-parameter ``acc`` trees, then the ``pows`` (per-leaf float32 values) and
    ``group`` (int32), each a vector with an entry per leaf in flatten order;
    ``domains`` (`gradxform._domains`): each accumulator's, finite where not
    given."""
    cls = NamedTuple(name, [("hyper", Hyper)] + [(f, ParamTree) for f in acc + pows + ("group",)])
    # class attributes of a class built at run time (the checker knows only its fields)
    setattr(cls, "per_leaf_fields", pows + ("group",))
    setattr(cls, "stepped_fields", pows)  # rewritten by every step (`per_leaf_counts` writes them out for a mask)
    setattr(cls, "domains", {**{f: FINITE for f in acc}, **(domains or {})})
    cls.__doc__ = (f"Paddle's accumulators {', '.join(acc)} per parameter"
                   + (f"; {', '.join(pows)} per leaf (Paddle: every element equal)" if pows else "")
                   + "; ``group``: each leaf's parameter group.")
    return cls


# moment: a sum of squares from initial_accumulator_value (a negative one, which Paddle takes,
# gives sqrt of a negative: NaN updates, and a state the loaders refuse)
AdagradState = _state("AdagradState", ("moment",), domains={"moment": NON_NEGATIVE_FINITE})
AdadeltaState = _state("AdadeltaState", ("avg_squared_grad", "avg_squared_update"),
                       domains={"avg_squared_grad": NON_NEGATIVE_FINITE, "avg_squared_update": NON_NEGATIVE_FINITE})
# rho >= 0 without an upper bound (Paddle's check): rho ms + (1 - rho) g^2 is a mean square only for rho <= 1
RMSPropState = _state("RMSPropState", ("momentum", "mean_square", "mean_grad"),
                      domains={"mean_square": non_negative_if("rho", at_most=1.0)})
NAdamState = _state("NAdamState", ("moment1", "moment2"), ("momentum_decay_pow", "beta2_pow", "mu_product"),
                    domains={"moment2": NON_NEGATIVE_FINITE, "momentum_decay_pow": POWER, "beta2_pow": POWER,
                             "mu_product": POWER})
RAdamState = _state("RAdamState", ("moment1", "moment2"), ("beta1_pow", "beta2_pow", "rho"),
                    domains={"moment2": NON_NEGATIVE_FINITE, "beta1_pow": POWER, "beta2_pow": POWER,
                             "rho": NON_NEGATIVE_FINITE})  # rho = t beta2^t / (1 - beta2^t), 1 at the start
RpropState = _state("RpropState", ("prevs", "learning_rates"), domains={"learning_rates": NON_NEGATIVE_FINITE})


def _rule(owner, state_cls, hyper: dict, pow_init: tuple, one, o, *, acc_init=None):
    """A Paddle kernel as a piece: ``one(h, g, w, lr, mask, *acc, *pows) ->
    (update, *acc, *pows)`` per leaf, ``h`` the leaf's hyperparameters (its
    group's own where the group of `PaddleOptions` ``o`` sets them)."""
    n_acc = len(state_cls._fields) - 2 - len(pow_init)
    groups = o.group_values(tuple(hyper))

    def init(params):
        slot = o.slots(params)
        acc = tuple(acc_init(params, i, slot) if acc_init else _zeros(params) for i in range(n_acc))
        # the powers of one parameter group move together until a masked step parts them
        # (`per_leaf_counts`): held once per group, each read once per group
        by_slot = group_by_value(slot, np.int32)
        return state_cls(with_groups(hyper, groups), *acc,
                         *(GroupValues(jnp.full(len(by_slot.values), v, jnp.float32), by_slot.groups) for v in pow_init),
                         by_slot)

    def new_pows(old, new_trees, mask, treedef):
        """The powers after the step, in the form they came: per group (one
        leaf per group read, the rest alike) or per leaf."""
        if shared_groups(*old) is None:
            return tuple(leaf_vector(p, jnp.float32) for p in new_trees)
        parts = by_group(treedef.flatten_up_to(mask), old[0].groups) is None
        return tuple(in_groups(o, treedef.flatten_up_to(p), parts) for o, p in zip(old, new_trees))

    @declare(who=owner, needs=("lr", "mask"), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        lr = context_value(extra_args, "lr", owner)
        mask = context_value(extra_args, "mask", owner)
        w = params if params is not None else updates
        h = state.hyper
        pows = tuple(leaf_values(p, updates) for p in state[1 + n_acc:-1])
        res = map_unzip(lambda g, w, l, on, k, *rest: one(leaf_hyper(h, k, groups), g, w, l, on, *rest),
                        1 + n_acc + len(pow_init), updates, w, lr, mask, leaf_values(state.group, updates),
                        *state[1:1 + n_acc], *pows)
        return res[0], state_cls(h, *res[1:1 + n_acc],
                                 *new_pows(tuple(state[1 + n_acc:-1]), res[1 + n_acc:], mask, jax.tree.structure(updates)),
                                 state.group)

    return transformation(init, update)


def adagrad(learning_rate, epsilon=1e-6, parameters=None, weight_decay=None, grad_clip=None, name=None,
            initial_accumulator_value=0.0, *, skip_nonfinite=False) -> GradientTransformation:
    """Paddle Adagrad (``paddle.optimizer.Adagrad`` -> ``adagrad_``)::

        g = grad_clip(g) + regularizer(w)
        moment += g^2                    (starts at initial_accumulator_value)
        w -= lr * g / (sqrt(moment) + epsilon)

    ``learning_rate`` has no default, as in Paddle.

    Rounding: the moment is the CPU kernel's (``cpu/adagrad_kernel.cc``, Eigen)
    to the last bit; the weight differs by a few ulps in a few percent of
    the elements: Eigen's vectorized ``sqrt()`` (``EIGEN_FAST_MATH``) is the
    hardware's approximate ``rsqrtps`` with one Newton step, a number that
    depends on the host CPU (tools/PADDLE_NOTES.md).
    """
    owner = registered_name(adagrad)
    del name
    check_float(owner, "epsilon", epsilon)
    check_float(owner, "initial_accumulator_value", initial_accumulator_value)
    o = parse(owner, learning_rate, parameters, weight_decay, grad_clip)
    init_acc = o.group_extra("initial_accumulator_value", initial_accumulator_value)
    for k, v in init_acc.items():
        check_float(f"{owner}(parameters[{k}])", "initial_accumulator_value", v)

    def one(h, g, w, l, on, m):
        # the kernel's products rounded (no fused multiply-add): the moment is Paddle's to
        # the last bit; the weight is not (see the docstring)
        m = m + rounded(g * g)
        return -((_c(l, g) * g) / (jnp.sqrt(m) + _c(h["epsilon"], g))), m

    def fill(params, i, slot):
        treedef = jax.tree.structure(params)
        return treedef.unflatten([jnp.full_like(p, init_acc.get(int(k), initial_accumulator_value), jnp.result_type(p))
                                  for p, k in zip(jax.tree.leaves(params), slot)])

    return o.build(_rule(owner, AdagradState, {"epsilon": epsilon}, (), one, o, acc_init=fill),
                   skip_nonfinite=skip_nonfinite)


def adadelta(learning_rate=0.001, epsilon=1e-6, rho=0.95, parameters=None, weight_decay=None, grad_clip=None,
             name=None, *, skip_nonfinite=False) -> GradientTransformation:
    """Paddle Adadelta (``paddle.optimizer.Adadelta`` -> ``adadelta_``)::

        g = grad_clip(g) + regularizer(w)
        E[g^2] = rho E[g^2] + (1 - rho) g^2
        d = -sqrt(E[dx^2] + epsilon) / sqrt(E[g^2] + epsilon) * g
        w += lr * d;    E[dx^2] = rho E[dx^2] + (1 - rho) d^2

    Paddle's kernel multiplies by ``learning_rate`` (the original Adadelta
    has none; its documentation shows the rule without it): the code wins.
    Accumulators: ``_avg_squared_grad``, ``_avg_squared_update``.
    """
    owner = registered_name(adadelta)
    del name
    check_float(owner, "epsilon", epsilon)
    check_float(owner, "rho", rho)
    o = parse(owner, learning_rate, parameters, weight_decay, grad_clip)

    def one(h, g, w, l, on, eg, ex):
        c = lambda x: _c(x, g)  # noqa: E731
        rho_, eps = c(h["rho"]), c(h["epsilon"])
        eg = rho_ * eg + (1 - rho_) * jnp.square(g)
        d = -(jnp.sqrt(ex + eps) / jnp.sqrt(eg + eps) * g)
        ex = rho_ * ex + (1 - rho_) * jnp.square(d)
        return c(l) * d, eg, ex

    return o.build(_rule(owner, AdadeltaState, {"epsilon": epsilon, "rho": rho}, (), one, o),
                   skip_nonfinite=skip_nonfinite)


def rmsprop(learning_rate, rho=0.95, epsilon=1e-6, momentum=0.0, centered=False, parameters=None,
            weight_decay=None, grad_clip=None, name=None, *, skip_nonfinite=False) -> GradientTransformation:
    """Paddle RMSProp (``paddle.optimizer.RMSProp`` -> ``rmsprop_``)::

        g = grad_clip(g) + regularizer(w)
        ms = rho ms + (1 - rho) g^2;   [mg = rho mg + (1 - rho) g]         (centered)
        mom = momentum mom + lr * g / sqrt(ms [- mg^2] + epsilon)
        w -= mom

    The learning rate is inside the momentum buffer here (Paddle's kernel),
    unlike Paddle's Momentum. ``rho, epsilon, momentum >= 0`` as Paddle checks
    them; ``learning_rate`` has no default. Accumulators: ``momentum``,
    ``mean_square``, ``mean_grad`` (for every parameter, as Paddle's).
    A parameter group may set its own ``centered`` (and ``rho``,
    ``epsilon``, ``momentum``); where groups differ, ``centered`` is a 0/1
    hyperparameter per group (an entry of ``centered_groups``), else it is static.

    Rounding: ``mean_square`` and ``mean_grad`` are the CPU kernel's
    (``impl/rmsprop_kernel_impl.h``, Eigen) to the last bit; ``momentum`` and
    the weight differ by a few ulps (momentum: about a third of the elements): Eigen's
    vectorized ``sqrt()`` (``EIGEN_FAST_MATH``) is the hardware's approximate
    ``rsqrtps`` with one Newton step, a number that depends on the host CPU
    (tools/PADDLE_NOTES.md).
    """
    owner = registered_name(rmsprop)
    del name
    for k, v in (("rho", rho), ("epsilon", epsilon), ("momentum", momentum)):
        check_float(owner, k, v, low=0.0)
    check_bool(owner, "centered", centered)
    o = parse(owner, learning_rate, parameters, weight_decay, grad_clip)
    for k, c in o.group_extra("centered", centered).items():
        check_bool(f"{owner}(parameters[{k}])", "centered", c)
    # a group's own 'centered' (Paddle's _update_param_group): every leaf keeps a
    # mean_grad, as Paddle creates the accumulator for all; 'centered' becomes a 0/1
    # hyperparameter, per group, only where the groups disagree (else it stays static)
    mixed = any(c != centered for c in o.group_extra("centered", centered).values())
    hyper = {"rho": rho, "epsilon": epsilon, "momentum": momentum}
    if mixed:
        hyper["centered"] = float(centered)

    def one(h, g, w, l, on, mom, ms, mg):
        c = lambda x: _c(x, g)  # noqa: E731
        # the kernel's products rounded (no fused multiply-add): mean_square and
        # mean_grad are Paddle's to the last bit; momentum and the weight are not
        # (Eigen's approximate sqrt, see the docstring)
        rho_ = c(h["rho"])
        ms = rounded(rho_ * ms) + rounded(rounded((1 - rho_) * g) * g)
        if mixed:
            on_c = h["centered"] > 0
            mg = jnp.where(on_c, rounded(rho_ * mg) + rounded((1 - rho_) * g), mg)
            den = jnp.sqrt(jnp.where(on_c, ms - rounded(jnp.square(mg)), ms) + c(h["epsilon"]))
        elif centered:
            mg = rounded(rho_ * mg) + rounded((1 - rho_) * g)
            den = jnp.sqrt(ms - rounded(jnp.square(mg)) + c(h["epsilon"]))
        else:
            den = jnp.sqrt(ms + c(h["epsilon"]))
        mom = rounded(c(h["momentum"]) * mom) + rounded(c(l) * g) / rounded(den)
        return -mom, mom, ms, mg

    return o.build(_rule(owner, RMSPropState, hyper, (), one, o),
                   skip_nonfinite=skip_nonfinite)


def nadam(learning_rate=0.002, beta1=0.9, beta2=0.999, epsilon=1e-8, momentum_decay=0.004, parameters=None,
          weight_decay=None, grad_clip=None, name=None, *, skip_nonfinite=False) -> GradientTransformation:
    """Paddle NAdam (``paddle.optimizer.NAdam`` -> ``nadam_``)::

        g = grad_clip(g) + regularizer(w)
        d_pow *= 0.96;   beta2_pow *= beta2                 (both start at 1)
        mu_t = beta1 (1 - 0.5 d_pow^momentum_decay);  mu_t1 = beta1 (1 - 0.5 d_pow^momentum_decay 0.96^momentum_decay)
        mu_product *= mu_t
        m1, m2 = EMAs of g, g^2
        m1^ = mu_t1 m1 / (1 - mu_product mu_t1) + (1 - mu_t) g / (1 - mu_product)
        w -= lr * m1^ / (sqrt(m2 / (1 - beta2_pow)) + epsilon)

    Paddle keeps ``momentum_decay_pow``, ``beta2_pow``, ``mu_product`` shaped
    like the parameter (every element equal); here one scalar per leaf.
    """
    owner = registered_name(nadam)
    del name
    _check_betas(owner, beta1, beta2, epsilon)
    check_float(owner, "momentum_decay", momentum_decay, low=0.0)
    o = parse(owner, learning_rate, parameters, weight_decay, grad_clip)

    def one(h, g, w, l, on, m1, m2, dp, b2p, mup):
        c = lambda x: _c(x, g)  # noqa: E731
        b1, b2, md = h["beta1"], h["beta2"], h["momentum_decay"]
        dp2, b2p2 = dp * jnp.float32(0.96), b2p * b2
        decay = jnp.power(dp2, md)
        mu_t = b1 * (1 - 0.5 * decay)
        mu_t1 = b1 * (1 - 0.5 * decay * jnp.power(jnp.float32(0.96), md))
        mup2 = mup * mu_t
        mup_t1 = mup2 * mu_t1
        m1 = c(b1) * m1 + (1 - c(b1)) * g
        m2 = c(b2) * m2 + (1 - c(b2)) * g * g
        m1h = c(mu_t1) * m1 / c(1 - mup_t1) + c(1 - mu_t) * g / c(1 - mup2)
        m2h = m2 / c(1 - b2p2)
        keep = lambda new, old: jnp.where(on, new, old)  # noqa: E731
        return (-(c(l) * m1h / (jnp.sqrt(m2h) + c(h["epsilon"]))), m1, m2, keep(dp2, dp), keep(b2p2, b2p),
                keep(mup2, mup))

    return o.build(_rule(owner, NAdamState, {"beta1": beta1, "beta2": beta2, "epsilon": epsilon,
                                             "momentum_decay": momentum_decay}, (1.0, 1.0, 1.0),
                         one, o),
                   skip_nonfinite=skip_nonfinite)


def _rounded(x):
    """``x`` (a product), rounded to its dtype before the next operation reads it, as
    Paddle's CPU kernel stores it. Inside one jitted program XLA:CPU may contract
    ``a * b + c`` (or ``c - a * b``) into one fused multiply-add, one rounding
    instead of two; in RAdam's ``rho`` recurrence that moves ``rho_t`` by an ulp and
    can flip the ``rho_t > 5`` switch (``beta2 = 0.8397686``: the step-6 update
    0.0274 jitted against Paddle's 0.1142). The select is the identity (NaN
    stays NaN) but sits between the product and the sum, so nothing contracts."""
    return jnp.where(x == x, x, jnp.nan)


def radam(learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, parameters=None, weight_decay=None,
          grad_clip=None, name=None, *, skip_nonfinite=False) -> GradientTransformation:
    """Paddle RAdam (``paddle.optimizer.RAdam`` -> ``radam_``)::

        g = grad_clip(g) + regularizer(w)
        rho_inf = 2 / (1 - beta2) - 1;   beta1_pow *= beta1;  beta2_pow *= beta2     (start at 1)
        rho = (rho (beta2 - beta2_pow) + beta2_pow) / (1 - beta2_pow)     (= t beta2^t / (1 - beta2^t))
        m1, m2 = EMAs of g, g^2;   m1^ = m1 / (1 - beta1_pow);   rho_t = rho_inf - 2 rho
        rho_t > 5:  w -= lr * m1^ * r_t * sqrt(1 - beta2_pow) / (sqrt(m2) + epsilon)
                    r_t = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t))
        else:       w -= lr * m1^
    """
    owner = registered_name(radam)
    del name
    _check_betas(owner, beta1, beta2, epsilon)
    o = parse(owner, learning_rate, parameters, weight_decay, grad_clip)

    def one(h, g, w, l, on, m1, m2, b1p, b2p, rho):
        c = lambda x: _c(x, g)  # noqa: E731
        b1, b2 = h["beta1"], h["beta2"]
        rho_inf = 2 / (1 - b2) - 1
        b1p2, b2p2 = _rounded(b1p * b1), _rounded(b2p * b2)
        rho2 = (_rounded(rho * (b2 - b2p2)) + b2p2) / (1 - b2p2)
        m1 = c(b1) * m1 + (1 - c(b1)) * g
        m2 = c(b2) * m2 + (1 - c(b2)) * g * g
        m1h = m1 / c(1 - b1p2)
        rho_t = rho_inf - 2 * rho2
        safe = jnp.where(rho_t > 5, rho_t, 5.0 + rho_inf)
        r_t = jnp.sqrt(((safe - 4) * (safe - 2) * rho_inf) / ((rho_inf - 4) * (rho_inf - 2) * safe))
        l_t = c(jnp.sqrt(1 - b2p2)) / (jnp.sqrt(m2) + c(h["epsilon"]))
        step = jnp.where(rho_t > 5, c(l) * m1h * c(r_t) * l_t, c(l) * m1h)
        keep = lambda new, old: jnp.where(on, new, old)  # noqa: E731
        return -step, m1, m2, keep(b1p2, b1p), keep(b2p2, b2p), keep(rho2, rho)

    return o.build(_rule(owner, RAdamState, {"beta1": beta1, "beta2": beta2, "epsilon": epsilon}, (1.0, 1.0, 1.0),
                         one, o),
                   skip_nonfinite=skip_nonfinite)


def rprop(learning_rate=0.001, learning_rate_range=(1e-5, 50), parameters=None, etas=(0.5, 1.2), grad_clip=None,
          multi_precision=False, name=None, *, skip_nonfinite=False) -> GradientTransformation:
    """Paddle Rprop (``paddle.optimizer.Rprop`` -> ``rprop_``, ``cpu/rprop_kernel.cc``)::

        g = grad_clip(g)
        s = g * prev:  eta = etas[1] if s > 0, 1 if s == 0, etas[0] (and g = 0) if s < 0
        lrs = clip(lrs * eta, learning_rate_range)      (lrs starts at learning_rate, per element)
        w -= sign(g) * lrs;   prev = g

    After the first step the optimizer's learning rate is not read again
    (Paddle's kernel uses only its ``learning_rates`` accumulator), so a
    schedule is refused here (Paddle fails on it at construction as well).
    Hyperparameters ``lr_min``, ``lr_max``, ``eta_negative``, ``eta_positive``.
    """
    owner = registered_name(rprop)
    del name
    check_float(owner, "learning_rate", learning_rate)
    check_hyper(owner, "learning_rate", learning_rate)
    lo, hi = (float(x) for x in learning_rate_range)
    if not 0.0 < lo <= learning_rate <= hi:
        raise ValueError(f"{owner}: '0.0 < learning_rate_range[0] <= learning_rate <= learning_rate_range[1]' "
                         f"must be true; got learning_rate={learning_rate}, learning_rate_range={learning_rate_range}.")
    en, ep = (float(x) for x in etas)
    if not 0.0 < en < 1.0 < ep:
        raise ValueError(f"{owner}(etas=...): '0.0 < etas[0] < 1.0 < etas[1]' must be true; got {etas}.")
    o = parse(owner, float(learning_rate), parameters, 0.0, grad_clip, multi_precision)

    def one(h, g, w, l, on, prev, lrs):
        c = lambda x: _c(x, g)  # noqa: E731
        s = g * prev
        eta = jnp.where(s > 0, c(h["eta_positive"]), jnp.where(s < 0, c(h["eta_negative"]), jnp.ones_like(g)))
        g = jnp.where(s < 0, jnp.zeros_like(g), g)
        lrs = lrs * eta
        lrs = jnp.where(lrs > c(h["lr_max"]), c(h["lr_max"]), jnp.where(lrs < c(h["lr_min"]), c(h["lr_min"]), lrs))
        return -(jnp.sign(g) * lrs), g, lrs

    fill = lambda params, i, slot: full_like_params(params, 0.0 if i == 0 else learning_rate)  # noqa: E731
    return o.build(_rule(owner, RpropState, {"lr_min": lo, "lr_max": hi, "eta_negative": en, "eta_positive": ep}, (),
                         one, o, acc_init=fill), skip_nonfinite=skip_nonfinite)


# Paddle's class names (paddle.optimizer.AdamW): each factory already takes Paddle's positional order
Adagrad = adagrad
Adadelta = adadelta
RMSProp = rmsprop
NAdam = nadam
RAdam = radam
Rprop = rprop
