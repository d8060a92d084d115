"""The optax-compatible protocol, `chain` with a typed step context, and `apply_updates`.

A gradxform transformation *is* an optax `GradientTransformationExtraArgs`: a
NamedTuple of two pure functions, ``init(params) -> state`` and
``update(updates, state, params=None, **extra_args) -> (updates, state)``.
gradxform pieces therefore go into `optax.chain` and optax pieces go into
`gradxform.chain` unchanged.

What `gradxform.chain` adds is a *step context*, a `StepContext` created once
per `update` call and handed to every piece as the extra argument
``gx_context``: a typed record whose fields are fixed, each with one writer
in a chain:

=========  ==================================================  ===========================
field      value (trees shaped like the parameters)            provided by
=========  ==================================================  ===========================
lr         each leaf's learning rate for this update (f32)     `track_step`, or the rate piece
                                                               `adjusted_rate` that runs it
                                                               with MindSpore group rates,
                                                               Paddle's plateau and group
                                                               ratios
count      each leaf's update count, this update included      `track_step`
mask       whether each leaf is updated this step (bool)       `track_step`
wd         each leaf's weight decay (f32)                      `add_decayed_weights`,
                                                               `provide_weight_decay`,
                                                               MindSpore's group decay
segments   the leaves of each flat buffer (None per leaf)      `gradxform.fused`
=========  ==================================================  ===========================

This is how one chain keeps exactly one step counter while several of its
pieces need the count (MXNet's Adam for bias correction, its LBSGD for
warmup), and how a rule that uses the learning rate inside its formula (FTRL,
FTML) gets the same learning rate as the rest of the chain.

Pieces declare what they read and write in their one `gradxform._spec.Spec`
(`uses_context` is its short form for the context; `gradxform.fused.fusable`
fills in the same spec)::

    @uses_context("scale_by_lr", needs=("lr",))
    def update(updates, state, params=None, **extra_args):
        lr = context_value(extra_args, "lr", "scale_by_lr")

and `chain` checks the order when it is built: a piece whose need no earlier
piece of the chain provides is a ValueError naming the piece and the
provider, and so is a second piece providing a field (or `LocalKey`) an
earlier one provides: one writer per field, so what a piece reads is never
decided by which of two writers ran last. At trace time `StepContext.publish`
refuses a write by a piece that does not declare it, and a key that is
neither a field nor a `LocalKey`. A chain meant to run *inside* another gradxform.chain that
provides the value says so, ``chain(..., needs=("lr",))``, and the
enclosing chain checks it in turn. Wrappers (`gated`, `lazy_rows`, master
weights, the guards, `fused`) declare the transformations they run
(``inner``), and the check reads those declarations, as `fused` does; an
undeclared transformation (an optax one) needs and provides nothing.

Values private to one optimizer (MXNet LBSGD's warmup multiplier and
"apply now" flags) use a `LocalKey`: they live in a layer of the context that
belongs to the chain they were written in (and the chains nested in it), and
are gone when that chain's update returns; they never reach the shared record
or a caller's context.

What crosses `optax.chain`, and what does not: a whole gradxform optimizer
(one `gradxform.chain`, as every optimizer here is) is one transformation and
works anywhere in `optax.chain`; its context is created and used up inside
it. The context does *not* cross from one element of an `optax.chain` to the
next: `optax.chain(track_step(...), scale_by_lr())` has no shared context
(``scale_by_lr`` fails at its first update, as a standalone piece cannot be
checked when built) unless the caller hands the same
``gx_context=StepContext()`` to the optax chain's update. A caller that
passes ``gx_context=`` its own `StepContext` reads the shared fields from it
afterwards (that is how tests look at ``lr``); anything else there is a
TypeError. `gradxform.fused`
and `gradxform.fused.packed`, which run the chain on flat buffers, give it a
context of its own (`StepContext.on_buffers`) and leave the caller's as it was.
"""
from __future__ import annotations

import collections
import contextlib
from typing import Any, Callable, Iterable, Mapping, Self, overload

import jax
import jax.numpy as jnp
import optax

from ._spec import (FIELDS, ContextUse, Fusion, LocalKey, check_key, context_use, declare, piece_name,
                    spec_of)
from ._tree import distinct_buffers

__all__ = [
    "needs_params",
    "run_inner",
    "piece_name",
    "GradientTransformation",
    "transformation",
    "identity",
    "chain",
    "apply_updates",
    "context_value",
    "CONTEXT_KEY",
    "StepContext",
    "LocalKey",
    "ContextUse",
    "uses_context",
    "context_use",
]

GradientTransformation = optax.GradientTransformationExtraArgs
CONTEXT_KEY = "gx_context"


def transformation(init: Callable, update: Callable) -> GradientTransformation:
    """Wraps an ``(init, update)`` pair as an optax-compatible transformation."""
    return optax.GradientTransformationExtraArgs(init, update)


class EmptyState(tuple):
    """State of a piece that keeps nothing (an empty pytree)."""

    __slots__ = ()

    def __new__(cls):
        return super().__new__(cls, ())


jax.tree_util.register_pytree_node(EmptyState, lambda s: ((), None), lambda _, __: EmptyState())


def identity() -> GradientTransformation:
    """A piece that passes updates through; fills a disabled slot of a chain so
    that the state's structure does not depend on options."""

    def init(params):
        del params
        return EmptyState()

    @declare(fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        return updates, state

    return transformation(init, update)


# -- the step context -----------------------------------------------------------

def _provider(key) -> str:
    if isinstance(key, LocalKey):
        return key.provider
    return FIELDS.get(key, "a piece")


def _label(key) -> str:
    return repr(key.name) if isinstance(key, LocalKey) else repr(key)


class _Record:
    """The shared fields of one step (`FIELDS`), None until written: a typed
    record, one slot per field, that a chain and the chains nested in it
    share."""

    __slots__ = tuple(FIELDS)

    def __init__(self, **values):
        for name in FIELDS:
            setattr(self, name, values.get(name))

    def copy(self) -> _Record:
        return _Record(**{name: getattr(self, name) for name in FIELDS})

    def written(self) -> list[str]:
        return [name for name in FIELDS if getattr(self, name) is not None]


class _Field:
    """A typed field of `StepContext`: reads its shared record; written only
    through `StepContext.publish` (by the piece that declares it provides it)."""

    def __init__(self, doc: str):
        self.__doc__ = doc

    def __set_name__(self, owner, name):
        self.name = name

    @overload
    def __get__(self, ctx: None, owner: type | None = None) -> Self: ...

    @overload
    def __get__(self, ctx: StepContext, owner: type | None = None) -> Any: ...

    def __get__(self, ctx: StepContext | None, owner: type | None = None) -> Self | Any:
        if ctx is None:
            return self
        return getattr(ctx._shared, self.name)

    def __set__(self, ctx, value):
        raise AttributeError(f"StepContext.{self.name} is written by the piece that declares it provides "
                             f"{self.name!r}, through publish({self.name}=...).")


class StepContext:
    """The step record of one `update` call: the shared fields (`FIELDS`:
    ``lr``, ``count``, ``mask``, ``wd``, ``segments``; None until provided)
    and the chain-local values of `LocalKey` keys. There are no other keys.

    Each field has one writer in a chain: `chain` refuses, when it is built,
    a second piece that declares it provides a field an earlier one provides,
    and `publish` refuses a write by a piece that does not declare it. A
    caller who wants to see what a chain published passes its own record,
    ``tx.update(..., gx_context=gradxform.StepContext())``, and reads its
    fields afterwards. ``segments`` is set only by the layout a chain runs on
    (`on_buffers`: `gradxform.fused`, the Trainer's sharded step) and read
    only by the layout's reductions (`gradxform.pieces._segments`), never by
    a rule.
    """

    __slots__ = ("_local", "_shared", "_running")

    lr = _Field("Each leaf's learning rate for this update: a tree of float32 scalars (track_step; "
                "`adjusted_rate` where a family adjusts it).")
    count = _Field("Each leaf's update count, this update included: a tree of int32 scalars (track_step).")
    mask = _Field("Whether each leaf is updated this step: a tree of bool scalars (track_step).")
    wd = _Field("Each leaf's weight decay: a tree of float32 scalars (add_decayed_weights, "
                "provide_weight_decay).")
    segments = _Field("Under gradxform.fused, one `Segments` per flat buffer; None per leaf.")

    def __init__(self, *, local: collections.ChainMap | None = None, running: list | None = None,
                 _shared: _Record | None = None):
        self._shared = _Record() if _shared is None else _shared
        self._local = collections.ChainMap() if local is None else local
        # the declarations of the pieces running now, innermost last (`running`)
        self._running = [] if running is None else running

    @classmethod
    def of(cls, extra_args: Mapping) -> StepContext | None:
        """The context in ``extra_args``, or None when there is none."""
        ctx = extra_args.get(CONTEXT_KEY)
        if ctx is None or isinstance(ctx, StepContext):
            return ctx
        raise TypeError(f"{CONTEXT_KEY}= takes a gradxform.StepContext (pass gradxform.StepContext() and read "
                        f"its fields, e.g. .lr, after the update); got {type(ctx).__name__}.")

    @classmethod
    def on_buffers(cls, segments) -> StepContext:
        """A fresh context for a chain run on flat buffers laid out as
        ``segments`` (`gradxform.fused`, `gradxform.fused.packed`, the
        Trainer's sharded step): the layout, and nothing of the caller's
        (whose per-leaf values do not fit the buffers, and whose record is not
        written)."""
        return cls(_shared=_Record(segments=segments))

    def probe(self) -> StepContext:
        """A fresh context for a run whose published values only the prober
        reads (MindSpore LARS asks its wrapped optimizer for ``lr`` and
        ``wd``; `adjusted_rate` asks `track_step`): this context's layout and
        nothing else."""
        return StepContext(_shared=_Record(segments=self.segments), running=self._running)

    def isolated(self) -> StepContext:
        """A context that reads this one's values and keeps its own writes: a
        chain traced a second time (a guard's step inside ``lax.cond``) must
        not publish values from inside the branch."""
        return StepContext(_shared=self._shared.copy(), local=self._local.new_child(), running=self._running)

    def child(self) -> StepContext:
        """The context a nested chain runs in: the same shared fields, and a
        fresh layer for its local values over this one's."""
        return StepContext(_shared=self._shared, local=self._local.new_child(), running=self._running)

    @contextlib.contextmanager
    def running(self, tx):
        """Marks ``tx`` (its `Spec`) as the piece running in this context
        while the block runs: the layout's reductions check that it declared
        the ones it takes (`require_reduction`), and `publish` that it
        declared what it writes."""
        spec = spec_of(tx)
        self._running.append((spec, (spec.who if spec is not None else "") or piece_name(_update_of(tx))))
        try:
            yield
        finally:
            self._running.pop()

    def _check_writer(self, key, method: str) -> None:
        """A TypeError unless the running piece declares it provides ``key``
        (nothing running: a piece called on its own, the only writer there is)."""
        if not self._running:
            return
        spec, who = self._running[-1]
        if spec is None or key not in spec.provides:
            raise TypeError(f"{who} writes {_label(key)} into the step context without declaring it: "
                            f"declare(provides=({_label(key)},)) on its update, so that gradxform.chain "
                            f"can check that nothing else writes it ({method}).")

    def require_reduction(self, name: str) -> None:
        """On flat buffers, a ValueError unless the running piece declared the
        per-leaf reduction ``name`` (`Fusion.reductions`): the layout supplies
        only what a piece says it takes, so an undeclared reduction cannot
        slip into a fused step. Per leaf, and for a piece without a fusion
        declaration (which `gradxform.fused` never runs on buffers), nothing."""
        spec, who = self._running[-1] if self._running else (None, "")
        if self.segments is None or spec is None or spec.fusion is None:
            return
        if name not in spec.fusion.reductions:
            raise ValueError(f"{who} takes the per-leaf reduction {name!r} on flat buffers "
                             f"without declaring it: its fusion declares {spec.fusion.reductions or 'none'}; "
                             f"declare it, e.g. @fusable(bit_exact=False, reductions=({name!r},)).")

    def publish(self, **fields) -> None:
        """Writes shared fields: a TypeError for a name that is not one, or
        when the running piece does not declare it provides it."""
        for name, value in fields.items():
            if name not in FIELDS:
                raise TypeError(f"StepContext.publish: {name!r} is not a step-context field "
                                f"({', '.join(FIELDS)}); a value private to one optimizer uses a LocalKey.")
            self._check_writer(name, "publish")
            setattr(self._shared, name, value)

    def publish_local(self, values: Mapping) -> None:
        """Writes `LocalKey` values into the innermost chain's layer (checked
        as `publish` is)."""
        for key, value in values.items():
            if not isinstance(key, LocalKey):
                raise TypeError(f"StepContext.publish_local: keys must be LocalKey; got {key!r}.")
            self._check_writer(key, "publish_local")
            self._local[key] = value

    def require(self, key, who: str) -> Any:
        """The value of ``key`` (a field or a LocalKey), or a ValueError that
        says which piece has to come earlier."""
        if key in self:
            return self[key]
        raise _missing(key, who)

    # read access by key: fields by name, LocalKey values by key
    def __contains__(self, key) -> bool:
        check_key(key, "StepContext")
        if isinstance(key, LocalKey):
            return key in self._local
        return getattr(self._shared, key) is not None

    def __getitem__(self, key):
        check_key(key, "StepContext")
        if isinstance(key, LocalKey):
            return self._local[key]
        value = getattr(self._shared, key)
        if value is None:
            raise KeyError(key)
        return value

    def get(self, key, default=None):
        return self[key] if key in self else default

    def __repr__(self):
        return f"StepContext(fields={self._shared.written()}, local={[k.name for k in self._local]})"


def _missing(key, who: str) -> ValueError:
    provider = _provider(key)
    return ValueError(
        f"{who} needs {_label(key)} from {provider} earlier in the same gradxform.chain; "
        f"put {provider} before it (optax.chain does not carry the step context).")


def context_value(extra_args: Mapping, key, who) -> Any:
    """Reads ``key`` from the step context, with an error that says which piece
    has to come earlier in the chain. ``who``: the piece's name, or its update
    function (the name its `Spec` declares)."""
    who = _who(who)
    ctx = StepContext.of(extra_args)
    if ctx is None:
        raise _missing(key, who)
    return ctx.require(key, who)


def _who(who) -> str:
    if isinstance(who, str):
        return who
    spec = spec_of(who)
    return spec.who if spec is not None and spec.who else piece_name(who)


def run_inner(tx, updates, state, params=None, **extra_args):
    """``tx.update(...)`` run by a wrapper piece as a piece of its own: on
    flat buffers the layout's reductions that ``tx`` takes are checked
    against its declaration, not the wrapper's."""
    ctx = StepContext.of(extra_args)
    if ctx is None:
        return tx.update(updates, state, params, **extra_args)
    with ctx.running(tx):
        return tx.update(updates, state, params, **extra_args)


def _update_of(tx):
    return tx.update if hasattr(tx, "update") else tx


def needs_params(who) -> ValueError:
    """The error of a piece whose update was called without ``params``;
    ``who`` as in `context_value`."""
    who = _who(who)
    return ValueError(f"{who}: needs params; call update(grads, state, params).")


# -- what a piece declares about the context -------------------------------------

def uses_context(who: str | None = None, *, needs: Iterable = (), provides: Iterable = (),
                 inner: Iterable = ()) -> Callable:
    """Declares, on a piece's update function, what it reads (``needs``) and
    writes (``provides``) in the step context; ``who`` names the piece in
    messages (default: where the update is defined, `piece_name`);
    ``inner``: transformations the piece runs, whose declarations are added
    to its own. The short form of `gradxform._spec.declare` for the context
    (it fills in the same `Spec` as `fusable`). Returns a decorator::

        @uses_context(needs=("lr",))
        def update(updates, state, params=None, **extra_args):
            lr = context_value(extra_args, "lr", update)
    """

    def mark(fn):
        return declare(fn, who=who, needs=needs, provides=provides, inner=inner)  # who=None: piece_name(fn)

    return mark


def _check_order(uses: list, declared: tuple) -> ContextUse:
    """The chain's order check (see the module docstring); returns the
    chain's own declaration."""
    available: set = set()
    writers: dict = {}  # provided key -> which piece writes it
    taken: dict = {}  # declared needs -> the piece that reads them (for the parent's messages)
    for i, use in enumerate(uses):
        for key, who in use.needs.items():
            if key in available:
                continue
            if key in declared:
                taken.setdefault(key, who)
                continue
            later = next((j for j in range(i + 1, len(uses)) if key in uses[j].provides), None)
            provider = _provider(key)
            if later is not None:
                raise ValueError(
                    f"gradxform.chain: {who} (piece {i}) needs {_label(key)} from {provider}, which comes "
                    f"after it (piece {later}); put {provider} before {who}.")
            raise ValueError(
                f"gradxform.chain: {who} (piece {i}) needs {_label(key)} from {provider} earlier in the "
                f"same gradxform.chain; put {provider} before it. (A chain meant to run inside another "
                f"gradxform.chain that provides it declares so: chain(..., needs=({_label(key)},)).)")
        # one writer per field: a second would silently decide what every later piece reads
        ordered = [k for k in FIELDS if k in use.provides] + sorted(
            (k for k in use.provides if isinstance(k, LocalKey)), key=_label)
        for key in ordered:
            first = writers.get(key) or ("the chain this one runs in" if key in declared else None)
            if first is not None:
                again = ", ".join(_label(k) for k in ordered if k in writers or k in declared)
                raise ValueError(
                    f"gradxform.chain: piece {i} provides {again}, which {first} already provides; "
                    f"a step-context field has one writer (a family that adjusts the learning rate does so "
                    f"inside its rate piece, gradxform.pieces.adjusted_rate).")
            writers[key] = f"piece {i}"
        available |= use.provides
    # local values end with the chain; shared fields are seen by later pieces of the parent
    return ContextUse({k: taken.get(k, "gradxform.chain(needs=...)") for k in declared},
                      frozenset(k for k in available if not isinstance(k, LocalKey)))


def chain(*pieces: optax.GradientTransformation, needs: Iterable = ()) -> GradientTransformation:
    """Applies pieces in order; the state is the tuple of their states.

    Unlike `optax.chain`, the pieces share one step context (see the module
    docstring), checked when the chain is built: a piece that needs a context
    field no earlier piece provides is a ValueError. ``needs``: the fields
    (or `LocalKey` values) this chain takes from the chain it is nested in,
    which checks them in turn; a nested chain shares its parent's fields.
    Extra keyword arguments given to `update` reach every piece that accepts
    extra arguments, as in optax.
    """
    pieces = tuple(optax.with_extra_args_support(p) for p in pieces)
    needs = tuple(needs)
    for key in needs:
        check_key(key, "gradxform.chain(needs=...)")
    use = _check_order([context_use(p) for p in pieces], needs)

    def init(params):
        # pieces may hand out one cached array twice (a zero, a hyperparameter):
        # copies keep the state donatable
        return distinct_buffers(tuple(p.init(params) for p in pieces))

    # the chain's context is its order check's result; it fuses when its pieces do
    @declare(needs=use.needs, provides=use.provides, inner=pieces, fusion=Fusion(), sealed=True)
    def update(updates, state, params=None, **extra_args):
        if not isinstance(state, tuple) or len(state) != len(pieces):
            raise ValueError(
                f"chain.update: expected a state of {len(pieces)} pieces (from this "
                f"chain's init), got {type(state).__name__} of length "
                f"{len(state) if isinstance(state, tuple) else '?'}; was the state "
                "made by another optimizer?")
        parent = StepContext.of(extra_args)
        ctx = StepContext() if parent is None else parent.child()
        extra_args = {**extra_args, CONTEXT_KEY: ctx}
        new_state = []
        for piece, s in zip(pieces, state):
            with ctx.running(piece):
                updates, s = piece.update(updates, s, params, **extra_args)
            new_state.append(s)
        return updates, tuple(new_state)

    return transformation(init, update)


def apply_updates(params, updates):
    """Returns ``params + updates`` leaf by leaf, computed in the wider of the
    two dtypes and cast back to the parameter's dtype.

    With master weights (``multi_precision=True``) the updates of a float16
    leaf are float32, so the addition happens in float32 and the result is the
    cast of the float32 master copy. Leaves whose update is None are kept.
    """
    def add(p, u):
        if u is None:
            return p
        p = jnp.asarray(p)
        return (p.astype(jnp.result_type(p, u)) + u).astype(p.dtype)

    return jax.tree.map(add, params, updates, is_leaf=lambda x: x is None)
