"""``create`` and ``register``: optimizers by name, as ``mx.optimizer.create``.

Names are case-insensitive and underscores do not count, so each framework's
class names work beside the snake_case ones: ``'mindspore.AdamWeightDecay'``
is ``'mindspore.adam_weight_decay'``, ``'mindspore.LazyAdam'`` is
``'mindspore.lazy_adam'``, ``'SGD'`` is ``'sgd'``. A bare name means the
MXNet flavour (Gluon's API is the default); other families are reached by a
namespaced name such as ``mindspore.rmsprop`` or ``paddle.asgd``.

``register`` takes MXNet's idiom as it is: ``@gradxform.register`` bare on a
function or a class (``@mx.optimizer.Optimizer.register``), then
``create('MyOptimizer')``; or ``@gradxform.register('name', family=...)``.
A registered class is called with the keywords and must give a
transformation, or an object with ``init`` and ``update`` methods.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import warnings
from typing import Any, Callable, Mapping, cast

from ._base import GradientTransformation, transformation
from ._ranges import Range, register_range

__all__ = ["create", "register", "registered_names", "register_family", "family_classes", "registered_name",
           "registered_factory", "keyword_checked", "Declaration", "declaration", "declarations", "group_keys_of"]

_REGISTRY: dict[str, Callable[..., Any]] = {}  # factories: what they return is checked by create
_NAMES: dict[Callable, str] = {}  # factory -> the name it was first registered under (its owner name)
_DECLARED: dict[str, Declaration] = {}  # 'family.name' -> its declaration (the families' optimizers)
_FAMILY_GROUP_KEYS: dict[str, tuple[str, ...]] = {}  # family -> the keys its parameter-group dicts take
DEFAULT_FAMILY = "mxnet"

# what porting users type for another framework's keyword
_SYNONYMS = {"lr": ("learning_rate",), "weight_decay": ("wd",), "wd": ("weight_decay",),
             "momentum_decay": ("momentum",), "eps": ("epsilon",), "epsilon": ("eps",),
             "betas": ("beta1", "beta2"), "b1": ("beta1",), "b2": ("beta2",), "nesterov": ("use_nesterov",),
             "use_nesterov": ("nesterov",), "grad_clip": ("clip_gradient",), "clip_grad": ("clip_gradient",),
             "scheduler": ("lr_scheduler", "learning_rate"), "lr_schedule": ("lr_scheduler", "learning_rate"),
             "parameters": ("params", "groups"), "params": ("groups",)}


# A JAX user who asks for AdamW wants decoupled weight decay (w -= lr * wd * w beside
# the Adam step); MXNet's Adam with ``wd`` adds wd * w to the gradient instead (coupled
# L2), a different trajectory. Neither a suggestion nor a synonym may lead there silently.
_DECOUPLED = ("decoupled weight decay (AdamW) is create('paddle.adamw', learning_rate=..., weight_decay=...): "
              "Paddle AdamW, optax.adamw's rule (w *= 1 - lr * weight_decay, then bias-corrected Adam; only "
              "where epsilon sits differs: within about 1e-6 after 20 steps), or "
              "create('mindspore.adam_weight_decay', ...): MindSpore AdamWeightDecay, the same decay without "
              "bias correction (larger first steps, not optax's numbers)")
_ADAMW_NAMES = {"adamw", "adamweightdecay", "decoupledadam"}


@dataclasses.dataclass(frozen=True)
class Declaration:
    """Everything gradxform states about one of its optimizers, in one place.

    Each family module lists its optimizers in ``DECLARED``, a tuple of these;
    `register_family` registers them, ``tools/gen_exports.py`` re-exports
    their factories and classes, `declared_range` reads their ranges, the
    `gradxform.migrate` readers their ``migrates``, the README's table and
    the tests all of it (``no_goldens`` too). No other list of the
    optimizers exists.

    name: the factory's name in its module, registered as ``family.name``.
    classes: the framework's class names that build it, defined in the same
      module (each in the framework's positional order), re-exported beside
      the factory.
    ranges: its hyperparameters' ranges where they differ from the family's
      (`gradxform._ranges.FAMILY`), checked at construction and by
      `gradxform.set_hyper`.
    migrates: its family's `gradxform.migrate` reader continues a run from
      the state the framework saved for it (False: the reader refuses it
      before reading the file).
    no_goldens: None where ``tests/goldens/<family>`` holds trajectories its
      framework recorded; otherwise why there are none (the tests read it).
    group_keys: the keys a parameter-group dict of this optimizer may hold,
      as its framework takes them (Paddle's ``_update_param_group``: Adam's
      ``'beta1'``; MindSpore: no per-group ``'lr'`` for AdaFactor); None: its
      family's (`group_keys_of`). The family's parser reads it.
    """
    name: str
    classes: tuple[str, ...] = ()
    ranges: Mapping[str, Range] = dataclasses.field(default_factory=dict)
    migrates: bool = False
    no_goldens: str | None = None
    group_keys: tuple[str, ...] | None = None

    def __post_init__(self):
        if not isinstance(self.classes, tuple) or not all(isinstance(c, str) for c in self.classes):
            raise TypeError(f"Declaration({self.name!r}, classes=...): a tuple of class names; got {self.classes!r}.")
        if self.group_keys is not None and (not isinstance(self.group_keys, tuple)
                                            or not all(isinstance(k, str) for k in self.group_keys)):
            raise TypeError(f"Declaration({self.name!r}, group_keys=...): a tuple of key names; "
                            f"got {self.group_keys!r}.")
        bad = [k for k, v in self.ranges.items() if not isinstance(v, Range)]
        if bad:
            raise TypeError(f"Declaration({self.name!r}, ranges=...): {bad[0]!r} is not a Range.")


def _norm(key: str) -> str:
    return key.lower().replace("_", "")


def _key(name: str, family: str) -> str:
    return f"{family}.{name.lower()}"


def register(name=None, *, family: str = DEFAULT_FAMILY):
    """Registers an optimizer factory (a function or a class) as
    ``family.name`` (and, for the default family, under the bare name).

    Use it bare, ``@register`` (the name is the function's or class's own
    ``__name__``), or with a name, ``@register('my_sgd', family='mxnet')``.
    Re-registering a name warns and replaces it, as MXNet does. Returns the
    factory unchanged."""

    def deco(factory):
        if not callable(factory):
            raise TypeError(f"register: expected a function or class; got {factory!r}.")
        key = _key(name or factory.__name__, family)
        old = _REGISTRY.get(key)
        if old is not None and old is not factory:
            warnings.warn(f"register: {key!r} is being overridden by {factory.__module__}."
                          f"{factory.__qualname__}.", UserWarning, stacklevel=2)
        _REGISTRY[key] = factory
        if old is not None and old is not factory:
            _DECLARED.pop(key, None)  # a user's own optimizer under that name: gradxform declares nothing of it
        _NAMES.setdefault(factory, key)
        return factory

    if callable(name) and not isinstance(name, str):  # bare @register
        factory, name = name, None
        return deco(factory)
    if name is not None and not isinstance(name, str):
        raise TypeError(f"register(name=...): must be a string or None; got {name!r}.")
    return deco


def register_family(family: str, modules, *, group_keys: tuple[str, ...] | None = None) -> dict[str, Callable]:
    """Registers the optimizers each of ``modules`` declares in its
    ``DECLARED`` tuple (`Declaration`) as ``family.<name>``: the factory of
    that name, as it is (its signature is what it accepts), its ranges for
    the name it is registered under, and its declaration (`declaration`).
    ``group_keys``: the keys the family's parameter-group dicts take, where
    a declaration gives none (`group_keys_of`); None: the family has none.
    Each factory and class is replaced in its module by its keyword-checked
    twin (`keyword_checked`), so the package's generated imports
    (``tools/gen_exports.py``) take those. Returns ``{name: factory}``.
    Adding an optimizer touches its family module (the factory, its class
    where the framework's positional order differs, its `Declaration`), the
    piece it needs, its tests/cases.py row and the generated README table."""
    out = {}
    if group_keys is not None:
        _FAMILY_GROUP_KEYS[family] = tuple(group_keys)
    for module in modules:
        for decl in module.DECLARED:
            original = getattr(module, decl.name)
            checked = keyword_checked(original, f"gradxform.{family}.{decl.name}")
            setattr(module, decl.name, checked)  # the module's own callers (its classes) get the message too
            out[decl.name] = register(family=family)(checked)
            key = _NAMES[checked]
            _NAMES.setdefault(original, key)  # the body's registered_name(itself), when unwrapped
            _DECLARED[key] = decl
            for hyper, rng in decl.ranges.items():
                register_range(hyper, rng, owner=key)
    family_classes(modules)  # the classes checked too, in their modules, before the package imports them
    return out


def declaration(name: str) -> Declaration | None:
    """The `Declaration` of the optimizer registered under ``name`` (resolved
    as `create` resolves it); None for one registered with `register`."""
    registered_factory(name)  # an unknown name: the ValueError naming the closest ones
    return _DECLARED.get(_resolve(name))


def group_keys_of(owner: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The keys a parameter-group dict of optimizer ``owner`` (a registered
    name) takes: its declaration's, else its family's (`register_family`),
    else ``default`` (an optimizer registered with `register` and built from
    a family's pieces: that family's keys); () for a family without groups."""
    decl = _DECLARED.get(owner)
    if decl is not None and decl.group_keys is not None:
        return decl.group_keys
    return _FAMILY_GROUP_KEYS.get(owner.split(".", 1)[0], default) if decl is not None else default


def declarations(family: str | None = None) -> dict[str, Declaration]:
    """``{'family.name': Declaration}`` of every family optimizer (of ``family`` only, if given)."""
    return {k: d for k, d in sorted(_DECLARED.items()) if family is None or k.split(".", 1)[0] == family}


def family_classes(modules) -> dict[str, Callable]:
    """The framework-named classes the declarations of ``modules`` list
    (``{"AdaDelta": AdaDelta, ...}``), each replaced in its module by its
    keyword-checked twin."""
    out = {}
    for module in modules:
        family = module.__name__.split(".")[-2]
        for name in (c for decl in module.DECLARED for c in decl.classes):
            out[name] = keyword_checked(getattr(module, name), f"gradxform.{family}.{name}")
            setattr(module, name, out[name])
    return out


_CHECKED: dict = {}  # factory -> its keyword-checked twin (one each: mxnet.Signum is mxnet.signum)


def keyword_checked(factory, who: str):
    """``factory`` with a keyword it does not take refused as `create`
    refuses it (`unknown_keyword_message`: the closest name, or the alias a
    ported script means, and every keyword it takes) instead of Python's
    bare "unexpected keyword argument". A factory taking ``**kwargs`` is
    returned as it is; one already checked gives the same twin."""
    if factory in _CHECKED.values():
        return factory
    if factory in _CHECKED:
        return _CHECKED[factory]
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return factory
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return factory
    allowed = frozenset(p.name for p in params if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                               inspect.Parameter.KEYWORD_ONLY))

    @functools.wraps(factory)
    def checked(*args, **kwargs):
        if not allowed.issuperset(kwargs):
            bad = next(k for k in kwargs if k not in allowed)
            raise TypeError(unknown_keyword_message(who, bad, keywords_of(factory)))
        return factory(*args, **kwargs)

    _CHECKED[factory] = checked
    return checked


def registered_name(factory) -> str:
    """The name ``factory`` was registered under (``"mxnet.adam"``): the
    owner name a family factory gives its messages and its hyperparameters'
    declared ranges, so no factory spells its own name by hand."""
    try:
        return _NAMES[factory]
    except (KeyError, TypeError):
        raise LookupError(f"{getattr(factory, '__qualname__', factory)!r} is not a registered optimizer; "
                          "register it with gradxform.register.") from None


def registered_factory(name: str) -> Callable[..., GradientTransformation]:
    """The factory registered under ``name`` (resolved as `create` does);
    a ValueError naming the closest names when there is none."""
    key = _resolve(name)
    if key not in _REGISTRY and _norm(key.partition(".")[2]) in _ADAMW_NAMES:
        raise ValueError(f"Cannot find optimizer {name!r}: {_DECOUPLED}. ('adam' with wd= is MXNet's coupled L2 "
                         "decay, a different rule.)")
    if key not in _REGISTRY:
        close = _suggest(name)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else "."
        raise ValueError(f"Cannot find optimizer {name!r}{hint} (gradxform.registered_names() lists all "
                         f"{len(_REGISTRY)}.)")
    return _REGISTRY[key]


def registered_names() -> list[str]:
    """Every registered name, namespaced."""
    return sorted(_REGISTRY)


def _resolve(name: str) -> str:
    """The registered key for ``name`` (exact, else case- and underscore-blind),
    or the namespaced form of ``name`` when nothing is registered under it."""
    key = name.lower()
    if "." not in key:
        key = f"{DEFAULT_FAMILY}.{key}"
    if key in _REGISTRY:
        return key
    family, _, bare = key.partition(".")
    want = f"{family}.{_norm(bare)}"
    for k in _REGISTRY:
        fam, _, b = k.partition(".")
        if f"{fam}.{_norm(b)}" == want:
            return k
    return key


def _suggest(name: str) -> list[str]:
    """The registered names closest to ``name`` (bare MXNet names as bare)."""
    shown = {k.split(".", 1)[1] if k.startswith(DEFAULT_FAMILY + ".") else k: k for k in _REGISTRY}
    probe = name.lower()
    pool = {_norm(s): s for s in shown}
    close = difflib.get_close_matches(_norm(probe), list(pool), n=3, cutoff=0.6)
    if "." in probe:  # also try the bare part against each family
        close += [c for c in difflib.get_close_matches(_norm(probe.split(".", 1)[1]), list(pool), n=3, cutoff=0.6)
                  if c not in close]
    return [pool[c] for c in close][:3]


def keywords_of(factory) -> list[str]:
    """The keyword arguments ``factory`` takes (its signature's names)."""
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):
        return []
    return [p.name for p in sig.parameters.values()
            if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]


def unknown_keyword_message(who: str, given: str, known: list[str]) -> str:
    """``who: unknown keyword 'lr'; did you mean 'learning_rate'? It takes: ...``."""
    close = difflib.get_close_matches(given, known, n=1, cutoff=0.6)
    close = close or [s for s in _SYNONYMS.get(given, ()) if s in known][:1]
    hint = f"; did you mean {close[0]!r}?" if close else "."
    if given == "weight_decay" and close == ["wd"]:
        hint = (f"; this optimizer's weight decay is 'wd', coupled L2 decay (wd * w added to the gradient "
                f"before the rule); {_DECOUPLED}.")
    return f"{who}: unknown keyword {given!r}{hint} It takes: {', '.join(known)}."


def _as_transformation(obj: Any, key: str) -> GradientTransformation:
    if isinstance(obj, tuple) and hasattr(obj, "init") and hasattr(obj, "update"):
        return cast(GradientTransformation, obj)  # an optax GradientTransformation(ExtraArgs) or alike
    init, update = getattr(obj, "init", None), getattr(obj, "update", None)
    if callable(init) and callable(update):
        return transformation(init, update)
    raise TypeError(f"create({key!r}): the registered factory returned {type(obj).__name__}, which is not a "
                    "transformation; it must return an (init, update) pair or an object with init(params) and "
                    "update(updates, state, params=None) methods.")


def create(name: str, **kwargs) -> GradientTransformation:
    """Builds the optimizer registered under ``name`` with ``kwargs`` (keywords only).

    Families (a bare name is MXNet's; case and underscores do not count, so
    a framework's class name works too)::

        create('adam', learning_rate=1e-3, wd=1e-4)            # MXNet 1.9.1 / Gluon: gradxform.mxnet
        create('mindspore.Momentum', learning_rate=0.1, momentum=0.9)   # MindSpore 2.x: gradxform.mindspore
        create('paddle.AdamW', learning_rate=1e-3)              # Paddle 3.x: gradxform.paddle

    ``gradxform.registered_names()`` lists every name (``'mxnet.sgd'``,
    ``'mindspore.lamb'``, ``'paddle.rprop'``, ...); ``help()`` of a family's
    factory (``help(gradxform.mxnet.adam)``) shows its keywords and rule.
    `register` adds your own.

    Raises ValueError for an unknown name (suggesting the closest names) and
    TypeError for a keyword the optimizer does not take (naming its keywords
    and the closest match).
    """
    if not isinstance(name, str):
        raise TypeError(f"create: name must be a string; got {type(name).__name__}.")
    key = _resolve(name)
    factory = registered_factory(name)
    try:
        inspect.signature(factory).bind(**kwargs)
    except TypeError as err:
        known = keywords_of(factory)
        bad = [k for k in kwargs if k not in known]
        if bad and known:
            raise TypeError(unknown_keyword_message(f"create({name!r})", bad[0], known)) from None
        raise TypeError(f"create({name!r}): {err}") from None
    return _as_transformation(factory(**kwargs), key)
