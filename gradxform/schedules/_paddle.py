"""Paddle's ``paddle.optimizer.lr`` schedulers (3.x) as pure vectorised
functions of ``last_epoch`` (``step``: how many times ``scheduler.step()``
ran, i.e. updates completed), (ReduceOnPlateau, a stateful piece, lives in `gradxform.paddle._plateau`).

Paddle computes in Python float64 and hands the optimizer a float32; here
the closed forms are evaluated in float32 (agreement ~1e-6 relative).
Recursive Paddle formulas (CosineAnnealingDecay) are replaced by their
closed form, which Paddle itself uses for ``step(epoch)``. ``LambdaDecay``'s
and ``CyclicLR``'s user functions must accept a jax array.
"""
from __future__ import annotations

import math
from typing import Callable

import jax.numpy as jnp

from ._common import Schedule, check_number

__all__ = ["StepDecay", "MultiStepDecay", "ExponentialDecay", "NaturalExpDecay", "InverseTimeDecay",
           "PolynomialDecay", "PiecewiseDecay", "CosineAnnealingDecay", "LinearWarmup", "NoamDecay",
           "LambdaDecay", "OneCycleLR", "CyclicLR", "LinearLR"]

F32 = jnp.float32


def _lr(owner, learning_rate):
    check_number(owner, "learning_rate", learning_rate)
    return float(learning_rate)


class StepDecay(Schedule):
    """``lr * gamma ** (step // step_size)``."""

    def __init__(self, learning_rate, step_size, gamma=0.1):
        self.base_lr = _lr("StepDecay", learning_rate)
        check_number("StepDecay", "step_size", step_size, low=0, low_open=True, integer=True)
        check_number("StepDecay", "gamma", gamma, high=1.0, high_open=True)
        self.step_size, self.gamma = step_size, float(gamma)

    def value(self, step):
        return F32(self.base_lr) * jnp.power(F32(self.gamma), jnp.floor(step / self.step_size))


class MultiStepDecay(Schedule):
    """``lr * gamma ** (number of milestones <= step)``."""

    def __init__(self, learning_rate, milestones, gamma=0.1):
        self.base_lr = _lr("MultiStepDecay", learning_rate)
        if not isinstance(milestones, (list, tuple)):
            raise TypeError(f"MultiStepDecay(milestones=...): must be a list or tuple; got {milestones!r}.")
        if not all(a < b for a, b in zip(milestones, milestones[1:])):
            raise ValueError(f"MultiStepDecay(milestones=...): must be increasing; got {milestones!r}.")
        check_number("MultiStepDecay", "gamma", gamma, high=1.0, high_open=True)
        self.milestones, self.gamma = list(milestones), float(gamma)

    def value(self, step):
        i = sum((step >= m).astype(F32) for m in self.milestones) if self.milestones else jnp.zeros_like(step)
        return F32(self.base_lr) * jnp.power(F32(self.gamma), i)


class ExponentialDecay(Schedule):
    """``lr * gamma ** step``."""

    def __init__(self, learning_rate, gamma):
        self.base_lr = _lr("ExponentialDecay", learning_rate)
        check_number("ExponentialDecay", "gamma", gamma, low=0.0, low_open=True, high=1.0, high_open=True)
        self.gamma = float(gamma)

    def value(self, step):
        return F32(self.base_lr) * jnp.power(F32(self.gamma), step)


class NaturalExpDecay(Schedule):
    """``lr * exp(-gamma * step)``."""

    def __init__(self, learning_rate, gamma):
        self.base_lr = _lr("NaturalExpDecay", learning_rate)
        check_number("NaturalExpDecay", "gamma", gamma, low=0.0)
        self.gamma = float(gamma)

    def value(self, step):
        return F32(self.base_lr) * jnp.exp(-F32(self.gamma) * step)


class InverseTimeDecay(Schedule):
    """``lr / (1 + gamma * step)``."""

    def __init__(self, learning_rate, gamma):
        self.base_lr = _lr("InverseTimeDecay", learning_rate)
        check_number("InverseTimeDecay", "gamma", gamma)
        self.gamma = float(gamma)

    def value(self, step):
        return F32(self.base_lr) / (1 + F32(self.gamma) * step)


class PolynomialDecay(Schedule):
    """``(lr - end_lr) * (1 - t / T) ** power + end_lr``; ``t = min(step, decay_steps)``,
    or with ``cycle`` ``T = decay_steps * ceil(step / decay_steps)`` (1 cycle at step 0)."""

    def __init__(self, learning_rate, decay_steps, end_lr=0.0001, power=1.0, cycle=False):
        owner = "PolynomialDecay"
        self.base_lr = _lr(owner, learning_rate)
        check_number(owner, "decay_steps", decay_steps, low=0, low_open=True, integer=True)
        check_number(owner, "power", power, low=0.0, low_open=True)
        check_number(owner, "end_lr", end_lr)
        self.decay_steps, self.end_lr, self.power, self.cycle = decay_steps, float(end_lr), float(power), bool(cycle)

    def value(self, step):
        d = F32(self.decay_steps)
        if self.cycle:
            div = jnp.where(step == 0, 1.0, jnp.ceil(step / d))
            t, total = step, d * div
        else:
            t, total = jnp.minimum(step, d), d
        return F32(self.base_lr - self.end_lr) * jnp.power(1 - t / total, F32(self.power)) + F32(self.end_lr)


class PiecewiseDecay(Schedule):
    """``values[i]`` for the first ``i`` with ``step < boundaries[i]``, else the last value.
    ``base_lr`` is ``values[0]``."""

    def __init__(self, boundaries, values):
        if len(values) != len(boundaries) + 1:
            raise ValueError(f"PiecewiseDecay(values=...): needs len(boundaries) + 1 values; got "
                             f"{len(values)} values for {len(boundaries)} boundaries.")
        self.boundaries, self.values = list(boundaries), [float(v) for v in values]
        self.base_lr = self.values[0]

    def value(self, step):
        out = jnp.full_like(step, self.values[-1])
        for b, v in reversed(list(zip(self.boundaries, self.values))):
            out = jnp.where(step < b, F32(v), out)
        return out


class CosineAnnealingDecay(Schedule):
    """``eta_min + (lr - eta_min) (1 + cos(pi * step / T_max)) / 2`` (Paddle's closed form;
    its recursive ``get_lr`` gives the same values)."""

    def __init__(self, learning_rate, T_max, eta_min=0.0):  # noqa: N803 (Paddle's name)
        self.base_lr = _lr("CosineAnnealingDecay", learning_rate)
        check_number("CosineAnnealingDecay", "T_max", T_max, low=0, low_open=True, integer=True)
        check_number("CosineAnnealingDecay", "eta_min", eta_min)
        self.T_max, self.eta_min = T_max, float(eta_min)

    def value(self, step):
        return F32(self.eta_min) + F32(self.base_lr - self.eta_min) * (
            1 + jnp.cos(F32(math.pi) * step / F32(self.T_max))) / 2


class LinearWarmup(Schedule):
    """Linear from ``start_lr`` to ``end_lr`` over ``warmup_steps``, then
    ``learning_rate`` (a number, or a schedule evaluated at ``step - warmup_steps``).
    ``base_lr`` is ``end_lr``."""

    def __init__(self, learning_rate, warmup_steps, start_lr, end_lr):
        owner = "LinearWarmup"
        if not isinstance(learning_rate, (int, float, Schedule)) or isinstance(learning_rate, bool):
            raise TypeError(f"{owner}(learning_rate=...): must be a number or a schedule; got {learning_rate!r}.")
        check_number(owner, "warmup_steps", warmup_steps, low=0, low_open=True, integer=True)
        if not end_lr > start_lr:
            raise ValueError(f"{owner}(end_lr=...): end_lr must be greater than start_lr; got "
                             f"start_lr={start_lr}, end_lr={end_lr}.")
        self.learning_rate, self.warmup_steps = learning_rate, warmup_steps
        self.start_lr, self.end_lr = float(start_lr), float(end_lr)
        self.base_lr = self.end_lr

    def value(self, step):
        warm = F32(self.end_lr - self.start_lr) * step / F32(self.warmup_steps) + F32(self.start_lr)
        if isinstance(self.learning_rate, Schedule):
            after = self.learning_rate(jnp.maximum(step - self.warmup_steps, 0))
        else:
            after = jnp.full_like(step, float(self.learning_rate))
        return jnp.where(step < self.warmup_steps, warm, after)


class NoamDecay(Schedule):
    """``lr * d_model ** -0.5 * min(step ** -0.5, warmup_steps ** -1.5 * step)`` (``step ** -0.5``
    read as 1 at step 0)."""

    def __init__(self, d_model, warmup_steps, learning_rate=1.0):
        check_number("NoamDecay", "d_model", d_model, low=0, low_open=True)
        check_number("NoamDecay", "warmup_steps", warmup_steps, low=0, low_open=True)
        self.d_model, self.warmup_steps = d_model, warmup_steps
        self.base_lr = _lr("NoamDecay", learning_rate)

    def value(self, step):
        a = jnp.where(step == 0, 1.0, jnp.power(jnp.maximum(step, 1.0), -0.5))
        b = F32(self.warmup_steps ** -1.5) * step
        return F32(self.base_lr * self.d_model ** -0.5) * jnp.minimum(a, b)


class LambdaDecay(Schedule):
    """``lr * lr_lambda(step)``; ``lr_lambda`` must work on a jax array."""

    def __init__(self, learning_rate, lr_lambda: Callable):
        if not callable(lr_lambda):
            raise TypeError(f"LambdaDecay(lr_lambda=...): must be callable; got {lr_lambda!r}.")
        self.base_lr, self.lr_lambda = _lr("LambdaDecay", learning_rate), lr_lambda

    def value(self, step):
        return F32(self.base_lr) * jnp.asarray(self.lr_lambda(step), F32)


class OneCycleLR(Schedule):
    """Paddle OneCycleLR: from ``max_learning_rate / divide_factor`` up to the max over
    ``phase_pct * total_steps - 1`` steps, then down to ``end_learning_rate`` (three_phase:
    back to the initial value first), cos or linear annealing. Past ``total_steps``
    Paddle raises; here the value stays at the end of the last phase. ``base_lr`` is the max."""

    def __init__(self, max_learning_rate, total_steps, divide_factor=25.0, end_learning_rate=0.0001,
                 phase_pct=0.3, anneal_strategy="cos", three_phase=False):
        owner = "OneCycleLR"
        check_number(owner, "max_learning_rate", max_learning_rate, low=0.0)
        check_number(owner, "end_learning_rate", end_learning_rate, low=0.0)
        check_number(owner, "total_steps", total_steps, low=0, low_open=True, integer=True)
        check_number(owner, "phase_pct", phase_pct, low=0.0, high=1.0)
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"{owner}(anneal_strategy=...): must be 'cos' or 'linear'; got {anneal_strategy!r}.")
        if three_phase and phase_pct >= 0.5:
            raise ValueError(f"{owner}(phase_pct=...): must be < 0.5 with three_phase; got {phase_pct}.")
        initial = max_learning_rate / float(divide_factor)
        n = total_steps
        if three_phase:
            steps = [0, phase_pct * n - 1, 2 * phase_pct * n - 2, n - 1, n - 1]
            sizes = [steps[1] - steps[0], steps[2] - steps[1], steps[3] - steps[2], steps[3] - steps[2]]
            lrs = [initial, max_learning_rate, initial, float(end_learning_rate)]
        else:
            steps = [0, phase_pct * n - 1, n - 1, n - 1]
            sizes = [steps[1] - steps[0], steps[2] - steps[1], steps[2] - steps[1]]
            lrs = [initial, max_learning_rate, float(end_learning_rate)]
        self._steps, self._sizes, self._lrs = steps, sizes, lrs
        self.total_steps, self.anneal_strategy = total_steps, anneal_strategy
        self.base_lr = float(max_learning_rate)

    def _anneal(self, start, end, pct):
        if self.anneal_strategy == "cos":
            return F32(end) + F32((start - end) / 2.0) * (jnp.cos(F32(math.pi) * pct) + 1)
        return F32(end - start) * pct + F32(start)

    def value(self, step):
        step = jnp.minimum(step, F32(self.total_steps))
        last = len(self._lrs) - 2

        def phase(i):
            pct = (step - F32(self._steps[i])) / F32(self._sizes[i])
            return self._anneal(self._lrs[i], self._lrs[i + 1], pct)

        out = phase(last)
        for i in reversed(range(last)):
            out = jnp.where(step <= F32(self._steps[i + 1]), phase(i), out)
        return out


class CyclicLR(Schedule):
    """Paddle CyclicLR (triangular, triangular2, exp_range or a custom ``scale_fn``).
    ``base_lr`` is ``base_learning_rate``."""

    def __init__(self, base_learning_rate, max_learning_rate, step_size_up, step_size_down=None,
                 mode="triangular", exp_gamma=1.0, scale_fn=None, scale_mode="cycle"):
        owner = "CyclicLR"
        check_number(owner, "base_learning_rate", base_learning_rate, low=0.0)
        check_number(owner, "max_learning_rate", max_learning_rate, low=0.0)
        check_number(owner, "step_size_up", step_size_up, low=0, low_open=True)
        if step_size_down is not None:
            check_number(owner, "step_size_down", step_size_down, low=0, low_open=True)
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise ValueError(f"{owner}(mode=...): must be 'triangular', 'triangular2' or 'exp_range'; got {mode!r}.")
        if scale_mode not in ("cycle", "iterations"):
            raise ValueError(f"{owner}(scale_mode=...): must be 'cycle' or 'iterations'; got {scale_mode!r}.")
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        self.cycle_size, self.step_up_pct = up + down, up / (up + down)
        self.max_lr, self.amplitude = float(max_learning_rate), float(max_learning_rate) - base_learning_rate
        self.mode, self.gamma = mode, float(exp_gamma)
        if scale_fn is None:
            self.scale_fn = {"triangular": lambda x: jnp.ones_like(x),
                             "triangular2": lambda x: 1 / (2.0 ** (x - 1)),
                             "exp_range": lambda x: F32(self.gamma) ** x}[mode]
            self.scale_mode = "iterations" if mode == "exp_range" else "cycle"
        else:
            self.scale_fn, self.scale_mode = scale_fn, scale_mode
        self.base_lr = float(base_learning_rate)

    def value(self, step):
        cycle = 1 + jnp.floor(step / F32(self.cycle_size))
        pct = 1.0 + step / F32(self.cycle_size) - cycle
        factor = jnp.where(pct <= self.step_up_pct, pct / F32(self.step_up_pct),
                           (1 - pct) / F32(1 - self.step_up_pct))
        x = cycle if self.scale_mode == "cycle" else step
        return F32(self.base_lr) + F32(self.amplitude) * factor * jnp.asarray(self.scale_fn(x), F32)


class LinearLR(Schedule):
    """``lr * (start_factor + (end_factor - start_factor) * min(step, total_steps) / total_steps)``."""

    def __init__(self, learning_rate, total_steps, start_factor=1.0 / 3, end_factor=1.0):
        self.base_lr = _lr("LinearLR", learning_rate)
        check_number("LinearLR", "total_steps", total_steps, low=0, low_open=True, integer=True)
        check_number("LinearLR", "start_factor", start_factor, low=0.0, low_open=True, high=1.0)
        check_number("LinearLR", "end_factor", end_factor, low=0.0, high=1.0)
        self.total_steps, self.start_factor, self.end_factor = total_steps, float(start_factor), float(end_factor)

    def value(self, step):
        t = jnp.minimum(step, F32(self.total_steps))
        return F32(self.base_lr) * (F32(self.start_factor) + F32(self.end_factor - self.start_factor)
                                    * t / F32(self.total_steps))
