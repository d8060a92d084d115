"""Guards: skip non-finite steps, and dynamic loss scaling for float16 training.

Both wrap an inner transformation and judge each step with one check,
`step_is_finite`: a step is *bad* when any floating element of the incoming
gradients, of the inner transformation's updates, or of its new state (moments,
accumulators, float32 master weights: every floating leaf) is NaN or +-Inf.
Checking the new state matters: a finite but huge gradient (1e38 in float32)
gives finite updates yet overflows a squared-gradient accumulator (Adam's
``nu``, AdaGrad's and FTRL's sums, RMSProp's ``n``) to +Inf, where it would
stay for the rest of the run. Without a guard, one such step poisons the
parameters and the state for good.

Both keep the step pure and jittable: a bad step is *selected away* with
``jnp.where`` over the whole inner state (no ``lax.cond``, so the guard vmaps,
and pieces that publish to the step context never leak tracers out of a
branch). They count skipped steps in a
`GuardState`; after ``max_consecutive`` bad steps in a row the guard *trips*
(a sticky flag in the state), and `check_guard` raises `NonFiniteError` on
the host. Nothing raises inside the jitted step: call `check_guard(state)`
after a step (it reads a few int32 scalars, one device->host transfer), or
every N steps: the trip flag is sticky, so a check every N steps misses
nothing. The Trainer calls it at its step boundary.

Why a host check and not ``checkify``/``jax.debug.callback``: a callback that
raises surfaces as an opaque runtime error at some later synchronisation
point, is not allowed under every transformation (vmap of a branch), and
costs a host round trip in the compiled step; the host check keeps the
compiled step free of effects and lets the caller choose when to pay the sync.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from .._base import CONTEXT_KEY, GradientTransformation, StepContext, run_inner, transformation
from .._spec import Fusion, declare
from .._state_paths import find_states
from ._segments import on_every_shard
from .._hyper import hyper_scalar, register_check
from .._tree import variable_value
from .._types import Hyper, InnerState
from .._domains import FLAG, NON_NEGATIVE_FINITE
from .._ranges import NON_NEGATIVE, POSITIVE, Range, check_bool, check_hyper, register_ranges

__all__ = [
    "GuardState", "SkipNonfiniteState", "LossScaleState", "NonFiniteError",
    "skip_nonfinite", "dynamic_loss_scale", "all_finite", "step_is_finite",
    "check_guard", "guard_status", "get_loss_scale", "scale_loss",
]
PUBLIC = ("all_finite", "dynamic_loss_scale", "skip_nonfinite",)  # what gradxform.pieces re-exports


class NonFiniteError(FloatingPointError):
    """Raised by `check_guard` when a guard has seen too many non-finite steps in a row."""


class GuardState(NamedTuple):
    """Counters of a guard: ``skipped`` (total skipped steps), ``consecutive``
    (skipped steps since the last applied one), ``max_consecutive`` (the
    limit; -1 for none), ``tripped`` (sticky: the limit was reached; int32
    0/1, as every flag in gradxform states: it survives arithmetic selection)."""
    skipped: jax.Array
    consecutive: jax.Array
    max_consecutive: jax.Array
    tripped: jax.Array
    domains = {"skipped": NON_NEGATIVE_FINITE, "consecutive": NON_NEGATIVE_FINITE,
               "max_consecutive": Range(low=-1.0), "tripped": FLAG}  # -1: no limit


class SkipNonfiniteState(NamedTuple):
    guard: GuardState
    inner: InnerState


class LossScaleState(NamedTuple):
    """``scale``: the loss scale the next step's loss is multiplied by
    (float32); ``good_steps``: clean steps since the last change of scale;
    ``hyper``: ``growth_factor``, ``backoff_factor``, ``growth_interval``
    (float32, settable with set_hyper); ``next_scale``: with ``delayed``
    (MXNet AMP), the scale the step after next uses, else None (no leaf:
    files of the other kind keep their layout)."""
    guard: GuardState
    hyper: Hyper
    scale: jax.Array
    good_steps: jax.Array
    inner: InnerState
    next_scale: jax.Array | None = None
    domains = {"scale": NON_NEGATIVE_FINITE, "good_steps": NON_NEGATIVE_FINITE,  # growth keeps the scale finite
               "next_scale": NON_NEGATIVE_FINITE}


register_check("growth_factor", low=1.0)
register_check("backoff_factor", low=0.0, low_open=True, high=1.0)
register_check("growth_interval", low=1.0)
register_check("backoff_interval", low=1.0)
# dynamic_loss_scale's own arguments (read by its checks, `gradxform._ranges.check_hyper`)
register_ranges("dynamic_loss_scale", {"init_scale": POSITIVE, "growth_interval": Range(low=1.0),
                                       "backoff": Range(low=0.0, high=1.0, low_open=True),
                                       "growth": Range(low=1.0), "min_scale": NON_NEGATIVE, "max_scale": POSITIVE})


def _floating_leaves(trees):
    leaves = []
    for x in jax.tree.leaves(trees):
        if not hasattr(x, "dtype"):
            x = jnp.asarray(x)
        if jnp.issubdtype(x.dtype, jnp.inexact):
            leaves.append(x)
    return leaves


def all_finite(*trees) -> jax.Array:
    """A scalar bool: every element of every floating (real or complex) leaf of
    ``trees`` is finite; integer, bool and key leaves are ignored (True when
    there is no floating leaf). One reduction over all of them, inside the
    step: each leaf is reduced to one flag (no concatenated copy of the
    leaves) and the flags are and-ed; nothing is synchronised with the host."""
    flags = [jnp.all(jnp.isfinite(x)) for x in _floating_leaves(trees)]
    if not flags:
        return jnp.asarray(True)
    return jnp.all(jnp.stack(flags))


def _space(x):
    return getattr(getattr(x, "aval", None), "memory_space", None)


def _finite_by_position(grads, *trees) -> jax.Array:
    """`all_finite` of ``grads`` and ``trees``, with one reduction per parameter
    position: every leaf of ``trees`` that sits in a subtree shaped like
    ``grads`` (the updates; an optimizer's moments) and has its gradient's shape
    is and-ed element by element with that gradient's flags before the one
    reduction. XLA then makes one loop per parameter that reads what the step
    reads once (MXNet Adam: g, w, m, v), where a reduction per leaf re-reads
    them for each (benchmarks/bench_guard.py). The same answer: an element is
    non-finite somewhere exactly when some position's and-ed flags say so.
    Only leaves at the same position, in the same memory space, are combined,
    so each combination stays within one parameter's sharding (and an
    offloaded moment in host memory is reduced on its own)."""
    anchors, treedef = jax.tree.flatten(grads)
    groups = [_floating_leaves([g]) for g in anchors]  # [g], or [] for an integer gradient
    shapes = [jnp.shape(g) for g in anchors]
    rest = []
    for tree in trees:
        for sub in jax.tree.leaves(tree, is_leaf=lambda x: x is not None and jax.tree.structure(x) == treedef):
            if jax.tree.structure(sub) != treedef:
                rest.append(sub)
                continue
            for i, x in enumerate(treedef.flatten_up_to(sub)):
                if _floating_leaves([x]) and jnp.shape(x) == shapes[i] and _space(x) == _space(anchors[i]):
                    groups[i].append(x)
                else:
                    rest.append(x)
    flags = [jnp.all(functools.reduce(jnp.logical_and, [jnp.isfinite(x) for x in group]))
             for group in groups if group]
    flags += [jnp.all(jnp.isfinite(x)) for x in _floating_leaves(rest)]
    if not flags:
        return jnp.asarray(True)
    return jnp.all(jnp.stack(flags))


def step_is_finite(grads, updates, new_state, *, check_updates: bool = True,
                   check_state: bool = True, extra_args: dict | None = None, also=()) -> jax.Array:
    """The one test both guards apply to a step: a scalar bool, True when the
    gradients, the inner updates (if ``check_updates``) and every floating leaf
    of the inner transformation's new state (if ``check_state``) are finite.

    ``check_state`` catches finite-but-huge gradients: ``g = 1e38`` gives
    finite updates but ``g * g`` = +Inf in an accumulator of squares, which
    would stay Inf (or turn NaN) for the rest of the run. Under a sharded
    step (``extra_args``' context) the answer covers every device's shard.
    ``also``: more trees shaped like ``grads`` (the loss scaler's unscaled
    gradients), checked in the same loops.
    """
    ok = _finite_by_position(grads, *also, updates if check_updates else None,
                             new_state if check_state else None)
    return on_every_shard(ok, extra_args)


def _check_limit(owner, max_consecutive):
    if max_consecutive is None:
        return -1
    if isinstance(max_consecutive, bool) or int(max_consecutive) != max_consecutive or max_consecutive < 1:
        raise ValueError(f"{owner}(max_consecutive=...): max_consecutive must be an integer >= 1 "
                         f"or None; got {max_consecutive!r}.")
    return int(max_consecutive)


def _guard_init(limit) -> GuardState:
    def zero():  # a buffer per field: a donated state must not hold one buffer twice
        return jnp.zeros((), jnp.int32)
    return GuardState(zero(), zero(), jnp.asarray(limit, jnp.int32), zero())  # tripped: int32 0/1 (survives sam's arithmetic)


def _guard_step(g: GuardState, ok) -> GuardState:
    consecutive = jnp.where(ok, 0, g.consecutive + 1).astype(jnp.int32)
    tripped = jnp.where((g.max_consecutive > 0) & (consecutive >= g.max_consecutive), 1, g.tripped).astype(jnp.int32)
    return GuardState((g.skipped + jnp.where(ok, 0, 1)).astype(jnp.int32), consecutive,
                      g.max_consecutive, tripped)


def _run_if(ok_of, inner, grads, inner_state, params, extra_args, prepare=None):
    """``(ok, (updates, new_state))``: the inner step where ``ok_of(updates',
    state')`` holds, else zero updates and ``inner_state`` unchanged.

    The step is traced twice: once whose outputs only feed the finiteness
    reductions (XLA fuses them: nothing the size of the state is stored), and
    once inside ``lax.cond``, which writes the new state over the old
    (donated) buffers. Selecting the first trace's outputs with
    ``where(ok, new, old)`` keeps them all whole until ``ok`` is known: MXNet
    Adam with 6 MiB of parameters held 21 MiB of XLA temporaries that way,
    6 MiB this way, as optax.apply_if_finite (benchmarks/bench_guard.py).
    XLA compiles the branch apart from the unguarded step, so a finite step's
    numbers equal the unguarded step's up to FMA contraction (within 2
    float32 ulp per update, tests/test_guards.py), not bit for bit.

    ``prepare`` (elementwise, e.g. the loss scaler's unscaling) is applied to
    ``grads`` in each trace, not once outside: a value computed outside the
    ``cond`` and read inside it is an operand of the ``cond``, stored whole
    (24 MiB of temporaries for 24 MiB of gradients), where each trace's own
    copy fuses into the loops that read it."""
    prepared = (lambda: grads) if prepare is None else (lambda: prepare(grads))
    new_updates, new_state = run_inner(inner, prepared(), inner_state, params, **extra_args)
    ok = ok_of(new_updates, new_state)
    ctx = StepContext.of(extra_args)
    again = extra_args if ctx is None else {**extra_args, CONTEXT_KEY: ctx.isolated()}
    # the barrier keeps XLA from merging the second trace into the first (whose
    # outputs would then be stored whole for the select)
    def step():
        return run_inner(inner, prepared(), inner_state, params, **again)

    def skip():
        return (jax.tree.map(jnp.zeros_like, new_updates),
                jax.tree.map(lambda o, n: jnp.asarray(o, n.dtype), inner_state, new_state))

    if not isinstance(ok, jax.core.Tracer):  # op by op: the first run's values are the step's
        return ok, ((new_updates, new_state) if bool(ok) else skip())
    return ok, jax.lax.cond(ok, step, skip)


def skip_nonfinite(inner: GradientTransformation, *, max_consecutive: int | None = 100,
                   check_updates: bool = True, check_state: bool = True) -> GradientTransformation:
    """Skips every step whose gradients, updates or new state contain a NaN or an Inf.

    On such a step the emitted updates are all zero (the parameters do not
    move) and the whole inner state is kept as it was, step counters, moment
    estimates and master weights included, exactly as if the step had not
    been taken::

        updates', state' = inner(grads, state)
        ok = all(isfinite(grads)) [& all(isfinite(updates'))] [& all(isfinite(state'))]
        updates, state = (updates', state') if ok else (0, state)
        skipped += !ok;  consecutive = 0 if ok else consecutive + 1

    ``state'`` is every floating leaf of the new inner state (`step_is_finite`):
    a finite but huge gradient (1e38) that overflows an accumulator of squared
    gradients to +Inf is skipped like a NaN gradient, so the state never
    holds an Inf it cannot recover from.

    Args:
      inner: the transformation to guard (a whole optimizer).
      max_consecutive: after this many skipped steps in a row the guard trips
        and `check_guard` raises `NonFiniteError`; None never trips. Static.
      check_updates: also skip when ``inner`` turns finite gradients into
        non-finite updates (an overflow inside the rule). Static.
      check_state: also skip when ``inner``'s new state has a non-finite
        floating element (an overflow in a moment or accumulator). Static.
    """
    limit = _check_limit("skip_nonfinite", max_consecutive)

    def init(params):
        return SkipNonfiniteState(_guard_init(limit), inner.init(params))

    @declare(inner=(inner,), fusion=Fusion(reductions=("whole",)))  # a sharded step's flags, all shards
    def update(updates, state, params=None, **extra_args):
        ok, (new_updates, new_inner) = _run_if(
            lambda u, s: step_is_finite(updates, u, s, check_updates=check_updates, check_state=check_state,
                                        extra_args=extra_args),
            inner, updates, state.inner, params, extra_args)
        return new_updates, SkipNonfiniteState(_guard_step(state.guard, ok), new_inner)

    return transformation(init, update)


# MXNet 1.9.1's amp.init_trainer, its LossScaler: a ceiling of 2**24 and no floor, the gradients
# checked, each new scale used one step late (the Trainer's loss_scale='dynamic')
MXNET_AMP = {"max_scale": 2.0 ** 24, "delayed": True, "check_updates": False, "check_state": False}


def dynamic_loss_scale(inner: GradientTransformation, init_scale: float = 2.0 ** 16, *,
                       growth_interval: int = 2000, backoff: float = 0.5, growth: float = 2.0,
                       min_scale: float | None = None, max_scale: float | None = None,
                       max_consecutive: int | None = 64, check_updates: bool = True,
                       check_state: bool = True, backoff_interval: int = 1,
                       delayed: bool = False) -> GradientTransformation:
    """Dynamic loss scaling (PyTorch ``GradScaler``, MXNet AMP ``DynamicLossScaler``,
    Paddle ``paddle.amp.GradScaler``, MindSpore ``DynamicLossScaleUpdateCell``
    and ``amp.DynamicLossScaler``).

    The user multiplies the loss by the current scale (`get_loss_scale` or
    `scale_loss`); this piece multiplies the incoming gradients by the
    float32 reciprocal of it (in at least float32, cast back to each
    gradient's dtype: what PyTorch, Paddle's ``check_finite_and_unscale`` and
    MindSpore's unscale compute) and hands them to ``inner``. Then::

        overflow (a non-finite gradient, or a non-finite inner update or new
            inner state, the check of `skip_nonfinite`): skip the step (zero
            updates, inner state kept bit for bit), good_steps = 0, and on
            every ``backoff_interval``-th overflow in a row scale *= backoff
            (Paddle's ``decr_every_n_nan_or_inf``; 1: every overflow)
        otherwise: apply the step, good_steps += 1, and when good_steps reaches
            growth_interval: scale *= growth (if still finite), good_steps = 0

    then the scale is clipped to ``[min_scale, max_scale]`` where given (MXNet
    AMP: a ceiling of 2**24 and no floor; Paddle and MindSpore: a floor of 1;
    PyTorch neither).

    ``delayed`` (MXNet AMP's ``LossScaler``): a scale decided at one step
    reaches the loss one step later. MXNet's ``has_overflow`` first takes the
    scale the previous step decided, then decides the next from it, while
    ``scale_loss`` already read the older one; so at an overflow MXNet skips
    twice per halving, and a growth decided before an overflow still
    happens. The state then holds ``next_scale`` beside ``scale``. Skips are counted as in
    `skip_nonfinite`, and ``max_consecutive`` overflows in a row trip the
    guard (the scale has collapsed: 64 halvings take 2**16 to 2**-48).

    ``growth_factor``, ``backoff_factor`` and ``growth_interval`` are
    hyperparameters in the state (`set_hyper`). Float16 parameters are best
    trained with ``multi_precision=True`` on the inner optimizer.
    ``check_updates`` and ``check_state`` (static) are those of
    `skip_nonfinite`: the gradients are always checked, before and after
    unscaling. Paddle and MindSpore check only the gradients (a finite
    gradient that overflows Adam's second moment is applied there):
    ``check_updates=False, check_state=False`` for their numbers.
    ``backoff_interval`` other than 1 is a hyperparameter in the state too.
    """
    check_hyper("dynamic_loss_scale", "init_scale", init_scale)
    check_hyper("dynamic_loss_scale", "growth_interval", growth_interval)
    if int(growth_interval) != growth_interval:
        raise ValueError(f"dynamic_loss_scale(growth_interval=...): growth_interval must be an integer; "
                         f"got {growth_interval!r}.")
    check_hyper("dynamic_loss_scale", "backoff", backoff)
    check_hyper("dynamic_loss_scale", "growth", growth)
    check_hyper("dynamic_loss_scale", "min_scale", min_scale, allow_none=True)
    check_hyper("dynamic_loss_scale", "max_scale", max_scale, allow_none=True)
    if min_scale is not None and max_scale is not None and min_scale > max_scale:
        raise ValueError(f"dynamic_loss_scale(min_scale=..., max_scale=...): min_scale must be <= "
                         f"max_scale; got {min_scale!r} > {max_scale!r}.")
    check_hyper("dynamic_loss_scale", "backoff_interval", backoff_interval)
    if int(backoff_interval) != backoff_interval:
        raise ValueError(f"dynamic_loss_scale(backoff_interval=...): backoff_interval must be an integer; "
                         f"got {backoff_interval!r}.")
    limit = _check_limit("dynamic_loss_scale", max_consecutive)
    # every overflow backs off unless told otherwise: then the interval is state too (states
    # and files of the default keep their layout)
    every = {} if backoff_interval == 1 else {"backoff_interval": backoff_interval}
    check_bool("dynamic_loss_scale", "delayed", delayed)

    def init(params):
        return LossScaleState(
            _guard_init(limit),
            {"growth_factor": hyper_scalar(growth), "backoff_factor": hyper_scalar(backoff),
             "growth_interval": hyper_scalar(growth_interval), **{k: hyper_scalar(v) for k, v in every.items()}},
            hyper_scalar(init_scale), jnp.zeros((), jnp.int32), inner.init(params),
            hyper_scalar(init_scale) if delayed else None)

    def unscale(g, s):
        g = jnp.asarray(g)
        if not jnp.issubdtype(g.dtype, jnp.inexact):
            return g
        wide = jnp.promote_types(g.dtype, jnp.float32)
        return (g.astype(wide) * (jnp.float32(1) / s).astype(wide)).astype(g.dtype)

    @declare(inner=(inner,), fusion=Fusion(reductions=("whole",)))
    def update(updates, state, params=None, **extra_args):
        h = state.hyper
        unscaled = lambda tree: jax.tree.map(lambda g: unscale(g, state.scale), tree)  # noqa: E731
        # the gradients as received and unscaled (a scale below 1 can overflow a finite one)
        ok, (new_updates, new_inner) = _run_if(
            lambda u, s: step_is_finite(updates, u, s, check_updates=check_updates, check_state=check_state,
                                        extra_args=extra_args, also=(unscaled(updates),)),
            inner, updates, state.inner, params, extra_args, prepare=unscaled)
        if delayed != (state.next_scale is not None):
            raise ValueError(f"dynamic_loss_scale(delayed={delayed}): the state was made with delayed={not delayed} "
                             "(its next_scale is " + ("None" if delayed else "held") + "); build the optimizer "
                             "as the run was built, or start from its init(params).")
        # the scale the decision starts from: the one this step used, or (delayed) the one the
        # previous step decided, which the next step uses
        base = state.next_scale if delayed else state.scale
        good = state.good_steps + 1
        grow = ok & (good.astype(jnp.float32) >= h["growth_interval"])
        grown = base * h["growth_factor"]
        grow_scale = jnp.where(jnp.isfinite(grown), grown, base)
        guard = _guard_step(state.guard, ok)
        backs_off = ~ok
        if "backoff_interval" in h:  # the n-th overflow in a row (Paddle: bad_steps reaching n, then reset)
            backs_off &= jnp.remainder(guard.consecutive.astype(jnp.float32), h["backoff_interval"]) == 0
        backed_off = jnp.where(backs_off, base * h["backoff_factor"], base)
        scale = jnp.where(ok, jnp.where(grow, grow_scale, base), backed_off)
        if min_scale is not None:
            scale = jnp.maximum(scale, jnp.float32(min_scale))
        if max_scale is not None:
            scale = jnp.minimum(scale, jnp.float32(max_scale))
        good = jnp.where(ok & ~grow, good, 0).astype(jnp.int32)
        if delayed:
            return new_updates, LossScaleState(guard, h, base, good, new_inner, scale.astype(jnp.float32))
        return new_updates, LossScaleState(guard, h, scale.astype(jnp.float32), good, new_inner)

    return transformation(init, update)


# -- reading guards on the host -------------------------------------------------

def guard_status(state) -> list[dict]:
    """One dict per guard in ``state`` (outermost first): ``skipped``,
    ``consecutive``, ``max_consecutive`` (None for no limit), ``tripped``, and
    ``loss_scale`` for a loss scaler. One device->host transfer for all. A
    replicated (pmap) or batched (vmap) state reports its worst copy: the
    largest counts, any trip, the smallest scale."""
    guards = find_states(state, (SkipNonfiniteState, LossScaleState))
    values = jax.device_get([(g.guard, getattr(g, "scale", None)) for g in guards])
    out = []
    for g, (counters, scale) in zip(guards, values):
        top = lambda x: int(np.max(x))  # noqa: E731
        limit = top(counters.max_consecutive)
        d = {"kind": "dynamic_loss_scale" if isinstance(g, LossScaleState) else "skip_nonfinite",
             "skipped": top(counters.skipped), "consecutive": top(counters.consecutive),
             "max_consecutive": None if limit < 0 else limit, "tripped": bool(np.any(counters.tripped))}
        if scale is not None:
            d["loss_scale"] = float(np.min(scale))
        out.append(d)
    return out


def check_guard(state) -> None:
    """Raises `NonFiniteError` if any guard in ``state`` has tripped (seen
    ``max_consecutive`` non-finite steps in a row). Host-side: call it between
    jitted steps; a state without guards passes. Returns None."""
    for d in guard_status(state):
        if d["tripped"]:
            extra = (f" The loss scale fell to {d['loss_scale']:g}." if "loss_scale" in d else "")
            raise NonFiniteError(
                f"{d['kind']}: {d['max_consecutive']} consecutive steps had NaN or Inf gradients, "
                f"updates or new optimizer state "
                f"({d['skipped']} skipped in all, {d['consecutive']} in a row now); the parameters "
                f"and optimizer state are those of the last finite step.{extra} Check the loss and "
                "the input data, lower the learning rate, or use float32 / multi_precision=True.")


def get_loss_scale(state) -> jax.Array:
    """The current loss scale held in ``state`` (a float32 scalar array;
    works inside jit). Raises ValueError if ``state`` has no loss scaler."""
    found = find_states(state, LossScaleState)
    if not found:
        raise ValueError("get_loss_scale: this state has no dynamic_loss_scale; wrap the optimizer "
                         "with gradxform.pieces.dynamic_loss_scale(optimizer).")
    return variable_value(found[0].scale)  # an nnx.Optimizer holds it in a Variable


def scale_loss(loss, state):
    """``loss * get_loss_scale(state)``, computed in at least float32 (a
    float16 loss times 2**16 would overflow before the backward pass starts);
    use it inside the function you differentiate."""
    loss = jnp.asarray(loss)
    wide = jnp.promote_types(loss.dtype, jnp.float32)
    return loss.astype(wide) * get_loss_scale(state).astype(wide)
