"""Paddle's gradient clips (``paddle/nn/clip.py``) as pieces:
`ClipGradByGlobalNorm`, `ClipGradByNorm`, `ClipGradByValue` (Paddle's class
names; the snake_case functions build the same objects), with Paddle's
``need_clip`` per parameter given by name, and the per-group clip every
Paddle optimizer runs first (``Optimizer._apply_optimize``: each parameter
group is clipped on its own, a global norm over that group's gradients).

Paddle (dygraph)::

    ClipGradByGlobalNorm:  n = sqrt(sum_i sum(g_i^2))  (need_clip leaves only, float32)
                           g *= clip_norm / max(n, clip_norm)
    ClipGradByNorm:        per tensor, g *= clip_norm / max(|g|, clip_norm)
    ClipGradByValue:       g = clip(g, min, max); min = -max when None (max > 0)

``auto_skip_clip`` (global norm) and ``group_name`` are accepted: the first
gives the same numbers (factor 1 when the norm is at most ``clip_norm``), the
second only matters in Paddle's static graphs.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from .._base import GradientTransformation, transformation
from .._spec import Fusion, declare
from .._group_hyper import group_value, with_group_hyper
from .._ranges import check_hyper
from .._selectors import Selector
from .._group_values import partition
from .._tree import leaf_values, param_names
from ..pieces.internal import leaf_sq_norm, whole_buffers
from ..schedules.internal import check_number
from .._types import Hyper, PerLeaf

__all__ = ["Clip", "ClipGradByGlobalNorm", "ClipGradByNorm", "ClipGradByValue", "clip_grad_by_global_norm",
           "clip_grad_by_norm", "clip_grad_by_value", "group_clip", "ClipState", "need_clip_flags"]


def need_clip_flags(owner: str, need_clip, names: list[str]) -> np.ndarray:
    """Paddle's ``param.need_clip`` per leaf: ``need_clip`` None (every leaf), a
    predicate over names, or a mapping ``{selection: bool}`` (a `Selector`:
    name, glob, regex; an exact name first, else the first key that selects
    the leaf; unmatched: True)."""
    if need_clip is None:
        return np.ones(len(names), bool)
    if callable(need_clip):
        return Selector(need_clip, what=f"{owner}(need_clip=...)").select(names)
    if isinstance(need_clip, dict):
        out = np.ones(len(names), bool)
        decided = np.zeros(len(names), bool)
        exact = {n: need_clip[n] for n in names if n in need_clip}
        for i, n in enumerate(names):
            if n in exact:
                out[i], decided[i] = bool(exact[n]), True
        for key, value in need_clip.items():
            hit = Selector(key, what=f"{owner}(need_clip=...)").select(names) & ~decided
            out[hit], decided = bool(value), decided | hit
        return out
    raise TypeError(f"{owner}(need_clip=...): must be None, a predicate over parameter names or a dict "
                    f"{{name or glob: bool}}; got {need_clip!r}.")


class ClipState(NamedTuple):
    """``slot``: each leaf's group (-1: not optimized); ``need``: Paddle's ``need_clip`` (0/1): int32
    vectors, an entry per leaf (flatten order; one per buffer under `gradxform.fused`)."""
    hyper: Hyper
    slot: PerLeaf
    need: PerLeaf
    per_leaf_fields = ("slot", "need")


def _fusion(active) -> Fusion:
    """How `group_clip` with the clips ``active`` fuses (gradxform.fused)."""
    kinds = {c.kind for _, c in active}
    if "norm" in kinds:
        return Fusion(refuse="paddle.clip_grad_by_norm needs a norm per parameter")
    if "global" in kinds:  # fused: the norm of the buffers, summed in another order
        return Fusion(bit_exact=False, reductions=("whole",))
    return Fusion()


def group_clip(clips: list, slots_of, *, default=None) -> GradientTransformation:
    """Clips each group's gradients with its own clip (``clips[k]``: a `Clip`
    or None), a global norm over that group's ``need_clip`` leaves.
    ``slots_of(params) -> int array`` gives the groups at ``init`` (leaves of
    no group are not touched). Hyperparameters as the clip's own
    (``clip_norm``, ``clip_min``/``clip_max``) for ``default``, a group's own
    clip's in ``<field>_groups`` (`GroupHyper`)."""
    active = [(k, c) for k, c in enumerate(clips) if c is not None]

    def value(h, k, c, field):
        return h[field] if c is default else group_value(h, field, k)

    def init(params):
        names = param_names(params)
        slot = slots_of(params)
        shared = {f: v for _, c in active if c is default for f, v in c.hyper_values().items()}
        own = {k: c.hyper_values() for k, c in active if c is not default}
        need = np.ones(len(names), bool)
        for k, c in reversed(active):
            flags = need_clip_flags(c.owner, c.need_clip, names)
            need = np.where(np.asarray(slot) == k, flags, need)
        # held and read once per group
        return ClipState(with_group_hyper(shared, own), *partition(slot, need, dtypes=(np.int32, np.int32)))

    @declare(fusion=_fusion(active))
    def update(updates, state, params=None, **extra_args):
        del params
        if not active:
            return updates, state
        leaves, treedef = jax.tree.flatten(updates)
        if not np.size(state.slot) and leaves:  # a standalone clip made by init(None)
            slots, needs = [0] * len(leaves), [True] * len(leaves)
        else:
            slots = treedef.flatten_up_to(leaf_values(state.slot, updates))
            needs = treedef.flatten_up_to(leaf_values(state.need, updates))
        h = state.hyper
        out = list(leaves)
        for k, c in active:
            sel = [jnp.logical_and(s == k, n) for s, n in zip(slots, needs)]
            if c.kind == "global":
                cn = value(h, k, c, "clip_norm")
                whole = whole_buffers(leaves, extra_args)  # a sharded step's buffers, gathered
                sq = [jnp.where(m, jnp.sum(jnp.square(g.astype(jnp.float32))), 0.0) for g, m in zip(whole, sel)]
                norm = jnp.sqrt(sum(sq)) if sq else jnp.zeros((), jnp.float32)
                f = cn / jnp.maximum(norm, cn)
                # g * 1 is g bit for bit: one read of g, the factor chosen per leaf
                out = [g * jnp.where(m, f, 1.0).astype(g.dtype) for g, m in zip(out, sel)]
            elif c.kind == "norm":
                cn = value(h, k, c, "clip_norm")
                norms = treedef.flatten_up_to(leaf_sq_norm(treedef.unflatten(leaves), extra_args))
                out = [g * jnp.where(m, cn / jnp.maximum(jnp.sqrt(n), cn), 1.0).astype(g.dtype)
                       for g, m, n in zip(out, sel, norms)]
            else:
                lo, hi = value(h, k, c, "clip_min"), value(h, k, c, "clip_max")
                out = [jnp.where(m, jnp.clip(g, lo.astype(g.dtype), hi.astype(g.dtype)), g) for g, m in zip(out, sel)]
        return treedef.unflatten(out), state

    return transformation(init, update)


def _all_slot_zero(params):
    return np.zeros(len(jax.tree.leaves(params)), np.int32)


class Clip(optax.GradientTransformationExtraArgs):
    """A Paddle gradient clip: a transformation over every leaf (``need_clip``
    honoured) that also carries ``kind`` and its numbers, so an optimizer clips
    each parameter group with it."""
    kind = "?"
    owner = "paddle.clip"
    need_clip: Any  # None, a callable or a dict of names (need_clip_flags); set in _build (instance attributes beside the tuple's fields)
    numbers: dict[str, Any]

    @classmethod
    def _build(cls, need_clip, **numbers):
        spec = _Spec(cls.kind, cls.owner, need_clip, numbers)
        piece = group_clip([spec], _all_slot_zero, default=spec)
        self = super().__new__(cls, piece.init, piece.update)
        self.need_clip = need_clip
        self.numbers = numbers
        return self

    def hyper_values(self) -> dict:
        return _Spec(self.kind, self.owner, self.need_clip, self.numbers).hyper_values()

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.numbers.items())
        return f"{type(self).__name__}({args})"


class _Spec:
    """What `group_clip` needs from a clip (a `Clip` or this stand-in)."""

    def __init__(self, kind, owner, need_clip, numbers):
        self.kind, self.owner, self.need_clip, self.numbers = kind, owner, need_clip, numbers

    def hyper_values(self) -> dict:
        if self.kind == "value":
            return {"clip_min": self.numbers["min"], "clip_max": self.numbers["max"]}
        return {"clip_norm": self.numbers["clip_norm"]}


class ClipGradByGlobalNorm(Clip):
    """Paddle ``ClipGradByGlobalNorm(clip_norm, group_name='default_group',
    auto_skip_clip=False)``: ``g *= clip_norm / max(global_norm, clip_norm)``
    over the ``need_clip`` leaves (hyperparameter ``clip_norm``, the norm in
    float32). ``need_clip``: see `need_clip_flags`."""
    kind, owner = "global", "paddle.ClipGradByGlobalNorm"

    def __new__(cls, clip_norm: float, group_name: str = "default_group", auto_skip_clip: bool = False, *,
                need_clip=None):
        check_number(cls.owner, "clip_norm", clip_norm)
        check_hyper(cls.owner, "clip_norm", clip_norm)
        if not isinstance(auto_skip_clip, bool):
            raise TypeError(f"{cls.owner}(auto_skip_clip=...): must be a bool; got {auto_skip_clip!r}.")
        need_clip_flags(cls.owner, need_clip, [])
        return cls._build(need_clip, clip_norm=float(clip_norm))


class ClipGradByNorm(Clip):
    """Paddle ``ClipGradByNorm(clip_norm)``: each tensor ``g *= clip_norm /
    max(|g|, clip_norm)`` (hyperparameter ``clip_norm``)."""
    kind, owner = "norm", "paddle.ClipGradByNorm"

    def __new__(cls, clip_norm: float, *, need_clip=None):
        check_number(cls.owner, "clip_norm", clip_norm)
        check_hyper(cls.owner, "clip_norm", clip_norm)
        need_clip_flags(cls.owner, need_clip, [])
        return cls._build(need_clip, clip_norm=float(clip_norm))


class ClipGradByValue(Clip):
    """Paddle ``ClipGradByValue(max, min=None)``: ``clip(g, min, max)``; ``min``
    defaults to ``-max`` (then ``max`` must be > 0). Hyperparameters
    ``clip_min``, ``clip_max``."""
    kind, owner = "value", "paddle.ClipGradByValue"

    def __new__(cls, max: float, min: float | None = None, *, need_clip=None):  # noqa: A002 (Paddle's names)
        check_number(cls.owner, "max", max)
        if min is None:
            if not max > 0:
                raise ValueError(f"{cls.owner}(max=...): max must be > 0 when min is None; got {max}.")
            lo = -float(max)
        else:
            check_number(cls.owner, "min", min)
            lo = float(min)
        if lo > max:
            raise ValueError(f"{cls.owner}(min=...): min must be <= max; got min={lo}, max={max}.")
        need_clip_flags(cls.owner, need_clip, [])
        return cls._build(need_clip, min=lo, max=float(max))


def clip_grad_by_global_norm(clip_norm: float, *, need_clip=None) -> ClipGradByGlobalNorm:
    """Paddle ``ClipGradByGlobalNorm`` (the same object as `ClipGradByGlobalNorm`)."""
    return ClipGradByGlobalNorm(clip_norm, need_clip=need_clip)


def clip_grad_by_norm(clip_norm: float, *, need_clip=None) -> ClipGradByNorm:
    """Paddle ``ClipGradByNorm`` (the same object as `ClipGradByNorm`)."""
    return ClipGradByNorm(clip_norm, need_clip=need_clip)


def clip_grad_by_value(max: float, min: float | None = None, *, need_clip=None) -> ClipGradByValue:  # noqa: A002
    """Paddle ``ClipGradByValue`` (the same object as `ClipGradByValue`)."""
    return ClipGradByValue(max, min, need_clip=need_clip)
