"""Paddle's ``paddle.optimizer.lr`` schedulers (3.x) as pure vectorised
functions of ``last_epoch`` (``step``: how many times ``scheduler.step()``
ran, i.e. updates completed); ReduceOnPlateau, a stateful piece, lives in
`gradxform.paddle._plateau`.

The classes carry a ``Paddle`` prefix (`PaddleStepDecay`, ...) because they
are the in-graph versions of Paddle's formulas, stepped once per update,
while Paddle's own stateful objects, which a ported script steps itself,
keep Paddle's names in `gradxform.paddle.lr` (``gradxform.paddle.lr.StepDecay``).

Paddle computes in Python float64 and hands the optimizer a float32; here
the closed forms are evaluated in float32 (agreement ~1e-6 relative).
Recursive Paddle formulas (CosineAnnealingDecay) are replaced by their
closed form, which Paddle itself uses for ``step(epoch)``. ``PaddleLambdaDecay``'s
and ``PaddleCyclicLR``'s user functions must accept a jax array.

Each formula is written once, as a function of the step over an array
namespace (`Ops`): `JAX32` here (float32, vectorised, inside jit) and
`HOST64` for Paddle's own scheduler objects (`gradxform.paddle.lr`, Python
float64 on the host, as Paddle's ``get_lr``). ``o.c`` casts a constant
computed in Python float64 to the namespace's dtype, so both evaluate the
expression in Paddle's order.
"""
from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import jax.numpy as jnp
import numpy as np

from ._common import Schedule, check_number

__all__ = ["PaddleStepDecay", "PaddleMultiStepDecay", "PaddleExponentialDecay", "PaddleNaturalExpDecay",
           "PaddleInverseTimeDecay", "PaddlePolynomialDecay", "PaddlePiecewiseDecay", "PaddleCosineAnnealingDecay",
           "PaddleLinearWarmup", "PaddleNoamDecay", "PaddleLambdaDecay", "PaddleOneCycleLR", "PaddleCyclicLR",
           "PaddleLinearLR", "Ops", "JAX32", "HOST64", "step_decay", "multi_step_decay", "exponential_decay",
           "natural_exp_decay", "inverse_time_decay", "polynomial_decay", "piecewise_decay", "cosine_annealing",
           "linear_warmup", "noam_decay", "one_cycle_phases", "one_cycle", "cyclic_scale_fn", "cyclic", "linear_lr"]

F32 = jnp.float32


class Ops(NamedTuple):
    """An array namespace (``xp``) and the cast of a Python constant (``c``)."""
    xp: Any
    c: Callable


JAX32 = Ops(jnp, jnp.float32)    # the schedules below: float32, inside jit
HOST64 = Ops(np, np.float64)     # Paddle's objects: Python float64 on the host


# -- the formulas (Paddle 3.3.1 ``paddle/optimizer/lr.py``, ``get_lr`` of each class) ------------------
def step_decay(t, base, step_size, gamma, o: Ops):
    """``base * gamma ** (t // step_size)``."""
    return o.c(base) * o.xp.power(o.c(gamma), o.xp.floor(t / step_size))


def multi_step_decay(t, base, milestones, gamma, o: Ops):
    """``base * gamma ** (number of milestones <= t)``."""
    i = sum(o.xp.where(t >= m, o.c(1.0), o.c(0.0)) for m in milestones) if milestones else t * 0
    return o.c(base) * o.xp.power(o.c(gamma), i)


def exponential_decay(t, base, gamma, o: Ops):
    return o.c(base) * o.xp.power(o.c(gamma), t)


def natural_exp_decay(t, base, gamma, o: Ops):
    return o.c(base) * o.xp.exp(-o.c(gamma) * t)


def inverse_time_decay(t, base, gamma, o: Ops):
    return o.c(base) / (1 + o.c(gamma) * t)


def polynomial_decay(t, base, decay_steps, end_lr, power, cycle, o: Ops):
    """``(base - end_lr) * (1 - t' / T) ** power + end_lr``; ``t' = min(t, decay_steps)``, or with
    ``cycle`` ``T = decay_steps * ceil(t / decay_steps)`` (1 cycle at t = 0)."""
    d = o.c(decay_steps)
    if cycle:
        div = o.xp.where(t == 0, o.c(1.0), o.xp.ceil(t / d))
        tt, total = t, d * div
    else:
        tt, total = o.xp.minimum(t, d), d
    # 0 where the decay ends (exactly 1 - 1 on the host): XLA may take tt / total as tt * (1 / total),
    # 1 - 6e-8 there, whose fractional power (1e-4 for power 0.5) would never reach end_lr
    rest = o.xp.where(tt >= total, o.c(0.0), 1 - tt / total)
    return o.c(base - end_lr) * o.xp.power(rest, o.c(power)) + o.c(end_lr)


def piecewise_decay(t, boundaries, values, o: Ops):
    """``values[i]`` for the first ``i`` with ``t < boundaries[i]``, else the last value."""
    out = t * 0 + o.c(values[-1])
    for b, v in reversed(list(zip(boundaries, values))):
        out = o.xp.where(t < b, o.c(v), out)
    return out


def cosine_annealing(t, base, t_max, eta_min, o: Ops):
    """``eta_min + (base - eta_min) (1 + cos(pi t / t_max)) / 2`` (CosineAnnealingDecay's closed form,
    CosineAnnealingWarmRestarts' ``get_lr`` with ``t = T_cur``, ``t_max = T_i``)."""
    return o.c(eta_min) + o.c(base - eta_min) * (1 + o.xp.cos(o.c(math.pi) * t / o.c(t_max))) / 2


def linear_warmup(t, start_lr, end_lr, warmup_steps, o: Ops):
    """``(end_lr - start_lr) * t / warmup_steps + start_lr``."""
    return o.c(end_lr - start_lr) * t / o.c(warmup_steps) + o.c(start_lr)


def noam_decay(t, base, d_model, warmup_steps, o: Ops):
    """``base * d_model ** -0.5 * min(t ** -0.5, warmup_steps ** -1.5 * t)`` (``t ** -0.5`` read as 1 at 0)."""
    a = o.xp.where(t == 0, o.c(1.0), o.xp.power(o.xp.maximum(t, o.c(1.0)), o.c(-0.5)))
    b = o.c(warmup_steps ** -1.5) * t
    return o.c(base * d_model ** -0.5) * o.xp.minimum(a, b)


def one_cycle_phases(max_lr, total_steps, divide_factor, end_lr, phase_pct, three_phase):
    """OneCycleLR's phases: (start step of each phase, its length, its start/end rates)."""
    initial, n = max_lr / float(divide_factor), total_steps
    if three_phase:
        steps = [0, phase_pct * n - 1, 2 * phase_pct * n - 2, n - 1, n - 1]
        sizes = [steps[1] - steps[0], steps[2] - steps[1], steps[3] - steps[2], steps[3] - steps[2]]
        return steps, sizes, [initial, max_lr, initial, float(end_lr)]
    steps = [0, phase_pct * n - 1, n - 1, n - 1]
    sizes = [steps[1] - steps[0], steps[2] - steps[1], steps[2] - steps[1]]
    return steps, sizes, [initial, max_lr, float(end_lr)]


def one_cycle(t, steps, sizes, lrs, anneal_strategy, o: Ops):
    """The phase ``i`` of the first end step ``>= t`` (the last phase past them), annealed from
    ``lrs[i]`` to ``lrs[i + 1]`` at ``(t - steps[i]) / sizes[i]``, by cosine or linearly."""
    def anneal(start, end, pct):
        if anneal_strategy == "cos":
            return o.c(end) + o.c((start - end) / 2.0) * (o.xp.cos(o.c(math.pi) * pct) + 1)
        return o.c(end - start) * pct + o.c(start)

    def phase(i):
        return anneal(lrs[i], lrs[i + 1], (t - o.c(steps[i])) / o.c(sizes[i]))

    last = len(lrs) - 2
    out = phase(last)
    for i in reversed(range(last)):
        out = o.xp.where(t <= o.c(steps[i + 1]), phase(i), out)
    return out


def cyclic_scale_fn(mode, gamma, o: Ops) -> Callable:
    """CyclicLR's built-in scale functions (``_triangular_scale_fn`` and the others)."""
    return {"triangular": lambda x: o.xp.ones_like(x),
            "triangular2": lambda x: 1 / (2.0 ** (x - 1)),
            "exp_range": lambda x: o.c(gamma) ** x}[mode]


def cyclic(t, base, amplitude, cycle_size, step_up_pct, scale_fn, scale_mode, o: Ops):
    """CyclicLR: ``base + amplitude * factor * scale_fn(cycle or t)``, ``factor`` the triangle."""
    cycle = 1 + o.xp.floor(t / o.c(cycle_size))
    pct = 1.0 + t / o.c(cycle_size) - cycle
    factor = o.xp.where(pct <= o.c(step_up_pct), pct / o.c(step_up_pct), (1 - pct) / o.c(1 - step_up_pct))
    return o.c(base) + o.c(amplitude) * factor * scale_fn(cycle if scale_mode == "cycle" else t)


def linear_lr(t, base, total_steps, start_factor, end_factor, o: Ops):
    """LinearLR's closed form ``base * (start + (end - start) * min(t, total) / total)`` (Paddle's
    ``get_lr`` is its recursion)."""
    tt = o.xp.minimum(t, o.c(total_steps))
    return o.c(base) * (o.c(start_factor) + o.c(end_factor - start_factor) * tt / o.c(total_steps))


def _lr(owner, learning_rate):
    check_number(owner, "learning_rate", learning_rate)
    return float(learning_rate)


class PaddleStepDecay(Schedule):
    """``lr * gamma ** (step // step_size)``."""

    def __init__(self, learning_rate, step_size, gamma=0.1):
        self.base_lr = _lr("PaddleStepDecay", learning_rate)
        check_number("PaddleStepDecay", "step_size", step_size, low=0, low_open=True, integer=True)
        check_number("PaddleStepDecay", "gamma", gamma, high=1.0, high_open=True)
        self.step_size, self.gamma = step_size, float(gamma)

    def value(self, step):
        return step_decay(step, self.base_lr, self.step_size, self.gamma, JAX32)


class PaddleMultiStepDecay(Schedule):
    """``lr * gamma ** (number of milestones <= step)``."""

    def __init__(self, learning_rate, milestones, gamma=0.1):
        self.base_lr = _lr("PaddleMultiStepDecay", learning_rate)
        if not isinstance(milestones, (list, tuple)):
            raise TypeError(f"PaddleMultiStepDecay(milestones=...): must be a list or tuple; got {milestones!r}.")
        if not all(a < b for a, b in zip(milestones, milestones[1:])):
            raise ValueError(f"PaddleMultiStepDecay(milestones=...): must be increasing; got {milestones!r}.")
        check_number("PaddleMultiStepDecay", "gamma", gamma, high=1.0, high_open=True)
        self.milestones, self.gamma = list(milestones), float(gamma)

    def value(self, step):
        return multi_step_decay(step, self.base_lr, self.milestones, self.gamma, JAX32)


class PaddleExponentialDecay(Schedule):
    """``lr * gamma ** step``."""

    def __init__(self, learning_rate, gamma):
        self.base_lr = _lr("PaddleExponentialDecay", learning_rate)
        check_number("PaddleExponentialDecay", "gamma", gamma, low=0.0, low_open=True, high=1.0, high_open=True)
        self.gamma = float(gamma)

    def value(self, step):
        return exponential_decay(step, self.base_lr, self.gamma, JAX32)


class PaddleNaturalExpDecay(Schedule):
    """``lr * exp(-gamma * step)``."""

    def __init__(self, learning_rate, gamma):
        self.base_lr = _lr("PaddleNaturalExpDecay", learning_rate)
        check_number("PaddleNaturalExpDecay", "gamma", gamma, low=0.0)
        self.gamma = float(gamma)

    def value(self, step):
        return natural_exp_decay(step, self.base_lr, self.gamma, JAX32)


class PaddleInverseTimeDecay(Schedule):
    """``lr / (1 + gamma * step)``."""

    def __init__(self, learning_rate, gamma):
        self.base_lr = _lr("PaddleInverseTimeDecay", learning_rate)
        check_number("PaddleInverseTimeDecay", "gamma", gamma)
        self.gamma = float(gamma)

    def value(self, step):
        return inverse_time_decay(step, self.base_lr, self.gamma, JAX32)


class PaddlePolynomialDecay(Schedule):
    """``(lr - end_lr) * (1 - t / T) ** power + end_lr``; ``t = min(step, decay_steps)``,
    or with ``cycle`` ``T = decay_steps * ceil(step / decay_steps)`` (1 cycle at step 0)."""

    def __init__(self, learning_rate, decay_steps, end_lr=0.0001, power=1.0, cycle=False):
        owner = "PaddlePolynomialDecay"
        self.base_lr = _lr(owner, learning_rate)
        check_number(owner, "decay_steps", decay_steps, low=0, low_open=True, integer=True)
        check_number(owner, "power", power, low=0.0, low_open=True)
        check_number(owner, "end_lr", end_lr)
        self.decay_steps, self.end_lr, self.power, self.cycle = decay_steps, float(end_lr), float(power), bool(cycle)

    def value(self, step):
        return polynomial_decay(step, self.base_lr, self.decay_steps, self.end_lr, self.power, self.cycle, JAX32)


class PaddlePiecewiseDecay(Schedule):
    """``values[i]`` for the first ``i`` with ``step < boundaries[i]``, else the last value.
    ``base_lr`` is ``values[0]``."""

    def __init__(self, boundaries, values):
        if len(values) != len(boundaries) + 1:
            raise ValueError(f"PaddlePiecewiseDecay(values=...): needs len(boundaries) + 1 values; got "
                             f"{len(values)} values for {len(boundaries)} boundaries.")
        self.boundaries, self.values = list(boundaries), [float(v) for v in values]
        self.base_lr = self.values[0]

    def value(self, step):
        return piecewise_decay(step, self.boundaries, self.values, JAX32)


class PaddleCosineAnnealingDecay(Schedule):
    """``eta_min + (lr - eta_min) (1 + cos(pi * step / T_max)) / 2`` (Paddle's closed form;
    its recursive ``get_lr`` gives the same values)."""

    def __init__(self, learning_rate, T_max, eta_min=0.0):  # noqa: N803 (Paddle's name)
        self.base_lr = _lr("PaddleCosineAnnealingDecay", learning_rate)
        check_number("PaddleCosineAnnealingDecay", "T_max", T_max, low=0, low_open=True, integer=True)
        check_number("PaddleCosineAnnealingDecay", "eta_min", eta_min)
        self.T_max, self.eta_min = T_max, float(eta_min)

    def value(self, step):
        return cosine_annealing(step, self.base_lr, self.T_max, self.eta_min, JAX32)


class PaddleLinearWarmup(Schedule):
    """Linear from ``start_lr`` to ``end_lr`` over ``warmup_steps``, then
    ``learning_rate`` (a number, or a schedule evaluated at ``step - warmup_steps``).
    ``base_lr`` is ``end_lr``."""

    def __init__(self, learning_rate, warmup_steps, start_lr, end_lr):
        owner = "PaddleLinearWarmup"
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
        warm = linear_warmup(step, self.start_lr, self.end_lr, self.warmup_steps, JAX32)
        if isinstance(self.learning_rate, Schedule):
            after = self.learning_rate(jnp.maximum(step - self.warmup_steps, 0))
        else:
            after = jnp.full_like(step, float(self.learning_rate))
        return jnp.where(step < self.warmup_steps, warm, after)


class PaddleNoamDecay(Schedule):
    """``lr * d_model ** -0.5 * min(step ** -0.5, warmup_steps ** -1.5 * step)`` (``step ** -0.5``
    read as 1 at step 0)."""

    def __init__(self, d_model, warmup_steps, learning_rate=1.0):
        check_number("PaddleNoamDecay", "d_model", d_model, low=0, low_open=True)
        check_number("PaddleNoamDecay", "warmup_steps", warmup_steps, low=0, low_open=True)
        self.d_model, self.warmup_steps = d_model, warmup_steps
        self.base_lr = _lr("PaddleNoamDecay", learning_rate)

    def value(self, step):
        return noam_decay(step, self.base_lr, self.d_model, self.warmup_steps, JAX32)


class PaddleLambdaDecay(Schedule):
    """``lr * lr_lambda(step)``; ``lr_lambda`` must work on a jax array."""

    def __init__(self, learning_rate, lr_lambda: Callable):
        if not callable(lr_lambda):
            raise TypeError(f"PaddleLambdaDecay(lr_lambda=...): must be callable; got {lr_lambda!r}.")
        self.base_lr, self.lr_lambda = _lr("PaddleLambdaDecay", learning_rate), lr_lambda

    def value(self, step):
        return F32(self.base_lr) * jnp.asarray(self.lr_lambda(step), F32)


class PaddleOneCycleLR(Schedule):
    """Paddle's OneCycleLR: from ``max_learning_rate / divide_factor`` up to the max over
    ``phase_pct * total_steps - 1`` steps, then down to ``end_learning_rate`` (three_phase:
    back to the initial value first), cos or linear annealing. Past ``total_steps``
    Paddle raises; here the value stays at the end of the last phase. ``base_lr`` is the max."""

    def __init__(self, max_learning_rate, total_steps, divide_factor=25.0, end_learning_rate=0.0001,
                 phase_pct=0.3, anneal_strategy="cos", three_phase=False):
        owner = "PaddleOneCycleLR"
        check_number(owner, "max_learning_rate", max_learning_rate, low=0.0)
        check_number(owner, "end_learning_rate", end_learning_rate, low=0.0)
        check_number(owner, "total_steps", total_steps, low=0, low_open=True, integer=True)
        check_number(owner, "phase_pct", phase_pct, low=0.0, high=1.0)
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"{owner}(anneal_strategy=...): must be 'cos' or 'linear'; got {anneal_strategy!r}.")
        if three_phase and phase_pct >= 0.5:
            raise ValueError(f"{owner}(phase_pct=...): must be < 0.5 with three_phase; got {phase_pct}.")
        self._steps, self._sizes, self._lrs = one_cycle_phases(max_learning_rate, total_steps, divide_factor,
                                                               end_learning_rate, phase_pct, three_phase)
        self.total_steps, self.anneal_strategy = total_steps, anneal_strategy
        self.base_lr = float(max_learning_rate)

    def value(self, step):
        step = jnp.minimum(step, F32(self.total_steps))
        return one_cycle(step, self._steps, self._sizes, self._lrs, self.anneal_strategy, JAX32)


class PaddleCyclicLR(Schedule):
    """Paddle's CyclicLR (triangular, triangular2, exp_range or a custom ``scale_fn``).
    ``base_lr`` is ``base_learning_rate``."""

    def __init__(self, base_learning_rate, max_learning_rate, step_size_up, step_size_down=None,
                 mode="triangular", exp_gamma=1.0, scale_fn=None, scale_mode="cycle"):
        owner = "PaddleCyclicLR"
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
            self.scale_fn = cyclic_scale_fn(mode, self.gamma, JAX32)
            self.scale_mode = "iterations" if mode == "exp_range" else "cycle"
        else:
            self.scale_fn, self.scale_mode = scale_fn, scale_mode
        self.base_lr = float(base_learning_rate)

    def value(self, step):
        return cyclic(step, self.base_lr, self.amplitude, self.cycle_size, self.step_up_pct,
                      lambda x: jnp.asarray(self.scale_fn(x), F32), self.scale_mode, JAX32)


class PaddleLinearLR(Schedule):
    """``lr * (start_factor + (end_factor - start_factor) * min(step, total_steps) / total_steps)``."""

    def __init__(self, learning_rate, total_steps, start_factor=1.0 / 3, end_factor=1.0):
        self.base_lr = _lr("PaddleLinearLR", learning_rate)
        check_number("PaddleLinearLR", "total_steps", total_steps, low=0, low_open=True, integer=True)
        check_number("PaddleLinearLR", "start_factor", start_factor, low=0.0, low_open=True, high=1.0)
        check_number("PaddleLinearLR", "end_factor", end_factor, low=0.0, high=1.0)
        self.total_steps, self.start_factor, self.end_factor = total_steps, float(start_factor), float(end_factor)

    def value(self, step):
        return linear_lr(step, self.base_lr, self.total_steps, self.start_factor, self.end_factor, JAX32)
