"""MindSpore 2.x's ``dynamic_lr`` builders (``mindspore/nn/dynamic_lr.py``):
Python lists of learning rates, one per step, computed in Python floats
exactly as MindSpore computes them (same expressions, same order), to pass
as an optimizer's ``learning_rate=`` (read as `DynamicLR`: update ``i`` uses
``lr[i]``, MindSpore's ``global_step``).

``current_epoch = floor(i / step_per_epoch)`` for step ``i`` in every builder
but `piecewise_constant_lr`. Arguments are checked as MindSpore's validator
does: learning rates must be Python floats, counts positive ints (not bool).
"""
from __future__ import annotations

import math

from ..schedules.internal import check_number

__all__ = ["piecewise_constant_lr", "exponential_decay_lr", "natural_exp_decay_lr", "inverse_decay_lr",
           "cosine_decay_lr", "polynomial_decay_lr", "warmup_lr"]


def _float(owner, name, value, *, positive):
    if isinstance(value, bool) or not isinstance(value, float):
        raise TypeError(f"{owner}({name}=...): must be a Python float; got {value!r}.")
    check_number(owner, name, value, low=0.0, low_open=positive)


def _count(owner, name, value):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner}({name}=...): must be an int > 0; got {value!r}.")
    check_number(owner, name, value, low=0, low_open=True, integer=True)


def _check_decay(owner, learning_rate, decay_rate, total_step, step_per_epoch, decay_epoch, is_stair):
    for name, value in (("total_step", total_step), ("step_per_epoch", step_per_epoch),
                        ("decay_epoch", decay_epoch)):
        _count(owner, name, value)
    _float(owner, "learning_rate", learning_rate, positive=True)
    _float(owner, "decay_rate", decay_rate, positive=True)
    if not isinstance(is_stair, bool):
        raise TypeError(f"{owner}(is_stair=...): must be a bool; got {is_stair!r}.")


def piecewise_constant_lr(milestone, learning_rates):
    """``lr[i] = learning_rates[t]`` for ``milestone[t-1] <= i < milestone[t]``;
    ``milestone[-1]`` values in all (non-decreasing positive ints)."""
    owner = "piecewise_constant_lr"
    for name, value in (("milestone", milestone), ("learning_rates", learning_rates)):
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"{owner}({name}=...): must be a list or tuple; got {type(value).__name__}.")
    if len(milestone) != len(learning_rates):
        raise ValueError(f"{owner}: milestone and learning_rates must have the same length; got "
                         f"{len(milestone)} and {len(learning_rates)}.")
    lr = []
    last_item = 0
    for i, item in enumerate(milestone):
        _count(owner, f"milestone[{i}]", item)
        if isinstance(learning_rates[i], bool) or not isinstance(learning_rates[i], float):
            raise TypeError(f"{owner}(learning_rates[{i}]=...): must be a Python float; got {learning_rates[i]!r}.")
        if item < last_item:
            raise ValueError(f"{owner}(milestone=...): must not decrease; milestone[{i}]={item} < "
                             f"milestone[{i - 1}]={last_item}.")
        lr += [learning_rates[i]] * (item - last_item)
        last_item = item
    return lr


def exponential_decay_lr(learning_rate, decay_rate, total_step, step_per_epoch, decay_epoch, is_stair=False):
    """``lr[i] = learning_rate * decay_rate ** (current_epoch / decay_epoch)`` (the exponent
    floored when ``is_stair``)."""
    _check_decay("exponential_decay_lr", learning_rate, decay_rate, total_step, step_per_epoch, decay_epoch, is_stair)
    lr = []
    for i in range(total_step):
        if is_stair:
            lr.append(learning_rate * decay_rate ** math.floor(math.floor(i / step_per_epoch) / decay_epoch))
        else:
            lr.append(learning_rate * decay_rate ** (math.floor(i / step_per_epoch) / decay_epoch))
    return lr


def natural_exp_decay_lr(learning_rate, decay_rate, total_step, step_per_epoch, decay_epoch, is_stair=False):
    """``lr[i] = learning_rate * e ** (-decay_rate * current_epoch)`` (``current_epoch``
    rounded down to a multiple of ``decay_epoch`` when ``is_stair``; not divided by it, as in MindSpore)."""
    _check_decay("natural_exp_decay_lr", learning_rate, decay_rate, total_step, step_per_epoch, decay_epoch, is_stair)
    lr = []
    for i in range(total_step):
        epoch = math.floor(i / step_per_epoch)
        if is_stair:
            epoch = math.floor(epoch / decay_epoch) * decay_epoch
        lr.append(learning_rate * math.e ** (-decay_rate * epoch))
    return lr


def inverse_decay_lr(learning_rate, decay_rate, total_step, step_per_epoch, decay_epoch, is_stair=False):
    """``lr[i] = learning_rate / (1 + decay_rate * current_epoch / decay_epoch)`` (the ratio
    floored when ``is_stair``)."""
    _check_decay("inverse_decay_lr", learning_rate, decay_rate, total_step, step_per_epoch, decay_epoch, is_stair)
    lr = []
    for i in range(total_step):
        if is_stair:
            lr.append(learning_rate / (1 + decay_rate * math.floor(math.floor(i / step_per_epoch) / decay_epoch)))
        else:
            lr.append(learning_rate / (1 + decay_rate * math.floor(i / step_per_epoch) / decay_epoch))
    return lr


def cosine_decay_lr(min_lr, max_lr, total_step, step_per_epoch, decay_epoch):
    """``lr[i] = min_lr + 0.5 (max_lr - min_lr) (1 + cos(pi * min(current_epoch, decay_epoch) / decay_epoch))``."""
    owner = "cosine_decay_lr"
    _float(owner, "min_lr", min_lr, positive=False)
    _float(owner, "max_lr", max_lr, positive=True)
    for name, value in (("total_step", total_step), ("step_per_epoch", step_per_epoch), ("decay_epoch", decay_epoch)):
        _count(owner, name, value)
    if min_lr >= max_lr:
        raise ValueError(f"{owner}(max_lr=...): must be greater than min_lr; got max_lr={max_lr}, min_lr={min_lr}.")
    delta = 0.5 * (max_lr - min_lr)
    lr = []
    for i in range(total_step):
        tmp_epoch = min(math.floor(i / step_per_epoch), decay_epoch)
        lr.append(min_lr + delta * (1 + math.cos(math.pi * tmp_epoch / decay_epoch)))
    return lr


def polynomial_decay_lr(learning_rate, end_learning_rate, total_step, step_per_epoch, decay_epoch, power,
                        update_decay_epoch=False):
    """``lr[i] = (learning_rate - end_learning_rate) * (1 - tmp_epoch / tmp_decay_epoch) ** power + end_learning_rate``,
    ``tmp_epoch = min(current_epoch, decay_epoch)``, ``tmp_decay_epoch = decay_epoch``; with
    ``update_decay_epoch``, ``tmp_epoch = current_epoch`` and ``tmp_decay_epoch = decay_epoch *
    max(ceil(current_epoch / decay_epoch), 1)`` (MindSpore's loop, kept as it is)."""
    owner = "polynomial_decay_lr"
    _float(owner, "learning_rate", learning_rate, positive=True)
    _float(owner, "end_learning_rate", end_learning_rate, positive=False)
    _float(owner, "power", power, positive=True)
    for name, value in (("total_step", total_step), ("step_per_epoch", step_per_epoch), ("decay_epoch", decay_epoch)):
        _count(owner, name, value)
    if not isinstance(update_decay_epoch, bool):
        raise TypeError(f"{owner}(update_decay_epoch=...): must be a bool; got {update_decay_epoch!r}.")
    origin_decay_epoch = decay_epoch
    lr = []
    delta = learning_rate - end_learning_rate
    for i in range(total_step):
        current_epoch = math.floor(i / step_per_epoch)
        if update_decay_epoch:
            decay_epoch, tmp_epoch = origin_decay_epoch * max(math.ceil(current_epoch / origin_decay_epoch), 1), \
                current_epoch
        else:
            tmp_epoch = min(decay_epoch, current_epoch)
        lr.append(delta * (1 - tmp_epoch / decay_epoch) ** power + end_learning_rate)
    return lr


def warmup_lr(learning_rate, total_step, step_per_epoch, warmup_epoch):
    """``lr[i] = learning_rate * min(current_epoch, warmup_epoch) / warmup_epoch``."""
    owner = "warmup_lr"
    _float(owner, "learning_rate", learning_rate, positive=False)
    for name, value in (("warmup_epoch", warmup_epoch), ("total_step", total_step), ("step_per_epoch", step_per_epoch)):
        _count(owner, name, value)
    lr = []
    for i in range(total_step):
        tmp_epoch = min(warmup_epoch, math.floor(i / step_per_epoch))
        lr.append(learning_rate * tmp_epoch / warmup_epoch)
    return lr
