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
"""
from __future__ import annotations

import weakref

from .._hyper import get_hyper
from ..pieces.internal import host_done

__all__ = ["get_lr", "get_lr_parameter", "remember"]

_OPTIONS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def remember(tx, options):
    """Records the options ``tx`` (a finished MindSpore optimizer) was built from; returns ``tx``."""
    for fn in (tx.init, tx.update):
        try:
            _OPTIONS[fn] = options
        except TypeError:  # not weakly referenceable
            pass
    return tx


def _options(optimizer, who):
    for fn in (getattr(optimizer, "update", None), getattr(optimizer, "init", None)):
        try:
            found = _OPTIONS.get(fn)
        except TypeError:
            found = None
        if found is not None:
            return found
    raise TypeError(f"gradxform.mindspore.{who}(optimizer, state): optimizer must be one built by "
                    "gradxform.mindspore (MindSpore's class names, or gradxform.create('mindspore.<name>')); got "
                    f"{type(optimizer).__name__}.")


def _rate(schedule, hyper_name, state, step):
    base = get_hyper(state, hyper_name)
    if schedule is None:
        return float(base)
    return float(schedule.lr_for_update(step + 1, base))  # update step + 1 reads index global_step


def get_lr(optimizer, state):
    """MindSpore's ``optimizer.get_lr()``: the rate of the next update (a tuple per group when
    groups have their own 'lr'); see the module docstring."""
    o = _options(optimizer, "get_lr")
    step = host_done(state)
    default = _rate(o.schedule, "learning_rate", state, step)
    if not o.grouped or all(s.lr is None for s in o.specs):
        return default
    return tuple(default if s.lr is None else _rate(s.lr_schedule, f"learning_rate_group_{s.index}", state, step)
                 for s in sorted(o.specs, key=lambda s: s.index))


def get_lr_parameter(optimizer, state, param):
    """The rate of the next update for the parameter named ``param`` (or a list of names)."""
    if isinstance(param, (list, tuple)):
        return [get_lr_parameter(optimizer, state, p) for p in param]
    o = _options(optimizer, "get_lr_parameter")
    name = getattr(param, "name", param)
    if not isinstance(name, str):
        raise TypeError(f"get_lr_parameter(param=...): expected a parameter name (or an object with .name); "
                        f"got {type(param).__name__}.")
    step = host_done(state)
    for s in (o.specs or ()):
        if s.matches(name) and s.lr is not None:
            return _rate(s.lr_schedule, f"learning_rate_group_{s.index}", state, step)
    return _rate(o.schedule, "learning_rate", state, step)
