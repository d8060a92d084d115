"""Paddle's regularizers (``paddle/regularizer.py``) as pieces: `L2Decay`
(``g += coeff * w``) and `L1Decay` (``g += coeff * sign(w)``), and the
per-group regularization every Paddle optimizer applies to the clipped
gradient (``Optimizer.append_regularization_ops``).

`L1Decay` / `L2Decay` are Paddle's class names; each instance is a
gradxform transformation (usable alone in any chain) that also says what it
is (``kind``, ``coeff``), so an optimizer can fold an L2 term into its rule
as Paddle's Momentum does. `l1_decay` / `l2_decay` build the same objects.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from .._base import GradientTransformation, transformation
from .._elementwise import fusable
from .._group_hyper import group_value, with_group_hyper
from .._hyper import hyper_scalar
from .._ranges import check_hyper
from .._group_values import group_by_value
from .._tree import leaf_values
from ..pieces.internal import HyperState
from ..schedules.internal import check_number
from .._types import Hyper, PerLeaf
from .._rounding import rounded

__all__ = ["Decay", "L1Decay", "L2Decay", "l1_decay", "l2_decay", "as_regularizer", "group_regularization",
           "RegState"]


def _term(kind, w):
    return jnp.sign(w) if kind == "l1" else w


def _scaled(c, kind, w, dtype):
    """``coeff * term(w)`` as Paddle's ``scale`` op computes it: in float32 for
    float16/bfloat16 (then one rounding), in the dtype otherwise."""
    t = _term(kind, w)
    if jnp.dtype(dtype).itemsize < 4:
        return (c * t.astype(jnp.float32)).astype(dtype)
    return rounded(c.astype(dtype) * t.astype(dtype))  # an op of its own: rounded before the addition


class Decay(optax.GradientTransformationExtraArgs):
    """A Paddle regularizer: a transformation ``g -> g + coeff * term(w)``
    (hyperparameter ``<kind>_coeff``) that also carries ``kind`` ('l1' or
    'l2') and ``coeff``."""
    kind = "?"
    coeff: float  # set in __new__ (an instance attribute beside the tuple's fields)

    def __new__(cls, coeff: float = 0.0):
        owner = f"paddle.{cls.__name__}"
        if coeff is None:
            raise ValueError(f"{owner}(coeff=None): coeff should not be None.")
        check_number(owner, "coeff", coeff)
        kind = cls.kind
        name = f"{kind}_coeff"
        check_hyper(f"paddle.{kind}_decay", name, coeff, arg="coeff")

        def init(params):
            del params
            return HyperState({name: hyper_scalar(coeff)})

        @fusable
        def update(updates, state, params=None, **extra_args):
            del extra_args
            if params is None:
                raise ValueError(f"{owner}: needs params; call update(grads, state, params).")
            c = state.hyper[name]
            return jax.tree.map(lambda g, w: g + _scaled(c, kind, w, g.dtype), updates, params), state

        self = super().__new__(cls, init, update)
        self.coeff = float(coeff)
        return self

    def __repr__(self):
        return f"{type(self).__name__}(coeff={self.coeff!r})"


class L2Decay(Decay):
    """Paddle ``L2Decay(coeff)``: ``g += coeff * w`` (a float ``weight_decay`` means this)."""
    kind = "l2"


class L1Decay(Decay):
    """Paddle ``L1Decay(coeff)``: ``g += coeff * sign(w)``."""
    kind = "l1"


def l2_decay(coeff: float = 0.0) -> L2Decay:
    """Paddle ``L2Decay``: ``g += coeff * w`` (the same object as `L2Decay`)."""
    return L2Decay(coeff)


def l1_decay(coeff: float = 0.0) -> L1Decay:
    """Paddle ``L1Decay``: ``g += coeff * sign(w)`` (the same object as `L1Decay`)."""
    return L1Decay(coeff)


def as_regularizer(owner: str, arg: str, value):
    """Paddle's ``weight_decay`` argument as a `Decay` or None: a float or int
    is an `L2Decay` (``Optimizer.__init__``); `L1Decay` / `L2Decay` as given."""
    if value is None or isinstance(value, Decay):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        check_hyper(owner, "weight_decay", value, arg=arg)
        return L2Decay(float(value))
    raise TypeError(f"{owner}({arg}=...): must be None, a float, or paddle.L1Decay / paddle.L2Decay; "
                    f"got {value!r}.")


class RegState(NamedTuple):
    """``slot``: each leaf's group (-1: none), an int32 vector with an entry per leaf
    (flatten order; one per buffer under `gradxform.fused`); the coefficients are hyperparameters."""
    hyper: Hyper
    slot: PerLeaf
    per_leaf_fields = ("slot",)


def group_regularization(regs: list, slots_of, *, default=None,
                         kinds=("l1", "l2")) -> GradientTransformation:
    """Each leaf's group regularizer, ``g += coeff_k * term_k(w)`` for the leaves
    of group ``k`` (``regs[k]``: a `Decay` or None), only for regularizers whose
    kind is in ``kinds`` (static: Paddle's Momentum folds L2 into its kernel).
    ``slots_of(params) -> int32 array`` gives the groups at ``init``.
    Hyperparameters: ``<kind>_coeff`` for the optimizer's own regularizer
    ``default`` (shared by the groups that keep it), and a group's own
    regularizer's coefficient in ``<kind>_coeff_groups`` (`GroupHyper`)."""
    active = [(k, r) for k, r in enumerate(regs) if r is not None and r.kind in kinds]

    def init(params):
        shared = {f"{r.kind}_coeff": r.coeff for _, r in active if r is default}
        own = {k: {f"{r.kind}_coeff": r.coeff} for k, r in active if r is not default}
        return RegState(with_group_hyper(shared, own),
                        group_by_value(slots_of(params), np.int32))  # held and read once per group

    @fusable
    def update(updates, state, params=None, **extra_args):
        del extra_args
        if not active:
            return updates, state
        if params is None:
            raise ValueError("paddle regularization: needs params; call update(grads, state, params).")
        leaves, treedef = jax.tree.flatten(updates)
        out = []
        slots = treedef.flatten_up_to(leaf_values(state.slot, updates))
        # each group's coefficient read once, not once per leaf (a slice of its vector each)
        coeffs = [state.hyper[f"{r.kind}_coeff"] if r is default else group_value(state.hyper, f"{r.kind}_coeff", k)
                  for k, r in active]
        for g, w, s in zip(leaves, treedef.flatten_up_to(params), slots):
            for (k, r), c in zip(active, coeffs):
                # g + (-0.0) is g bit for bit; reading g once lets XLA fuse the rule's
                # arithmetic into this loop (where(s, g + d, g) reads it twice)
                g = g + jnp.where(s == k, _scaled(c, r.kind, w, g.dtype), jnp.asarray(-0.0, g.dtype))
            out.append(g)
        return treedef.unflatten(out), state

    return transformation(init, update)
