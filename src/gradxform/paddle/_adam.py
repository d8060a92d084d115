"""Paddle (3.x) Adam, AdamW, Adamax and Lamb (``paddle/optimizer/adam.py``,
``adamw.py``, ``adamax.py``, ``lamb.py`` -> the CPU kernels
``paddle/phi/kernels/cpu/adam_kernel.cc``, ``adamw_kernel.cc``,
``impl/adamax_kernel_impl.h``, ``impl/lamb_kernel_impl.h``).

Paddle keeps each parameter's ``beta1_pow_acc`` / ``beta2_pow_acc`` (its
accumulators, starting at ``beta1`` / ``beta2``, multiplied by the beta in
float32 after each update); so do these pieces (float32 vectors, an entry per
leaf in flatten order, advanced only for the leaves updated), which keeps the bias corrections
Paddle's numbers and lets a ``.pdopt`` run continue exactly.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._registry import Declaration, registered_name
from .._base import GradientTransformation, context_value, transformation
from .._spec import Fusion, declare
from .._ranges import ANY, NON_NEGATIVE, check_hyper
from .._group_values import partition, per_group, stepped
from .._tree import map_unzip, zeros_like_params as _zeros
from ..pieces.internal import leaf_sq_norm
from ._common import (check_bool, check_float, group_keys, leaf_hyper, param_infos, parse, refuse_selecting_nothing,
                      with_groups)
from .._types import Hyper, ParamTree, PerLeaf
from .._domains import FINITE, FLAG, NON_NEGATIVE_FINITE, POWER
from .._rounding import rounded

__all__ = ["adam", "adamw", "adamax", "lamb", "AdamState", "AdamaxState", "LambState"]
# Paddle's own checks where they differ from the generic ranges: ``0 <= epsilon``;
# Lamb's lamb_weight_decay, which Paddle does not check, any finite number
ADAM_KEYS = group_keys("beta1", "beta2", "epsilon", "lazy_mode")  # what Paddle's _update_param_group reads
DECLARED = (  # registered as 'paddle.<name>' by the family's __init__ (gradxform._registry.Declaration)
    Declaration('adam', classes=('Adam',), ranges={"epsilon": NON_NEGATIVE}, migrates=True,
                group_keys=ADAM_KEYS),
    Declaration('adamw', classes=('AdamW',), ranges={"epsilon": NON_NEGATIVE}, migrates=True, group_keys=ADAM_KEYS),
    Declaration('adamax', classes=('Adamax',), ranges={"epsilon": NON_NEGATIVE}, migrates=True,
                group_keys=group_keys("beta1", "beta2", "epsilon")),
    Declaration('lamb', classes=('Lamb',), ranges={"epsilon": NON_NEGATIVE, "lamb_weight_decay": ANY},
                migrates=True,
                group_keys=group_keys("beta1", "beta2", "epsilon", "lamb_weight_decay",
                                      "exclude_from_weight_decay_fn")),
)



def _c(h, x):
    return jnp.asarray(h).astype(x.dtype)


def _entry(x, i: int):
    """Leaf ``i``'s entry of a per-leaf vector; a scalar is every leaf's."""
    return x[i] if jnp.ndim(x) else x


def _check_betas(owner, beta1, beta2, epsilon):
    for name, v in (("beta1", beta1), ("beta2", beta2)):
        check_float(owner, name, v)
        if not 0 <= v < 1:
            raise ValueError(f"{owner}({name}=...): Invalid value of {name}, expect {name} in [0,1); got {v}.")
    check_float(owner, "epsilon", epsilon)
    if not epsilon >= 0:
        raise ValueError(f"{owner}(epsilon=...): Invalid value of epsilon, expect epsilon >= 0; got {epsilon}.")


_ADAM_FIELDS = ("beta1_pow", "beta2_pow", "lr_ratio", "decay", "group")  # AdamState's per-leaf fields, held per group
_ADAM_DTYPES = (np.float32, np.float32, np.float32, np.int32, np.int32)


def _checked_groups(owner, o, **defaults) -> dict:
    """A group's own numeric hyperparameters (``defaults``: the optimizer's,
    for their checks); ``lazy_mode`` (no effect on dense gradients) must be a bool."""
    for g in o.groups:
        for k, v in g.extra.items():
            if k == "lazy_mode":
                check_bool(f"{owner}(parameters[{g.index}])", k, v)
            elif k in ("beta1", "beta2", "epsilon"):
                _check_betas(f"{owner}(parameters[{g.index}])", *(g.extra.get(n, defaults[n])
                                                                 for n in ("beta1", "beta2", "epsilon")))
    return o.group_values(tuple(defaults))


class AdamState(NamedTuple):
    """Paddle's accumulators: ``moment1``, ``moment2`` (and ``moment2_max``
    with amsgrad, else ``()``) per parameter; ``beta1_pow``, ``beta2_pow`` per
    leaf (``beta^t`` for the next update, as Paddle's ``*_pow_acc``);
    ``lr_ratio``, ``decay`` and ``group`` (AdamW's, per leaf: the ratio, whether
    the leaf is decayed (int32 0/1), its parameter group; 1, 0, 0 for Adam).
    The per-leaf fields are vectors, an entry per leaf in flatten order."""
    hyper: Hyper
    moment1: ParamTree
    moment2: ParamTree
    moment2_max: ParamTree
    beta1_pow: PerLeaf
    beta2_pow: PerLeaf
    lr_ratio: PerLeaf
    decay: PerLeaf
    group: PerLeaf
    per_leaf_fields = _ADAM_FIELDS
    stepped_fields = ("beta1_pow", "beta2_pow")  # rewritten by every step (`per_leaf_counts`)
    domains = {"moment1": FINITE, "moment2": NON_NEGATIVE_FINITE, "moment2_max": NON_NEGATIVE_FINITE, "beta1_pow": POWER,
               "beta2_pow": POWER, "lr_ratio": FINITE, "decay": FLAG}


def _group_pows(params, slots_of, groups, name, default):
    """Each leaf's starting power: its group's beta (Paddle creates a group's
    accumulators after ``_update_param_group``), else the optimizer's."""
    slot = slots_of(params) if slots_of is not None else np.zeros(len(jax.tree.leaves(params)), np.int32)
    vals = [groups.get(int(k), {}).get(name, default) for k in slot]
    return np.asarray(vals, np.float32), slot  # host numbers: `partition` groups them


def _check_some_decay(owner, infos, slot, chosen, groups, coeff_name, coeff):
    """Refuses, at init, a decay function (AdamW's ``apply_decay_param_fun``,
    Lamb's ``exclude_from_weight_decay_fn``) that chose no parameter among
    the optimized leaves it was asked about (``slot >= 0``; ``chosen``: what
    it returned), where some of them have a nonzero decay (else the choice
    changes no number). `refuse_selecting_nothing` words it."""
    asked = [i.name for i, k in zip(infos, slot) if k >= 0]
    if any(c for c, k in zip(chosen, slot) if k >= 0):
        return
    if not any(groups.get(int(k), {}).get(coeff_name, coeff) != 0 for k in slot if k >= 0):
        return
    if coeff_name == "weight_decay":
        refuse_selecting_nothing(owner, "apply_decay_param_fun", asked, "decays",
                                 "type weight_decay=0.0 (no decay) or apply_decay_param_fun=None (every "
                                 "parameter decays)")
    refuse_selecting_nothing(owner, "exclude_from_weight_decay_fn", asked, "excludes",
                             "type exclude_from_weight_decay_fn=None (every parameter decays)")


def _adam_rule(owner, beta1, beta2, epsilon, amsgrad, coeff=None, lr_ratio=None, decay_fn=None, groups=None,
               slots_of=None):
    """Paddle's ``adam_`` / ``adamw_`` CPU kernel (``coeff``: AdamW)::

        lr_t = lr * lr_ratio * (sqrt(1 - beta2_pow) / (1 - beta1_pow));  eps = epsilon * sqrt(1 - beta2_pow)
        w = w - lr * lr_ratio * coeff * w          (AdamW, parameters with decay)
        m1 = beta1 m1 + (1 - beta1) g;  m2 = beta2 m2 + (1 - beta2) g^2;  [m2max = max(m2max, m2)]
        w = w + (-lr_t) * (m1 / (sqrt(m2 or m2max) + eps));   beta_pow *= beta

    ``groups``: ``{group: {name: value}}``, a group's own beta1, beta2,
    epsilon (and AdamW's weight_decay), held as ``<name>_groups`` (`GroupHyper`).
    """
    groups = groups or {}

    def init(params):
        base = {"beta1": beta1, "beta2": beta2, "epsilon": epsilon}
        if coeff is not None:
            base["weight_decay"] = coeff
        infos = param_infos(params)
        p1, slot = _group_pows(params, slots_of, groups, "beta1", beta1)
        p2, _ = _group_pows(params, slots_of, groups, "beta2", beta2)
        ratios = [1.0 if lr_ratio is None else float(lr_ratio(i)) for i in infos]
        if any(not np.isfinite(r) or r < 0 for r in ratios):
            raise ValueError(f"{owner}(lr_ratio=...): must give finite ratios >= 0; got {ratios}.")
        decay = [coeff is not None and (decay_fn is None or bool(decay_fn(i.name))) for i in infos]
        if decay_fn is not None and coeff is not None:
            _check_some_decay(owner, infos, slot, decay, groups, "weight_decay", coeff)
        return AdamState(with_groups(base, groups), _zeros(params), _zeros(params), _zeros(params) if amsgrad else (),
                         *partition(p1, p2, ratios, decay, slot, dtypes=_ADAM_DTYPES))

    @declare(who=owner, needs=("lr", "mask"), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        if params is None and coeff is not None:
            raise ValueError(f"{owner}: needs params; call update(grads, state, params).")
        lr = context_value(extra_args, "lr", owner)
        mask = context_value(extra_args, "mask", owner)
        vmax = state.moment2_max if amsgrad else state.moment1
        w_tree = params if params is not None else updates

        # The per-leaf scalars (bias corrections, epsilon, decay, beta powers) as vectors, one entry
        # per leaf: a handful of ops for any number of leaves. A value the same at every leaf (a
        # hyperparameter no group sets, a shared rate, every leaf decayed) stays one scalar: each
        # per-leaf read is a slice, which XLA:CPU compiles at about 8 ms apiece.
        # Held per group of leaves (`partition`), they are computed per group and each leaf reads its
        # group's entry: a slice per group, where XLA:CPU compiles each distinct slice at about 8 ms.
        run = per_group({f: getattr(state, f) for f in _ADAM_FIELDS}, lr, mask, updates)
        h = leaf_hyper(state.hyper, run.values["group"], groups)
        b1, b2, e = (jnp.asarray(h[n], jnp.float32) for n in ("beta1", "beta2", "epsilon"))
        b1p, b2p = run.values["beta1_pow"], run.values["beta2_pow"]
        l = run.lr
        if lr_ratio is not None:
            l = l * run.values["lr_ratio"]
        lr_t = l * (jnp.sqrt(1 - b2p) / (1 - b1p))
        eps = e * jnp.sqrt(1 - b2p)
        wd = None
        if coeff is not None:
            wd = l * h["weight_decay"] if decay_fn is None else \
                jnp.where(run.values["decay"] != 0, l * h["weight_decay"], 0.0)
        on, at = run.on, run.at

        def one(g, w, m1, m2, mx, i):
            c = lambda x: _c(_entry(x, i), g)  # noqa: E731
            m1 = c(b1) * m1 + (1 - c(b1)) * g
            m2 = c(b2) * m2 + (1 - c(b2)) * g * g
            mx = jnp.maximum(m2, mx) if amsgrad else mx
            step = -c(lr_t) * (m1 / (jnp.sqrt(mx if amsgrad else m2) + c(eps)))
            if wd is not None:
                w_tmp = w.astype(g.dtype) - c(wd) * w.astype(g.dtype)
                step = (w_tmp + step) - w.astype(g.dtype)
            return step, m1, m2, mx

        out, m1, m2, mx = map_unzip(one, 4, updates, w_tree, state.moment1, state.moment2, vmax, at)
        return out, state._replace(moment1=m1, moment2=m2, moment2_max=mx if amsgrad else (),
                                   beta1_pow=stepped(state.beta1_pow, jnp.where(on, b1p * b1, b1p), run),
                                   beta2_pow=stepped(state.beta2_pow, jnp.where(on, b2p * b2, b2p), run))

    return transformation(init, update)


def adam(learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, parameters=None, weight_decay=None,
         grad_clip=None, lazy_mode=False, multi_precision=False, use_multi_tensor=False, amsgrad=False, name=None,
         *, skip_nonfinite=False) -> GradientTransformation:
    """Paddle Adam (``paddle.optimizer.Adam`` -> ``adam_``, CPU kernel ``AdamDenseKernel``)::

        g = grad_clip(g) + regularizer(w)
        m1 = beta1 m1 + (1-beta1) g;   m2 = beta2 m2 + (1-beta2) g^2
        lr_t = lr * sqrt(1 - beta2_pow) / (1 - beta1_pow)
        w -= lr_t * m1 / (sqrt(m2) + epsilon * sqrt(1 - beta2_pow))
        beta1_pow *= beta1;  beta2_pow *= beta2          (they start at beta1, beta2)
        amsgrad: m2max = max(m2max, m2) replaces m2 in the last-but-one line

    Paddle's documentation prints ``epsilon`` added to ``sqrt(m2)``; its
    kernel adds ``epsilon * sqrt(1 - beta2_pow)`` (the code wins).

    The other arguments are as `gradxform.paddle.sgd`'s.

    Args:
      beta1: in [0, 1) (hyperparameter).
      beta2: in [0, 1) (hyperparameter).
      epsilon: >= 0 (hyperparameter).
      amsgrad: bool (static).
      lazy_mode: accepted; it acts only on Paddle's sparse (SelectedRows)
        gradients, so dense gradients give the same numbers with either
        value (goldens checked).
      use_multi_tensor: accepted (the same numbers).
    """
    owner = registered_name(adam)
    del name
    _check_betas(owner, beta1, beta2, epsilon)
    for k, v in (("lazy_mode", lazy_mode), ("use_multi_tensor", use_multi_tensor), ("amsgrad", amsgrad)):
        check_bool(owner, k, v)
    o = parse(owner, learning_rate, parameters, weight_decay, grad_clip, multi_precision)
    groups = _checked_groups(owner, o, beta1=beta1, beta2=beta2, epsilon=epsilon)
    return o.build(_adam_rule(owner, beta1, beta2, epsilon, amsgrad, groups=groups, slots_of=o.slots),
                   skip_nonfinite=skip_nonfinite)


def _check_group_decay(owner: str, parameters) -> None:
    """A group's 'weight_decay' is AdamW's decoupled coefficient, a number:
    Paddle's ``adamw_`` raises a TypeError at the first step for anything
    else (an ``L2Decay``, None); here at construction."""
    if not isinstance(parameters, (list, tuple)):
        return
    for i, g in enumerate(parameters):
        if not isinstance(g, dict) or "weight_decay" not in g:
            continue
        v = g["weight_decay"]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            coeff = getattr(v, "coeff", None)
            raise TypeError(
                f"{owner}(parameters[{i}]['weight_decay']=...): AdamW's group weight_decay is its decoupled "
                f"coefficient and must be a float (Paddle's adamw_ raises TypeError: must be double, but got "
                f"{type(v).__name__}); got {v!r}. Give a float, e.g. 'weight_decay': "
                f"{0.01 if coeff is None else coeff} (decoupled: w -= lr * coeff * w, not an L2 term on the "
                "gradient), 'weight_decay': 0.0 for no decay, or leave the key out for the optimizer's own.")


def adamw(learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, parameters=None, weight_decay=0.01,
          use_lowprecision_moment=False, lr_ratio=None, apply_decay_param_fun=None, grad_clip=None,
          lazy_mode=False, multi_precision=False, amsgrad=False, name=None, *,
          skip_nonfinite=False) -> GradientTransformation:
    """Paddle AdamW (``paddle.optimizer.AdamW`` -> ``adamw_``, CPU kernel ``AdamwDenseKernel``)::

        g = grad_clip(g)                                   (no regularizer: AdamW has none)
        l = lr * lr_ratio(p)
        w = w - l * weight_decay * w                       (if apply_decay_param_fun(p.name))
        then Adam's rule on that w with learning rate l (see `adam`)

    The decoupled coefficient ``weight_decay`` defaults to 0.01 (a number,
    hyperparameter ``weight_decay``); a parameter group's 'weight_decay' (a
    number) is that group's coefficient (its entry of ``weight_decay_groups``), as
    Paddle's ``_update_param_group`` does (no regularizer is added). ``lr_ratio(p)`` (``p.name``,
    ``p.shape``: a `ParamInfo`) is refused by Paddle on CPU ("unimplemented
    in CPU"); here it multiplies the learning rate of both the decay and the
    Adam step, as Paddle's GPU kernel does. ``apply_decay_param_fun(name)``
    gets the gradxform parameter name, the pytree path joined by ``/``
    (``'fc1/weight'``), not Paddle's automatic name (``'linear_0.w_0'``); one
    that decays no parameter (a rule written for Paddle's names) is refused at
    init: type ``weight_decay=0.0`` for no decay. ``use_lowprecision_moment``: accepted
    (moments follow the update dtype here; float32 under multi_precision).
    """
    owner = registered_name(adamw)
    del name
    _check_betas(owner, beta1, beta2, epsilon)
    if isinstance(weight_decay, bool) or not isinstance(weight_decay, (int, float)):
        raise TypeError(f"{owner}(weight_decay=...): weight_decay should be int, float; got {weight_decay!r}.")
    check_hyper(owner, "weight_decay", weight_decay)
    for k, v in (("lazy_mode", lazy_mode), ("amsgrad", amsgrad), ("use_lowprecision_moment", use_lowprecision_moment)):
        check_bool(owner, k, v)
    for k, f in (("lr_ratio", lr_ratio), ("apply_decay_param_fun", apply_decay_param_fun)):
        if f is not None and not callable(f):
            raise TypeError(f"{owner}({k}=...): must be None or callable; got {f!r}.")
    _check_group_decay(owner, parameters)
    o = parse(owner, learning_rate, parameters, None, grad_clip, multi_precision)
    groups = _checked_groups(owner, o, beta1=beta1, beta2=beta2, epsilon=epsilon)
    for g in o.groups:
        if g.reg is not None:
            if g.reg.kind != "l2":
                raise TypeError(f"{owner}(parameters=...): group {g.index} 'weight_decay' must be a number "
                                f"(AdamW's decoupled coefficient); got {g.reg!r}.")
            groups.setdefault(g.index, {})["weight_decay"] = g.reg.coeff
    o = dataclasses.replace(o, groups=tuple(dataclasses.replace(g, reg=None) for g in o.groups))
    return o.build(_adam_rule(owner, beta1, beta2, epsilon, amsgrad, float(weight_decay), lr_ratio,
                              apply_decay_param_fun, groups, o.slots), regularize_kinds=(),
                   skip_nonfinite=skip_nonfinite)


class AdamaxState(NamedTuple):
    """``moment``, ``inf_norm`` per parameter; ``beta1_pow`` and ``group`` per
    leaf (vectors, an entry per leaf in flatten order)."""
    hyper: Hyper
    moment: ParamTree
    inf_norm: ParamTree
    beta1_pow: PerLeaf
    group: PerLeaf
    per_leaf_fields = ("beta1_pow", "group")
    stepped_fields = ("beta1_pow",)  # rewritten by every step (`per_leaf_counts`)
    domains = {"moment": FINITE, "inf_norm": NON_NEGATIVE_FINITE, "beta1_pow": POWER}


def _adamax_rule(owner, beta1, beta2, epsilon, groups, slots_of):
    """Paddle's ``adamax_`` kernel, then ``_finish_update``'s ``beta1_pow *= beta1``::

        m = beta1 m + (1 - beta1) g;  u = max(|g|, beta2 u + epsilon)
        w -= (lr / (1 - beta1_pow)) * (m / u)

    in the CPU kernel's order (``impl/adamax_kernel_impl.h``), every product
    rounded on its own: a jitted step is Paddle 3.3.1's to the last bit
    (tests/test_kernel_order_ms_paddle.py).
    """

    def init(params):
        p1, slot = _group_pows(params, slots_of, groups, "beta1", beta1)
        return AdamaxState(with_groups({"beta1": beta1, "beta2": beta2, "epsilon": epsilon}, groups),
                           _zeros(params), _zeros(params), *partition(p1, slot, dtypes=(np.float32, np.int32)))

    @declare(who=owner, needs=("lr", "mask"), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        del params
        lr = context_value(extra_args, "lr", owner)
        mask = context_value(extra_args, "mask", owner)
        # per-leaf scalars as vectors, a value the same at every leaf as one scalar (see `_adam_rule`)
        run = per_group({"beta1_pow": state.beta1_pow, "group": state.group}, lr, mask, updates)
        h = leaf_hyper(state.hyper, run.values["group"], groups)
        b1, b2, e = (jnp.asarray(h[n], jnp.float32) for n in ("beta1", "beta2", "epsilon"))
        b1p = run.values["beta1_pow"]
        lr_t = run.lr / (1 - b1p)
        at = run.at

        def one(g, m, u, i):
            # the kernel's Eigen expressions round every product (no fused multiply-add)
            c = lambda x: _c(_entry(x, i), g)  # noqa: E731
            m = rounded(c(b1) * m) + rounded((1 - c(b1)) * g)
            u = jnp.maximum(jnp.abs(g), rounded(c(b2) * u) + c(e))
            return -rounded(c(lr_t) * (m / u)), m, u

        out, m, u = map_unzip(one, 3, updates, state.moment, state.inf_norm, at)
        return out, state._replace(moment=m, inf_norm=u,
                                   beta1_pow=stepped(state.beta1_pow, jnp.where(run.on, b1p * b1, b1p), run))

    return transformation(init, update)


def adamax(learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, parameters=None, weight_decay=None,
           grad_clip=None, name=None, *, skip_nonfinite=False) -> GradientTransformation:
    """Paddle Adamax (``paddle.optimizer.Adamax`` -> ``adamax_``, ``impl/adamax_kernel_impl.h``)::

        g = grad_clip(g) + regularizer(w)
        m = beta1 m + (1 - beta1) g;   u = max(|g|, beta2 u + epsilon)
        w -= lr / (1 - beta1_pow) * m / u;    beta1_pow *= beta1     (starts at beta1)

    Paddle's documentation puts epsilon in ``u = max(beta2 u, |g|) + ...``;
    the kernel adds it inside the max (the code wins). Adamax has no
    multi_precision in Paddle.
    """
    owner = registered_name(adamax)
    del name
    _check_betas(owner, beta1, beta2, epsilon)
    o = parse(owner, learning_rate, parameters, weight_decay, grad_clip)
    groups = _checked_groups(owner, o, beta1=beta1, beta2=beta2, epsilon=epsilon)
    return o.build(_adamax_rule(owner, beta1, beta2, epsilon, groups, o.slots), skip_nonfinite=skip_nonfinite)


class LambState(NamedTuple):
    """``moment1``, ``moment2`` per parameter; ``beta1_pow``, ``beta2_pow``,
    ``decay`` (int32, 0 where ``exclude_from_weight_decay_fn`` excludes) and
    ``group`` per leaf (vectors, an entry per leaf in flatten order)."""
    hyper: Hyper
    moment1: ParamTree
    moment2: ParamTree
    beta1_pow: PerLeaf
    beta2_pow: PerLeaf
    decay: PerLeaf
    group: PerLeaf
    per_leaf_fields = ("beta1_pow", "beta2_pow", "decay", "group")
    stepped_fields = ("beta1_pow", "beta2_pow")  # rewritten by every step (`per_leaf_counts`)
    domains = {"moment1": FINITE, "moment2": NON_NEGATIVE_FINITE, "beta1_pow": POWER, "beta2_pow": POWER, "decay": FLAG}


def _lamb_rule(owner, wd, beta1, beta2, epsilon, exclude_fn, always_adapt, groups, excludes, slots_of):
    """Paddle's ``lamb_`` kernel (``impl/lamb_kernel_impl.h``)::

        m1, m2 = Adam's EMAs;  r = (m1 / (1 - beta1_pow)) / (sqrt(m2 / (1 - beta2_pow)) + epsilon) + wd * w
        ratio = |w| / |r| if both > 0 else 1;  w -= lr * ratio * r;   beta_pow *= beta
    """

    def init(params):
        infos = param_infos(params)
        p1, slot = _group_pows(params, slots_of, groups, "beta1", beta1)
        p2, _ = _group_pows(params, slots_of, groups, "beta2", beta2)
        fns = [excludes.get(int(k), exclude_fn) for k in slot]
        decay = [not (f is not None and bool(f(i))) for i, f in zip(infos, fns)]
        asked = [k >= 0 and f is not None for k, f in zip(slot, fns)]
        _check_some_decay(owner, infos, np.where(np.asarray(asked, bool), slot, -1), [not d for d in decay], groups,
                          "lamb_weight_decay", wd)
        return LambState(with_groups({"lamb_weight_decay": wd, "beta1": beta1, "beta2": beta2, "epsilon": epsilon},
                                     groups), _zeros(params), _zeros(params),
                         *partition(p1, p2, decay, slot, dtypes=(np.float32, np.float32, np.int32, np.int32)))

    # fused: the trust ratio's norms per leaf as segment sums (another order)
    # per-leaf norms as segment sums (another order)
    @declare(who=owner, needs=("lr", "mask"), fusion=Fusion(bit_exact=False, reductions=("leaf_sum",)))
    def update(updates, state, params=None, **extra_args):
        if params is None:
            raise ValueError(f"{owner}: needs params; call update(grads, state, params).")
        lr = context_value(extra_args, "lr", owner)
        mask = context_value(extra_args, "mask", owner)
        # per-leaf scalars as vectors, a value the same at every leaf as one scalar (see `_adam_rule`)
        run = per_group({f: getattr(state, f) for f in ("beta1_pow", "beta2_pow", "decay", "group")}, lr, mask,
                        updates)
        h = leaf_hyper(state.hyper, run.values["group"], groups)
        b1, b2, e, lwd = (jnp.asarray(h[n], jnp.float32) for n in ("beta1", "beta2", "epsilon", "lamb_weight_decay"))
        b1p, b2p, decays = run.values["beta1_pow"], run.values["beta2_pow"], run.values["decay"] != 0
        every_leaf_decays = exclude_fn is None and not any(f is not None for f in excludes.values())
        k_wd = lwd if every_leaf_decays else jnp.where(decays, lwd, 0.0)
        adapt = None if always_adapt else (lwd != 0 if every_leaf_decays else decays & (lwd != 0))
        l_vec = run.lr
        omb1, omb2 = 1 - b1p, 1 - b2p
        at = run.at

        def direction(g, w, m1, m2, i):
            c = lambda x: _c(_entry(x, i), g)  # noqa: E731
            m1 = c(b1) * m1 + (1 - c(b1)) * g
            m2 = c(b2) * m2 + (1 - c(b2)) * g * g
            r = (m1 / c(omb1)) / (jnp.sqrt(m2 / c(omb2)) + c(e)) + c(k_wd) * w.astype(g.dtype)
            return r, m1, m2

        r, m1, m2 = map_unzip(direction, 3, updates, params, state.moment1, state.moment2, at)
        w_sq, r_sq = leaf_sq_norm(params, extra_args), leaf_sq_norm(r, extra_args)

        def scaled(r, wq, rq, i):
            pn, tn = jnp.sqrt(wq), jnp.sqrt(rq)
            ratio = jnp.where((pn > 0) & (tn > 0), pn / jnp.where(tn > 0, tn, 1.0), 1.0)
            if adapt is not None:  # Paddle skips the adaptation where the decay is 0
                ratio = jnp.where(_entry(adapt, i), ratio, 1.0)
            return -((_entry(l_vec, i) * ratio).astype(r.dtype) * r)

        out = jax.tree.map(scaled, r, w_sq, r_sq, at)
        on = run.on
        return out, state._replace(moment1=m1, moment2=m2,
                                   beta1_pow=stepped(state.beta1_pow, jnp.where(on, b1p * b1, b1p), run),
                                   beta2_pow=stepped(state.beta2_pow, jnp.where(on, b2p * b2, b2p), run))

    return transformation(init, update)


def lamb(learning_rate=0.001, lamb_weight_decay=0.01, beta1=0.9, beta2=0.999, epsilon=1e-6, parameters=None,
         grad_clip=None, exclude_from_weight_decay_fn=None, multi_precision=False, always_adapt=False, name=None,
         *, skip_nonfinite=False) -> GradientTransformation:
    """Paddle Lamb (``paddle.optimizer.Lamb`` -> ``lamb_``)::

        g = grad_clip(g)
        m1, m2 = EMAs of g, g^2;  r = m1^ / (sqrt(m2^) + epsilon) + lamb_weight_decay * w
        w -= lr * (|w| / |r|) * r           (ratio 1 if a norm is 0)

    with ``m^ = m / (1 - beta_pow)``. ``exclude_from_weight_decay_fn(p)``
    (a `ParamInfo`) turns the decay off for a parameter; there the
    trust ratio is 1 unless ``always_adapt`` (Paddle: "skip adaptation on
    parameters that are excluded from weight decay"). ``p.name`` is the
    gradxform name, the pytree path joined by ``/`` (``'fc1/bias'``), not
    Paddle's automatic name (``'linear_0.b_0'``): write
    ``lambda p: p.name.endswith('bias')``, not ``...endswith('b_0')``. One
    that excludes no parameter (a rule written for Paddle's names) is refused
    at init; type ``exclude_from_weight_decay_fn=None`` if none was meant.
    """
    owner = registered_name(lamb)
    del name
    check_float(owner, "lamb_weight_decay", lamb_weight_decay)
    for k, v in (("beta1", beta1), ("beta2", beta2), ("epsilon", epsilon)):
        check_float(owner, k, v)
    check_bool(owner, "always_adapt", always_adapt)
    if exclude_from_weight_decay_fn is not None and not callable(exclude_from_weight_decay_fn):
        raise TypeError(f"{owner}(exclude_from_weight_decay_fn=...): must be None or callable.")
    o = parse(owner, learning_rate, parameters, None, grad_clip, multi_precision)
    groups = o.group_values(("beta1", "beta2", "epsilon", "lamb_weight_decay"))
    for k, vals in groups.items():
        for n, v in vals.items():
            check_float(f"{owner}(parameters[{k}])", n, v)
    excludes = {g.index: g.extra["exclude_from_weight_decay_fn"] for g in o.groups
                if "exclude_from_weight_decay_fn" in g.extra}
    return o.build(_lamb_rule(owner, float(lamb_weight_decay), beta1, beta2, epsilon, exclude_from_weight_decay_fn,
                              always_adapt, groups, excludes, o.slots), skip_nonfinite=skip_nonfinite)


# Paddle's class names (paddle.optimizer.AdamW): each factory already takes Paddle's positional order
Adam = adam
AdamW = adamw
Adamax = adamax
Lamb = lamb
