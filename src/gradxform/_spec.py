"""What a piece is, declared once where it is built: one `Spec` per update function.

A piece's factory attaches a `Spec` to the ``update`` function it returns
(`declare`; `fusable`, `not_fusable` and `uses_context` are its short forms,
and stacked they fill in one spec). Everything that reasons about a chain
reads these declarations and nothing else:

* `gradxform.chain`'s order check: what each piece ``needs`` from the step
  context and ``provides`` to it (`context_use`);
* `gradxform.fused`: whether a piece runs on flat buffers (`Fusion`: bit-exact
  or to float32 rounding, whether leaf 0 needs a buffer of its own, why a
  configuration is refused, which per-leaf reductions it takes);
* both: the transformations a wrapper runs (``inner``), which are checked in
  turn. A wrapper lists them; nothing looks into a function's closure, so a
  renamed variable or helper cannot change what a chain is.

An update function without a spec (an optax transformation, a user's own
piece) is opaque: it needs and provides nothing in the context, and
`gradxform.fused` keeps the per-leaf path, saying which function is not
declared. This module imports nothing from gradxform, so every piece can
import it.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Mapping, cast

__all__ = ["FIELDS", "LocalKey", "ContextUse", "Fusion", "Spec", "REDUCTIONS", "declare", "spec_of",
           "context_use", "check_key", "piece_name"]

ATTR = "gx_spec"  # the attribute a `Spec` lives in, on an update function

#: The shared fields of the step context and who provides each (for messages).
FIELDS: dict[str, str] = {
    "lr": "track_step",
    "count": "track_step",
    "mask": "track_step",
    "wd": "add_decayed_weights or provide_weight_decay",
    "segments": "gradxform.fused",
}

#: The per-leaf reductions a piece may declare (`Fusion.reductions`), each
#: supplied by the layout the step runs on (`gradxform.pieces._segments`): per
#: leaf a plain reduction of the leaf, under `gradxform.fused` a segment
#: reduction over its buffer.
REDUCTIONS: dict[str, str] = {
    "leaf_sum": "each leaf's sum (norms), in another order on flat buffers",
    "leaf_flags": "a static flag per parameter name, per element of a mixed buffer",
    "row_sums": "each row's integer sum (lazy rows)",
    "whole": "every element in the per-leaf order (global norms of a sharded step)",
    "leaf_scan": "a running value carried over the leaves in index order",
}


class LocalKey:
    """The key of a value private to one optimizer's chain (see
    `gradxform._base`). ``provider`` names the piece that writes it, for
    messages. Two keys are the same key only if they are the same object."""

    __slots__ = ("name", "provider")

    def __init__(self, name: str, provider: str):
        self.name, self.provider = name, provider

    def __repr__(self):
        return f"LocalKey({self.name!r}, provider={self.provider!r})"


def check_key(key, where: str):
    if not (isinstance(key, LocalKey) or key in FIELDS):
        raise TypeError(f"{where}: {key!r} is not a step-context field ({', '.join(FIELDS)}) or a LocalKey.")


@dataclasses.dataclass(frozen=True)
class ContextUse:
    """What a piece's update reads from the step context (``needs``: key ->
    the piece that reads it, for messages) and writes (``provides``)."""
    needs: Mapping = dataclasses.field(default_factory=dict)
    provides: frozenset = frozenset()

    def merged(self, other: ContextUse) -> ContextUse:
        needs = dict(self.needs)
        for k, w in other.needs.items():
            needs.setdefault(k, w)
        return ContextUse(needs, self.provides | other.provides)


@dataclasses.dataclass(frozen=True)
class Fusion:
    """How a piece runs under `gradxform.fused`.

    ``bit_exact``: False where the fused run agrees with the per-leaf one to
    float32 rounding only. A norm (global, or per leaf as a segment sum over a
    buffer) adds the same float32 numbers in another order. Per-leaf values
    applied per element (spread over a buffer, or row flags) are the same
    arithmetic, but XLA fuses it differently than with a broadcast scalar,
    and XLA:CPU contracts a multiply-add into an FMA per fusion, so a result
    may differ in its last bit (measured: 2e-7 relative).
    ``isolate_first``: leaf 0 gets a buffer of its own (MXNet reads a
    schedule before leaf 0 bumps the shared count and after it for the rest).
    ``refuse``: why this configuration of the piece never fuses (None: it does).
    ``reductions``: the per-leaf reductions it takes (names from `REDUCTIONS`),
    which the layout supplies."""
    bit_exact: bool = True
    isolate_first: bool = False
    refuse: str | None = None
    reductions: tuple = ()

    def __post_init__(self):
        unknown = [r for r in self.reductions if r not in REDUCTIONS]
        if unknown:
            raise ValueError(f"Fusion(reductions=...): unknown {unknown}; known: {', '.join(REDUCTIONS)}.")
        if self.refuse is not None and not isinstance(self.refuse, str):
            raise TypeError(f"Fusion(refuse=...): a reason string or None; got {self.refuse!r}.")


@dataclasses.dataclass(frozen=True)
class Spec:
    """The one declaration of a piece (see the module docstring).

    ``who``: the piece's name in messages. ``needs``, ``provides``: its own
    use of the step context (``context``: whether it declares one at all).
    ``inner``: the transformations it runs. ``fusion``: how it fuses, None
    where it is not declared (the per-leaf path). ``sealed``: ``needs`` and
    ``provides`` already account for ``inner`` (a chain, whose local values
    end with it)."""
    who: str = ""
    needs: Mapping = dataclasses.field(default_factory=dict)
    provides: frozenset = frozenset()
    context: bool = False
    inner: tuple = ()
    fusion: Fusion | None = None
    sealed: bool = False


def _is_tx(x) -> bool:
    return isinstance(x, tuple) and hasattr(x, "init") and callable(getattr(x, "update", None))


def _function(target):
    fn = target.update if _is_tx(target) else target
    if not callable(fn):
        raise TypeError(f"expected an update function or a transformation; got {target!r}.")
    return getattr(fn, "__func__", fn)


def spec_of(target) -> Spec | None:
    """The `Spec` declared on an update function (or a transformation's), or None."""
    spec = getattr(_function(target), ATTR, None) if target is not None else None
    return spec if isinstance(spec, Spec) else None


_KEEP: Any = object()


def declare(target=None, *, who: str | None = None, needs: Iterable = _KEEP, provides: Iterable = _KEEP,
            inner: Iterable = _KEEP, fusion: Fusion | None = _KEEP, sealed: bool = _KEEP) -> Callable:
    """Declares what an update function is (fills in its `Spec`; a field not
    given keeps what an earlier declaration of the same function said).
    Returns ``target``, or a decorator without it::

        @declare(who="scale_by_lr", needs=("lr",), fusion=Fusion())
        def update(updates, state, params=None, **extra_args): ...

    ``needs``/``provides``: step-context fields or `LocalKey` values (checked
    here); giving either (or ``who``) declares the piece's context use
    (``who`` defaults to where the update is defined, `piece_name`).
    ``inner``: the transformations the update runs. ``fusion``: a `Fusion`,
    or None for "not declared" (the per-leaf path)."""
    changes: dict = {}
    if who is not None:
        changes.update(who=who, context=True)
    if needs is not _KEEP:
        needs = dict(needs) if isinstance(needs, Mapping) else tuple(needs)
        for key in needs:
            check_key(key, f"declare({who!r})")
        changes.update(needs=needs, context=True)
    if provides is not _KEEP:
        provides = frozenset(provides)
        for key in provides:
            check_key(key, f"declare({who!r})")
        changes.update(provides=provides, context=True)
    if inner is not _KEEP:
        inner = tuple(inner)
        bad = [t for t in inner if not _is_tx(t)]
        if bad and _is_tx(getattr(bad[0], "tx", None)):  # Paddle's stateful face: it holds its pair
            raise TypeError(f"expected an (init, update) transformation; got {type(bad[0]).__name__}, an optimizer "
                            "object that holds its parameters (built with parameters=<arrays>). Wrap the pure "
                            "pair: build the optimizer without parameters= (or pass opt.tx) and step it with "
                            "tx.update(grads, state, params).")
        if bad:
            raise TypeError(f"declare(inner=...): expected transformations; got {bad[0]!r}.")
        changes["inner"] = inner
    if fusion is not _KEEP:
        if fusion is not None and not isinstance(fusion, Fusion):
            raise TypeError(f"declare(fusion=...): a Fusion or None; got {fusion!r}.")
        changes["fusion"] = fusion
    if sealed is not _KEEP:
        changes["sealed"] = bool(sealed)

    def mark(t):
        fn = _function(t)
        spec = getattr(fn, ATTR, None)
        spec = dataclasses.replace(spec if isinstance(spec, Spec) else Spec(), **changes)
        if spec.context and not spec.who:
            spec = dataclasses.replace(spec, who=piece_name(fn))
        if not isinstance(spec.needs, Mapping):  # who reads each need, for messages
            spec = dataclasses.replace(spec, needs={k: spec.who for k in cast(Iterable[str], spec.needs)})
        setattr(fn, ATTR, spec)
        return t

    return mark if target is None else mark(target)


def piece_name(fn) -> str:
    """A piece's name in messages, from where its update function is defined:
    ``gradxform.mxnet._momentum._nesterov_step`` for an ``update`` written
    inside that factory (no name is spelled by hand)."""
    fn = getattr(fn, "__func__", fn)
    qualname = getattr(fn, "__qualname__", repr(fn))
    return f"{getattr(fn, '__module__', '?')}.{qualname.split('.<locals>.')[0]}"


def context_use(tx) -> ContextUse:
    """What ``tx`` declares it needs from and provides to the step context:
    its own use merged with its inner transformations'; a wrapper that
    declares no use of its own passes on its inner transformations' needs
    that none of them provides. An undeclared transformation: nothing."""
    spec = spec_of(tx)
    if spec is None:
        return ContextUse()
    own = ContextUse(dict(spec.needs), spec.provides)
    if spec.sealed:
        return own
    inner = ContextUse()
    for t in spec.inner:
        inner = inner.merged(context_use(t))
    if spec.context:
        return own.merged(inner)
    return ContextUse({k: w for k, w in inner.needs.items() if k not in inner.provides}, inner.provides)

