"""MXNet 1.x SGD-like rules: sgd (ccsgd), nag, signum, lbsgd, dcasgd, sgld.

Source: ``mxnet/optimizer/optimizer.py`` (1.9.1) and its kernels
(``sgd_update``, ``sgd_mom_update``, ``signum_update``, ...); the seed
``../shared/seeds/000_*.txt`` carries the same rules.
"""
from __future__ import annotations

from typing import NamedTuple, cast

import jax
import jax.numpy as jnp

from .._registry import Declaration
from .._base import (GradientTransformation, LocalKey, StepContext, chain, context_value, identity, transformation,
                     uses_context)
from .._spec import Fusion, declare
from .._elementwise import fusable
from .._hyper import check_range, hyper_scalar
from .._ranges import check_hyper
from .._tree import leaf_values, leaf_vector, map_unzip
from ..pieces import add_decoupled_weight_decay, gated, lazy_rows, scale_by_lr, sign, trace
from ..pieces.internal import leaf_sq_norm
from ._common import check_unit, parse_options
from ._kernels import rescaled, sgd_momentum, sgd_terms, sgd_update_step, signum_decay, signum_momentum
from .._rounding import rounded
from .._types import Hyper, ParamTree
from .._domains import FINITE, NON_NEGATIVE_FINITE

__all__ = ["sgd", "ccsgd", "nag", "signum", "lbsgd", "dcasgd", "sgld"]
DECLARED = (  # registered as 'mxnet.<name>' by the family's __init__ (gradxform._registry.Declaration)
    Declaration('sgd', classes=('SGD',), migrates=True),
    Declaration('ccsgd', classes=('ccSGD',), migrates=True),
    Declaration('nag', classes=('NAG',), migrates=True),
    Declaration('signum', classes=('Signum',), migrates=True),
    Declaration('lbsgd', classes=('LBSGD',), migrates=True),
    Declaration('dcasgd', classes=('DCASGD',), migrates=True),
    Declaration('sgld', classes=('SGLD',), migrates=True,
                no_goldens="SGLD adds Gaussian noise from MXNet's global random generator, which JAX cannot reproduce: "
                           "tests/test_mxnet_reference.py checks its drift and its documented noise stream"),
)



def sgd(learning_rate=None, momentum=0.0, lazy_update=False, *, wd=0.0, rescale_grad=1.0, clip_gradient=None,
        lr_scheduler=None, multi_precision=False, begin_num_update=0, lr_mult=None, wd_mult=None, param_idx2name=None,
        skip_nonfinite=False, param_dict=None, aggregate_num=None, use_fused_step=None) -> GradientTransformation:
    """MXNet SGD with momentum (``SGD.update`` -> ``multi_sgd_mom_update`` /
    ``multi_sgd_update``, ``MultiSGDKernel`` in optimizer_op-inl.h:225-256, the kernels
    Gluon's Trainer runs), in its order of operations, each product rounded::

        mom = momentum * mom - (lr * wd) * w - (lr * rescale_grad) * grad
              (clip_gradient: ... - lr * clip(grad * rescale_grad, clip_gradient))
        w  += mom                            (no buffer when momentum == 0: mom = 0)

    A jitted step is MXNet 1.9.1's to the last bit (tests/test_mxnet_kernel_order.py).

    Args:
      learning_rate: >= 0; None means 0.01, or the lr_scheduler's base_lr.
      momentum: in [0, 1); 0 keeps no momentum buffer (static).
      lazy_update: row_sparse semantics over dense gradients: rows
        whose gradient is all zero are left alone, weight and momentum alike.
        MXNet's default True only acts on row_sparse gradients, so dense
        MXNet training matches the default False here.

    The other keywords (``wd``, ``rescale_grad``, ``clip_gradient``,
    ``lr_scheduler``, ``multi_precision``, ...; keyword-only) are the ones
    every MXNet optimizer takes, with MXNet's defaults (`gradxform.mxnet._common`).
    """
    return _sgd_rule(parse_options(sgd, learning_rate, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient,
                                   lr_scheduler=lr_scheduler, multi_precision=multi_precision,
                                   begin_num_update=begin_num_update, lr_mult=lr_mult, wd_mult=wd_mult,
                                   param_idx2name=param_idx2name, skip_nonfinite=skip_nonfinite,
                                   param_dict=param_dict, aggregate_num=aggregate_num, use_fused_step=use_fused_step), momentum, lazy_update)


def _sgd_rule(o, momentum, lazy_update) -> GradientTransformation:
    """MXNet's ``MultiSGDKernel`` (`gradxform.mxnet._kernels`), in the slots (and states) of
    ``rescale, clip, add_wd, scale_by_lr, trace``."""
    check_unit(o.owner, momentum=momentum)
    deferred = not o.clip_gradient  # the unclipped branch multiplies (lr * rescale_grad) * g
    body = chain(rescaled(o.rescale_grad, deferred=deferred), o.clip(), o.provide_wd(),
                 sgd_terms(deferred_rescale=deferred, momentum=momentum > 0),
                 sgd_momentum(momentum) if momentum > 0 else identity(), needs=("lr",))
    return o.build(lazy_rows(body) if lazy_update else body, warn_as="SGD")


def ccsgd(learning_rate=None, momentum=0.0, lazy_update=False, *, wd=0.0, rescale_grad=1.0, clip_gradient=None,
          lr_scheduler=None, multi_precision=False, begin_num_update=0, lr_mult=None, wd_mult=None,
          param_idx2name=None, skip_nonfinite=False, param_dict=None, aggregate_num=None,
          use_fused_step=None) -> GradientTransformation:
    """MXNet ccSGD: deprecated in MXNet, the same rule as `sgd`."""
    return _sgd_rule(parse_options(ccsgd, learning_rate, wd=wd, rescale_grad=rescale_grad,
                                   clip_gradient=clip_gradient, lr_scheduler=lr_scheduler,
                                   multi_precision=multi_precision, begin_num_update=begin_num_update,
                                   lr_mult=lr_mult, wd_mult=wd_mult, param_idx2name=param_idx2name,
                                   skip_nonfinite=skip_nonfinite, param_dict=param_dict, aggregate_num=aggregate_num,
                                   use_fused_step=use_fused_step), momentum, lazy_update)


class NAGState(NamedTuple):
    hyper: Hyper
    mom: ParamTree
    domains = {"mom": FINITE}


def _nesterov_step(momentum):
    """NAG's own piece, MXNet 1.9.1's ``NAGMomKernel`` (optimizer_op-inl.h:1061-1085) in its
    order of operations, each product rounded (`gradxform._rounding.rounded`). The momentum
    holds lr-scaled steps, and because the kernel writes the weight in place before it
    updates the momentum, the decay term of the stored momentum uses the *new* weight::

        mom   = momentum * mom
        w_new = (w - mom) + (momentum + 1) * (mom - lr * (g + wd * w))
        mom   = mom - lr * (g + wd * w_new)

    with ``g`` the rescaled (and clipped) gradient (`gradxform.mxnet._kernels.rescaled`).
    Emits ``w_new - w``."""

    def init(params):
        return NAGState({"momentum": hyper_scalar(momentum)}, jax.tree.map(jnp.zeros_like, params))

    @declare(needs=("lr", "wd"), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        lr = context_value(extra_args, "lr", update)
        wd = context_value(extra_args, "wd", update)

        def one(g, w, mom, l, d):
            c = lambda x: x.astype(g.dtype)  # noqa: E731
            mu, l, d, w = c(state.hyper["momentum"]), c(l), c(d), c(w)
            mom = rounded(mu * mom)
            w_new = (w - mom) + rounded((mu + 1) * (mom - rounded(l * (g + rounded(d * w)))))
            return w_new - w, mom - rounded(l * (g + rounded(d * w_new)))

        out, s1 = map_unzip(one, 2, updates, params, state.mom, lr, wd)
        return out, NAGState(state.hyper, s1)

    return transformation(init, update)


def nag(learning_rate=None, momentum=0.0, *, wd=0.0, rescale_grad=1.0, clip_gradient=None, lr_scheduler=None,
        multi_precision=False, begin_num_update=0, lr_mult=None, wd_mult=None, param_idx2name=None,
        skip_nonfinite=False, param_dict=None, aggregate_num=None, use_fused_step=None) -> GradientTransformation:
    """MXNet NAG (Nesterov accelerated SGD; 1.9.1 ``nag_mom_update``, ``NAGMomKernel`` in
    optimizer_op-inl.h:1061-1085), in its order of operations, each product rounded::

        g     = clip(rescale_grad * grad, clip_gradient)
        mom   = momentum * mom
        w_new = (w - mom) + (momentum + 1) * (mom - lr * (g + wd * w))
        mom   = mom - lr * (g + wd * w_new)

    With ``momentum=0``, ``sgd_update`` (``SGDKernel``, :381-398; no state)::

        w = (1 - lr * wd) * w - (lr * rescale_grad) * grad
            (clip_gradient: (1 - lr * wd) * w - lr * clip(rescale_grad * grad, clip_gradient))

    A jitted step computes MXNet 1.9.1's new weight and momentum to the last bit; the weight
    comes back as ``w + (w_new - w)``, which is not ``w_new`` where no float32 difference
    reaches it from ``w`` (a step larger than the weight; tests/test_mxnet_kernel_order.py).
    (The seed's older pure-Python NAG kept an un-scaled momentum; 1.9.1's kernel,
    followed here, is what MXNet runs.)
    """
    o = parse_options(nag, learning_rate, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient,
                      lr_scheduler=lr_scheduler, multi_precision=multi_precision, begin_num_update=begin_num_update,
                      lr_mult=lr_mult, wd_mult=wd_mult, param_idx2name=param_idx2name, skip_nonfinite=skip_nonfinite,
                      param_dict=param_dict, aggregate_num=aggregate_num, use_fused_step=use_fused_step)
    check_unit(o.owner, momentum=momentum)
    if momentum == 0:  # in the slots (and states) of rescale, clip, add_wd, scale_by_lr, identity
        deferred = not o.clip_gradient  # the unclipped branch multiplies (lr * rescale_grad) * g
        return o.build(rescaled(o.rescale_grad, deferred=deferred), o.clip(), o.provide_wd(),
                       sgd_update_step(deferred_rescale=deferred), identity(), warn_as="NAG")
    return o.build(rescaled(o.rescale_grad), o.clip(), o.provide_wd(), _nesterov_step(momentum), warn_as="NAG")


def signum(learning_rate=0.01, momentum=0.9, wd_lh=0.0, *, wd=0.0, rescale_grad=1.0, clip_gradient=None,
           lr_scheduler=None, multi_precision=False, begin_num_update=0, lr_mult=None, wd_mult=None,
           param_idx2name=None, skip_nonfinite=False, param_dict=None, aggregate_num=None,
           use_fused_step=None) -> GradientTransformation:
    """MXNet Signum (``signum_update``, ``SignumKernel`` in optimizer_op-inl.h:2412-2432;
    ``signsgd_update`` when momentum is 0), in its order of operations, each product
    rounded (MXNet stores ``mom``, the negated moving average; the state here holds the
    average, ``-mom``)::

        mom = momentum * mom - ((1 - momentum) * wd) * w - ((1 - momentum) * rescale_grad) * grad
              (clip_gradient: ... - (1 - momentum) * clip(rescale_grad * grad, clip_gradient))
        w   = (1 - lr * wd_lh) * w + lr * sign(mom)

    A jitted step is MXNet 1.9.1's to the last bit (tests/test_mxnet_kernel_order.py); with
    ``wd_lh`` the new weight comes back as ``w + (w_new - w)``, which is not ``w_new`` where
    no float32 difference reaches it from ``w``.

    With ``momentum=0`` (signSGD) the kernel ignores ``rescale_grad`` and
    ``clip_gradient`` and decays with ``wd`` outside the sign::

        w = (1 - lr * wd) * w - lr * sign(grad)

    and, as MXNet's ``signsgd_update`` has no ``wd_lh``, ``wd_lh`` must be 0.

    Args: momentum in [0, 1) (0: signSGD, static); wd_lh >= 0, decoupled decay.
    """
    o = parse_options(signum, learning_rate, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient,
                      lr_scheduler=lr_scheduler, multi_precision=multi_precision, begin_num_update=begin_num_update,
                      lr_mult=lr_mult, wd_mult=wd_mult, param_idx2name=param_idx2name, skip_nonfinite=skip_nonfinite,
                      param_dict=param_dict, aggregate_num=aggregate_num, use_fused_step=use_fused_step)
    check_unit(o.owner, momentum=momentum)
    check_hyper(o.owner, "wd_lh", wd_lh)
    if momentum == 0:
        if wd_lh:
            raise ValueError(f"{o.owner}(wd_lh=...): with momentum=0 (signSGD) wd_lh must be 0; "
                             "MXNet's signsgd_update has no wd_lh (use wd).")
        return o.build(o.provide_wd(), sign(), scale_by_lr(), add_decoupled_weight_decay(None))
    deferred = not o.clip_gradient  # the unclipped branch multiplies ((1 - mu) * rescale_grad) * g
    # in the slots (and states) of rescale, clip, add_wd, ema, sign, scale_by_lr, add_decoupled_weight_decay
    return o.build(rescaled(o.rescale_grad, deferred=deferred), o.clip(), o.provide_wd(),
                   signum_momentum(momentum, deferred_rescale=deferred), sign(), scale_by_lr(), signum_decay(wd_lh))


class LBSGDState(NamedTuple):
    """``num_cums``: per-leaf int32 counts (a vector, an entry per leaf)."""
    hyper: Hyper
    cum_grad: ParamTree
    num_cums: ParamTree
    per_leaf_fields = ("num_cums",)  # a vector, an entry per leaf (gradxform.fused: one per buffer)
    domains = {"cum_grad": FINITE, "num_cums": NON_NEGATIVE_FINITE}


# LBSGD's own values: local to the LBSGD chain (gradxform.LocalKey), never on the shared context
LBMULT = LocalKey("lbmult", "LBSGD's accumulator")
LBSGD_APPLY = LocalKey("lbsgd_apply", "LBSGD's accumulator")


def _lbsgd_accumulate(batch_scale, warmup_strategy, warmup_epochs, updates_per_epoch, begin_epoch):
    """LBSGD's own piece: accumulate gradients over ``batch_scale`` calls,
    emit their mean on every ``batch_scale``-th call, and publish the warmup
    multiplier `LBMULT` and the per-leaf flag `LBSGD_APPLY` for the rest of
    LBSGD's chain."""
    nwup = warmup_epochs * updates_per_epoch
    init_updates = begin_epoch * updates_per_epoch

    def lbmult(nup):
        nup = nup.astype(jnp.float32)
        maxmult = float(batch_scale)
        if nwup <= 1:
            warm = jnp.ones_like(nup)
        elif warmup_strategy == "linear":
            warm = 1.0 + (maxmult - 1) * nup / nwup
        elif warmup_strategy == "power2":
            warm = 1.0 + (maxmult - 1) * (nup * nup) / (nwup * nwup)
        elif warmup_strategy == "sqrt":
            warm = 1.0 + (maxmult - 1) * jnp.sqrt(nup / nwup)
        else:
            warm = jnp.ones_like(nup)
        return jnp.where(nup >= nwup, maxmult, warm)

    def init(params):
        return LBSGDState({}, jax.tree.map(jnp.zeros_like, params),
                          jnp.full((jax.tree.structure(params).num_leaves,), init_updates, jnp.int32))

    lars = warmup_strategy == "lars"

    # fused: LARS warmup takes per-leaf norms, segment sums over the flat buffers
    # (summed in another order)
    @declare(needs=("wd",) if lars else (), provides=(LBMULT, LBSGD_APPLY),
             fusion=Fusion(bit_exact=not lars, reductions=("leaf_sum",) if lars else ()))
    def update(updates, state, params=None, **extra_args):
        num_cums = jax.tree.map(lambda c: c + 1, leaf_values(state.num_cums, updates))
        cum = jax.tree.map(lambda c, g: c + g, state.cum_grad, updates)
        apply_tree = jax.tree.map(lambda c: c % batch_scale == 0, num_cums)
        mean = jax.tree.map(lambda c: c / jnp.asarray(batch_scale, c.dtype), cum)
        if warmup_strategy == "lars":
            wd = context_value(extra_args, "wd", update)
            # per-leaf norms: per leaf, or per element of a fused buffer
            w2, g2 = leaf_sq_norm(params, extra_args), leaf_sq_norm(mean, extra_args)
            mult = jax.tree.map(lambda w, g, d: jnp.clip(jnp.sqrt(w / (g + d * w + 1e-18)), 0.01, 100.0),
                                w2, g2, wd)
        else:
            mult = jax.tree.map(lbmult, num_cums)
        cast(StepContext, StepContext.of(extra_args)).publish_local({LBMULT: mult, LBSGD_APPLY: apply_tree})
        cum = jax.tree.map(lambda c, a: jnp.where(a, jnp.zeros_like(c), c), cum, apply_tree)
        return mean, LBSGDState(state.hyper, cum, leaf_vector(num_cums, jnp.int32))

    return transformation(init, update)


def lbsgd(learning_rate=None, momentum=0.0, warmup_strategy="linear", warmup_epochs=5, batch_scale=1,
          updates_per_epoch=32, begin_epoch=0, num_epochs=60, *, wd=0.0, rescale_grad=1.0, clip_gradient=None,
          lr_scheduler=None, multi_precision=False, begin_num_update=0, lr_mult=None, wd_mult=None,
          param_idx2name=None, skip_nonfinite=False, param_dict=None, aggregate_num=None,
          use_fused_step=None) -> GradientTransformation:
    """MXNet LBSGD (large-batch SGD, ``LBSGD.update``).

    Reads the learning rate *before* bumping the update count. Gradients are
    summed over ``batch_scale`` calls; on every ``batch_scale``-th call (the
    count starting at ``begin_epoch * updates_per_epoch``) the mean ``g`` takes
    an SGD step with ``lr * lbmult``, and between those calls nothing moves::

        lbmult = warmup(strategy, num_cums)  or, for 'lars',
                 clip(sqrt(|w|^2 / (|g|^2 + wd |w|^2 + 1e-18)), 0.01, 100)
        then the `sgd` rule with lr * lbmult

    Args: warmup_strategy in {'linear', 'power2', 'sqrt', 'lars'};
    warmup_epochs, updates_per_epoch, batch_scale >= 1; begin_epoch >= 0.
    ``num_epochs`` is accepted and unused, as in MXNet.
    """
    del num_epochs
    o = parse_options(lbsgd, learning_rate, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient,
                      lr_scheduler=lr_scheduler, multi_precision=multi_precision, begin_num_update=begin_num_update,
                      lr_mult=lr_mult, wd_mult=wd_mult, param_idx2name=param_idx2name, skip_nonfinite=skip_nonfinite,
                      param_dict=param_dict, aggregate_num=aggregate_num, use_fused_step=use_fused_step)
    check_unit(o.owner, momentum=momentum)
    if warmup_strategy not in ("linear", "power2", "sqrt", "lars"):
        raise ValueError(f"{o.owner}(warmup_strategy=...): must be one of 'linear', 'power2', "
                         f"'sqrt', 'lars'; got {warmup_strategy!r}.")
    for name, v in dict(warmup_epochs=warmup_epochs, updates_per_epoch=updates_per_epoch).items():
        check_range(o.owner, name, v, low=0)
    check_range(o.owner, "batch_scale", batch_scale, low=1)
    check_range(o.owner, "begin_epoch", begin_epoch, low=0)
    sgd_step = chain(o.rescale(), o.clip(), o.add_wd_from_context(), scale_by_lr(factor_key=LBMULT),
                     trace(momentum) if momentum > 0 else identity(), needs=("lr", "wd", LBMULT))
    return o.build(o.provide_wd(),
                   _lbsgd_accumulate(int(batch_scale), warmup_strategy, warmup_epochs, updates_per_epoch,
                                     begin_epoch),
                   gated(sgd_step, LBSGD_APPLY), read_lr="before", warn_as="SGD")


class DCASGDState(NamedTuple):
    hyper: Hyper
    previous_weight: ParamTree
    domains = {"previous_weight": FINITE}


def _delay_compensation(lamda):
    """DCASGD's own piece: ``u -> u + lamda * u^2 * (w - w_prev)``; keeps ``w``."""

    def init(params):
        return DCASGDState({"lamda": hyper_scalar(lamda)}, jax.tree.map(jnp.array, params))

    @fusable
    def update(updates, state, params=None, **extra_args):
        del extra_args
        lam = state.hyper["lamda"]
        out = jax.tree.map(lambda g, w, prev: g + lam.astype(g.dtype) * g * g * (w - prev),
                           updates, params, state.previous_weight)
        return out, DCASGDState(state.hyper, jax.tree.map(jnp.array, params))

    return transformation(init, update)


def dcasgd(learning_rate=None, momentum=0.0, lamda=0.04, *, wd=0.0, rescale_grad=1.0, clip_gradient=None,
           lr_scheduler=None, multi_precision=False, begin_num_update=0, lr_mult=None, wd_mult=None,
           param_idx2name=None, skip_nonfinite=False, param_dict=None, aggregate_num=None,
           use_fused_step=None) -> GradientTransformation:
    """MXNet DCASGD (delay-compensated async SGD, ``DCASGD.update``)::

        g   = clip(rescale_grad * grad, clip_gradient)
        mom = momentum * mom - lr * (g + wd * w + lamda * g^2 * (w - w_prev))
        w_prev = w;  w += mom

    MXNet 1.9.1 raises on ``if mom:`` for a momentum buffer of more than one
    element; the rule above is what its code writes, and what it computes for
    one-element parameters.
    """
    o = parse_options(dcasgd, learning_rate, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient,
                      lr_scheduler=lr_scheduler, multi_precision=multi_precision, begin_num_update=begin_num_update,
                      lr_mult=lr_mult, wd_mult=wd_mult, param_idx2name=param_idx2name, skip_nonfinite=skip_nonfinite,
                      param_dict=param_dict, aggregate_num=aggregate_num, use_fused_step=use_fused_step)
    check_unit(o.owner, momentum=momentum)
    check_hyper(o.owner, "lamda", lamda)
    return o.build(o.rescale(), o.clip(), _delay_compensation(lamda), o.add_wd(), scale_by_lr(),
                   trace(momentum) if momentum > 0 else identity())


class NoiseState(NamedTuple):
    key: jax.Array


def _langevin_noise(seed):
    """SGLD's own piece: adds ``N(0, lr)`` noise (std ``sqrt(lr)``); the PRNG key
    lives in the state, so a step is a pure function and a resumed run draws
    the same noise. The stream (fixed: a seed gives the same run in every
    version)::

        state = key(seed)
        state, sub = split(state);  k_i = split(sub, number of leaves)[i]
        noise_i = sqrt(lr_i) * normal(k_i, shape_i, dtype_i)     (added: u_i + noise_i)"""

    def init(params):
        del params
        return NoiseState(jax.random.key_data(jax.random.key(seed)))

    @uses_context(needs=("lr",))
    def update(updates, state, params=None, **extra_args):
        del params
        lr = context_value(extra_args, "lr", update)
        key, sub = jax.random.split(jax.random.wrap_key_data(state.key))
        leaves, treedef = jax.tree.flatten(updates)
        keys = jax.random.split(sub, max(len(leaves), 1))
        noisy = [u + jnp.sqrt(l).astype(u.dtype) * jax.random.normal(k, jnp.shape(u), u.dtype)
                 for u, l, k in zip(leaves, treedef.flatten_up_to(lr), keys)]
        return treedef.unflatten(noisy), NoiseState(jax.random.key_data(key))

    return transformation(init, update)


def sgld(learning_rate=None, seed=0, *, wd=0.0, rescale_grad=1.0, clip_gradient=None, lr_scheduler=None,
         multi_precision=False, begin_num_update=0, lr_mult=None, wd_mult=None, param_idx2name=None,
         skip_nonfinite=False, param_dict=None, aggregate_num=None, use_fused_step=None) -> GradientTransformation:
    """MXNet SGLD (stochastic gradient Langevin dynamics, ``SGLD.update``)::

        g  = clip(rescale_grad * grad, clip_gradient)
        w += -lr/2 * (g + wd * w) + N(0, sqrt(lr))

    The noise comes from a JAX PRNG key in the state (``seed``), so it does
    not reproduce MXNet's random stream; its distribution is the same.
    """
    o = parse_options(sgld, learning_rate, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient,
                      lr_scheduler=lr_scheduler, multi_precision=multi_precision, begin_num_update=begin_num_update,
                      lr_mult=lr_mult, wd_mult=wd_mult, param_idx2name=param_idx2name, skip_nonfinite=skip_nonfinite,
                      param_dict=param_dict, aggregate_num=aggregate_num, use_fused_step=use_fused_step)
    return o.build(o.rescale(), o.clip(), o.add_wd(), scale_by_lr(sign=-0.5), _langevin_noise(seed))



# -- the framework's classes, in its positional order (each named in its `Declaration`) --

def DCASGD(momentum=0.0, lamda=0.04, *, rescale_grad=1.0, param_idx2name=None, wd=0.0, clip_gradient=None,
           learning_rate=None, lr_scheduler=None, begin_num_update=0, multi_precision=False, param_dict=None,
           lr_mult=None, wd_mult=None, skip_nonfinite=False, aggregate_num=None,
           use_fused_step=None) -> GradientTransformation:
    """``mx.optimizer.DCASGD(momentum, lamda, **kwargs)``: `gradxform.mxnet.dcasgd`."""
    return dcasgd(momentum=momentum, lamda=lamda, rescale_grad=rescale_grad, param_idx2name=param_idx2name, wd=wd,
                  clip_gradient=clip_gradient, learning_rate=learning_rate, lr_scheduler=lr_scheduler,
                  begin_num_update=begin_num_update, multi_precision=multi_precision, param_dict=param_dict,
                  lr_mult=lr_mult, wd_mult=wd_mult, skip_nonfinite=skip_nonfinite, aggregate_num=aggregate_num,
                  use_fused_step=use_fused_step)


def LBSGD(momentum=0.0, multi_precision=False, warmup_strategy="linear", warmup_epochs=5, batch_scale=1,
          updates_per_epoch=32, begin_epoch=0, num_epochs=60, *, rescale_grad=1.0, param_idx2name=None, wd=0.0,
          clip_gradient=None, learning_rate=None, lr_scheduler=None, begin_num_update=0, param_dict=None,
          lr_mult=None, wd_mult=None, skip_nonfinite=False, aggregate_num=None,
          use_fused_step=None) -> GradientTransformation:
    """``mx.optimizer.LBSGD(momentum, multi_precision, warmup_strategy, warmup_epochs,
    batch_scale, updates_per_epoch, begin_epoch, num_epochs, **kwargs)``: `gradxform.mxnet.lbsgd`."""
    return lbsgd(momentum=momentum, multi_precision=multi_precision, warmup_strategy=warmup_strategy,
                 warmup_epochs=warmup_epochs, batch_scale=batch_scale, updates_per_epoch=updates_per_epoch,
                 begin_epoch=begin_epoch, num_epochs=num_epochs, rescale_grad=rescale_grad,
                 param_idx2name=param_idx2name, wd=wd, clip_gradient=clip_gradient, learning_rate=learning_rate,
                 lr_scheduler=lr_scheduler, begin_num_update=begin_num_update, param_dict=param_dict, lr_mult=lr_mult,
                 wd_mult=wd_mult, skip_nonfinite=skip_nonfinite, aggregate_num=aggregate_num,
                 use_fused_step=use_fused_step)


def NAG(momentum=0.0, *, rescale_grad=1.0, param_idx2name=None, wd=0.0, clip_gradient=None, learning_rate=None,
        lr_scheduler=None, begin_num_update=0, multi_precision=False, param_dict=None, lr_mult=None,
        wd_mult=None, skip_nonfinite=False, aggregate_num=None, use_fused_step=None) -> GradientTransformation:
    """``mx.optimizer.NAG(momentum, **kwargs)``: `gradxform.mxnet.nag`."""
    return nag(momentum=momentum, rescale_grad=rescale_grad, param_idx2name=param_idx2name, wd=wd,
               clip_gradient=clip_gradient, learning_rate=learning_rate, lr_scheduler=lr_scheduler,
               begin_num_update=begin_num_update, multi_precision=multi_precision, param_dict=param_dict,
               lr_mult=lr_mult, wd_mult=wd_mult, skip_nonfinite=skip_nonfinite, aggregate_num=aggregate_num,
               use_fused_step=use_fused_step)


def SGD(momentum=0.0, lazy_update=False, *, rescale_grad=1.0, param_idx2name=None, wd=0.0, clip_gradient=None,
        learning_rate=None, lr_scheduler=None, begin_num_update=0, multi_precision=False, param_dict=None,
        lr_mult=None, wd_mult=None, skip_nonfinite=False, aggregate_num=None,
        use_fused_step=None) -> GradientTransformation:
    """``mx.optimizer.SGD(momentum, lazy_update, **kwargs)``: `gradxform.mxnet.sgd`."""
    return sgd(momentum=momentum, lazy_update=lazy_update, rescale_grad=rescale_grad, param_idx2name=param_idx2name,
               wd=wd, clip_gradient=clip_gradient, learning_rate=learning_rate, lr_scheduler=lr_scheduler,
               begin_num_update=begin_num_update, multi_precision=multi_precision, param_dict=param_dict,
               lr_mult=lr_mult, wd_mult=wd_mult, skip_nonfinite=skip_nonfinite, aggregate_num=aggregate_num,
               use_fused_step=use_fused_step)


def ccSGD(momentum=0.0, lazy_update=False, *, rescale_grad=1.0, param_idx2name=None, wd=0.0, clip_gradient=None,
          learning_rate=None, lr_scheduler=None, begin_num_update=0, multi_precision=False, param_dict=None,
          lr_mult=None, wd_mult=None, skip_nonfinite=False, aggregate_num=None,
          use_fused_step=None) -> GradientTransformation:
    """``mx.optimizer.ccSGD(*args, **kwargs)`` (deprecated in MXNet, SGD's arguments): `gradxform.mxnet.ccsgd`."""
    return ccsgd(momentum=momentum, lazy_update=lazy_update, rescale_grad=rescale_grad, param_idx2name=param_idx2name,
                 wd=wd, clip_gradient=clip_gradient, learning_rate=learning_rate, lr_scheduler=lr_scheduler,
                 begin_num_update=begin_num_update, multi_precision=multi_precision, param_dict=param_dict,
                 lr_mult=lr_mult, wd_mult=wd_mult, skip_nonfinite=skip_nonfinite, aggregate_num=aggregate_num,
                 use_fused_step=use_fused_step)


Signum = signum


SGLD = sgld
