"""Weight decay: coupled (``wd * w`` added to the gradient) and decoupled."""
from __future__ import annotations

from typing import NamedTuple, Optional

import jax

from .._base import GradientTransformation, StepContext, context_value, transformation
from .._spec import Fusion, declare
from .._hyper import hyper_scalar
from .._ranges import check_hyper
from .._types import Hyper, PerLeaf
from .._tree import leaf_values
from ._step import Multiplier, per_leaf_multipliers
from .._domains import FINITE
from .._rounding import rounded

__all__ = ["DecayState", "add_decayed_weights", "provide_weight_decay", "add_decoupled_weight_decay"]
PUBLIC = ("add_decayed_weights", "add_decoupled_weight_decay", "provide_weight_decay")  # what gradxform.pieces re-exports


class DecayState(NamedTuple):
    """``wd_mult``: per-leaf float32 multipliers, a vector (an entry per leaf), or None
    when every one is 1 (the decay is then one scalar for every leaf)."""
    hyper: Hyper
    wd_mult: Optional[PerLeaf]
    per_leaf_fields = ("wd_mult",)  # a vector, an entry per leaf (gradxform.fused: one per buffer)
    optional_fields = {"wd_mult": 1.0}  # None: every leaf's multiplier is 1
    domains = {"wd_mult": FINITE}


def _decay(wd, wd_mult, name, add, who, rounded_product=False):
    if wd is not None:
        check_hyper(who, "wd", wd, arg=name)

    def init(params):
        if wd is None:
            return ()
        return DecayState({name: hyper_scalar(wd)}, per_leaf_multipliers(wd_mult, params, "wd_mult"))

    @declare(who=who, needs=("wd",) if wd is None else (), provides=("wd",) if wd is not None else (),
             fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        if wd is None:
            per_leaf = context_value(extra_args, "wd", who)
        else:
            d = state.hyper[name]
            if state.wd_mult is None:
                per_leaf = jax.tree.map(lambda _: d, updates)
            else:
                per_leaf = jax.tree.map(lambda m: d * m, leaf_values(state.wd_mult, updates))
            ctx = StepContext.of(extra_args)
            if ctx is not None:
                ctx.publish(wd=per_leaf)
        if add:
            if params is None:
                raise ValueError(f"{who}: needs params; call update(grads, state, params).")
            def one(u, p, d):
                product = d.astype(u.dtype) * p.astype(u.dtype)
                return u + (rounded(product) if rounded_product else product)

            updates = jax.tree.map(one, updates, params, per_leaf)
        return updates, state

    return transformation(init, update)


def add_decayed_weights(wd: float | None = 0.0, *, wd_mult: Multiplier = None,
                        name: str = "wd", rounded: bool = False) -> GradientTransformation:
    """Coupled weight decay: ``u -> u + wd * wd_mult[i] * w``.

    ``wd`` is a hyperparameter named ``name``; ``wd_mult`` maps parameter
    names or glob patterns to multipliers (default 1: every parameter is
    decayed, as in Gluon). The per-leaf decay is published in the step context
    as ``wd`` for later pieces. ``wd=None`` reuses the decay an earlier
    `provide_weight_decay` published instead of holding its own. ``rounded``:
    ``wd * w`` is rounded before it is added (`gradxform._rounding`), as a
    kernel without fused multiply-adds computes it (MXNet's Adam).
    """
    return _decay(wd, wd_mult, name, True, "add_decayed_weights", rounded_product=rounded)


def provide_weight_decay(wd: float = 0.0, *, wd_mult: Multiplier = None,
                         name: str = "wd") -> GradientTransformation:
    """Holds ``wd`` and ``wd_mult`` and publishes each parameter's decay in the
    step context without touching the updates, for rules that use the decay
    inside their own formula (MXNet FTRL, LBSGD's LARS)."""
    return _decay(wd, wd_mult, name, False, "provide_weight_decay")


def add_decoupled_weight_decay(wd: float | None = 0.0, *, name: str = "wd_lh") -> GradientTransformation:
    """Decoupled weight decay: ``u -> u - lr[i] * wd * w`` with the learning rate
    from the step context (Loshchilov & Hutter; MXNet Signum's ``wd_lh``).
    ``wd=None`` uses each parameter's decay published by an earlier
    `provide_weight_decay` (MXNet signSGD decays with ``wd * wd_mult``)."""
    if wd is not None:
        check_hyper("add_decoupled_weight_decay", "wd", wd, arg=name)

    def init(params):
        del params
        if wd is None:
            return ()
        return DecayState({name: hyper_scalar(wd)}, ())

    @declare(who="add_decoupled_weight_decay", needs=("lr", "wd") if wd is None else ("lr",), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        lr = context_value(extra_args, "lr", "add_decoupled_weight_decay")
        if wd is None:
            d = context_value(extra_args, "wd", "add_decoupled_weight_decay")
        else:
            d = jax.tree.map(lambda _: state.hyper[name], lr)
        return jax.tree.map(lambda u, p, l, k: u - (l * k).astype(u.dtype) * p.astype(u.dtype),
                            updates, params, lr, d), state

    return transformation(init, update)
