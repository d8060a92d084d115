"""MindSpore's ``optimizer.get_lr()`` and ``optimizer.get_lr_parameter(param)`` for gradxform's
functional MindSpore optimizers (issue 38): ``get_lr(optimizer, state)``.

MindSpore 2.10.0's ``get_lr()`` is the learning rate of the step about to run: with a list or a
``LearningRateSchedule`` it is ``learning_rate[global_step]`` (``global_step``: steps done), a fixed
rate otherwise, and with per-group rates a tuple, one per group in the order given. Here
``global_step`` is the state's step count, so ``get_lr(opt, state)`` after ``k`` updates is the rate of
update ``k + 1``, as MindSpore's after ``k`` calls. It is pure: it reads the state and changes nothing.
``get_lr_parameter(opt, state, name)`` gives that rate for the group of the parameter named ``name``
(a list of names: a list); MindSpore returns the ``Parameter`` holding the rate (the whole list for a
dynamic one) or the schedule Cell, which a JAX state has no counterpart of, so the current value is
what is given.

The optimizers return a `MindSporeOptimizer`, the same ``(init, update)`` pair with both as methods
that take the state: ``opt.get_lr(state)``, ``opt.get_lr_parameter(state, param)`` (MindSpore's
``opt.get_lr()``, without the state, raises a TypeError saying what to write). A list learning rate
read past its end raises (`gradxform.schedules.internal.MindSporeListLR`), as MindSpore's CPU and
GPU Gather kernels fail there.
"""
from __future__ import annotations

import weakref

import optax

from .._hyper import get_hyper
from .._selectors import describe_names
from .._tree import param_names
from ..pieces.internal import host_done
from ..schedules.internal import DynamicLR, MindSporeListLR

__all__ = ["get_lr", "get_lr_parameter", "remember", "MindSporeOptimizer", "options_of"]

# the options each MindSpore optimizer was built from, by its init and update functions (weakly:
# a dropped optimizer's entry goes with its functions)
_OPTIONS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_NAMES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # the names its last init saw
_NO_STATE = ("a gradxform optimizer holds no step count (its state does), so MindSpore's "
             "optimizer.{0}() takes the state here: write opt.{0}(state{1}) or "
             "gradxform.mindspore.{0}(opt, state{1}).")


_STATE_HOLDS = "here the optimizer is a pure (init, update) pair and the state holds it: "
_MS_ATTRIBUTES = {
    "learning_rate": _STATE_HOLDS + "read the rate with opt.get_lr(state) (per parameter: "
                     "opt.get_lr_parameter(state, name)), change it with gradxform.set_hyper(state, learning_rate=x).",
    "global_step": _STATE_HOLDS + "the updates done are its step count; opt.get_lr(state) reads the rate there.",
    "weight_decay": _STATE_HOLDS + "gradxform.get_hyper(state, 'weight_decay'), set_hyper to change it.",
    "parameters": "the parameters are the tree you pass to init and update (gradxform.param_names(params) lists "
                  "their names).",
    "is_group": "fixed when built: the group list you passed (params=[{...}, ...]).",
    "is_group_lr": "fixed when built: groups with their own 'lr' (opt.get_lr(state) returns one rate per group).",
    "dynamic_lr": "fixed when built: a list or LearningRateSchedule learning_rate (opt.get_lr(state) reads it).",
    "target": "there is no device target: JAX places the arrays (jax.devices()).",
    "unique": "gradxform's updates are dense; there is no sparse-gradient deduplication to turn off.",
    "loss_scale": "fixed when built: the loss_scale= you passed.",
}


class MindSporeOptimizer(optax.GradientTransformationExtraArgs):
    """A MindSpore optimizer: the ``(init, update)`` pair, with MindSpore's
    ``get_lr`` and ``get_lr_parameter`` as methods that take the state
    (``opt.get_lr(state)``; see the module docstring).

    The pair is all it holds, so it is an ordinary optax pytree:
    ``jax.tree.map``, ``_replace`` and ``nnx.Optimizer`` rebuild it from its
    two functions. The options its methods read are looked up by its
    functions (`_OPTIONS`), so a copy that keeps either function keeps them
    (a wrapper ``_replace(update=...)`` keeps ``init``)."""

    __slots__ = ()

    def get_lr(self, state=None):
        """MindSpore's ``optimizer.get_lr()``: the rate of the next update (`get_lr`)."""
        if state is None:
            raise TypeError("get_lr(state): " + _NO_STATE.format("get_lr", ""))
        return get_lr(self, state)

    def __call__(self, *args, **kwargs):
        # MindSpore 2's training step is `optimizer(grads)`: the Cell writes its Parameters in place
        raise TypeError("optimizer(grads): a MindSpore optimizer Cell updates its parameters in place when "
                        "called; this one is a pure (init, update) pair, as optax's. Write: state = opt.init(params) "
                        "once, then per step updates, state = opt.update(grads, state, params); params = "
                        "optax.apply_updates(params, updates) (inside jax.jit for speed).")

    def __getattr__(self, name):
        if name in _MS_ATTRIBUTES:  # what MindSpore scripts read off an optimizer Cell
            raise AttributeError(f"optimizer.{name}: MindSpore's optimizer Cell attribute; {_MS_ATTRIBUTES[name]}")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def get_lr_parameter(self, state, param=None):
        """MindSpore's ``optimizer.get_lr_parameter(param)``: the rate of the next
        update for the parameter named ``param`` (`get_lr_parameter`)."""
        if param is None:
            raise TypeError("get_lr_parameter(state, param): " + _NO_STATE.format("get_lr_parameter", ", param"))
        return get_lr_parameter(self, state, param)


def remember(tx, options) -> MindSporeOptimizer:
    """Records the options ``tx`` (a finished MindSpore optimizer) was built from; returns ``tx``
    as a `MindSporeOptimizer` (the same update; an init that also records the parameter names,
    which `get_lr_parameter` checks a name against, as MindSpore checks its parameters)."""
    names: list = []
    inner = tx.init

    def init(params):
        names[:] = param_names(params)
        return inner(params)

    for fn in (init, tx.update):
        try:
            _OPTIONS[fn] = options
            _NAMES[fn] = names
        except TypeError:  # not weakly referenceable
            pass
    return MindSporeOptimizer(init, tx.update)


def options_of(optimizer):
    """The options a MindSpore optimizer was built from (`remember`), or None."""
    for fn in (getattr(optimizer, "update", None), getattr(optimizer, "init", None)):
        try:
            found = _OPTIONS.get(fn)
        except TypeError:
            found = None
        if found is not None:
            return found
    return None


def _weak_get(table, fn):
    try:
        return table.get(fn)
    except TypeError:  # not weakly referenceable
        return None


def _options(optimizer, who):
    found = options_of(optimizer)
    if found is not None:
        return found
    raise TypeError(f"gradxform.mindspore.{who}(optimizer, state): optimizer must be one built by "
                    "gradxform.mindspore (MindSpore's class names, or gradxform.create('mindspore.<name>')); got "
                    f"{type(optimizer).__name__}.")


def _rate(schedule, hyper_name, state, step, *, past_end_raises: bool = True, group: int | None = None):
    base = get_hyper(state, hyper_name, group=group)
    if schedule is None:
        return float(base)
    if not past_end_raises and isinstance(schedule, MindSporeListLR):
        # the list's own reading, unchecked: its last value past the end
        return float(DynamicLR.lr_for_update(schedule, step + 1, base))
    return float(schedule.lr_for_update(step + 1, base))  # update step + 1 reads index global_step


def get_lr(optimizer, state):
    """MindSpore's ``optimizer.get_lr()``: the rate of the next update (a tuple per group when
    groups have their own 'lr'); see the module docstring. Also ``optimizer.get_lr(state)``. With a
    list learning rate and the run at its end, a ValueError naming the list's length (MindSpore's
    Gather fails there too)."""
    o = _options(optimizer, "get_lr")
    step = host_done(state)
    default = _rate(o.schedule, "learning_rate", state, step)
    if not o.grouped or all(s.lr is None for s in o.specs):
        return default
    return tuple(default if s.lr is None else _rate(s.lr_schedule, "learning_rate", state, step, group=s.index)
                 for s in sorted(o.specs, key=lambda s: s.index))


def get_lr_parameter(optimizer, state, param):
    """The rate of the next update for the parameter named ``param`` (or a list of names). Past the
    end of a list learning rate, its last value: MindSpore's ``get_lr_parameter`` returns the list's
    ``Parameter`` there (it reads no element), while the update itself fails (and `get_lr` raises)."""
    if isinstance(param, (list, tuple)):
        return [get_lr_parameter(optimizer, state, p) for p in param]
    o = _options(optimizer, "get_lr_parameter")
    name = getattr(param, "name", param)
    if not isinstance(name, str):
        raise TypeError(f"get_lr_parameter(param=...): expected a parameter name (or an object with .name); "
                        f"got {type(param).__name__}.")
    known = next((k for k in (_weak_get(_NAMES, fn) for fn in (optimizer.update, optimizer.init)) if k), None)
    if known and name not in known:
        # MindSpore: "For 'get_lr_parameter', the parameter ... is not in optimizer"
        raise ValueError(f"get_lr_parameter(param={name!r}): the parameter {name!r} is not in the optimizer. "
                         "gradxform names a parameter by its pytree path joined by '/' ('dense/weight' where "
                         f"MindSpore has 'dense.weight'); its parameters are {describe_names(known)}.")
    step = host_done(state)
    for s in (o.specs or ()):
        if s.matches(name) and s.lr is not None:
            return _rate(s.lr_schedule, "learning_rate", state, step, past_end_raises=False,
                         group=s.index)
    return _rate(o.schedule, "learning_rate", state, step, past_end_raises=False)
