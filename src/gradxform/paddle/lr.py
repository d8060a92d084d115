"""Paddle's ``paddle.optimizer.lr`` (3.3.1, ``paddle/optimizer/lr.py``) as Paddle's objects:
a script that imported ``paddle.optimizer.lr`` imports ``gradxform.paddle.lr`` instead.

Each scheduler lives on the host and computes in Python float64, as Paddle's::

    sched = LinearWarmup(CosineAnnealingDecay(0.1, T_max=100), 10, 0.0, 0.1)
    sched()              # last_lr: the rate the next optimizer update uses
    sched.step()         # last_epoch += 1; last_lr = get_lr()   (per batch or per epoch)
    sched.step(epoch=5)  # last_epoch = 5 (a closed form where the class has one)
    sd = sched.state_dict(); fresh.set_state_dict(sd)

`LRScheduler` is subclassable as in Paddle: override ``get_lr()`` in plain
Python (``if``, ``float``, ``max`` on ``self.last_epoch`` and ``self.base_lr``).
``set_dict`` is the base class's ``set_state_dict`` in every class, as in Paddle
(so LinearWarmup's ``set_dict`` leaves its inner scheduler as it was).

**How the rate reaches the optimizer.** Paddle's optimizer reads ``scheduler()`` at each
``optimizer.step()`` (a float32 tensor); a new value never recompiles here:

* `gradxform.Trainer(params, 'paddle.momentum', {'learning_rate': sched})` and
  `gradxform.mxnet.get_updater('paddle.sgd', {'learning_rate': sched})` read ``sched()`` on the
  host before every update;
* any family's optimizer built with the scheduler (``gradxform.paddle.Momentum(sched)``), in your
  own jit: each update reads ``sched()`` itself when it runs (a host callback,
  `gradxform.schedules._held`), so no update runs at a stale rate; the scheduler waits, before it
  changes, for the updates already dispatched (JAX runs them asynchronously).

``opt.get_lr(state)`` is ``sched()``, as Paddle's ``optimizer.get_lr()``:
between an update and ``sched.step()``, the rate that update used.

The closed forms are the ones `gradxform.schedules` evaluates in float32
inside jit (one formula, `gradxform.schedules._paddle`); Paddle's recursive
``get_lr`` (CosineAnnealingDecay, LinearLR, MultiplicativeDecay) and its
stateful steps (LinearWarmup over a scheduler, CosineAnnealingWarmRestarts,
ReduceOnPlateau) are Paddle's, step for step.
"""
from __future__ import annotations

import contextlib
import math
import warnings
from typing import Callable

import numpy as np

from ..schedules.internal import (HOST64, check_number, wait_for_updates, cosine_annealing, cyclic, cyclic_scale_fn, exponential_decay,
                                  inverse_time_decay, linear_warmup, multi_step_decay, natural_exp_decay, noam_decay,
                                  one_cycle, one_cycle_phases, piecewise_decay, polynomial_decay, step_decay)
from .._ranges import NON_NEGATIVE, Range, check_value, real_value
from ._plateau import is_better, reduced

__all__ = ["LRScheduler", "NoamDecay", "PiecewiseDecay", "NaturalExpDecay", "InverseTimeDecay", "PolynomialDecay",
           "LinearWarmup", "ExponentialDecay", "MultiStepDecay", "StepDecay", "LambdaDecay", "ReduceOnPlateau",
           "CosineAnnealingDecay", "MultiplicativeDecay", "OneCycleLR", "CyclicLR", "LinearLR",
           "CosineAnnealingWarmRestarts"]


def __dir__():  # Paddle's names only, not the helpers imported here (np, math, Callable, HOST64)
    return sorted(__all__)


def _int(owner, name, value, low=None):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{owner}({name}=...): must be an int; got {value!r}.")
    if low is not None and value < low:
        raise ValueError(f"{owner}({name}=...): must be >= {low}; got {value!r}.")
    return int(value)


def _loaded(owner: str, key: str, value):
    """A ``set_state_dict`` value, checked as the constructor checks it: ``last_lr`` a real
    number, finite and >= 0 as float32; ``last_epoch`` an integer >= -1 (a one-element
    array of either is taken as its element). Other keys load as they are."""
    if key == "last_lr":
        check_value(f"{owner}.set_state_dict", key, value, NON_NEGATIVE)
        return real_value(owner, key, value)[0]
    if key == "last_epoch":
        check_value(f"{owner}.set_state_dict", key, value, Range(low=-1.0), as_stored=False)
        exact = real_value(owner, key, value)[0]
        if not exact.is_integer():
            raise ValueError(f"{owner}.set_state_dict(last_epoch=...): last_epoch must be an integer; got {value!r}.")
        return int(exact)
    return value


class LRScheduler:
    """Paddle's ``LRScheduler`` base class: ``base_lr``, ``last_lr`` (the rate the next
    update uses, ``sched()``), ``last_epoch`` (-1 before the first ``step()``,
    which ``__init__`` makes). A subclass implements ``get_lr()`` from
    ``self.last_epoch`` (and ``self.base_lr``, ``self.last_lr``); ``state_keys``
    names what ``state_dict`` saves (``last_epoch``, ``last_lr``)."""

    def __init__(self, learning_rate=0.1, last_epoch=-1, verbose=False):
        owner = type(self).__name__
        if isinstance(learning_rate, bool) or not isinstance(learning_rate, (float, int)):
            raise TypeError(f"{owner}(learning_rate=...): the type of learning rate must be float, but received "
                            f"{type(learning_rate)}.")
        if real_value(owner, "learning_rate", learning_rate)[0] < 0:
            raise ValueError(f"{owner}(learning_rate=...): invalid learning rate {learning_rate} (must be >= 0).")
        check_value(owner, "learning_rate", learning_rate, NON_NEGATIVE)  # as stored: 1e40, 10**400 refused
        self.base_lr = float(learning_rate)
        self.last_lr = float(learning_rate)
        self.last_epoch = _int(owner, "last_epoch", last_epoch)
        self.verbose = verbose
        self.step()

    def __call__(self) -> float:
        """The rate the next optimizer update uses (``last_lr``)."""
        return self.last_lr

    def step(self, epoch=None) -> None:
        """After ``optimizer.step()``: ``last_epoch += 1`` (or ``= epoch``) and the new
        ``last_lr`` (``get_lr()``; with ``epoch``, the class's closed form if it has one)."""
        with self._one_wait():
            if epoch is None:
                self.last_epoch += 1
                self.last_lr = self.get_lr()
            else:
                self.last_epoch = epoch
                closed = getattr(self, "_get_closed_form_lr", None)
                self.last_lr = closed() if closed is not None else self.get_lr()
        self._announce()

    def _announce(self, changed=True):
        if self.verbose and changed:
            print(f"Epoch {self.last_epoch}: {self.__class__.__name__} set learning rate to {self.last_lr}.")

    def _hold(self) -> None:
        """An update reads this scheduler (`schedules._held`): a change waits for the updates in flight."""
        object.__setattr__(self, "_held", True)

    def __setattr__(self, name, value):
        d = self.__dict__
        if not name.startswith("_") and d.get("_held"):
            if not d.get("_waited"):
                wait_for_updates()
            object.__setattr__(self, "_gx_changes", d.get("_gx_changes", 0) + 1)
        object.__setattr__(self, name, value)

    @contextlib.contextmanager
    def _one_wait(self):
        """One wait covers every attribute a change writes (a subclass's own ``step`` waits at each)."""
        again = self.__dict__.get("_held") and not self.__dict__.get("_waited")
        if again:
            wait_for_updates()
            object.__setattr__(self, "_waited", True)
        try:
            yield
        finally:
            if again:
                object.__setattr__(self, "_waited", False)

    def state_keys(self) -> None:
        """What `state_dict` saves: ``self.keys = ['last_epoch', 'last_lr']`` (a subclass may change it)."""
        self.keys = ["last_epoch", "last_lr"]

    def state_dict(self) -> dict:
        """``{key: value}`` of `state_keys` (a one-element array as a float)."""
        self.state_keys()
        out = {}
        for key in self.keys:
            if key not in self.__dict__:
                continue
            value = self.__dict__[key]
            if hasattr(value, "shape") and not isinstance(value, (float, int)):
                if np.size(value) != 1:
                    raise ValueError(f"{type(self).__name__}.state_dict: {key!r} must hold one element; "
                                     f"got shape {np.shape(value)}.")
                value = float(np.asarray(value).reshape(()))
            out[key] = value
        return out

    def set_state_dict(self, state_dict: dict) -> None:
        """Loads what `state_dict` returned (a RuntimeError naming a missing key, as Paddle)."""
        self.state_keys()
        missing = [key for key in self.keys if key not in state_dict]
        if missing:
            raise RuntimeError(f"Please check whether state_dict is correct for optimizer. Can't find "
                               f"[ {missing[0]} ] in state_dict")
        values = {key: _loaded(type(self).__name__, key, state_dict[key]) for key in self.keys}  # all, or none
        with self._one_wait():  # no update in flight reads a half-loaded scheduler
            for key, value in values.items():
                setattr(self, key, value)
        if len(state_dict) > len(self.keys):
            warnings.warn("There are some unused values in state_dict. Maybe the optimizer have different "
                          "'LearningRateDecay' when invoking state_dict and set_dict", stacklevel=2)

    set_dict = set_state_dict  # Paddle's alias

    def get_lr(self) -> float:
        """The rate at ``self.last_epoch``: what a subclass implements."""
        raise NotImplementedError(f"{type(self).__name__}.get_lr(): a subclass of LRScheduler implements get_lr().")

    @property
    def _t(self):
        return np.float64(self.last_epoch)


class NoamDecay(LRScheduler):
    """``base_lr * d_model ** -0.5 * min(t ** -0.5, warmup_steps ** -1.5 * t)`` (``t ** -0.5`` is 1 at 0)."""

    def __init__(self, d_model, warmup_steps, learning_rate=1.0, last_epoch=-1, verbose=False):
        check_number("NoamDecay", "d_model", d_model, low=0, low_open=True)
        check_number("NoamDecay", "warmup_steps", warmup_steps, low=0, low_open=True)
        self.d_model, self.warmup_steps = d_model, warmup_steps
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        return float(noam_decay(self._t, self.base_lr, self.d_model, self.warmup_steps, HOST64))


class PiecewiseDecay(LRScheduler):
    """``values[i]`` for the first ``i`` with ``t < boundaries[i]``, else the last value
    (``base_lr`` is Paddle's default 0.1)."""

    def __init__(self, boundaries, values, last_epoch=-1, verbose=False):
        if len(boundaries) == 0:
            raise ValueError("PiecewiseDecay(boundaries=...): the boundaries cannot be empty.")
        if len(values) <= len(boundaries):
            raise ValueError(f"PiecewiseDecay(values=...): needs one more value than boundaries; got "
                             f"{len(values)} values for {len(boundaries)} boundaries.")
        self.boundaries, self.values = boundaries, values
        super().__init__(last_epoch=last_epoch, verbose=verbose)

    def get_lr(self):
        return float(piecewise_decay(self._t, list(self.boundaries), list(self.values), HOST64))


class NaturalExpDecay(LRScheduler):
    """``base_lr * exp(-gamma * t)``."""

    def __init__(self, learning_rate, gamma, last_epoch=-1, verbose=False):
        check_number("NaturalExpDecay", "gamma", gamma, low=0.0, low_open=True)
        self.gamma = gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        return float(natural_exp_decay(self._t, self.base_lr, self.gamma, HOST64))


class InverseTimeDecay(LRScheduler):
    """``base_lr / (1 + gamma * t)``."""

    def __init__(self, learning_rate, gamma, last_epoch=-1, verbose=False):
        check_number("InverseTimeDecay", "gamma", gamma)
        self.gamma = gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        return float(inverse_time_decay(self._t, self.base_lr, self.gamma, HOST64))


class PolynomialDecay(LRScheduler):
    """``(base_lr - end_lr) * (1 - t' / T) ** power + end_lr``, ``t' = min(t, decay_steps)``;
    with ``cycle``, ``T = decay_steps * ceil(t / decay_steps)`` (1 at t = 0)."""

    def __init__(self, learning_rate, decay_steps, end_lr=0.0001, power=1.0, cycle=False, last_epoch=-1,
                 verbose=False):
        self.decay_steps = _int("PolynomialDecay", "decay_steps", decay_steps, low=1)
        check_number("PolynomialDecay", "end_lr", end_lr)
        check_number("PolynomialDecay", "power", power, low=0.0, low_open=True)
        self.end_lr, self.power, self.cycle = end_lr, power, cycle
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        return float(polynomial_decay(self._t, self.base_lr, self.decay_steps, self.end_lr, self.power,
                                      bool(self.cycle), HOST64))


class LinearWarmup(LRScheduler):
    """Linear from ``start_lr`` to ``end_lr`` over ``warmup_steps``, then ``learning_rate``: a
    number, or a scheduler that Paddle steps to ``t - warmup_steps`` (``step(epoch)``) and reads.
    ``base_lr`` is ``start_lr``; `state_dict` nests the inner scheduler's as ``LinearWarmup_LR``."""

    def __init__(self, learning_rate, warmup_steps, start_lr, end_lr, last_epoch=-1, verbose=False):
        if isinstance(learning_rate, bool) or not isinstance(learning_rate, (float, int, LRScheduler)):
            raise TypeError(f"LinearWarmup(learning_rate=...): must be an int, a float or an LRScheduler; "
                            f"got {learning_rate!r}.")
        self.learning_rate = learning_rate
        self.warmup_steps = _int("LinearWarmup", "warmup_steps", warmup_steps, low=1)
        check_number("LinearWarmup", "start_lr", start_lr)
        check_number("LinearWarmup", "end_lr", end_lr)
        if not end_lr > start_lr:
            raise ValueError(f"LinearWarmup(end_lr=...): end_lr {end_lr} must be greater than start_lr {start_lr}.")
        self.start_lr, self.end_lr = start_lr, end_lr
        super().__init__(start_lr, last_epoch, verbose)

    def state_dict(self):
        out = super().state_dict()
        if isinstance(self.learning_rate, LRScheduler):
            out["LinearWarmup_LR"] = self.learning_rate.state_dict()
        return out

    def set_state_dict(self, state_dict):
        super().set_state_dict(state_dict)
        if isinstance(self.learning_rate, LRScheduler):
            self.learning_rate.set_state_dict(state_dict["LinearWarmup_LR"])

    def get_lr(self):
        if self.last_epoch < self.warmup_steps:
            return float(linear_warmup(self._t, self.start_lr, self.end_lr, self.warmup_steps, HOST64))
        if isinstance(self.learning_rate, LRScheduler):
            self.learning_rate.step(self.last_epoch - self.warmup_steps)
            return self.learning_rate()
        return self.learning_rate


class ExponentialDecay(LRScheduler):
    """``base_lr * gamma ** t``."""

    def __init__(self, learning_rate, gamma, last_epoch=-1, verbose=False):
        check_number("ExponentialDecay", "gamma", gamma, low=0.0, low_open=True, high=1.0, high_open=True)
        self.gamma = gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        return float(exponential_decay(self._t, self.base_lr, self.gamma, HOST64))


class MultiStepDecay(LRScheduler):
    """``base_lr * gamma ** (number of milestones <= t)``."""

    def __init__(self, learning_rate, milestones, gamma=0.1, last_epoch=-1, verbose=False):
        if not isinstance(milestones, (tuple, list)):
            raise TypeError(f"MultiStepDecay(milestones=...): must be a tuple or list; got {type(milestones)}.")
        if not all(a < b for a, b in zip(milestones, milestones[1:])):
            raise ValueError(f"MultiStepDecay(milestones=...): must be increasing; got {milestones!r}.")
        check_number("MultiStepDecay", "gamma", gamma, high=1.0, high_open=True)
        self.milestones, self.gamma = milestones, gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        return float(multi_step_decay(self._t, self.base_lr, list(self.milestones), self.gamma, HOST64))


class StepDecay(LRScheduler):
    """``base_lr * gamma ** (t // step_size)``."""

    def __init__(self, learning_rate, step_size, gamma=0.1, last_epoch=-1, verbose=False):
        self.step_size = _int("StepDecay", "step_size", step_size, low=1)
        check_number("StepDecay", "gamma", gamma, high=1.0, high_open=True)
        self.gamma = gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        return float(step_decay(self._t, self.base_lr, self.step_size, self.gamma, HOST64))


class LambdaDecay(LRScheduler):
    """``base_lr * lr_lambda(last_epoch)``: ``lr_lambda`` any Python function of an int."""

    def __init__(self, learning_rate, lr_lambda: Callable, last_epoch=-1, verbose=False):
        if not callable(lr_lambda):
            raise TypeError(f"LambdaDecay(lr_lambda=...): must be a function; got {type(lr_lambda)}.")
        self.lr_lambda = lr_lambda
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        return self.base_lr * self.lr_lambda(self.last_epoch)


class MultiplicativeDecay(LRScheduler):
    """``base_lr * lr_lambda(1) * ... * lr_lambda(last_epoch)`` (Paddle recomputes the product)."""

    def __init__(self, learning_rate, lr_lambda: Callable, last_epoch=-1, verbose=False):
        if not callable(lr_lambda):
            raise TypeError(f"MultiplicativeDecay(lr_lambda=...): must be a function; got {type(lr_lambda)}.")
        self.lr_lambda = lr_lambda
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        lr = self.base_lr
        for epoch in range(1, self.last_epoch + 1):
            lr = lr * self.lr_lambda(epoch)
        return lr


class ReduceOnPlateau(LRScheduler):
    """Paddle's ReduceOnPlateau object: ``step(metrics)`` after each evaluation (the in-graph
    piece is `gradxform.schedules.PaddleReduceOnPlateau`). Paddle's rule, cooldown included::

        if cooldown_counter > 0: cooldown_counter -= 1
        else:
            if best is None or better(metrics, best): best, num_bad_epochs = metrics, 0
            else: num_bad_epochs += 1
            if num_bad_epochs > patience:
                cooldown_counter, num_bad_epochs = cooldown, 0
                new = max(last_lr * factor, min_lr); if last_lr - new > epsilon: last_lr = new

    ``last_epoch`` starts at 0 and ``__init__`` does not step, as Paddle's."""

    def __init__(self, learning_rate, mode="min", factor=0.1, patience=10, threshold=1e-4, threshold_mode="rel",
                 cooldown=0, min_lr=0, epsilon=1e-8, verbose=False):
        owner = "ReduceOnPlateau"
        mode, threshold_mode = str(mode).lower(), str(threshold_mode).lower()
        if mode not in ("min", "max"):
            raise ValueError(f"{owner}(mode=...): must be 'min' or 'max'; got {mode!r}.")
        check_number(owner, "factor", factor, high=1.0, high_open=True)
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(f"{owner}(threshold_mode=...): must be 'rel' or 'abs'; got {threshold_mode!r}.")
        if isinstance(learning_rate, bool) or not isinstance(learning_rate, (float, int)):
            raise TypeError(f"{owner}(learning_rate=...): must be a float; got {type(learning_rate)}.")
        for name, value in (("threshold", threshold), ("min_lr", min_lr), ("epsilon", epsilon)):
            check_number(owner, name, value)
        self.mode, self.factor, self.threshold_mode = mode, factor, threshold_mode
        self.patience = _int(owner, "patience", patience, low=0)
        self.cooldown = _int(owner, "cooldown", cooldown, low=0)
        self.threshold, self.min_lr, self.epsilon = threshold, min_lr, epsilon
        self.cooldown_counter, self.best, self.num_bad_epochs = 0, None, 0
        self.base_lr = self.last_lr = float(learning_rate)
        self.last_epoch, self.verbose = 0, verbose

    def state_keys(self):
        self.keys = ["cooldown_counter", "best", "num_bad_epochs", "last_epoch", "last_lr"]

    def step(self, metrics, epoch=None):  # pyright: ignore[reportIncompatibleMethodOverride]  # Paddle's signature
        """``metrics``: a number or a one-element array (the loss or score of this epoch)."""
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        if hasattr(metrics, "shape") and not isinstance(metrics, (np.floating, np.integer)):
            if np.size(metrics) != 1:
                raise ValueError(f"ReduceOnPlateau.step(metrics=...): the size of metrics must be 1; got shape "
                                 f"{np.shape(metrics)} (take the mean first).")
            metrics = float(np.asarray(metrics).reshape(()))
        elif isinstance(metrics, bool) or not isinstance(metrics, (int, float, np.floating, np.integer)):
            raise TypeError(f"ReduceOnPlateau.step(metrics=...): must be a number or a one-element array; "
                            f"got {type(metrics)}.")
        before = self.last_lr
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
        else:
            if self.best is None or is_better(self.mode, self.threshold_mode, self.threshold, metrics, self.best):
                self.best, self.num_bad_epochs = metrics, 0
            else:
                self.num_bad_epochs += 1
            if self.num_bad_epochs > self.patience:
                self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
                self.last_lr = float(reduced(self.last_lr, self.factor, self.min_lr, self.epsilon, HOST64))
        self._announce(changed=self.last_lr != before)  # Paddle prints only a reduction


class CosineAnnealingDecay(LRScheduler):
    """Paddle's recursion from ``last_lr``::

        t == 0: base_lr;  (t - 1 - T_max) % (2 T_max) == 0: last_lr + (base_lr - eta_min)(1 - cos(pi/T_max))/2
        else: (1 + cos(pi t/T_max)) / (1 + cos(pi (t-1)/T_max)) * (last_lr - eta_min) + eta_min

    and its closed form for ``step(epoch)``
    (``eta_min + (base_lr - eta_min)(1 + cos(pi t / T_max)) / 2``)."""

    def __init__(self, learning_rate, T_max, eta_min=0, last_epoch=-1, verbose=False):  # noqa: N803 (Paddle's)
        self.T_max = _int("CosineAnnealingDecay", "T_max", T_max, low=1)
        check_number("CosineAnnealingDecay", "eta_min", eta_min)
        self.eta_min = float(eta_min)
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        t, T = self.last_epoch, self.T_max
        if t == 0:
            return self.base_lr
        if (t - 1 - T) % (2 * T) == 0:
            return self.last_lr + (self.base_lr - self.eta_min) * (1 - math.cos(math.pi / T)) / 2
        return ((1 + math.cos(math.pi * t / T)) / (1 + math.cos(math.pi * (t - 1) / T))
                * (self.last_lr - self.eta_min) + self.eta_min)

    def _get_closed_form_lr(self):
        return float(cosine_annealing(self._t, self.base_lr, self.T_max, self.eta_min, HOST64))


class OneCycleLR(LRScheduler):
    """Up from ``max_learning_rate / divide_factor`` to the max over the first ``phase_pct`` of
    ``total_steps``, then down to ``end_learning_rate`` (``three_phase``: back to the initial rate
    first), by cosine or linearly. ``base_lr`` is the initial rate; past ``total_steps`` a ValueError."""

    def __init__(self, max_learning_rate, total_steps, divide_factor=25.0, end_learning_rate=0.0001, phase_pct=0.3,
                 anneal_strategy="cos", three_phase=False, last_epoch=-1, verbose=False):
        owner = "OneCycleLR"
        check_number(owner, "max_learning_rate", max_learning_rate, low=0.0)
        check_number(owner, "end_learning_rate", end_learning_rate, low=0.0)
        self.total_steps = _int(owner, "total_steps", total_steps, low=1)
        check_number(owner, "phase_pct", phase_pct, low=0.0, high=1.0)
        check_number(owner, "divide_factor", divide_factor)
        if three_phase and phase_pct >= 0.5:
            raise ValueError(f"{owner}(phase_pct=...): must be less than 0.5 with three_phase; got {phase_pct}.")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"{owner}(anneal_strategy=...): must be 'cos' or 'linear'; got {anneal_strategy!r}.")
        self.anneal_strategy = anneal_strategy
        self._step_config, self._steps_size, self._lr_config = one_cycle_phases(
            max_learning_rate, total_steps, divide_factor, end_learning_rate, phase_pct, three_phase)
        super().__init__(self._lr_config[0], last_epoch, verbose)

    def get_lr(self):
        if self.last_epoch > self.total_steps:
            raise ValueError(f"Tried to step {self.last_epoch} times. However the number of total steps is "
                             f"{self.total_steps}")
        return float(one_cycle(self._t, self._step_config, self._steps_size, self._lr_config, self.anneal_strategy,
                               HOST64))

    @property
    def anneal_func(self) -> Callable[[float, float, float], float]:
        """Paddle's ``anneal_func(start_lr, end_lr, pct)`` for ``anneal_strategy``
        (``_cos_annealing`` / ``_linear_annealing`` of ``paddle/optimizer/lr.py``), to read or call."""
        if self.anneal_strategy == "cos":
            return lambda start_lr, end_lr, pct: end_lr + (start_lr - end_lr) / 2.0 * (math.cos(math.pi * pct) + 1)
        return lambda start_lr, end_lr, pct: (end_lr - start_lr) * pct + start_lr


class CyclicLR(LRScheduler):
    """Between ``base_learning_rate`` and ``max_learning_rate`` in triangles of
    ``step_size_up + step_size_down`` steps, scaled by ``scale_fn(cycle)`` or
    ``scale_fn(t)`` (triangular: 1; triangular2: halved each cycle; exp_range: ``exp_gamma ** t``)."""

    def __init__(self, base_learning_rate, max_learning_rate, step_size_up, step_size_down=None, mode="triangular",
                 exp_gamma=1.0, scale_fn=None, scale_mode="cycle", last_epoch=-1, verbose=False):
        owner = "CyclicLR"
        check_number(owner, "max_learning_rate", max_learning_rate, low=0.0)
        up = _int(owner, "step_size_up", step_size_up, low=1)
        down = up if step_size_down is None else _int(owner, "step_size_down", step_size_down, low=1)
        check_number(owner, "exp_gamma", exp_gamma)
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise ValueError(f"{owner}(mode=...): must be 'triangular', 'triangular2' or 'exp_range' unless "
                             f"scale_fn is given; got {mode!r}.")
        if scale_mode not in ("cycle", "iterations"):
            raise ValueError(f"{owner}(scale_mode=...): must be 'cycle' or 'iterations'; got {scale_mode!r}.")
        self.cycle_size = float(up) + float(down)
        self.step_up_pct = float(up) / self.cycle_size
        self.max_lr = float(max_learning_rate)
        self.amplitude = self.max_lr - base_learning_rate
        self.mode, self.gamma = mode, exp_gamma
        if scale_fn is None:
            self.scale_fn = cyclic_scale_fn(mode, exp_gamma, HOST64)
            self.scale_mode = "iterations" if mode == "exp_range" else "cycle"
        else:
            self.scale_fn, self.scale_mode = scale_fn, scale_mode
        super().__init__(base_learning_rate, last_epoch, verbose)

    def get_lr(self):
        return float(cyclic(self._t, self.base_lr, self.amplitude, self.cycle_size, self.step_up_pct, self.scale_fn,
                            self.scale_mode, HOST64))


class LinearLR(LRScheduler):
    """``base_lr * start_factor`` at 0, then Paddle's recursion up to ``total_steps`` (``last_lr``
    times ``1 + (end - start) / (total * start + (t - 1)(end - start))``), then ``last_lr`` held."""

    def __init__(self, learning_rate, total_steps, start_factor=1.0 / 3, end_factor=1.0, last_epoch=-1,
                 verbose=False):
        owner = "LinearLR"
        check_number(owner, "start_factor", start_factor, low=0.0, low_open=True, high=1.0)
        check_number(owner, "end_factor", end_factor, low=0.0, high=1.0)
        check_number(owner, "total_steps", total_steps, low=0, low_open=True)
        self.start_factor, self.end_factor, self.total_steps = start_factor, end_factor, total_steps
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        if self.last_epoch == 0:
            return self.base_lr * self.start_factor
        if self.last_epoch > self.total_steps:
            return self.last_lr
        base = self.total_steps * self.start_factor
        diff = self.end_factor - self.start_factor
        return self.last_lr * (1.0 + diff / (base + (self.last_epoch - 1) * diff))


class CosineAnnealingWarmRestarts(LRScheduler):
    """``eta_min + (base_lr - eta_min)(1 + cos(pi T_cur / T_i)) / 2``, restarting when ``T_cur``
    reaches ``T_i`` (then ``T_i *= T_mult``); Paddle's ``step``, ``step(epoch)`` included.
    ``state_dict`` holds ``last_epoch`` and ``last_lr`` only, as Paddle's."""

    def __init__(self, learning_rate, T_0, T_mult=1, eta_min=0, last_epoch=-1, verbose=False):  # noqa: N803
        self.T_0 = _int("CosineAnnealingWarmRestarts", "T_0", T_0, low=1)
        self.T_mult = _int("CosineAnnealingWarmRestarts", "T_mult", T_mult, low=1)
        check_number("CosineAnnealingWarmRestarts", "eta_min", eta_min)
        self.T_i, self.eta_min, self.T_cur = self.T_0, eta_min, last_epoch
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        return float(cosine_annealing(np.float64(self.T_cur), self.base_lr, self.T_i, self.eta_min, HOST64))

    def step(self, epoch=None):
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur = self.T_cur + 1
            if self.T_cur >= self.T_i:
                self.T_cur, self.T_i = self.T_cur - self.T_i, self.T_i * self.T_mult
        elif epoch < 0:
            raise ValueError(f"CosineAnnealingWarmRestarts.step(epoch=...): expected a non-negative epoch; got {epoch}.")
        elif epoch >= self.T_0:
            if self.T_mult == 1:
                self.T_cur = epoch % self.T_0
            else:
                n = int(math.log((epoch / self.T_0 * (self.T_mult - 1) + 1), self.T_mult))
                self.T_cur = epoch - self.T_0 * (self.T_mult ** n - 1) / (self.T_mult - 1)
                self.T_i = self.T_0 * self.T_mult ** n
        else:
            self.T_i, self.T_cur = self.T_0, epoch
        self.last_epoch = math.floor(epoch)
        self.last_lr = self.get_lr()
        self._announce()
