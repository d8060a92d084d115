"""MindSpore (2.x) / TinyMS momentum rules: Momentum, SGD, and the LARS wrapper.

Sources: ``mindspore/nn/optim/momentum.py`` (``ApplyMomentum``), ``sgd.py``
(``P.SGD``), ``lars.py`` (``LARSUpdate``); the TinyMS seed
(``../shared/seeds/003_*.txt``) gives the same rules.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from .._registry import Declaration, registered_name
from .._base import CONTEXT_KEY, GradientTransformation, StepContext, run_inner, transformation
from .._elementwise import fusable
from .._spec import Fusion, declare
from .._errors import validated
from .._optimizer import guarded
from ._get_lr import MindSporeOptimizer
from ._groups import beta_gamma_filter, list_lr
from .._hyper import get_hyper, hyper_names, hyper_scalar, tag_owner
from .._ranges import NON_NEGATIVE, check_hyper
from ..pieces import scale_by_lr
from ..pieces.internal import TraceState, leaf_flags, leaf_sq_norm
from .._rounding import rounded
from .._state_paths import get_path, map_states
from ..schedules.internal import Constant, as_schedule
from ._common import check_bool, check_float, parse
from .._types import Hyper, ParamTree, InnerState
from .._domains import FINITE, FLAG

__all__ = ["momentum", "sgd", "lars", "SGDMomentumState", "LarsState"]
# LARS: epsilon and coefficient non-negative
DECLARED = (  # registered as 'mindspore.<name>' by the family's __init__ (gradxform._registry.Declaration)
    Declaration('momentum', classes=('Momentum',), migrates=True),
    Declaration('sgd', classes=('SGD',), migrates=True),
    Declaration('lars', classes=('LARS',), ranges={"epsilon": NON_NEGATIVE},
                no_goldens="MindSpore 2.10 has no CPU kernel for LARSUpdate (tests/goldens/mindspore/FAILURES.json): "
                       "checked against a float64 transcription of lars.py"),
)



def momentum(learning_rate, momentum, weight_decay=0.0, loss_scale=1.0, use_nesterov=False, *,
             params=None, groups=None, skip_nonfinite=False) -> GradientTransformation:
    """MindSpore Momentum (``nn.Momentum`` -> ``ApplyMomentum``)::

        g = (g + weight_decay * loss_scale * w) / loss_scale   (no decay for 'beta'/'gamma')
        v = momentum * v + g
        w -= lr * v                        (use_nesterov: w -= lr * (g + momentum * v))

    Args:
      learning_rate: a number >= 0, a list / 1-D array (update i uses the i-th
        value, the last one after the end), or a `gradxform.schedules` schedule.
      momentum: float >= 0 (hyperparameter ``momentum``).
      weight_decay: >= 0.
      loss_scale: > 0, static gradient division.
      use_nesterov: bool (static).
      groups: MindSpore parameter groups (`gradxform.mindspore._groups`): 'params',
        'lr', 'weight_decay', 'grad_centralization', and 'order_params'.

    Warning: MindSpore 2.10's CPU ``ApplyMomentum`` kernel ignores
    ``use_nesterov`` (its golden equals plain momentum); the seed and the
    other kernels apply Nesterov, and so does this (the seed wins).
    """
    owner = registered_name(globals()["momentum"])  # the argument momentum shadows the factory
    o = parse(owner, learning_rate, weight_decay, loss_scale, groups, params=params, skip_nonfinite=skip_nonfinite)
    check_float(owner, "momentum", momentum)
    check_bool(owner, "use_nesterov", use_nesterov)
    return o.build(o.head(), _apply_momentum(momentum, use_nesterov), scale_by_lr(rounded=True))


def _apply_momentum(momentum, nesterov: bool) -> GradientTransformation:
    """``ApplyMomentum``'s accumulation as its CPU kernel rounds it (no fused
    multiply-add, ``apply_momentum_cpu_kernel.cc``)::

        v = round(v * momentum) + g;   emits v   (use_nesterov: g + momentum * v)

    The state is `gradxform.pieces.trace`'s (``TraceState``, hyperparameter
    ``momentum``); with ``scale_by_lr(rounded=True)`` a jitted step is the
    CPU kernel's to the last bit (tests/test_kernel_order_ms_paddle.py)."""

    def init(params):
        return TraceState({"momentum": hyper_scalar(momentum)}, jax.tree.map(jnp.zeros_like, params))

    @fusable
    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        mu = state.hyper["momentum"]
        v = jax.tree.map(lambda t, g: rounded(t * mu.astype(g.dtype)) + g, state.trace, updates)
        out = jax.tree.map(lambda g, t: g + mu.astype(g.dtype) * t, updates, v) if nesterov else v
        return out, TraceState(state.hyper, v)

    return transformation(init, update)


class SGDMomentumState(NamedTuple):
    hyper: Hyper
    accum: ParamTree
    stat: ParamTree
    domains = {"accum": FINITE, "stat": FLAG}


def _sgd_momentum(momentum: float, dampening: float, nesterov: bool) -> GradientTransformation:
    """MindSpore ``P.SGD`` momentum (PyTorch-style, first step ``accum = g``)::

        if momentum > 0:
            accum = g if stat else momentum * accum + (1 - dampening) * g;  stat = 0
            g = g + momentum * accum if nesterov else accum

    ``stat`` (1 until a leaf's first update) is per element, as MindSpore's."""

    def init(params):
        return SGDMomentumState({"momentum": hyper_scalar(momentum), "dampening": hyper_scalar(dampening)},
                                jax.tree.map(jnp.zeros_like, params), jax.tree.map(jnp.ones_like, params))

    @fusable
    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        mu, d = state.hyper["momentum"], state.hyper["dampening"]
        active = mu > 0

        def one(g, a, s):
            m, dd = mu.astype(g.dtype), d.astype(g.dtype)
            new_a = jnp.where(s > 0, g, rounded(a * m) + rounded((1 - dd) * g))  # the kernel's roundings
            a2 = jnp.where(active, new_a, a)
            s2 = jnp.where(active, jnp.zeros_like(s), s)
            out = (g + rounded(a2 * m)) if nesterov else a2
            return jnp.where(active, out, g), a2, s2

        leaves, treedef = jax.tree.flatten(updates)
        res = [one(g, a, s) for g, a, s in zip(leaves, treedef.flatten_up_to(state.accum),
                                               treedef.flatten_up_to(state.stat))]
        col = lambda i: treedef.unflatten([r[i] for r in res])  # noqa: E731
        return col(0), SGDMomentumState(state.hyper, col(1), col(2))

    return transformation(init, update)


def sgd(learning_rate=0.1, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, loss_scale=1.0, *,
        params=None, groups=None, skip_nonfinite=False) -> GradientTransformation:
    """MindSpore SGD (``nn.SGD`` -> ``P.SGD``)::

        g = (g + weight_decay * loss_scale * w) / loss_scale   (no decay for 'beta'/'gamma')
        v = momentum * v + (1 - dampening) * g     (v = g on a parameter's first update)
        w -= lr * (g + momentum * v)  if nesterov  else  lr * v
        (momentum == 0: w -= lr * g)

    Args: momentum, dampening: >= 0 (ints accepted, as MindSpore converts
    them); nesterov (static) needs momentum > 0 and dampening == 0. Others as
    `momentum`.
    """
    owner = registered_name(sgd)
    o = parse(owner, learning_rate, weight_decay, loss_scale, groups, params=params, skip_nonfinite=skip_nonfinite)
    momentum = check_float(owner, "momentum", momentum, ints=True)
    dampening = check_float(owner, "dampening", dampening, ints=True)
    check_bool(owner, "nesterov", nesterov)
    if nesterov and (momentum <= 0.0 or dampening != 0.0):
        raise ValueError(f"{owner}(nesterov=True): needs momentum > 0 and dampening == 0; got "
                         f"momentum={momentum}, dampening={dampening}.")
    return o.build(o.head(), _sgd_momentum(momentum, dampening, nesterov), scale_by_lr(rounded=True))


class LarsState(NamedTuple):
    hyper: Hyper
    inner: InnerState


def _default_lars_filter(name: str) -> bool:
    return "LayerNorm" not in name and "bias" not in name


def _taken_over(key) -> str | None:
    """What LARS takes over from the wrapped optimizer: its weight decays
    (set to 0 there) and its loss scale (set to 1 there)."""
    k = str(key)
    if k in ("weight_decay", "weight_decay_groups"):  # the optimizer's and its groups' own (a GroupHyper)
        return "wd"
    if k == "loss_scale":
        return "ls"
    return None


def _switch_off(state):
    """``state`` with every weight decay 0 and every loss scale 1 (MindSpore's
    LARS.__init__ sets the wrapped optimizer's decay_flags False,
    exec_weight_decay False and reciprocal_scale 1)."""
    def fn(_, node):
        h = getattr(node, "hyper", None)
        if not isinstance(h, dict) or not any(_taken_over(k) for k in h):
            return node
        off = {k: jax.tree.map(jnp.zeros_like if _taken_over(k) == "wd" else jnp.ones_like, v) if _taken_over(k)
               else v for k, v in h.items()}
        return node._replace(hyper=off)
    return map_states(fn, state)


def _switch_back(new, old):
    """``new`` with the values `_switch_off` replaced taken back from ``old``
    (every other hyperparameter, e.g. the step counter's current_lr, is new's)."""
    def fn(path, node):
        h = getattr(node, "hyper", None)
        if not isinstance(h, dict) or not any(_taken_over(k) for k in h):
            return node
        was = get_path(old, path).hyper
        return node._replace(hyper={k: (was[k] if _taken_over(k) else v) for k, v in h.items()})
    return map_states(fn, new)


def _decoupled_decays(state) -> list[str]:
    """The weight decays held inside a rule's own hyperparameters (beside
    others: AdaFactor's, Paddle AdamW's), nonzero, as ``'Class.key=value'``.
    MindSpore's LARS switches off only the base class's decay (decay_flags,
    exec_weight_decay), so such a decay is applied by the rule as well as by
    LARS there; `_switch_off` would zero it and the wrapped optimizer does not
    publish it, so no decay at all would be applied."""
    found = []

    def fn(_, node):
        h = getattr(node, "hyper", None)
        if isinstance(h, dict) and not all(_taken_over(k) for k in h):
            for k, v in h.items():
                if _taken_over(k) == "wd" and not any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(v)) \
                        and np.any(np.asarray(v) != 0.0):
                    found.append(f"{type(node).__name__}.{k}={', '.join(f'{x:g}' for x in np.asarray(v).reshape(-1))}")
        return node
    map_states(fn, state)
    return found


def _inner_inspect(optimizer, updates, state, params, extra_args):
    """What the wrapped optimizer would use on this update, per leaf: its
    step context's ``lr``, ``wd`` and ``count`` (published by `track_step`,
    the group pieces and the decay piece), from a run on zero gradients whose
    results are discarded (under jit only the scalars are computed)."""
    ctx = StepContext.of(extra_args)
    probe = StepContext() if ctx is None else ctx.probe()  # the layout of a fused step, if any
    zeros = jax.tree.map(jnp.zeros_like, updates)
    run_inner(optimizer, zeros, state, params, **{**extra_args, CONTEXT_KEY: probe})
    return probe.lr, probe.wd, probe.count


def lars(optimizer: GradientTransformation, epsilon=1e-05, coefficient=0.001, use_clip=False,
         lars_filter: Callable[[str], bool] = _default_lars_filter, *, weight_decay=None, loss_scale=None,
         decay_filter: Callable[[str], bool] | None = beta_gamma_filter, learning_rate=None,
         skip_nonfinite=False) -> GradientTransformation:
    """MindSpore LARS (``nn.LARS`` -> ``LARSUpdate``): rescales each filtered
    gradient by a layer-wise trust ratio, then runs ``optimizer``::

        g = g / loss_scale
        for parameters with lars_filter(name):          (others: g unchanged, no decay)
            wd = the parameter's weight decay (0 where its decay flag is off)
            lam = coefficient * |w| / (|g| + wd * |w| + epsilon)   (0 if the denominator is 0 (*))
            lam = min(lam / lr, 1)  if use_clip              (lr: the parameter's learning rate)
            g = lam * (g + wd * w)
        w = optimizer(g)

    As MindSpore's LARS, this takes over the wrapped optimizer's weight decay
    and loss scale: ``lars(momentum(0.1, 0.9, weight_decay=1e-4, loss_scale=128))``
    decays and unscales in LARS (each parameter with its own, per-group
    weight decay and decay flag, as the wrapped optimizer would) and runs the
    optimizer with weight decay 0 and loss scale 1 (its state keeps the
    values; they are switched off for its update only). Parameters the
    filter leaves out lose their weight decay, as in MindSpore. A wrapped
    optimizer whose rule applies its own weight decay (AdaFactor's, decoupled:
    ``adafactor.py`` ``_run_opt_with_one_number``, ``weight_decay_flag``) is
    refused at ``init`` when that decay is > 0: MindSpore's LARS switches off
    only the base class's decay, so it would decay there twice, and gradxform
    cannot take that decay over. ``use_clip``
    uses each parameter's learning rate for this update as the wrapped
    optimizer computes it (per group, fixed, list or schedule: MindSpore's
    ``LARS._get_lr``).

    Args:
      optimizer: the wrapped transformation (a `gradxform.mindspore`
        optimizer; another transformation works with ``weight_decay``,
        ``loss_scale`` and, for ``use_clip``, ``learning_rate`` given here).
      epsilon: float >= 0 (hyperparameter).
      coefficient: float >= 0 (hyperparameter).
      use_clip: bool (static).
      lars_filter: name -> bool (static per leaf).
      weight_decay: None (the wrapped optimizer's), or LARS's own: a number
        >= 0, a list, or a `gradxform.schedules` schedule (dynamic weight
        decay, MindSpore's weight-decay Cell, read at the update's step as a
        learning rate is), applied where ``decay_filter(name)`` (None: all).
        Giving it here when the wrapped optimizer has a weight decay > 0 is
        an error (MindSpore has one weight decay).
      loss_scale: None (the wrapped optimizer's) or a float > 0; the same
        rule.
      learning_rate: only for ``use_clip`` over an optimizer that does not
        publish its learning rate (a number, list or schedule).

    The trust ratio is the seed's and Ascend's ``lars_v2_update`` (no guard:
    |w| = 0 gives 0, so a zero-initialised parameter that passes the filter
    is not moved by its raw gradient at full lr). MindSpore's CPU and GPU
    have no LARSUpdate kernel: checked against a float64 transcription. The
    wrapped optimizer already went through `finalize`, so this wrapper does
    not repeat it.

    (*) The denominator is 0 only with epsilon 0, no decay and a gradient
    whose float32 norm is 0 (g = 0, or every ``g^2`` underflows: |g| below
    about 3.7e-23); the kernel divides by it (inf * g, NaN for g = 0), so
    gradxform takes ratio 0 there: no update.
    """
    owner = registered_name(lars)
    if not (isinstance(optimizer, tuple) and hasattr(optimizer, "init") and hasattr(optimizer, "update")):
        raise TypeError(f"{owner}(optimizer=...): must be a gradxform/optax transformation; got {optimizer!r}.")
    epsilon = check_float(owner, "epsilon", epsilon)
    coefficient = check_float(owner, "coefficient", coefficient)
    check_bool(owner, "use_clip", use_clip)
    if not callable(lars_filter):
        raise TypeError(f"{owner}(lars_filter=...): must be a function of the parameter name.")
    wd_base, wd_sched = None, None
    if weight_decay is not None:
        if isinstance(weight_decay, bool) or not (isinstance(weight_decay, (int, float)) or callable(weight_decay)
                                                  or isinstance(weight_decay, (list, tuple))):
            raise TypeError(f"{owner}(weight_decay=...): must be a float, an int, a list or a schedule; "
                            f"got {weight_decay!r}.")
        wd_base, wd_sched = as_schedule(owner, weight_decay, list_lr(f"{owner}(weight_decay=[...])"))
        check_hyper(owner, "weight_decay", wd_base)
    if loss_scale is not None:
        check_float(owner, "loss_scale", loss_scale, ints=True)
    sched = None
    if learning_rate is not None:
        _, sched = as_schedule(owner, learning_rate, list_lr(f"{owner}(learning_rate=[...])"))
        if sched is None:
            sched = Constant(float(learning_rate))
    own = {"epsilon": epsilon, "coefficient": coefficient}
    if wd_base is not None:
        own["weight_decay"] = wd_base
    if loss_scale is not None:
        own["loss_scale"] = float(loss_scale)

    def init(params):
        inner = optimizer.init(params)
        names = hyper_names(inner)
        for mine, key, neutral in (("weight_decay", "weight_decay", 0.0), ("loss_scale", "loss_scale", 1.0)):
            if (wd_base if mine == "weight_decay" else loss_scale) is None or key not in names:
                continue
            v = get_hyper(inner, key)
            # traced when init runs under jit (gradxform.fused builds its state so,
            # after an eager init that made this check)
            if not isinstance(v, jax.core.Tracer) and float(v) != neutral:
                raise ValueError(f"{owner}({mine}=...): the wrapped optimizer has {key}={float(v):g}; LARS takes "
                                 f"it over from there (as MindSpore's) - give it once, to the wrapped optimizer.")
        rule_decays = _decoupled_decays(inner)
        if rule_decays:
            raise ValueError(f"{owner}(optimizer=...): the wrapped optimizer applies its weight decay inside its "
                             f"rule ({', '.join(rule_decays)}), which LARS cannot take over (MindSpore's LARS "
                             "would apply it twice: in LARS and in the rule); give weight_decay=0.0 to it and "
                             "the weight decay to LARS (weight_decay=).")
        # the wrapped optimizer's hyperparameters keep their own owner
        # fresh arrays on every init: a donated state must not delete a cached one
        return tag_owner(LarsState({k: hyper_scalar(v) for k, v in own.items()}, inner), owner)

    # fused: trust ratios from per-leaf norms, segment sums over each buffer (summed in
    # another order); the name filters are static per leaf and applied per element, so
    # leaves that skip LARS may share a buffer
    @declare(inner=(optimizer,), fusion=Fusion(bit_exact=False, reductions=("leaf_sum", "leaf_flags")))
    def update(updates, state, params=None, **extra_args):
        if params is None:
            raise ValueError(f"{owner}: needs params; call update(grads, state, params).")
        h = state.hyper
        lr_in, wd_in, count = _inner_inspect(optimizer, updates, state.inner, params, extra_args)
        treedef = jax.tree.structure(updates)
        if loss_scale is not None:
            ls = h["loss_scale"]
        elif "loss_scale" in hyper_names(state.inner):
            ls = get_hyper(state.inner, "loss_scale")
        else:
            ls = jnp.float32(1.0)
        if wd_base is not None:
            wd_value = h["weight_decay"]
            if wd_sched is not None:
                if count is None:
                    raise ValueError(f"{owner}(weight_decay=<schedule>): the wrapped optimizer publishes no step "
                                     "count (it is not a gradxform optimizer).")
                wd_of = wd_sched.lr_for_update  # bound here, where it is known not None
                wd_value = jax.tree.map(lambda c: jnp.asarray(wd_of(c, wd_value), jnp.float32), count)
            else:
                wd_value = treedef.unflatten([wd_value] * treedef.num_leaves)
            decays = leaf_flags(updates, extra_args, decay_filter or (lambda name: True))
            wd = jax.tree.map(lambda d, f: jnp.where(f, d, jnp.float32(0.0)), wd_value, decays)
        elif wd_in is not None:
            wd = wd_in
        else:
            wd = treedef.unflatten([jnp.float32(0.0)] * treedef.num_leaves)
        if use_clip:
            if sched is not None:
                if count is None:
                    raise ValueError(f"{owner}(learning_rate=<schedule>): the wrapped optimizer publishes no "
                                     "step count (it is not a gradxform optimizer).")
                lr_of = sched.lr_for_update  # bound here, where it is known not None
                lr = jax.tree.map(lambda c: jnp.asarray(lr_of(c), jnp.float32), count)
            elif lr_in is not None:
                lr = lr_in
            else:
                raise ValueError(f"{owner}(use_clip=True): the wrapped optimizer publishes no learning rate; "
                                 "pass learning_rate= here.")
        else:
            lr = wd  # unused without use_clip
        # Which leaves get LARS is decided by name: static per leaf (a Python bool),
        # and under gradxform.fused per buffer (a bool where its leaves agree, else
        # one per element), with the norms summed per leaf (gradxform.pieces._segments).
        scaled = jax.tree.map(lambda g: g / ls.astype(g.dtype), updates)
        on = leaf_flags(updates, extra_args, lars_filter)
        w_sq = leaf_sq_norm(params, extra_args)
        g_sq = leaf_sq_norm(scaled, extra_args)

        def one(g, w, on, d, w_sq, g_sq, lr_):
            if on is False:
                return g
            d = jnp.asarray(d, jnp.float32)
            w32, g32 = w.astype(jnp.float32), g.astype(jnp.float32)
            w_norm, g_norm = jnp.sqrt(w_sq), jnp.sqrt(g_sq)
            den = g_norm + d * w_norm + h["epsilon"]
            # lars_v2_update has no guard; the denominator is 0 only with epsilon 0, no decay and
            # |g| = 0 in float32 (g = 0, or every g^2 underflows: |g| < 3.7e-23), where the kernel
            # gives inf * g (NaN for g = 0): the ratio there is 0, no update, instead
            ratio = jnp.where(den > 0, h["coefficient"] * w_norm / jnp.where(den > 0, den, 1.0), 0.0)
            if use_clip:
                ratio = jnp.clip(ratio / jnp.asarray(lr_, jnp.float32), 0.0, 1.0)
            lars_g = (ratio * (g32 + d * w32)).astype(g.dtype)
            return lars_g if on is True else jnp.where(on, lars_g, g)

        out = jax.tree.map(one, scaled, params, on, wd, w_sq, g_sq, lr)
        new_updates, inner = run_inner(optimizer, out, _switch_off(state.inner), params, **extra_args)
        return new_updates, LarsState(state.hyper, _switch_back(inner, state.inner))

    # The wrapped optimizer validates what it is given, but that is LARS's
    # output: ``ratio * (g + wd * w)`` broadcasts a (1, n) gradient to a (m, n)
    # parameter's shape and ``g / loss_scale`` turns an int32 gradient into
    # float32, so bad gradients passed unnoticed. Check them here, where they
    # come in. master_weights=True lets a float32 gradient of a float16
    # parameter through to the wrapped optimizer, which refuses it unless it
    # keeps master weights (LARS keeps the gradient's dtype).
    # a MindSpore optimizer Cell, called as one (`optimizer(grads)`) says what to write
    return MindSporeOptimizer(*guarded(validated(transformation(init, update), master_weights=True, name=owner),
                                       skip_nonfinite))



# -- the framework's classes, in its positional order (each named in its `Declaration`) --

_momentum_factory = momentum  # the class's own argument 'momentum' shadows the factory's name


def Momentum(params, learning_rate, momentum, weight_decay=0.0, loss_scale=1.0, use_nesterov=False, *,
             skip_nonfinite=False) -> GradientTransformation:
    """``nn.Momentum(params, learning_rate, momentum, ...)``: `gradxform.mindspore.momentum`."""
    return _momentum_factory(params=params, learning_rate=learning_rate, momentum=momentum, weight_decay=weight_decay,
                             loss_scale=loss_scale, use_nesterov=use_nesterov, skip_nonfinite=skip_nonfinite)


def SGD(params, learning_rate=0.1, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, loss_scale=1.0,
        *, skip_nonfinite=False) -> GradientTransformation:
    """``nn.SGD(params, learning_rate, momentum, ...)``: `gradxform.mindspore.sgd`."""
    return sgd(params=params, learning_rate=learning_rate, momentum=momentum, dampening=dampening,
               weight_decay=weight_decay, nesterov=nesterov, loss_scale=loss_scale, skip_nonfinite=skip_nonfinite)


LARS = lars
