"""MindSpore (2.x) / TinyMS momentum rules: Momentum, SGD, and the LARS wrapper.

Sources: ``mindspore/nn/optim/momentum.py`` (``ApplyMomentum``), ``sgd.py``
(``P.SGD``), ``lars.py`` (``LARSUpdate``); the TinyMS seed
(``../shared/seeds/003_*.txt``) gives the same rules.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from .._base import GradientTransformation, transformation
from .._elementwise import fusable
from .._errors import validated
from ._groups import beta_gamma_filter
from .._hyper import get_hyper, hyper_names, hyper_scalar, tag_owner
from .._ranges import check_hyper
from ..pieces import scale_by_lr, trace
from ..pieces._segments import leaf_flags, leaf_sq_norm
from ..pieces._step import StepState
from .._state_paths import find_states
from ..schedules._common import Constant, as_schedule
from ..schedules._mindspore import DynamicLR
from ._common import check_bool, check_float, parse

__all__ = ["momentum", "sgd", "lars", "SGDMomentumState", "LarsState"]


def momentum(learning_rate, momentum, weight_decay=0.0, loss_scale=1.0, use_nesterov=False, *,
             groups=None) -> GradientTransformation:
    """MindSpore Momentum (``nn.Momentum`` -> ``ApplyMomentum``)::

        g = (g + weight_decay * loss_scale * w) / loss_scale   (no decay for 'beta'/'gamma')
        v = momentum * v + g
        w -= lr * v                        (use_nesterov: w -= lr * (g + momentum * v))

    Args:
      learning_rate: a number >= 0, a list / 1-D array (update i uses the i-th
        value, the last one after the end), or a `gradxform.schedules` schedule.
      momentum: float >= 0 (hyperparameter ``momentum``).
      weight_decay: >= 0. loss_scale: > 0, static gradient division.
      use_nesterov: bool (static).
      groups: MindSpore parameter groups (`gradxform.mindspore._groups`): 'params',
        'lr', 'weight_decay', 'grad_centralization', and 'order_params'.

    Warning: MindSpore 2.10's CPU ``ApplyMomentum`` kernel ignores
    ``use_nesterov`` (its golden equals plain momentum); the seed and the
    other kernels apply Nesterov, and so does this (the seed wins).
    """
    owner = "mindspore.momentum"
    o = parse(owner, learning_rate, weight_decay, loss_scale, groups)
    check_float(owner, "momentum", momentum)
    check_bool(owner, "use_nesterov", use_nesterov)
    return o.build(o.head(), trace(momentum, nesterov=use_nesterov), scale_by_lr())


class SGDMomentumState(NamedTuple):
    hyper: dict
    accum: object
    stat: object


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
            new_a = jnp.where(s > 0, g, a * m + (1 - dd) * g)
            a2 = jnp.where(active, new_a, a)
            s2 = jnp.where(active, jnp.zeros_like(s), s)
            out = (g + a2 * m) if nesterov else a2
            return jnp.where(active, out, g), a2, s2

        leaves, treedef = jax.tree.flatten(updates)
        res = [one(g, a, s) for g, a, s in zip(leaves, treedef.flatten_up_to(state.accum),
                                               treedef.flatten_up_to(state.stat))]
        col = lambda i: treedef.unflatten([r[i] for r in res])  # noqa: E731
        return col(0), SGDMomentumState(state.hyper, col(1), col(2))

    return transformation(init, update)


def sgd(learning_rate=0.1, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, loss_scale=1.0, *,
        groups=None) -> GradientTransformation:
    """MindSpore SGD (``nn.SGD`` -> ``P.SGD``)::

        g = (g + weight_decay * loss_scale * w) / loss_scale   (no decay for 'beta'/'gamma')
        v = momentum * v + (1 - dampening) * g     (v = g on a parameter's first update)
        w -= lr * (g + momentum * v)  if nesterov  else  lr * v
        (momentum == 0: w -= lr * g)

    Args: momentum, dampening: >= 0 (ints accepted, as MindSpore converts
    them); nesterov (static) needs momentum > 0 and dampening == 0. Others as
    `momentum`.
    """
    owner = "mindspore.sgd"
    o = parse(owner, learning_rate, weight_decay, loss_scale, groups)
    momentum = check_float(owner, "momentum", momentum, ints=True)
    dampening = check_float(owner, "dampening", dampening, ints=True)
    check_bool(owner, "nesterov", nesterov)
    if nesterov and (momentum <= 0.0 or dampening != 0.0):
        raise ValueError(f"{owner}(nesterov=True): needs momentum > 0 and dampening == 0; got "
                         f"momentum={momentum}, dampening={dampening}.")
    return o.build(o.head(), _sgd_momentum(momentum, dampening, nesterov), scale_by_lr())


class LarsState(NamedTuple):
    hyper: dict
    inner: object


def _default_lars_filter(name: str) -> bool:
    return "LayerNorm" not in name and "bias" not in name


def lars(optimizer: GradientTransformation, epsilon=1e-05, coefficient=0.001, use_clip=False,
         lars_filter: Callable[[str], bool] = _default_lars_filter, *, weight_decay=0.0, loss_scale=1.0,
         decay_filter: Callable[[str], bool] | None = beta_gamma_filter, learning_rate=None) -> GradientTransformation:
    """MindSpore LARS (``nn.LARS`` -> ``LARSUpdate``): rescales each filtered
    gradient by a layer-wise trust ratio, then runs ``optimizer``::

        g = g / loss_scale
        for parameters with lars_filter(name):          (others: g unchanged, no decay)
            wd = weight_decay if decay_filter(name) else 0
            lam = coefficient * |w| / (|g| + wd * |w| + epsilon)   (1 if |w| or |g| is 0)
            lam = min(lam / lr, 1)  if use_clip
            g = lam * (g + wd * w)
        w = optimizer(g)

    MindSpore takes ``weight_decay`` and ``loss_scale`` from the wrapped
    optimizer and switches them off there; a gradxform optimizer is opaque,
    so give them here and build ``optimizer`` with weight_decay=0 and
    loss_scale=1 (its own learning rate, momentum etc. are used as they
    are). The seed's formula omits ``epsilon``; MindSpore's docs and kernel
    add it to the denominator, as here, and the kernel's zero-norm guard is
    kept. ``use_clip`` needs the learning rate ``lr`` of the current update:
    by default the wrapped optimizer's ``learning_rate`` hyperparameter
    (a fixed rate); for a dynamic one pass the same ``learning_rate`` (list
    or schedule) here. MindSpore's CPU has no LARSUpdate kernel: checked
    against a NumPy transcription only. The wrapped optimizer already went
    through `finalize`, so this wrapper does not repeat it.
    """
    owner = "mindspore.lars"
    if not (isinstance(optimizer, tuple) and hasattr(optimizer, "init") and hasattr(optimizer, "update")):
        raise TypeError(f"{owner}(optimizer=...): must be a gradxform/optax transformation; got {optimizer!r}.")
    epsilon = check_float(owner, "epsilon", epsilon)
    coefficient = check_float(owner, "coefficient", coefficient)
    check_bool(owner, "use_clip", use_clip)
    if not callable(lars_filter):
        raise TypeError(f"{owner}(lars_filter=...): must be a function of the parameter name.")
    if isinstance(weight_decay, bool) or not isinstance(weight_decay, (int, float)):
        raise TypeError(f"{owner}(weight_decay=...): must be a float or int; got {weight_decay!r}.")
    check_hyper(owner, "weight_decay", weight_decay)
    check_float(owner, "loss_scale", loss_scale, ints=True)
    sched = None
    if learning_rate is not None:
        _, sched = as_schedule(owner, learning_rate, DynamicLR)
        if sched is None:
            sched = Constant(float(learning_rate))

    def init(params):
        inner = optimizer.init(params)
        if use_clip and sched is None:
            if "learning_rate" not in hyper_names(inner):
                raise ValueError(f"{owner}(use_clip=True): the wrapped optimizer has no 'learning_rate' "
                                 "hyperparameter; pass learning_rate= here.")
            # traced when init runs under jit (gradxform.fused builds its state so,
            # after an eager init that made this check)
            scheduled = get_hyper(inner, "scheduled") if "scheduled" in hyper_names(inner) else False
            if not isinstance(scheduled, jax.core.Tracer) and bool(scheduled):
                raise ValueError(f"{owner}(use_clip=True): the wrapped optimizer's learning rate is dynamic; "
                                 "pass the same learning_rate (list or schedule) to lars as well.")
        # the wrapped optimizer's hyperparameters keep their own owner
        return tag_owner(LarsState({"epsilon": hyper_scalar(epsilon), "coefficient": hyper_scalar(coefficient),
                                    "weight_decay": hyper_scalar(weight_decay),
                                    "loss_scale": hyper_scalar(loss_scale)}, inner), owner)

    # fused: trust ratios from per-leaf norms, segment sums over each buffer (summed in
    # another order); the name filters are static per leaf and applied per element, so
    # leaves that skip LARS may share a buffer
    @fusable(bit_exact=False)
    def update(updates, state, params=None, **extra_args):
        if params is None:
            raise ValueError(f"{owner}: needs params; call update(grads, state, params).")
        h = state.hyper
        if use_clip:
            if sched is None:
                lr = get_hyper(state.inner, "learning_rate")
            else:
                step_state = next(iter(find_states(state.inner, StepState)), None)
                if step_state is None:
                    raise ValueError(f"{owner}(use_clip=True): no step counter in the wrapped optimizer's state.")
                # the state before this update: num_update updates completed, this is the next
                lr = sched.lr_for_update(step_state.num_update + 1)
        # Which leaves get LARS, and which of those decay, is decided by name:
        # static per leaf (a Python bool), and under gradxform.fused per buffer
        # (a bool where its leaves agree, else one per element), with the
        # norms summed per leaf (gradxform.pieces._segments).
        scaled = jax.tree.map(lambda g: g / h["loss_scale"].astype(g.dtype), updates)
        on = leaf_flags(updates, extra_args, lars_filter)
        decays = leaf_flags(updates, extra_args, decay_filter or (lambda name: True))
        w_sq = leaf_sq_norm(params, extra_args)
        g_sq = leaf_sq_norm(scaled, extra_args)

        def one(g, w, on, decays, w_sq, g_sq):
            if on is False:
                return g
            wd = jnp.where(decays, h["weight_decay"], jnp.float32(0.0))
            w32, g32 = w.astype(jnp.float32), g.astype(jnp.float32)
            w_norm, g_norm = jnp.sqrt(w_sq), jnp.sqrt(g_sq)
            ratio = h["coefficient"] * w_norm / (g_norm + wd * w_norm + h["epsilon"])
            ratio = jnp.where((w_norm > 0) & (g_norm > 0), ratio, 1.0)
            if use_clip:
                ratio = jnp.minimum(ratio / lr, 1.0)
            lars_g = (ratio * (g32 + wd * w32)).astype(g.dtype)
            return lars_g if on is True else jnp.where(on, lars_g, g)

        out = jax.tree.map(one, scaled, params, on, decays, w_sq, g_sq)
        new_updates, inner = optimizer.update(out, state.inner, params, **extra_args)
        return new_updates, LarsState(state.hyper, inner)

    # The wrapped optimizer validates what it is given, but that is LARS's
    # output: ``ratio * (g + wd * w)`` broadcasts a (1, n) gradient to a (m, n)
    # parameter's shape and ``g / loss_scale`` turns an int32 gradient into
    # float32, so bad gradients passed unnoticed. Check them here, where they
    # come in. master_weights=True lets a float32 gradient of a float16
    # parameter through to the wrapped optimizer, which refuses it unless it
    # keeps master weights (LARS keeps the gradient's dtype).
    return validated(transformation(init, update), master_weights=True, name=owner)
