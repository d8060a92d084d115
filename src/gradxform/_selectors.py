"""`Selector`: the one way gradxform chooses parameters by name.

Every place where names select parameters (``lr_mult``/``wd_mult`` keys,
MindSpore group ``params``, ``decay_filter``, ``lars_filter``, the
``param_dict`` of MXNet 2.x, Paddle's ``parameters=`` groups) builds a
`Selector` from what the user wrote and asks it one question: which of these
names do you select? A name is a parameter's pytree path joined by ``/``
(`gradxform.param_names`).

What a selection may be, as each framework's users write it:

* an exact name: ``'head/bias'``;
* a glob (``fnmatch``, whole name): ``'head/*'``, ``'*/bias'``;
* a Gluon regex, read as ``collect_params(select)`` reads it: ``re.match``
  (anchored at the start only): ``'.*beta|.*gamma|.*bias'``, ``'dense0_.*'``;
  a compiled ``re.Pattern`` is always a regex;
* a predicate over names, ``lambda name: 'bias' in name``, or over MindSpore
  parameter objects, ``lambda x: 'beta' not in x.name``: the predicate is
  called with a `ParamName`, a ``str`` that also has ``.name`` (itself), so
  both spellings work unchanged;
* a parameter object with a ``.name`` (MindSpore's ``Parameter``, Gluon's):
  selects that name exactly;
* a list, tuple or set of any of these: their union.

How a string is read (decided once per string against all names, so one key
never means two things): an exact name if some parameter has that name;
else a regex if it holds syntax no glob has (``| ( ) + ^ $ \\ { }``); else a
glob if the glob matches some name; else a regex (``'.*bias'`` matches no
glob, since no name starts with a dot). A string that selects nothing is the
caller's error to report (almost always a typo).

Flax's names: nnx's trailing ``/value`` is never part of a name
(`gradxform.param_names`); linen's leading ``params/`` may be written or
left out, whether the tree is linen's whole ``variables`` or its ``params``
subtree (`Selector.select`).
"""
from __future__ import annotations

import fnmatch
import re
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

__all__ = ["Selector", "ParamName", "assign_slots", "multipliers", "check_keys", "describe_names", "names_of",
           "as_names"]

_REGEX_ONLY = re.compile(r"[|()+^$\\{}]")
_LINEN_PREFIX = "params/"  # Flax linen's variables['params']


class ParamName(str):
    """A parameter name handed to a predicate: a ``str`` with ``.name`` (and
    ``.shape`` when known), so filters written for MindSpore's ``Parameter``
    (``x.name``) and for names (``'bias' in x``) both work."""

    shape: tuple | None

    def __new__(cls, name: str, shape=None):
        self = super().__new__(cls, name)
        self.shape = None if shape is None else tuple(shape)
        return self

    @property
    def name(self) -> str:
        return str(self)

    @property
    def ndim(self) -> int | None:
        return None if self.shape is None else len(self.shape)


def _object_name(x) -> str | None:
    """The ``.name`` of a parameter object (not a str, not a callable predicate)."""
    if isinstance(x, str) or callable(x) and not hasattr(x, "name"):
        return None
    name = getattr(x, "name", None)
    return name if isinstance(name, str) else None


def describe_names(names: Sequence[str], k: int = 8) -> str:
    return f"{list(names[:k])}{' ...' if len(names) > k else ''}"


class Selector:
    """A selection of parameters by name (see the module docstring).

    ``Selector(spec)``; ``sel.select(names)`` gives one bool per name;
    ``sel(name)`` answers for one name (a string key is then read against that
    name alone). ``what`` names the argument in messages."""

    def __init__(self, spec: Any, *, what: str = "select"):
        if isinstance(spec, Selector):
            spec = spec.spec
        self.spec, self.what = spec, what
        if isinstance(spec, (list, tuple, set, frozenset)):
            if not spec:
                raise ValueError(f"{what}: an empty selection selects nothing.")
            self._parts = [Selector(s, what=what) for s in spec]
        elif isinstance(spec, (str, re.Pattern)) or _object_name(spec) is not None or callable(spec):
            self._parts = None
        else:
            raise TypeError(f"{what}: expected a name, a glob, a regex, a predicate over names or parameter "
                            f"objects, a parameter object with a .name, or a list of those; got {spec!r}.")

    @classmethod
    def of(cls, spec, *, what: str = "select") -> "Selector":
        return spec if isinstance(spec, Selector) else cls(spec, what=what)

    @property
    def is_predicate(self) -> bool:
        return self._parts is None and callable(self.spec) and not isinstance(self.spec, re.Pattern) \
            and _object_name(self.spec) is None

    def kind(self, names: Sequence[str]) -> str:
        """How a string spec is read against ``names``: 'exact', 'glob' or 'regex'."""
        s = self.spec
        if isinstance(s, re.Pattern):
            return "regex"
        if _object_name(s) is not None:
            return "exact"
        if not isinstance(s, str):
            return "predicate" if self._parts is None else "union"
        if s in names:
            return "exact"
        if _REGEX_ONLY.search(s):
            return "regex"
        if any(fnmatch.fnmatchcase(n, s) for n in names):
            return "glob"
        return "regex"

    def select(self, names: Sequence[str], shapes: Sequence[tuple] | None = None) -> np.ndarray:
        """One bool per name. Under Flax linen's ``{'params': ...}`` a name is
        also read without its leading ``params/`` (``'dense/kernel'`` selects
        ``params/dense/kernel``; so does the full name). The other way round,
        a string key written with linen's ``params/`` (copied from the
        variables' paths) also selects in the ``params`` subtree alone (a
        ``TrainState``'s, whose names have no such prefix)."""
        names = list(names)
        out = self._select(names, shapes)
        if any(n.startswith(_LINEN_PREFIX) for n in names):
            out |= self._select([n[len(_LINEN_PREFIX):] if n.startswith(_LINEN_PREFIX) else n for n in names],
                                shapes)
        elif isinstance(self.spec, str) and self.spec.startswith(_LINEN_PREFIX):
            out |= Selector(self.spec[len(_LINEN_PREFIX):], what=self.what)._select(names, shapes)
        return out

    def _select(self, names: list[str], shapes: Sequence[tuple] | None) -> np.ndarray:
        if self._parts is not None:
            out = np.zeros(len(names), bool)
            for p in self._parts:
                out |= p.select(names, shapes)
            return out
        if self.is_predicate:
            shp = shapes if shapes is not None else [None] * len(names)
            return np.array([bool(self.spec(ParamName(n, s))) for n, s in zip(names, shp)], bool)
        kind = self.kind(names)
        s = self.spec
        if kind == "exact":
            target = _object_name(s) if _object_name(s) is not None else s
            return np.array([n == target for n in names], bool)
        if kind == "glob":
            return np.array([fnmatch.fnmatchcase(n, s) for n in names], bool)
        try:
            rx = s if isinstance(s, re.Pattern) else re.compile(s)
        except re.error:
            return np.zeros(len(names), bool)
        return np.array([rx.match(n) is not None for n in names], bool)

    def __call__(self, name: str, shape=None) -> bool:
        return bool(self.select([str(name)], None if shape is None else [shape])[0])

    def matches_any(self, names: Sequence[str]) -> bool:
        return bool(self.select(names).any())

    def __repr__(self):
        return f"Selector({self.spec!r})"


def check_keys(names: Sequence[str], mapping, what: str) -> None:
    """Every non-integer key of ``mapping`` selects some parameter: a key
    that matches nothing is almost always a typo, so say so."""
    if not mapping or callable(mapping) or not names:  # no names: an empty tree, or optax's params placeholder
        return
    for key in mapping:
        if isinstance(key, int):
            continue
        sel = Selector(key, what=what)
        if sel.is_predicate:
            continue
        if not sel.matches_any(names):
            raise ValueError(f"{what}: {key!r} matches no parameter (read as a name, a glob or a Gluon "
                             f"regex); parameter names are {describe_names(names)}.")


def assign_slots(names: Sequence[str], groups: Iterable[tuple[int, Any]], *,
                 unmatched: Callable[[int, Any], str], overlap: Callable[[str, int, int], str]) -> np.ndarray:
    """Parameter groups (MindSpore's ``group_params``, Paddle's ``parameters=``):
    each name's group id, -1 where no group selects it.

    ``groups``: ``(id, selection)`` pairs in order, a selection being anything
    `Selector` takes, or a `Selector`. ``unmatched(id, selection)`` and
    ``overlap(name, first_id, second_id)`` give the ValueError message for a
    selection that selects nothing, and for a name that two groups select
    (each framework words them its own way).

    A selection that selects nothing is refused, a predicate too: MindSpore
    refuses an empty group (``'group params must not be empty'``), and a
    predicate written for a framework's dotted names (``'dense1.bias' in
    x.name``) selects nothing among gradxform's ``'dense1/bias'``: a typo, not
    an intent. (Paddle's explicit group of no parameters, ``'params': []``, is
    not passed here: it selects nothing by construction.)"""
    slot = np.full(len(names), -1, np.int32)
    for gid, selection in groups:
        sel = Selector.of(selection)
        hits = np.flatnonzero(sel.select(list(names))).tolist()
        # no names: optax's params placeholder (nothing to select from)
        if not hits and names:
            raise ValueError(unmatched(gid, selection))
        for i in hits:
            if slot[i] >= 0:
                raise ValueError(overlap(names[i], int(slot[i]), gid))
            slot[i] = gid
    return slot


def multipliers(names: Sequence[str], mapping: Mapping[Any, float] | Callable[[str], float] | None,
                default: Callable[[str], float] | float = 1.0, what: str = "lr_mult") -> np.ndarray:
    """Resolves a selection -> multiplier mapping to one float32 per name.

    Keys are anything a `Selector` takes except lists (names, globs, Gluon
    regexes, compiled patterns, parameter objects). An exact name wins over
    patterns; among patterns the first in the mapping's order that selects a
    name wins. Unselected names get ``default`` (a number, or a function of
    the name). A callable ``mapping`` is called with each name (a `ParamName`).
    """
    names = list(names)
    out = np.empty(len(names), np.float32)
    exact: dict[str, Any] = {}
    patterns: list[tuple[np.ndarray, Any]] = []
    if mapping and not callable(mapping):
        for key, v in mapping.items():
            if isinstance(key, int):
                continue
            sel = Selector(key, what=what)
            if sel.kind(names) == "exact":
                named = _object_name(key)
                target = named if named is not None else key
                exact.setdefault(target, v)
            else:
                patterns.append((sel.select(names), v))
    for i, name in enumerate(names):
        value = default(name) if callable(default) else default
        if callable(mapping):
            value = mapping(ParamName(name))
        elif name in exact:
            value = exact[name]
        else:
            for hit, v in patterns:
                if hit[i]:
                    value = v
                    break
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"{what}[{name!r}] must be a number; got {value!r}.") from None
        if not np.isfinite(value) or value < 0:
            raise ValueError(f"{what}[{name!r}] must be a finite number >= 0; got {value}.")
        out[i] = value
    return out


def names_of(objs: Iterable) -> list[str] | None:
    """The names of a list of parameter objects (each with a ``.name``), or
    None when ``objs`` is not such a list."""
    if isinstance(objs, (str, bytes, dict)) or not isinstance(objs, (list, tuple)) or not objs:
        return None
    got = [_object_name(x) for x in objs]
    names = [n for n in got if n is not None]
    return names if len(names) == len(got) else None


def as_names(objs) -> list[str] | None:
    """``objs`` (a list of names and parameter objects with a ``.name``, as
    the frameworks hand parameters out: Paddle's ``model.parameters()``,
    MindSpore's ``net.trainable_params()``, Gluon's
    ``collect_params().values()``) as a list of names; None when ``objs`` is
    not such a list (patterns and predicates are for `Selector`)."""
    if isinstance(objs, (str, bytes, dict)) or not isinstance(objs, (list, tuple)) or not objs:
        return None
    got = [x if isinstance(x, str) else _object_name(x) for x in objs]
    names = [n for n in got if n is not None]
    return names if len(names) == len(got) else None
