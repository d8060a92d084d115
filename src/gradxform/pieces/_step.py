"""The step counter and learning rate of a chain (MXNet's update counts and ``_get_lr``)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, NamedTuple, Optional, cast

import jax
import jax.numpy as jnp
import numpy as np

from .._base import CONTEXT_KEY, EmptyState, GradientTransformation, StepContext, chain, context_value, transformation
from .._spec import Fusion, check_key, declare, spec_of
from .._hyper import hyper_scalar
from .._rounding import rounded as _rounded
from .._ranges import check_hyper, check_value
from .._selectors import multipliers
from .._state_paths import find_states, is_optax_placeholder, map_states, written_out
from .._group_values import expand_groups, group_by_value, per_leaf_list, stepped_in_groups
from .._tree import distinct_buffers, leaf_vector, once_per_value, param_names
from .._types import Hyper, ParamTree, PerLeaf
from ..schedules.internal import NUM_UPDATE, as_update_schedule
from .._domains import COUNT, FINITE, MAX_COUNT

if TYPE_CHECKING:
    from ..schedules.internal import HeldRate

__all__ = ["StepState", "track_step", "RateAdjuster", "adjusted_rate", "no_adjustment", "scale_by_lr", "scale_by_learning_rate", "Multiplier", "per_leaf_counts",
           "per_leaf_multipliers", "host_done"]
PUBLIC = ("scale_by_learning_rate", "scale_by_lr", "track_step", "adjusted_rate", "RateAdjuster",)  # what gradxform.pieces re-exports

# A per-parameter multiplier: a mapping from a selection (name, glob, Gluon regex:
# `gradxform._selectors.Selector`) to a number, or a function ``names -> np.ndarray``
# that resolves all leaves at once.
Multiplier = Optional[object]


def per_leaf_multipliers(spec, params, what: str):
    """The float32 multipliers of ``params``' leaves (flatten order) as
    `GroupValues`, one value per distinct multiplier, or None when every
    leaf's is 1 (nothing to store, nothing to multiply by in the step)."""
    if spec is not None and is_optax_placeholder(params):
        return params  # optax.tree_map_params: a per-leaf field (its names are unknown here)
    mults = resolve_multiplier(spec, param_names(params), what)
    if np.all(mults == 1.0):
        return None
    return group_by_value(mults)  # one value per distinct multiplier: a slice per group in the step


def resolve_multiplier(spec, names: list[str], what: str) -> np.ndarray:
    if spec is None:
        return np.ones(len(names), np.float32)
    if callable(spec) and not isinstance(spec, dict):
        out = np.asarray(spec(names), np.float32)
        if out.shape != (len(names),):
            raise ValueError(f"{what}: the resolver returned shape {out.shape}, expected ({len(names)},).")
        return out
    return multipliers(names, spec, 1.0, what)


class StepState(NamedTuple):
    """``count``: the largest update count of any leaf (MXNet
    ``num_update``; optax's ``count``, so ``optax.tree_utils.tree_get(state,
    'count')`` reads it), which the schedule reads; ``leaf_counts``: each
    leaf's count (MXNet ``_index_update_count``), an int32 vector with an
    entry per leaf (flatten order), or None while every leaf's count is ``count``
    (leaves that have always stepped together: the state `init` makes);
    ``lr_mult``: per-leaf float32 multipliers as `GroupValues` (one value
    per group of leaves that share one, each leaf's group in the tree
    structure; a plain per-leaf vector is read too), or None when every
    one is 1; ``hyper``: the base ``learning_rate``, the
    schedule's ``current_lr`` and whether one is set (``scheduled``, int32
    0/1: a flag that survives arithmetic selection such as
    ``optax.contrib.sam``'s ``c * a + (1 - c) * b``).

    Shared counts and absent multipliers keep the per-leaf arithmetic out of
    the step: every leaf's bias correction and learning rate is one scalar
    computed once (measured at 400 leaves, MXNet Adam: first call 6.9 s
    against 3.1 s; ``benchmarks/README.md``). The first update with an
    ``update_mask``, and a migrated state whose counts differ, switch to
    per-leaf counts (`per_leaf_counts`). Nothing stored is derived from
    another field.

    ``optax.tree_utils.tree_set(state, count=k)`` (a Python int or an int32
    scalar) makes the next update number ``k + 1``, as MXNet's
    ``optimizer.num_update = k``: with per-leaf counts, each leaf still
    counts from its own (``count = max(count, leaf count)``)."""
    hyper: Hyper
    lr_mult: Optional[PerLeaf]
    leaf_counts: Optional[ParamTree]
    count: jax.Array  # pyright: ignore[reportIncompatibleMethodOverride]  # optax's field name (shadows tuple.count)
    per_leaf_fields = ("lr_mult", "leaf_counts")  # vectors, an entry per leaf (gradxform.fused: one per buffer)
    step_counter = True  # one per gradxform optimizer: gradxform._hyper tells optimizers apart by it
    # fields that may be None, and what each leaf holds then: leaf_counts -> count, lr_mult -> 1
    optional_fields = {"leaf_counts": "count", "lr_mult": 1.0}
    # files written before the rename name these fields so (gradxform.checkpoint reads them)
    renamed_fields = {"leaf_counts": "count", "count": "num_update"}
    domains = {"lr_mult": FINITE, "leaf_counts": COUNT, "count": COUNT}


def per_leaf_counts(state, params):
    """``state`` with every shared step count (`StepState.leaf_counts` None)
    written out per leaf, each equal to that state's ``count``: the form an
    ``update_mask`` needs, made before the step (so the state keeps one
    structure inside ``jax.lax.scan``) or by the update itself. Per-leaf
    values a step rewrites that are held per group (Paddle's beta powers,
    `GroupValues` in a class's ``stepped_fields``) are written out per leaf
    as well: a masked step parts the leaves of a group."""
    state = map_states(lambda _, node: written_out(node, "leaf_counts", params), state, StepState)

    def per_leaf(_, node):
        fields = stepped_in_groups(type(node), node)
        return node._replace(**expand_groups({f: getattr(node, f) for f in fields})) if fields else node

    return map_states(per_leaf, state)


def host_done(state) -> int:
    """Updates done, as an optimizer state records them (``count`` of its
    step counter; 0 when it has none): where a host-side schedule resumes."""
    found = find_states(state, StepState)
    return max((int(jnp.max(jnp.asarray(s.count))) for s in found), default=0)


def _derived(counts):
    """(max_count, first_max) of a list of count scalars, by reduction."""
    if not counts:
        return jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32)
    vec = jnp.stack([jnp.asarray(c, jnp.int32).reshape(()) for c in counts])
    return jnp.max(vec), jnp.argmax(vec).astype(jnp.int32)


def _within(count) -> jax.Array:
    """A stored count as int32 in [0, MAX_COUNT]: a value written outside it
    (``tree_set(state, count=-5)`` inside jit, where it cannot be refused;
    outside jit the update refuses it) is taken as the nearest end."""
    return jnp.clip(jnp.asarray(count, jnp.int32), 0, MAX_COUNT)


def _next(count) -> jax.Array:
    """The count after one more update, stopping at MAX_COUNT (2**31 - 2): a
    run never wraps to a negative count, and every state it saves loads back."""
    return jnp.minimum(count, MAX_COUNT - 1) + 1


def _usable_rate(lr) -> jax.Array:
    """A scheduled rate as float32, 0 where it is NaN, infinite or negative."""
    lr = jnp.asarray(lr, jnp.float32)
    return jnp.where(jnp.isfinite(lr) & (lr >= 0), lr, jnp.zeros((), jnp.float32))


def track_step(learning_rate: float, *, schedule: Callable | None = None, lr_mult: Multiplier = None,
               begin_num_update: int = 0, read_lr: str = "after") -> GradientTransformation:
    """Counts updates per parameter and publishes each parameter's learning rate.

    Updates pass through unchanged. For leaf ``i`` (leaves in flatten order, as
    MXNet's indices)::

        leaf_counts[i] += 1;  count = max(count, leaf_counts[i])
        lr[i] = schedule.lr_for_update(count, learning_rate) * lr_mult[i]
                                                  (or learning_rate * lr_mult[i])

    (MXNet's ``_index_update_count[i]`` and ``num_update``; `StepState`.)

    ``read_lr='after'`` reads the schedule after leaf i bumped the counter (as
    MXNet's SGD, Adam and most rules do); ``'before'`` reads it first (MXNet's
    LBSGD and AdaDelta), so in one step leaf 0 still sees the previous count
    and later leaves see the count leaf 0 bumped, exactly as MXNet's sequential
    per-index loop does. It provides the step context's ``lr``, ``count``
    (per-leaf t) and ``mask`` (`gradxform.StepContext`).

    An extra argument ``update_mask`` (a per-leaf bool tree, as the Trainer
    passes for stale gradients) limits the bump to the leaves being updated.

    Args:
      learning_rate: base learning rate, >= 0; with a schedule, its base value.
      schedule: a `gradxform.schedules.Schedule` of any family, asked
        ``lr_for_update(num_update, learning_rate)`` (it maps the count to its
        own index and says what ``learning_rate`` means); or a pure function
        ``(num_update, base_lr) -> lr``, vectorised over ``num_update``.
      lr_mult: per-parameter multipliers by name or glob pattern.
      begin_num_update: the count every leaf starts from, >= 0.
      read_lr: 'after' or 'before' (static).

    A schedule's value is checked in the program as the host checks a host
    schedule's: a NaN, infinite or negative rate is used as 0 (the parameters
    do not move at that update; never gradient ascent).

    Counts end at ``MAX_COUNT = 2**31 - 2`` (`gradxform._domains`): the update
    after it is numbered ``MAX_COUNT`` again (every later one too), so a count
    never wraps and every state a run saves loads back. A count written outside
    ``[0, MAX_COUNT]`` is refused by an eager update and taken as the nearest
    end inside jit (where nothing can be refused).
    """
    check_hyper("track_step", "learning_rate", learning_rate)
    check_value("track_step", "begin_num_update", begin_num_update, COUNT, as_stored=False)
    if read_lr not in ("after", "before"):
        raise ValueError(f"track_step(read_lr=...): must be 'after' or 'before'; got {read_lr!r}.")
    schedule = as_update_schedule(schedule, NUM_UPDATE)
    held = getattr(schedule, "reads_host", False)  # a user-stepped object (schedules._held): no count enters

    def init(params):
        base = hyper_scalar(learning_rate)
        current = schedule.lr_for_update(jnp.asarray(begin_num_update, jnp.int32), base) if schedule else base
        return StepState(
            hyper={"learning_rate": base, "current_lr": hyper_scalar(current),
                   "scheduled": jnp.asarray(schedule is not None, jnp.int32)},
            lr_mult=per_leaf_multipliers(lr_mult, params, "lr_mult"),
            leaf_counts=None, count=jnp.asarray(begin_num_update, jnp.int32))

    # fused: MXNet reads the schedule before leaf 0 bumps the shared count and after
    # it for every later leaf, so with read_lr='before' leaf 0 gets a group of its own
    @declare(who="track_step", provides=("lr", "count", "mask"),
             fusion=Fusion(isolate_first=read_lr == "before" and schedule is not None))
    def update(updates, state, params=None, **extra_args):
        del params
        treedef = jax.tree.structure(updates)
        mask = extra_args.get("update_mask")
        if mask is not None and state.leaf_counts is None:
            state = per_leaf_counts(state, updates)  # masked leaves keep their counts from now on
        n = treedef.num_leaves
        for field in ("leaf_counts", "lr_mult"):
            vector = getattr(state, field)
            if vector is not None and np.shape(vector) != (n,):
                raise ValueError(f"track_step: the state's {field} has shape {np.shape(vector)} (made for another "
                                 f"tree of parameters); the updates have {n} leaves.")
        # int32 and float32 whatever was stored: optax.tree_utils.tree_set may put a Python number here.
        # A count outside [0, MAX_COUNT] (written into the state inside jit, where it cannot be refused)
        # is taken as the nearest end; the count stops at MAX_COUNT (`_next`): it never wraps.
        old = _within(state.count)
        nxt = _next(old)
        base = hyper_scalar(state.hyper["learning_rate"])
        if held:
            # one host read per update, whatever the count (the count checks for a restarted scheduler)
            at_old = at_new = _usable_rate(cast("HeldRate", schedule).read(old - begin_num_update))
        elif schedule is not None:
            # A count never exceeds num_update, so leaf i reads the schedule at
            # `old` or `old + 1`: at old + 1 once some leaf up to i (after) or
            # before i (before) has bumped its count past `old`, as MXNet's
            # sequential loop over indices does.
            at_old = _usable_rate(schedule.lr_for_update(old, base))
            at_new = _usable_rate(schedule.lr_for_update(nxt, base))
        else:
            # without a schedule every leaf's rate is the base: a base written around the host checks
            # (tree_set inside jit) that is NaN, infinite or negative is used as 0, as a schedule's is
            at_old = at_new = _usable_rate(base)
        if state.leaf_counts is None:
            # Every leaf goes from `old` to `old + 1`: one count, one rate, one
            # flag, the same traced scalar at every leaf (pieces compute on it once).
            num_update = nxt
            new_counts, count_tree = [num_update] * n, None
            bumps = [jnp.asarray(True)] * n
            rates = [at_new] * n
            if schedule is not None and read_lr == "before" and n:
                rates[0] = at_old  # leaf 0 reads the schedule before its own bump
        else:
            counts = [_within(state.leaf_counts[i]) for i in range(n)]
            bumps = [True] * n if mask is None else \
                [jnp.asarray(m).reshape(()) for m in treedef.flatten_up_to(mask)]
            new_counts = [_next(c) if b is True else jnp.minimum(c + jnp.asarray(b, jnp.int32), MAX_COUNT)
                          for c, b in zip(counts, bumps)]
            rates = [at_new] * n
            if mask is None:
                # Every leaf bumps: the leaves holding the largest count pass `old`
                # (if that count is `old`), from the first of them on. Reduced over
                # the new counts (the same maximum, plus one): a second reader of the
                # old counts would make XLA copy each one before its buffer is reused.
                new_max, first_max = _derived(new_counts)
                num_update = jnp.maximum(old, new_max)
                at_max = new_max - 1 == old
                if schedule is not None:
                    rates = [jnp.where(jnp.logical_and(at_max, i >= first_max if read_lr == "after"
                                                       else i > first_max), at_new, at_old) for i in range(n)]
            else:
                bumped = [jnp.where(b, c, old) for c, b in zip(new_counts, bumps)]
                num_update = jnp.maximum(old, _derived(bumped)[0])
                if schedule is not None:
                    reached, rates = jnp.asarray(False), []
                    for c, b in zip(new_counts, bumps):
                        passed = jnp.logical_and(b, c > old)
                        if read_lr == "after":
                            reached = jnp.logical_or(reached, passed)
                        rates.append(jnp.where(reached, at_new, at_old))
                        if read_lr == "before":
                            reached = jnp.logical_or(reached, passed)
            count_tree = leaf_vector(new_counts, jnp.int32)
            bumps = [jnp.asarray(b) for b in bumps]
        if state.lr_mult is None:
            lrs = rates
        else:  # one product per (rate, group): leaves of a group share it, as they share a kernel
            times = once_per_value(lambda r, m: r * m)
            lrs = [times(r, m) for r, m in zip(rates, per_leaf_list(state.lr_mult, n))]
        current = base if schedule is None else at_new if held else \
            jnp.asarray(schedule.lr_for_update(num_update, base), jnp.float32)
        ctx = StepContext.of(extra_args)
        if ctx is not None:
            ctx.publish(lr=treedef.unflatten(lrs), count=treedef.unflatten(new_counts),
                        mask=treedef.unflatten(bumps))
        # The step reads the stored current_lr, whose value it replaces: a state
        # input that no computation reads is dropped by jax.jit, and donation
        # then pairs each later scalar of the state with its neighbour's buffer,
        # so XLA copies every one (measured on MXNet Adam: 5 copies per
        # parameter instead of 1, compile 27% slower at 200 parameters).
        current = jnp.where(jnp.isnan(state.hyper["current_lr"]), current, current)
        hyper = dict(state.hyper, learning_rate=base, current_lr=current)
        return updates, StepState(hyper, state.lr_mult, count_tree, num_update)

    return transformation(init, update)


class RateAdjuster(NamedTuple):
    """One family's adjustment of the learning rate `track_step` computes
    (MindSpore's group rates, Paddle's ReduceOnPlateau and group ratios): not
    a piece of its own, so it cannot publish a rate; `adjusted_rate` runs it.

    ``init(params) -> state``; ``adjust(lr, count, updates, state,
    extra_args) -> (lr, state)``, with ``lr`` and ``count`` trees shaped
    like ``updates`` (the rate so far, each leaf's update count).
    ``fusion``: how it runs under `gradxform.fused` (as a piece's)."""
    who: str
    init: Callable
    adjust: Callable
    fusion: Fusion = Fusion()


def no_adjustment() -> RateAdjuster:
    """An adjuster that keeps the rate and holds nothing (fills a disabled
    slot, so that the state's structure does not depend on options)."""
    return RateAdjuster("no_adjustment", lambda params: EmptyState(), lambda lr, count, u, s, extra: (lr, s))


def _merged_fusion(fusions) -> Fusion | None:
    if any(f is None for f in fusions):
        return None
    return Fusion(bit_exact=all(f.bit_exact for f in fusions), isolate_first=any(f.isolate_first for f in fusions),
                  refuse=next((f.refuse for f in fusions if f.refuse is not None), None),
                  reductions=tuple(dict.fromkeys(r for f in fusions for r in f.reductions)))


def adjusted_rate(track: GradientTransformation, *adjusters: RateAdjuster) -> GradientTransformation:
    """`track_step`'s count and rate, the rate adjusted by ``adjusters`` in
    order, published once: the one writer of the step context's ``lr``
    (and ``count``, ``mask``) in a chain whose family adjusts the rate.

    The state is ``(track's state, *each adjuster's state)``, as
    ``chain(track, *pieces)`` would hold it. ``track``: a `track_step`."""
    bad = [a for a in adjusters if not isinstance(a, RateAdjuster)]
    if bad:
        raise TypeError(f"adjusted_rate: adjusters must be RateAdjuster; got {bad[0]!r}.")
    spec = spec_of(track)
    if spec is None or not {"lr", "count", "mask"} <= spec.provides:
        raise TypeError("adjusted_rate: track must provide lr, count and mask (a track_step).")

    def init(params):
        return distinct_buffers((track.init(params), *(a.init(params) for a in adjusters)))

    @declare(who=spec.who, provides=spec.provides,
             fusion=_merged_fusion([spec.fusion, *(a.fusion for a in adjusters)]))
    def update(updates, state, params=None, **extra_args):
        if not isinstance(state, tuple) or len(state) != 1 + len(adjusters):
            raise ValueError(f"adjusted_rate.update: expected a state of {1 + len(adjusters)} parts (from its "
                             f"init); got {type(state).__name__}.")
        ctx = StepContext.of(extra_args)
        own = StepContext() if ctx is None else ctx.probe()  # track's values, read here only
        with own.running(track):
            _, track_state = track.update(updates, state[0], params, **{**extra_args, CONTEXT_KEY: own})
        lr, new_state = own.lr, [track_state]
        for adjuster, s in zip(adjusters, state[1:]):
            lr, s = adjuster.adjust(lr, own.count, updates, s, extra_args)
            new_state.append(s)
        if ctx is not None:
            ctx.publish(lr=lr, count=own.count, mask=own.mask)
        return updates, tuple(new_state)

    return transformation(init, update)


def scale_by_lr(sign: float = -1.0, factor_key=None, *, rounded: bool = False) -> GradientTransformation:
    """``u -> sign * lr[i] * u`` with each parameter's learning rate from the
    step context (so it must follow `track_step` in a gradxform chain).
    ``factor_key`` names a further per-leaf factor in the context (LBSGD's
    warmup multiplier, a `gradxform.LocalKey`). ``rounded``: the product is
    rounded before ``apply_updates`` adds it (`gradxform._rounding`): a kernel
    that computes ``w -= lr * v`` without a fused multiply-add."""

    def init(params):
        del params
        return ()

    if factor_key is not None:
        check_key(factor_key, "scale_by_lr(factor_key=...)")

    @declare(who="scale_by_lr", needs=("lr",) if factor_key is None else ("lr", factor_key), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        del params
        lr = context_value(extra_args, "lr", "scale_by_lr")
        factor = context_value(extra_args, factor_key, "scale_by_lr") if factor_key else None

        scale = once_per_value(lambda l, f=None: l * sign if f is None else l * f * sign)

        def one(u, l, f=None):
            out = u * scale(l, f).astype(u.dtype)
            return _rounded(out) if rounded else out

        if factor is None:
            return jax.tree.map(one, updates, lr), state
        return jax.tree.map(one, updates, lr, factor), state

    return transformation(init, update)


def scale_by_learning_rate(learning_rate: float, *, schedule: Callable | None = None,
                           lr_mult: Multiplier = None, begin_num_update: int = 0) -> GradientTransformation:
    """Standalone ``u -> -lr * u`` (a `track_step` and `scale_by_lr` pair), for
    use anywhere, optax chains included."""
    return chain(track_step(learning_rate, schedule=schedule, lr_mult=lr_mult,
                            begin_num_update=begin_num_update), scale_by_lr())
