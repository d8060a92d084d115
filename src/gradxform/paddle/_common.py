"""What every Paddle optimizer shares (``paddle.optimizer.Optimizer``, 3.x):
the learning rate (a float or an ``LRScheduler``, times each group's
``learning_rate`` ratio), parameter groups, ``grad_clip`` per group,
``weight_decay`` as a regularizer per group, ``multi_precision`` master
weights, and the order Paddle applies them in (``Optimizer.step`` ->
``_apply_optimize``)::

    for each parameter group:
        g = grad_clip(g)                       # the group's clip, a global norm per group
        g = g + regularizer(w)                 # the parameter's group regularizer, else weight_decay
        lr = float32(scheduler() or lr) * group['learning_rate']
        rule(w, g, lr)                         # the optimizer's kernel, on float32 master weights
                                               # for float16/bfloat16 with multi_precision

``parameters`` names the optimized parameters (gradxform sees them only at
``init``): None (all), a list of names / glob patterns, or Paddle's list of
group dicts ``{'params': [...], 'learning_rate': ratio, 'weight_decay': ...,
'grad_clip': ...}`` (names as `gradxform.param_names`; a group without
'weight_decay' or 'grad_clip' takes the optimizer's, a group weight_decay of
None too, as Paddle's ``param.regularizer = None`` does; a group
``grad_clip=None`` clips nothing). A parameter that no entry names is not
optimized (update zero, state untouched), as in Paddle. A group may also set
the optimizer's own hyperparameters where Paddle's ``_update_param_group``
reads them (Adam's ``beta1``, Momentum's ``momentum``, ...; each optimizer
lists its keys): each becomes an entry of ``<name>_groups``, one float32
vector per hyperparameter (`gradxform._group_hyper.GroupHyper`); any
other key is a ValueError.

The learning rate: a number, or a `gradxform.schedules` Paddle schedule,
read at the number of ``optimizer.step()`` calls done (Paddle's user calls
``scheduler.step()`` after ``opt.step()``), or a `PaddleReduceOnPlateau` (then
``update`` needs ``loss=``), or a Paddle scheduler object
(`gradxform.paddle.lr`), stepped by the user and read by each update
when it runs, inside the user's jit too (`gradxform.schedules._held`).
`get_lr` / `set_lr` are Paddle's: `set_lr` under a scheduler is a
RuntimeError.
"""
from __future__ import annotations

import dataclasses
import weakref
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from .._base import GradientTransformation, chain, identity
from .._hyper import _scheduled, get_hyper, get_learning_rate, set_hyper
from .._optimizer import Setup
from .._registry import group_keys_of
from .._ranges import check_bool
from .._selectors import Selector, as_names, assign_slots, describe_names
from .._state_paths import find_states
from .._group_hyper import slot_value, with_group_hyper
from .._group_values import GroupValues, host_groups
from .._tree import leaf_values, once_per_value, param_names
from ..pieces.internal import RateAdjuster, StepState, adjusted_rate, no_adjustment
from ..pieces.internal import only_slotted
from ..pieces.internal import with_master_weights
from ..schedules.internal import DynamicLR, as_schedule, check_number, holds_its_rate
from ._clip import Clip, group_clip
from ._bind import bind_parameters
from ._plateau import PaddleReduceOnPlateau, PlateauState
from ._regularizer import Decay, as_regularizer, group_regularization
from .._types import Hyper, PerLeaf
from .._domains import FINITE

__all__ = ["ParamInfo", "PaddleOptions", "PaddleOptimizer", "group_keys", "with_groups", "leaf_hyper", "parse", "get_lr", "set_lr", "check_bool", "check_float",
           "GroupState", "PADDLE_FP16_WARNING"]

# what a PaddleOptimizer's methods read, by its init and update functions (weakly: a dropped
# optimizer's entries go with its functions)
_SCHEDULES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

SET_LR_UNDER_SCHEDULER = ("optimizer's learning rate can't be LRScheduler when invoke this API, because this "
                          "will lead to conflict.")
PADDLE_FP16_WARNING = ("Accumulating with FP16/BF16 in optimizer can lead to poor accuracy or slow convergence. "
                       "Consider using multi_precision=True option of the optimizer.")
GROUP_KEYS = ("params", "learning_rate", "weight_decay", "grad_clip")  # every Paddle optimizer's


def group_keys(*own: str) -> tuple[str, ...]:
    """A Paddle optimizer's parameter-group keys (its `Declaration`'s
    ``group_keys``): the family's and ``own``, the optimizer's own
    hyperparameters that Paddle's ``_update_param_group`` reads from a group."""
    return GROUP_KEYS + own


class ParamInfo(NamedTuple):
    """What a Paddle callable that takes a parameter tensor (``lr_ratio``,
    ``exclude_from_weight_decay_fn``) gets here: ``p.name`` (the gradxform
    name, the pytree path joined by ``/``: ``'fc1/bias'``, not Paddle's
    automatic ``'linear_0.b_0'``), ``p.shape``, ``p.dtype``."""
    name: str
    shape: tuple
    dtype: Any


def param_infos(params) -> list[ParamInfo]:
    return [ParamInfo(n, tuple(np.shape(p)), jnp.result_type(p))
            for n, p in zip(param_names(params), jax.tree.leaves(params))]


def refuse_selecting_nothing(owner: str, keyword: str, asked: list[str], verb: str, if_meant: str) -> None:
    """A Paddle function over parameters (``exclude_from_weight_decay_fn``,
    ``apply_decay_param_fun``) that selected none of the names ``asked`` at
    init: almost always a rule written for Paddle's automatic names
    (``linear_0.b_0``), which match nothing among gradxform's, so the run
    would train on with the wrong decay. Refused, saying what to type.
    No names (optax's params placeholder): nothing to judge, no error."""
    if not asked:
        return
    raise ValueError(
        f"{owner}({keyword}=...): the function {verb} no parameter; it was called with {describe_names(asked, 4)}. "
        "gradxform calls it with its own parameter names, the pytree path joined by '/' ('fc1/weight', "
        "'fc1/bias'), not Paddle's automatic names ('linear_0.w_0', 'linear_0.b_0'), so a rule written for "
        f"Paddle's names matches nothing here: rewrite it for these names. If nothing was meant, {if_meant}.")


def check_float(owner: str, name: str, value, **range_kw) -> float:
    """``value is None`` is Paddle's "not set" ValueError; then a number in range."""
    if value is None:
        raise ValueError(f"{owner}({name}=None): {name} is not set.")
    check_number(owner, name, value, **range_kw)
    return float(value)


@dataclasses.dataclass(frozen=True)
class _Group:
    index: int
    select: Any                 # None (every parameter) | list of names/globs | predicate
    lr_ratio: float = 1.0
    reg: Decay | None = None
    clip: Clip | None = None
    extra: dict = dataclasses.field(default_factory=dict)  # the optimizer's own hyperparameters for this group

    def selector(self) -> Selector:
        """The group's ``params`` as a `Selector` (names, globs, regexes,
        predicates, parameter objects with a ``.name``); None: every parameter."""
        spec = (lambda name: True) if self.select is None else self.select
        return Selector(spec, what=f"parameters[{self.index}]['params']")

    @property
    def empty(self) -> bool:
        """``'params': []``: Paddle's ``_add_param_group`` takes a group of no
        parameters (a config may build one); it optimizes nothing, and its
        options apply to nothing."""
        return isinstance(self.select, list) and not self.select


class GroupState(NamedTuple):
    """``slot``: each leaf's group (-1: not optimized; int32); ``lr_ratio``: its
    group's ``learning_rate`` ratio (float32): one vector each, an entry per
    leaf in flatten order (one per buffer under `gradxform.fused`)."""
    hyper: Hyper
    slot: PerLeaf
    lr_ratio: PerLeaf
    per_leaf_fields = ("slot", "lr_ratio")
    domains = {"lr_ratio": FINITE}


def _named(parameters) -> list[Any]:
    """``parameters`` with each parameter object (anything with a ``.name``:
    ``model.parameters()``) replaced by its name, at the top level and in
    each group's ``'params'`` list; anything else as it was."""
    names = as_names(parameters)
    if names is not None:
        return names
    return [dict(g, params=as_names(g["params"]) or g["params"]) if isinstance(g, dict) and "params" in g
            and as_names(g["params"]) is not None else g for g in parameters]


def _selection(owner, i, sel):
    if callable(sel) or (isinstance(sel, str)):
        return [sel] if isinstance(sel, str) else sel
    if isinstance(sel, (list, tuple)) and all(isinstance(x, str) for x in sel):
        return list(sel)
    raise TypeError(f"{owner}(parameters=...): group {i} 'params' must be a list of parameter names (or of "
                    f"parameter objects with a .name) or glob patterns, or a predicate over names; got {sel!r}.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PaddleOptions(Setup):
    """Paddle's ``Optimizer`` arguments: parameter groups, regularizer, clip, plateau."""
    fp16_warning = PADDLE_FP16_WARNING
    master_weights_inside = True   # `rule`: they hold the rule only
    plateau: PaddleReduceOnPlateau | None
    groups: tuple
    explicit: bool              # parameters= was given: unnamed leaves are not optimized
    weight_decay: Decay | None
    grad_clip: Clip | None
    lr_scheduler: Any = None    # a Paddle LRScheduler object, read by each update (schedules._held)
    regularize_kinds: tuple = ("l1", "l2")   # the regularizers the chain applies before the rule
    # the arrays parameters= gave (`_face.Bound`): build returns the stateful `_face.Optimizer`
    bound: Any = dataclasses.field(default=None, compare=False, repr=False)

    def slots(self, params) -> np.ndarray:
        names, owner = param_names(params), self.owner
        return assign_slots(
            names, [(g.index, g.selector()) for g in self.groups if not g.empty],
            unmatched=lambda k, sel: (f"{owner}(parameters=...): entry {k} {sel.spec!r} matches no parameter; "
                                      f"parameter names are {describe_names(names)}."),
            overlap=lambda name, first, k: (f"{owner}(parameters=...): some parameters appear in more than one "
                                            f"parameter group ({name!r}: groups {first} and {k})."))

    # -- pieces -------------------------------------------------------------------
    def step(self) -> GradientTransformation:
        """`track_step`'s rate, then the plateau's, then each group's ratio on
        it: one rate piece (`adjusted_rate`), the chain's one writer of ``lr``."""
        return adjusted_rate(self.track(), self.plateau.adjuster() if self.plateau is not None else no_adjustment(),
                             self._group_lr())

    def _group_lr(self) -> RateAdjuster:
        ratios = {g.index: g.lr_ratio for g in self.groups}

        def init(params):
            slots, groups = host_groups(self.slots(params), np.int32)  # held once per group, read once per group
            return GroupState({}, GroupValues(jnp.asarray(slots), groups), GroupValues(
                jnp.asarray([ratios.get(int(s), 1.0) for s in slots], jnp.float32), groups))

        def adjust(lr, count, updates, state, extra_args):
            del count, extra_args
            if all(r == 1.0 for r in ratios.values()):  # no group scales its rate: the rates as they are
                return lr, state
            # Paddle: float32(lr) * group['learning_rate'] (its scale op, float32)
            times = once_per_value(lambda l, r: l * r)  # one rate per (rate, group ratio): a group's leaves share it
            return jax.tree.map(times, lr, leaf_values(state.lr_ratio, updates)), state

        return RateAdjuster(self.owner, init, adjust)

    def group_values(self, names) -> dict:
        """``{group: {name: value}}`` for the optimizer hyperparameters ``names``
        that a group sets (Paddle's ``_update_param_group``)."""
        out = {}
        for g in self.groups:
            vals = {n: g.extra[n] for n in names if n in g.extra}
            if vals:
                out[g.index] = vals
        return out

    def group_extra(self, key, default):
        """``{group: value}`` of a group key that is not a hyperparameter (a flag, a function)."""
        return {g.index: g.extra.get(key, default) for g in self.groups}

    def clip(self) -> GradientTransformation:
        return group_clip([g.clip for g in self.groups], self.slots, default=self.grad_clip)

    def regularize(self, kinds=("l1", "l2")) -> GradientTransformation:
        return group_regularization([g.reg for g in self.groups], self.slots, default=self.weight_decay,
                                    kinds=kinds)

    # -- the family's hooks (`Setup.build`) -----------------------------------
    def before_rule(self) -> tuple[GradientTransformation, ...]:
        """Each group's clip, then its regularizer (``regularize_kinds``: the
        kinds the rule leaves to it; none, an AdamW, decays in its own rule)."""
        return (self.clip(), self.regularize(self.regularize_kinds) if self.regularize_kinds else identity())

    def rule(self, body: tuple[GradientTransformation, ...]) -> tuple[GradientTransformation, ...]:
        """The rule as one sub-chain, on float32 master weights under
        ``multi_precision`` (after clip and regularizer, as Paddle's kernels)."""
        inner = chain(*body, needs=("lr", "count", "mask"))
        return (with_master_weights(inner) if self.multi_precision else inner,)

    def selected(self, tx: GradientTransformation) -> GradientTransformation:
        """With ``parameters=``, leaves no entry names are not optimized."""
        return only_slotted(tx, _group_slots) if self.explicit else tx

    def presented(self, tx: GradientTransformation) -> Any:
        pair = PaddleOptimizer.of(tx, self.schedule, self.lr_scheduler)
        return pair if self.bound is None else self.bound.face(pair, self.bound, self)


def _group_slots(state):
    """Each leaf's ``parameters`` entry (-1: none names it, so it is frozen),
    from the `GroupState`: one per buffer under `gradxform.fused`."""
    return find_states(state, GroupState)[0].slot


def _clip_arg(owner, where, value):
    if value is None or isinstance(value, Clip):
        return value
    raise TypeError(f"{owner}({where}=...): 'grad_clip' should be None or a paddle clip "
                    f"(paddle.ClipGradByGlobalNorm, ClipGradByNorm, ClipGradByValue); got {value!r}.")


def parse(owner: str, learning_rate, parameters=None, weight_decay=None, grad_clip=None,
          multi_precision: bool = False) -> PaddleOptions:
    """Checks the base-class arguments at construction (``Optimizer.__init__``);
    the keys a group may set are the optimizer's declared ``group_keys``."""
    if learning_rate is None:
        raise ValueError(f"{owner}(learning_rate=None): learning_rate is not set.")
    if isinstance(learning_rate, (list, tuple)) or (hasattr(learning_rate, "shape") and np.ndim(learning_rate)):
        # Paddle's own TypeError: a float or an LRScheduler, no per-step list
        raise TypeError(f"{owner}(learning_rate=...): learning rate should be float or LRScheduler, got "
                        f"{type(learning_rate).__name__} here (as Paddle). For a rate per step, pass "
                        "gradxform.paddle.lr.PiecewiseDecay(boundaries, values), or a list to a MindSpore "
                        "optimizer (gradxform.mindspore), which takes one.")
    plateau = sched = host = None
    if holds_its_rate(learning_rate):  # gradxform.paddle.lr: each update reads it (schedules._held.HeldRate)
        host = learning_rate
    if isinstance(learning_rate, PaddleReduceOnPlateau):
        plateau, base = learning_rate, learning_rate.base_lr
    else:
        base, sched = as_schedule(owner, learning_rate, DynamicLR)
    wd = as_regularizer(owner, "weight_decay", weight_decay)
    clip = _clip_arg(owner, "grad_clip", grad_clip)
    check_bool(owner, "multi_precision", multi_precision)
    parameters, bound = bind_parameters(owner, parameters)  # arrays bind (the stateful face), names select
    groups, explicit = [_Group(0, None, 1.0, wd, clip)], False
    keys = group_keys_of(owner, GROUP_KEYS)
    if parameters is not None:
        explicit = True
        if isinstance(parameters, dict) or isinstance(parameters, str) or not isinstance(parameters, (list, tuple)):
            raise TypeError(f"{owner}(parameters=...): must be a list of parameter names or a list of group "
                            f"dicts (not a dict or a string); got {parameters!r}.")
        if not parameters:
            raise ValueError(f"{owner}(parameters=[]): the list is empty.")
        parameters = _named(parameters)  # Paddle's model.parameters(): objects with a .name
        if all(isinstance(g, dict) for g in parameters):
            groups = []
            for i, g in enumerate(parameters):
                bad = [k for k in g if k not in keys]
                if bad:
                    raise ValueError(f"{owner}(parameters=...): group {i} has key(s) {bad}; a group of this "
                                     f"optimizer takes {keys}.")
                if "params" not in g:
                    raise ValueError(f"{owner}(parameters=...): group {i}: params should be set in parameters "
                                     "if parameter groups are optimized in different options.")
                ratio = g.get("learning_rate", 1.0)
                check_number(f"{owner}(parameters[{i}])", "learning_rate", ratio, low=0.0)
                reg = as_regularizer(f"{owner}(parameters[{i}])", "weight_decay", g.get("weight_decay")) or wd
                gclip = _clip_arg(f"{owner}(parameters[{i}])", "grad_clip", g["grad_clip"]) if "grad_clip" in g \
                    else clip
                extra = {k: g[k] for k in keys if k in g and k not in GROUP_KEYS}
                groups.append(_Group(i, _selection(owner, i, g["params"]), float(ratio), reg, gclip, extra))
        elif all(isinstance(g, str) for g in parameters):
            groups = [_Group(0, list(parameters), 1.0, wd, clip)]
        else:
            raise TypeError(f"{owner}(parameters=...): must be all names or all group dicts; got {parameters!r}.")
    return PaddleOptions(owner=owner, learning_rate=base, schedule=sched, plateau=plateau, groups=tuple(groups),
                         explicit=explicit, weight_decay=wd, grad_clip=clip, multi_precision=multi_precision,
                         lr_scheduler=host, bound=bound)


class PaddleOptimizer(optax.GradientTransformationExtraArgs):
    """A Paddle optimizer: the ``(init, update)`` pair, with Paddle's
    ``get_lr(state)`` / ``set_lr(state, value)`` as methods (``opt.get_lr()``)
    and ``sync_lr(state)``.

    The pair is all it holds, so it is an ordinary optax pytree:
    ``jax.tree.map``, ``_replace`` and ``nnx.Optimizer`` rebuild it from its
    two functions. The schedule and the scheduler object its methods read are
    looked up by its functions (`_SCHEDULES`), so a copy that keeps either
    function keeps them (a wrapper ``_replace(update=...)`` keeps ``init``)."""

    __slots__ = ()

    @classmethod
    def of(cls, tx, schedule=None, lr_scheduler=None) -> "PaddleOptimizer":
        """``tx`` as a `PaddleOptimizer` whose methods read ``schedule`` and ``lr_scheduler``."""
        out = cls(tx.init, tx.update)
        for fn in (tx.init, tx.update):
            _SCHEDULES[fn] = (schedule, lr_scheduler)
        return out

    def _schedules(self) -> tuple:
        for fn in (self.update, self.init):
            try:
                found = _SCHEDULES.get(fn)
            except TypeError:  # not weakly referenceable (a leaf jax.tree.map put there)
                found = None
            if found is not None:
                return found
        return (None, None)

    @property
    def schedule(self):
        """The learning-rate `Schedule` (None for a number or a scheduler object)."""
        return self._schedules()[0]

    @property
    def lr_scheduler(self):
        """The Paddle scheduler object given as ``learning_rate`` (None otherwise)."""
        return self._schedules()[1]

    def get_lr(self, state) -> float | jax.Array:
        return get_lr(state, self)

    def set_lr(self, state, value: float):
        out = set_lr(state, value)  # Paddle's type check first
        if self.lr_scheduler is not None:
            raise RuntimeError(SET_LR_UNDER_SCHEDULER)
        return out

    def sync_lr(self, state):
        """``state`` with the scheduler's rate now (``scheduler()``) recorded as
        its ``learning_rate`` hyperparameter. Not needed: each update reads the
        scheduler itself (`gradxform.schedules._held`); kept so that loops
        written for gradxform 0.1 run unchanged."""
        if self.lr_scheduler is None:
            raise ValueError("sync_lr: this optimizer was not built with a Paddle LRScheduler object "
                             "(gradxform.paddle.lr); its learning rate is already in the state.")
        return set_hyper(state, learning_rate=float(self.lr_scheduler()))


def with_groups(hyper: dict, groups: dict) -> dict:
    """``hyper`` (float32 scalars) plus, for each name a group sets (``groups``:
    ``{position: {name: value}}``), the groups' own values as one `GroupHyper`."""
    return with_group_hyper(hyper, groups)


def leaf_hyper(h: dict, slot, groups: dict) -> dict:
    """The hyperparameters of one leaf of group ``slot``: its group's own
    value where the group sets one, else the optimizer's."""
    out = dict(h)
    for n in {n for vals in groups.values() for n in vals}:
        out[n] = slot_value(h, n, slot)
    return out


def get_lr(state, tx: Any = None) -> float | jax.Array:
    """Paddle ``optimizer.get_lr()``: the learning rate the next step uses
    (without the group ratios): the number, a Paddle scheduler object's
    ``scheduler()`` (what it holds now; pass ``tx``), the schedule at the number of
    steps done (``tx``, the optimizer, carries the schedule: pass it, or call
    ``tx.get_lr(state)``), or `PaddleReduceOnPlateau`'s current value."""
    if getattr(tx, "lr_scheduler", None) is not None:  # Paddle: what the scheduler holds now
        return float(tx.lr_scheduler())
    plateau = find_states(state, PlateauState)
    if plateau:
        return float(plateau[0].last_lr)
    sched = getattr(tx, "schedule", None)
    if _scheduled(state):
        if sched is None:
            raise ValueError("paddle.get_lr: the learning rate is a schedule; pass the optimizer "
                             "(get_lr(state, tx) or tx.get_lr(state)).")
        steps = find_states(state, StepState)[0].count
        return float(sched.lr_for_update(jnp.asarray(steps) + 1, get_hyper(state, "learning_rate")))
    return get_learning_rate(state)


def set_lr(state, value: float):
    """Paddle ``optimizer.set_lr(value)``: a new learning rate (no recompile);
    a RuntimeError when the learning rate is an LRScheduler, a TypeError for
    a non-number, as Paddle."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"The type of 'value' in optimizer.set_lr must be float, but received {type(value)}.")
    if _scheduled(state) or find_states(state, PlateauState):
        raise RuntimeError(SET_LR_UNDER_SCHEDULER)
    return set_hyper(state, learning_rate=float(value))
