"""Parameter groups (MindSpore ``nn.Optimizer`` style): per-group learning
rate, weight decay and gradient centralization, selected by parameter name.

A group list is what MindSpore takes as ``params``, with parameters named
instead of passed (gradxform sees the parameters only at ``init``)::

    groups = [{"params": "conv*", "weight_decay": 0.01, "grad_centralization": True},
              {"params": lambda name: "conv" not in name, "lr": 0.01},
              {"order_params": [...]}]

``params`` selects by anything a `gradxform._selectors.Selector` takes: an
exact name, a glob, a Gluon regex, a predicate over names or over parameter
objects (``lambda x: 'conv' in x.name``), MindSpore ``Parameter`` objects
(anything with a ``.name``: ``list(filter(lambda x: 'conv' in x.name,
net.trainable_params()))``), or a list of those (names as
`gradxform.param_names`). ``order_params`` takes names or such objects. A
parameter selected by two groups is an error; a pattern that matches nothing
is an error, and so is a predicate that selects nothing (MindSpore refuses an
empty group); a parameter that no group selects is not optimized (update zero,
state untouched), as in MindSpore, where only grouped parameters belong to
the optimizer. ``order_params`` fixes MindSpore's parameter order: it must
list every grouped parameter exactly once; since each parameter's update
here depends only on its own values, it changes no number.

Two parts carry the per-group values, both hyperparameters in their state:
`group_learning_rate` (``learning_rate_groups``, a `GroupHyper`), a rate
adjuster that the family's rate piece runs (`gradxform.pieces.adjusted_rate`:
the one writer of the step context's ``lr``), and the piece
`group_weight_decay` (``weight_decay`` plus ``weight_decay_groups``).
Which group a leaf is in, and whether it is decayed, are per-leaf values
(one int32 vector each, an entry per leaf in flatten order: two state arrays
however many leaves), so `gradxform.fused` groups leaves by them and runs
these pieces unchanged on its flat buffers (one entry per buffer there).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._base import GradientTransformation, StepContext, transformation
from .._spec import Fusion, declare
from .._group_hyper import group_value, with_group_hyper
from .._registry import group_keys_of
from .._selectors import Selector, assign_slots, describe_names, names_of
from .._state_paths import find_states, is_optax_placeholder
from ..pieces.internal import RateAdjuster, buffer_segments, only_slotted
from .._group_values import partition, per_group, read_per_leaf
from .._tree import leaf_values, param_names
from .._rounding import rounded
from ..schedules.internal import MindSporeListLR, as_schedule, check_number
from .._types import Hyper

__all__ = ["GroupSpec", "GROUP_KEYS", "group_keys_but", "parse_groups", "assign_groups", "beta_gamma_filter", "group_learning_rate",
           "group_weight_decay", "GroupState", "unselected_frozen", "check_weight_decay", "list_lr"]

GROUP_KEYS = ("params", "lr", "weight_decay", "grad_centralization", "order_params")  # the family's


def group_keys_but(*refused: str) -> tuple[str, ...]:
    """The family's group keys but ``refused`` (a `Declaration`'s
    ``group_keys`` where MindSpore says a key "is not supported")."""
    return tuple(k for k in GROUP_KEYS if k not in refused)


def beta_gamma_filter(name: str) -> bool:
    """MindSpore's default weight-decay filter: True (decay) unless the name
    contains 'beta' or 'gamma' (normalization offsets and scales)."""
    return "beta" not in name and "gamma" not in name


@dataclasses.dataclass(frozen=True)
class GroupSpec:
    index: int                      # position in the user's list (MindSpore's group number)
    select: Any                     # str | list[str] | callable(name) -> bool
    lr: Any = None                  # None: the optimizer's learning_rate
    lr_base: float | None = None
    lr_schedule: Callable | None = None
    weight_decay: float | None = None
    grad_centralization: bool = False

    def matches(self, name: str) -> bool:
        return Selector(self.select)(name)


def list_lr(what: str) -> Callable:
    """``as_schedule``'s ``list_cls`` for a MindSpore list named ``what`` in messages
    (`MindSporeListLR`: an update past its end raises where the count is known)."""
    return functools.partial(MindSporeListLR, what=what)


def check_weight_decay(owner: str, weight_decay, where: str = "") -> None:
    """A fixed weight decay (a float or an int). MindSpore also takes a Cell of
    ``global_step`` (a dynamic weight decay, read before the step is counted);
    here the TypeError says what to write instead: its first value, changed
    between updates with `gradxform.set_hyper` (``where``: its other
    arguments, ``"group=0, "`` for a group's)."""
    if not isinstance(weight_decay, bool) and isinstance(weight_decay, (int, float)):
        return
    hint = ""
    if callable(weight_decay):
        try:
            first = f" ({float(np.asarray(weight_decay(0)).reshape(())):g})"
        except Exception:  # noqa: BLE001 - a user's Cell: the hint goes without the value
            first = ""
        hint = (" A weight decay that changes per step (MindSpore's dynamic weight_decay Cell) is not taken "
                f"here: give a float, the Cell's value at global_step 0{first}, and change it between updates "
                f"with state = gradxform.set_hyper(state, {where}weight_decay=value) (value: the Cell's value at the "
                "number of updates done; no recompile). MindSpore's LARS wrapper, here too, takes a weight_decay schedule.")
    raise TypeError(f"{owner}(weight_decay=...): weight_decay must be a float or int; got {weight_decay!r}.{hint}")


def parse_groups(owner: str, groups, *, allow_gc=True, list_cls=None):
    """Checks a group list at construction; returns ``(specs, order_params)``.
    The keys a group may hold are ``owner``'s declared ``group_keys``;
    ``allow_gc=False`` refuses grad_centralization besides (a keyword of the
    call, Adam's use_offload, takes it away)."""
    if groups is None:
        return None, None
    keys = group_keys_of(owner, GROUP_KEYS)
    allow_lr, allow_gc = "lr" in keys, allow_gc and "grad_centralization" in keys
    if not isinstance(groups, (list, tuple)) or not groups:
        raise TypeError(f"{owner}(groups=...): must be a non-empty list of dicts; got {groups!r}.")
    specs, order = [], None
    for i, g in enumerate(groups):
        if not isinstance(g, dict):
            raise TypeError(f"{owner}(groups=...): group {i} must be a dict; got {type(g).__name__}.")
        bad = [k for k in g if k not in GROUP_KEYS]
        if bad:
            raise ValueError(f"{owner}(groups=...): group {i} has unknown key(s) {bad}; the keys are {GROUP_KEYS}.")
        if "order_params" in g:
            if len(g) > 1:
                raise ValueError(f"{owner}(groups=...): the 'order_params' dict (group {i}) must hold "
                                 f"only that key; got {sorted(g)}.")
            op = g["order_params"]
            if isinstance(op, str) or not isinstance(op, (list, tuple)):
                raise TypeError(f"{owner}(groups=...): order_params must be a list of names or parameters.")
            order = names_of(op) or list(op)
            continue
        if "params" not in g:
            raise ValueError(f"{owner}(groups=...): group {i} needs a 'params' selection.")
        sel = g["params"]
        if isinstance(sel, (list, tuple)) and not sel:  # nn.Optimizer._check_group_params
            raise ValueError(f"{owner}(groups=...): group {i}: Optimizer got an empty group parameter list "
                             "(MindSpore refuses it; Paddle takes one).")
        try:
            Selector(sel)
        except (TypeError, ValueError):
            raise TypeError(f"{owner}(groups=...): group {i} 'params' must be a name, a glob, a Gluon regex, "
                            f"a predicate, parameter objects with a .name, or a list of those; got {sel!r}.") from None
        lr_base = lr_sched = None
        if "lr" in g:
            if not allow_lr:
                raise ValueError(f"{owner}(groups=...): a per-group 'lr' is not supported (group {i}).")
            where = f"{owner}(groups[{i}]['lr'])"
            lr_base, lr_sched = as_schedule(where, g["lr"], list_cls if list_cls is not MindSporeListLR
                                            else list_lr(f"{owner}: groups[{i}]['lr']=[...]"))
        wd = None
        if "weight_decay" in g:
            if callable(g["weight_decay"]):  # a dynamic weight decay: the TypeError says what to write
                check_weight_decay(f"{owner}(groups[{i}])", g["weight_decay"], f"group={i}, ")
            check_number(f"{owner}(groups[{i}])", "weight_decay", g["weight_decay"], low=0.0)
            wd = float(g.get("weight_decay", 0.0))
        gc = g.get("grad_centralization", False)
        if not isinstance(gc, bool):
            raise TypeError(f"{owner}(groups=...): group {i} 'grad_centralization' must be a bool; got {gc!r}.")
        if gc and not allow_gc:
            raise ValueError(f"{owner}(groups=...): grad_centralization is not supported (group {i}).")
        specs.append(GroupSpec(i, sel, g.get("lr"), lr_base, lr_sched, wd, gc))
    if not specs:
        raise ValueError(f"{owner}(groups=...): no group selects any parameter (only 'order_params').")
    return specs, order


def _unmatched(owner: str, index: int, sel, names: list[str]) -> str:
    """The message for group ``index``'s ``'params'`` selecting no parameter."""
    if not Selector(sel).is_predicate:
        return (f"{owner}: group {index} 'params' {sel!r} matches no parameter; "
                f"parameter names are {describe_names(names)}.")
    nested = next((n for n in names if "/" in n), None)
    example = "" if nested is None else (f" (lambda x: {nested!r} in x.name where MindSpore has "
                                         f"{nested.replace('/', '.')!r} in x.name)")
    return (f"{owner}: group {index} 'params' is a predicate that selects no parameter; MindSpore refuses an "
            "empty group ('the argument group params must not be empty'). The predicate is called with each "
            "gradxform name, which joins the pytree path with '/' where MindSpore's parameter names have '.'"
            f"{example}. Parameter names are {describe_names(names)}.")


def assign_groups(owner: str, specs, order, names: list[str]) -> np.ndarray:
    """Each leaf's position in ``specs`` (-1: in no group), with the checks of the module docstring."""
    slot = assign_slots(
        names, [(k, spec.select) for k, spec in enumerate(specs)],
        unmatched=lambda k, sel: _unmatched(owner, specs[k].index, sel, names),
        overlap=lambda name, first, k: (f"{owner}: parameter {name!r} is in group {specs[first].index} and "
                                        f"group {specs[k].index}; a parameter may be set only once."))
    if order is not None:
        grouped = [names[i] for i in range(len(names)) if slot[i] >= 0]
        if sorted(order) != sorted(grouped):
            raise ValueError(f"{owner}: order_params must list every grouped parameter exactly once; "
                             f"got {order}, grouped parameters are {grouped}.")
    return slot


class GroupState(NamedTuple):
    hyper: Hyper
    group_slot: Any          # int32 vector, an entry per leaf: the leaf's group position, -1 for none
    decay_flag: Any          # int32 vector, an entry per leaf, 0/1: decayed (the name filter)
    # gradxform.fused groups leaves by these, so leaves of different groups never share a
    # buffer and each group's lr (fixed, list or schedule) and weight decay is one scalar
    per_leaf_fields = ("group_slot", "decay_flag")


def _slots(owner, specs, order, params):
    names = param_names(params)
    if specs is None:
        return names, np.full(len(names), -1, np.int32)
    return names, assign_groups(owner, specs, order, names)


def _group_state(hyper, params, slot, flags) -> GroupState:
    if is_optax_placeholder(params):  # optax.tree_map_params: per-leaf fields, no leaves to number
        return GroupState(hyper, params, params)
    # held once per group of leaves (one slot, one flag) and read once per group
    return GroupState(hyper, *partition(slot, np.asarray(flags, bool), dtypes=(np.int32, np.int32)))


def group_learning_rate(owner: str, specs, order) -> RateAdjuster:
    """Gives leaves of groups with their own 'lr' that group's rate:
    entry ``i`` of hyperparameter ``learning_rate_groups`` (a fixed value, or the base of
    the group's list/schedule, evaluated at the leaf's completed updates,
    `Schedule.lr_for_update`). A rate adjuster (`adjusted_rate` runs it after
    `track_step`); other leaves keep the rate `track_step` computed."""
    own = [(k, s) for k, s in enumerate(specs or []) if s.lr_base is not None]

    def init(params):
        _, slot = _slots(owner, specs, order, params)
        return _group_state(with_group_hyper({}, {s.index: {"learning_rate": s.lr_base} for _, s in own}),
                            params, slot, np.ones(slot.shape, bool))

    def adjust(lr_tree, count, updates, state, extra_args):
        del updates, extra_args
        if not own:
            return lr_tree, state
        # one vectorised schedule call for all groups of leaves (per group of `GroupState`,
        # where the rates and counts are one object per group; else per leaf), each leaf
        # reading its entry: a slice per group, not per leaf (compile time)
        run = per_group({"group_slot": state.group_slot}, lr_tree, count, lr_tree, mask_dtype=jnp.int32)
        lr, t, slot = run.lr, run.on, run.values["group_slot"]
        lr = jnp.broadcast_to(lr, slot.shape)
        t = jnp.broadcast_to(t, slot.shape)
        for k, s in own:
            base = group_value(state.hyper, "learning_rate", s.index)
            val = s.lr_schedule.lr_for_update(t, base) if s.lr_schedule is not None else \
                jnp.broadcast_to(base, t.shape)
            lr = jnp.where(slot == k, val, lr)
        return read_per_leaf(lr, run), state

    return RateAdjuster(owner, init, adjust)


def group_weight_decay(owner: str, weight_decay: float, specs, order, *,
                       decay_filter: Callable[[str], bool] | None = beta_gamma_filter,
                       loss_scale: float | None = None, add: bool = True) -> GradientTransformation:
    """Coupled, per-group weight decay ``u -> u + wd[i] * loss_scale * w``.

    ``wd[i]`` is the leaf's group's entry of ``weight_decay_groups`` or else the
    hyperparameter ``weight_decay``. Without groups, ``decay_filter(name)``
    picks the decayed leaves (MindSpore: not 'beta'/'gamma'); with groups
    every grouped leaf is decayed by its group's value (MindSpore ignores the
    name filter there). ``loss_scale`` (a hyperparameter when given) multiplies
    the decay because MindSpore decays the still-scaled gradient and divides
    by the loss scale afterwards. The per-leaf decay is published in the
    step context as ``wd``; ``add=False`` only publishes it (Lamb and
    AdamWeightDecay use it inside their rule). ``wd * w`` is rounded before
    it is added, as ``_apply_decay``'s ``op_mul`` then ``op_add`` round it.
    """
    own = [(k, s) for k, s in enumerate(specs or []) if s.weight_decay is not None]

    def decayed(names) -> np.ndarray:
        if specs is None and decay_filter is not None:
            return np.asarray(Selector(decay_filter, what="decay_filter").select(names), bool)  # names or x.name
        return np.ones(len(names), bool)

    def init(params):
        names, slot = _slots(owner, specs, order, params)
        flags = decayed(names)
        shared = {"weight_decay": weight_decay} if loss_scale is None else \
            {"weight_decay": weight_decay, "loss_scale": loss_scale}
        hyper = with_group_hyper(shared, {s.index: {"weight_decay": s.weight_decay} for _, s in own})
        return _group_state(hyper, params, slot, flags)

    @declare(who=owner, provides=("wd",), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        leaves, treedef = jax.tree.flatten(updates)
        h = state.hyper
        # Per leaf, the flags are the names' (as init found them), known when the program is built:
        # no per-leaf read of the stored vector, each a slice XLA:CPU compiles at about 8 ms. On flat
        # buffers (gradxform.fused: no names), the stored vector's entry per buffer.
        slots = treedef.flatten_up_to(leaf_values(state.group_slot, updates)) if own else [None] * len(leaves)
        if buffer_segments(extra_args) is None:
            flags = [bool(f) for f in decayed(param_names(updates))]
        else:
            flags = treedef.flatten_up_to(leaf_values(state.decay_flag, updates))
        wd = []
        own_wd = [group_value(h, "weight_decay", s.index) for _, s in own]  # once, not once per leaf
        for slot, flag in zip(slots, flags):
            d = h["weight_decay"]
            for (k, _), value in zip(own, own_wd):
                d = jnp.where(slot == k, value, d)
            wd.append(jnp.where(flag, d, 0.0))
        ctx = StepContext.of(extra_args)
        if ctx is not None:
            ctx.publish(wd=treedef.unflatten(wd))
        if not add:
            return updates, state
        if params is None:
            raise ValueError(f"{owner}: weight decay needs params; call update(grads, state, params).")
        pl = treedef.flatten_up_to(params)
        out = []
        for u, p, d, flag in zip(leaves, pl, wd, flags):
            scaled = d * h["loss_scale"] if loss_scale is not None else d
            # u + (-0.0) is u bit for bit, and u is read once: XLA then fuses the
            # rule's division into this loop instead of keeping it as a buffer
            # (measured: AdamWeightDecay 2.2x -> see benchmarks/README.md)
            # MindSpore's _apply_decay: op_mul, then op_add (two roundings)
            decay = jnp.where(flag, rounded(scaled.astype(u.dtype) * p.astype(u.dtype)), jnp.asarray(-0.0, u.dtype))
            out.append(u + decay)
        return treedef.unflatten(out), state

    return transformation(init, update)


def unselected_frozen(owner: str, specs, order, inner: GradientTransformation) -> GradientTransformation:
    """Runs ``inner`` and, when groups are given, zeroes the update and keeps
    the state of every leaf no group selects (not part of the optimizer).

    The selection is read from the ``group_slot`` of the first `GroupState`
    in ``inner``'s state (MindSpore's chains always hold one), not from the
    names of the updates: under `gradxform.fused` the updates are flat
    buffers without names, and the per-leaf slot is then one per group."""
    if specs is None:
        return inner

    def slots(state):
        groups = find_states(state, GroupState)
        if not groups:
            raise ValueError(f"{owner}: parameter groups need a group_learning_rate or group_weight_decay "
                             "piece in the chain (its state says which parameters are grouped).")
        return groups[0].group_slot

    return only_slotted(inner, slots)
