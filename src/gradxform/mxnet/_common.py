"""The keywords every MXNet optimizer accepts, checked once, and the chain head they make.

MXNet's ``Optimizer.__init__`` takes ``learning_rate, wd, rescale_grad,
clip_gradient, lr_scheduler, multi_precision, begin_num_update,
param_idx2name, param_dict`` (2.x adds ``aggregate_num, use_fused_step``);
Gluon adds per-parameter ``lr_mult``/``wd_mult``. Here each becomes a piece
(or an option of `track_step`), and every optimizer module assembles its
rule from them in the order MXNet applies them.

Porting notes, as MXNet reads these keywords:

* ``clip_gradient <= 0`` (or None) means no clipping, as MXNet's kernels read
  it (``clip_gradient=-1`` is their default; 1.9.1's Python-side rules would
  clip to ``[-c, c]`` instead, which no one means).
* ``param_dict`` (index or name -> a parameter object with ``lr_mult`` and
  ``wd_mult`` attributes, e.g. Gluon's ``Parameter``, or a dict with those
  keys): those multipliers win over ``lr_mult``/``wd_mult`` entries for the
  same parameter, as in MXNet's ``_get_lr``/``_get_wd``.
* ``aggregate_num`` and ``use_fused_step`` (MXNet 2.x) choose how MXNet
  batches its kernel calls, never the numbers; they are accepted and change
  nothing here. gradxform's own multi-tensor path is `gradxform.fused`,
  which the `gradxform.Trainer` uses by default (``fused=``).
* ``lr_scheduler``: any schedule (`gradxform.schedules._user`); a bare
  callable counts MXNet's ``num_update`` (1 on the first update). A callable
  ``learning_rate`` (an optax schedule, say) counts from 0.

Every factory lists these keywords in its own signature (keyword-only,
with the defaults of `COMMON_DEFAULTS`; tests/test_registry.py checks that
each one does) and passes them to `parse_options` by name.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import weakref
from typing import Any

import numpy as np
import optax

from .._base import GradientTransformation
from .._hyper import check_range
from .._ranges import check_flag, check_hyper
from .._registry import registered_name
from .._selectors import as_names, check_keys, describe_names, multipliers
from .._optimizer import Setup
from ..pieces.internal import FP16_WARNING
from ..pieces import add_decayed_weights, clip_by_value, provide_weight_decay, rescale
from ..schedules.internal import COMPLETED, NUM_UPDATE, LRScheduler, as_update_schedule, holds_its_rate

__all__ = ["MXNetOptions", "parse_options", "COMMON_DEFAULTS", "MXNetTransformation", "updater_index",
           "live_multipliers"]

COMMON_DEFAULTS: dict[str, Any] = dict(
    wd=0.0, rescale_grad=1.0, clip_gradient=None, lr_scheduler=None, multi_precision=False,
    begin_num_update=0, lr_mult=None, wd_mult=None, param_idx2name=None, skip_nonfinite=False,
    param_dict=None, aggregate_num=None, use_fused_step=None,
)


def _param_dict_mult(obj, what: str, where) -> float:
    value = obj.get(what, 1.0) if isinstance(obj, dict) else getattr(obj, what, 1.0)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"param_dict[{where!r}].{what}: must be a number; got {value!r}.") from None


def _module_wd_default(name: str) -> float:
    # MXNet Optimizer.set_wd_mult: with param_idx2name, names not ending in
    # _weight or _gamma are not decayed (biases, BatchNorm beta, running stats).
    return 1.0 if name.endswith("_weight") or name.endswith("_gamma") else 0.0


def _mxnet_names(owner: str, idx2name, names: list[str]):
    """``(mx_names, index_of, named)``: each leaf's MXNet name, the leaf
    position of an MXNet parameter index (None: no such parameter), and the
    MXNet names ``param_idx2name`` gives (those get MXNet's
    ``_weight``/``_gamma`` decay rule).

    ``param_idx2name`` (MXNet index -> name) is matched by name, never by
    the leaves' order: when its values are the tree's leaf names
    (`gradxform.param_names`), each leaf keeps its name and index ``i`` is
    the leaf named ``idx2name[i]``; when the tree is a list of arrays (leaf
    names ``'0'``, ``'1'``, ...), index ``i`` is the leaf named ``str(i)``,
    MXNet's own index, and is called ``idx2name[i]``. Anything else is a
    ValueError saying how to pass it. ``True``: the leaf names themselves."""
    if not isinstance(idx2name, dict) or not idx2name:
        positions = dict(enumerate(range(len(names))))  # MXNet's legacy integer keys: leaf order
        return list(names), positions.get, set(names) if idx2name else set()
    at = {n: i for i, n in enumerate(names)}
    by_index = _by_index(idx2name)
    values = list(by_index.values())
    if all(v in at for v in values):
        return list(names), lambda k: at.get(by_index[k]) if k in by_index else None, set(values)
    if all(str(k) in at for k in by_index):
        mx = list(names)
        for k, v in by_index.items():
            mx[at[str(k)]] = v
        return mx, lambda k: at.get(str(k)), set(values)
    missing = [v for v in values if v not in at][:4]
    raise ValueError(f"{owner}(param_idx2name=...): its names {missing} are not parameters of this tree, and its "
                     f"indices are not the tree's leaf names either, so it cannot be matched (never by position). "
                     f"The tree's parameter names are {describe_names(names)}: pass "
                     f"{{i: name for i, name in enumerate(gradxform.param_names(params))}} in your order, name the "
                     f"tree's leaves as MXNet does (a dict keyed 'fc1_weight', ...), or pass param_idx2name=True "
                     f"to apply MXNet's rule to the leaf names.")


# -- the imperative Updater: one parameter per init, known by its MXNet index ----------------
_NO_INDEX = object()
_UPDATER_INDEX: contextvars.ContextVar = contextvars.ContextVar("gradxform_mxnet_updater_index", default=_NO_INDEX)


@contextlib.contextmanager
def updater_index(index):
    """While open, ``init`` of a one-leaf tree is MXNet parameter ``index``
    (`gradxform.mxnet.Updater`): its multipliers resolve by ``index`` and
    ``param_idx2name[index]``, as MXNet's ``_get_lr``/``_get_wd`` do."""
    token = _UPDATER_INDEX.set(index)
    try:
        yield
    finally:
        _UPDATER_INDEX.reset(token)


def _by_index(idx2name: dict) -> dict:
    # a name, or a parameter object with a .name (Gluon's collect_params().values())
    return dict(zip(idx2name, as_names(list(idx2name.values())) or map(str, idx2name.values())))


@dataclasses.dataclass(frozen=True, kw_only=True)
class MXNetOptions(Setup):
    """MXNet's common keywords (``schedule`` is ``lr_scheduler``)."""
    wd: float
    rescale_grad: float
    clip_gradient: float | None
    begin_num_update: int
    lr_mult: Any
    wd_mult: Any
    param_idx2name: Any
    param_dict: Any = None
    warn_as: str | None = None   # the class name MXNet's float16 warning gives (SGD, LBSGD, NAG)
    # {'lr_mult', 'wd_mult': the dicts set_lr_mult/set_wd_mult replace, 'version', 'tree_inits'}: shared by
    # every copy `build` makes, read by each init (`MXNetTransformation`)
    live: dict = dataclasses.field(default_factory=dict, compare=False)

    # -- per-parameter multipliers --------------------------------------------
    def _resolver(self, what: str, module_rule: bool):
        idx2name = self.param_idx2name

        def resolve(names):
            mapping: Any = self.live.get(what, getattr(self, what))  # a dict, a callable or None
            index = _UPDATER_INDEX.get()
            if index is not _NO_INDEX and len(names) == 1:
                return np.asarray([self._index_mult(index, mapping, module_rule, what)], np.float32)
            if self.live:
                self.live["tree_inits"] = self.live.get("tree_inits", 0) + 1
            mx_names, index_of, named = _mxnet_names(self.owner, idx2name, list(names))
            if mapping and not callable(mapping):
                known = list(dict.fromkeys(mx_names + list(names)))
                check_keys(known, {k: v for k, v in mapping.items() if not isinstance(k, int)}, what)
            # MXNet's set_wd_mult: only the parameters param_idx2name names get the _weight/_gamma rule
            default = (lambda n: _module_wd_default(n) if n in named else 1.0) if (module_rule and idx2name) \
                else 1.0
            by_name: Any = {k: v for k, v in (mapping or {}).items() if not isinstance(k, int)} \
                if not callable(mapping) else mapping
            out = multipliers(mx_names, by_name, default, what)
            if mapping and not callable(mapping):
                # MXNet also accepts integer indices as keys (its legacy form).
                for k, v in mapping.items():
                    if isinstance(k, int):
                        if index_of(k) is None:
                            raise ValueError(f"{what}: index {k} is out of range for {len(names)} parameters.")
                        out[index_of(k)] = float(v)
            if self.param_dict:
                # MXNet: a parameter object's own multiplier wins (_get_lr / _get_wd)
                for k, obj in self.param_dict.items():
                    i = index_of(k) if isinstance(k, int) else (mx_names.index(k) if k in mx_names else
                                                                names.index(k) if k in names else None)
                    if i is None:
                        raise ValueError(f"param_dict: {k!r} is not a parameter index or name here; "
                                         f"{len(names)} parameters, named {names[:8]}.")
                    out[i] = _param_dict_mult(obj, what, k)
            return out

        return resolve

    def _index_mult(self, index, mapping, module_rule: bool, what: str) -> float:
        """The multiplier of the Updater's parameter ``index`` (MXNet's
        ``_get_lrs``/``_get_wds``): ``param_dict[index]``, else an integer
        key ``index``, else the entry of its name (``param_idx2name[index]``;
        a string index is its own name), else MXNet's ``_weight``/``_gamma``
        rule for a name ``param_idx2name`` gives (``wd_mult``), else 1."""
        idx2name = self.param_idx2name
        if idx2name is True:
            raise ValueError(
                f"{self.owner}(param_idx2name=True) with gradxform.mxnet.get_updater: the Updater's weights come by "
                f"index and have no names for MXNet's _weight/_gamma decay rule to read. Pass the dict "
                f"param_idx2name={{0: 'fc1_weight', 1: 'fc1_bias', ...}} (index -> name, as MXNet takes it) instead.")
        by_index = _by_index(idx2name) if isinstance(idx2name, dict) else {}
        named = set(by_index.values())
        name = index if isinstance(index, str) else by_index.get(index)
        keyed = {k: v for k, v in mapping.items() if not isinstance(k, int)} \
            if mapping and not callable(mapping) else {}
        if keyed and not named and not isinstance(index, str):
            first = next(iter(keyed))
            raise ValueError(
                f"{what}={{{first!r}: ...}} with gradxform.mxnet.get_updater: the Updater's parameters are indices "
                f"and, without param_idx2name, have no names (MXNet would ignore this entry and train with "
                f"{what} 1). Pass param_idx2name={{0: {first!r}, ...}} (index -> name) to the optimizer, or key "
                f"{what} by index ({{0: ...}}) instead.")
        check_keys(sorted(named | ({name} if name is not None else set())), keyed, what)
        rule = module_rule and name in named
        source: Any = mapping if callable(mapping) else keyed  # a name -> multiplier callable, or its dict entries
        value = float(multipliers([name if name is not None else str(index)], source,
                                  _module_wd_default if rule else 1.0, what)[0])
        if mapping and not callable(mapping) and isinstance(index, int) and index in mapping:
            value = float(multipliers(["i"], {"i": mapping[index]}, 1.0, what)[0])  # checked as a number >= 0
        if self.param_dict:
            for k, obj in self.param_dict.items():
                if k == index or (name is not None and k == name):
                    value = _param_dict_mult(obj, what, k)
        return value

    # -- the family's hooks (`Setup.build`) -----------------------------------
    def step(self) -> GradientTransformation:
        return self.track(lr_mult=self._resolver("lr_mult", False),
                          begin_num_update=self.begin_num_update)

    def presented(self, tx: GradientTransformation) -> "MXNetTransformation":
        return MXNetTransformation.of(tx, self)

    def warning(self) -> str:
        """MXNet's float16 warning; SGD, LBSGD and NAG put their class name in it (``warn_as``)."""
        return FP16_WARNING.replace("of the optimizer", f"of the {self.warn_as} optimizer") if self.warn_as \
            else FP16_WARNING

    # -- the pieces every rule shares ------------------------------------------
    def rescale(self) -> GradientTransformation:
        return rescale(self.rescale_grad)

    def clip(self) -> GradientTransformation:
        return clip_by_value(self.clip_gradient)

    def add_wd(self, *, rounded: bool = False) -> GradientTransformation:
        """Coupled decay; ``rounded``: ``w * wd`` rounded before the sum (MXNet's Adam kernel, no FMA)."""
        return add_decayed_weights(self.wd, wd_mult=self._resolver("wd_mult", True), rounded=rounded)

    def add_wd_from_context(self) -> GradientTransformation:
        """Coupled decay with the per-leaf values an earlier `provide_wd` published."""
        return add_decayed_weights(None)

    def provide_wd(self) -> GradientTransformation:
        return provide_weight_decay(self.wd, wd_mult=self._resolver("wd_mult", True))


def parse_options(factory, learning_rate, *, wd, rescale_grad, clip_gradient, lr_scheduler, multi_precision,
                  begin_num_update, lr_mult, wd_mult, param_idx2name, skip_nonfinite, param_dict, aggregate_num,
                  use_fused_step) -> MXNetOptions:
    """Checks the common keywords at construction: a value out of range is a
    ValueError naming the range. ``factory``: the registered factory (its
    registered name is the owner in every message); then its
    ``learning_rate`` and the `COMMON_DEFAULTS` keywords, each passed by name
    (none has a default here, so a factory that forgets one fails at once).

    ``learning_rate=None`` (MXNet 1.9.1's base default) means 0.01, or, with
    an ``lr_scheduler``, the scheduler's own ``base_lr``; an explicit value
    becomes the scheduler's base, as MXNet overwrites ``base_lr`` with it.
    """
    owner = registered_name(factory)
    if clip_gradient is not None and not isinstance(clip_gradient, bool) \
            and isinstance(clip_gradient, (int, float)) and clip_gradient <= 0:
        clip_gradient = None  # MXNet's kernels: clip_gradient <= 0 turns clipping off
    if callable(learning_rate):  # an optax-style schedule as the learning rate (count from 0)
        if lr_scheduler is not None:
            raise TypeError(f"{owner}: give a schedule as learning_rate or as lr_scheduler, not both.")
        lr_scheduler = as_update_schedule(learning_rate, COMPLETED, owner=owner, arg="learning_rate")
        learning_rate = None
    elif lr_scheduler is not None:
        if learning_rate is not None and not callable(getattr(lr_scheduler, "lr_for_update", None)) \
                and not holds_its_rate(lr_scheduler) \
                and isinstance(getattr(lr_scheduler, "base_lr", None), (int, float)):
            lr_scheduler.base_lr = learning_rate  # as MXNet's Optimizer.__init__ does
        elif isinstance(lr_scheduler, LRScheduler):
            lr_scheduler.bind(learning_rate)  # gradxform's own: base_lr = learning_rate, as MXNet does
        lr_scheduler = as_update_schedule(lr_scheduler, NUM_UPDATE, owner=owner, arg="lr_scheduler")
    if learning_rate is None:
        base = getattr(lr_scheduler, "base_lr", None) if lr_scheduler else None
        learning_rate = 0.01 if base is None else base
    for name, value in (("learning_rate", learning_rate), ("wd", wd), ("rescale_grad", rescale_grad)):
        check_hyper(owner, name, value)
    check_hyper(owner, "clip_gradient", clip_gradient, allow_none=True)
    check_range(owner, "begin_num_update", begin_num_update, low=0)
    agg = aggregate_num
    if agg is not None and (isinstance(agg, bool) or not isinstance(agg, (int, float))
                            or not (agg >= 1 and (float(agg).is_integer() or math.isinf(agg)))):
        raise ValueError(f"{owner}(aggregate_num=...): must be None, an int >= 1 or inf; got {agg!r}.")
    check_flag(owner, "use_fused_step", use_fused_step)
    if param_dict is not None and not isinstance(param_dict, dict):
        raise TypeError(f"{owner}(param_dict=...): must be a dict of index or name -> parameter; "
                        f"got {type(param_dict).__name__}.")
    if param_idx2name not in (None, True, False) and not isinstance(param_idx2name, dict):
        raise TypeError(f"{owner}(param_idx2name=...): must be a dict of index -> name, or True; "
                        f"got {type(param_idx2name).__name__}.")
    for what, m in (("lr_mult", lr_mult), ("wd_mult", wd_mult)):
        if m is not None and not isinstance(m, dict) and not callable(m):
            raise TypeError(f"{owner}({what}=...): must be a dict of name or pattern -> multiplier; "
                            f"got {type(m).__name__}.")
    return MXNetOptions(owner=owner, learning_rate=float(learning_rate), wd=float(wd),
                        rescale_grad=float(rescale_grad), clip_gradient=clip_gradient,
                        schedule=lr_scheduler, multi_precision=bool(multi_precision),
                        begin_num_update=int(begin_num_update), lr_mult=lr_mult,
                        wd_mult=wd_mult, param_idx2name=param_idx2name or None,
                        skip_nonfinite=bool(skip_nonfinite), param_dict=param_dict or None,
                        live=dict(lr_mult=lr_mult, wd_mult=wd_mult, version=0, tree_inits=0))


def check_unit(owner: str, **values) -> None:
    """Decay rates and momenta: their declared ranges ([0, 1) for MXNet, `gradxform._ranges`)."""
    for name, v in values.items():
        check_hyper(owner, name, v)


_LIVE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # init/update function -> MXNetOptions.live


def live_multipliers(tx) -> dict | None:
    """The multipliers ``set_lr_mult``/``set_wd_mult`` of MXNet optimizer ``tx`` replace (None: not one)."""
    for fn in (getattr(tx, "init", None), getattr(tx, "update", None)):
        try:
            found = _LIVE.get(fn)
        except TypeError:  # not weakly referenceable
            found = None
        if found is not None:
            return found
    return None


class MXNetTransformation(optax.GradientTransformationExtraArgs):
    """An MXNet optimizer: the ``(init, update)`` pair, with MXNet's
    ``set_lr_mult``/``set_wd_mult`` (and ``lr_mult``/``wd_mult`` to read).

    MXNet's semantics: each call replaces the multipliers dict, and later
    updates use it. `gradxform.mxnet.get_updater` reads it at every update;
    a state ``init`` made for a tree holds its multipliers, so once one is
    made these calls raise (MXNet would change them; that state would not).
    The pair is all it holds (an ordinary optax pytree); the multipliers are
    looked up by its functions, as `gradxform.paddle` does its schedules."""

    __slots__ = ()

    @classmethod
    def of(cls, tx, options: MXNetOptions) -> "MXNetTransformation":
        out = cls(tx.init, tx.update)
        if options.live:
            for fn in (tx.init, tx.update):
                _LIVE[fn] = options.live
        return out

    def _live(self, what: str) -> dict:
        live = live_multipliers(self)
        if live is None:
            raise AttributeError(f"optimizer.{what}: this transformation no longer holds its MXNet multipliers "
                                 f"(a wrapper replaced both its functions); pass {what.removeprefix('set_')}={{...}} "
                                 "to gradxform.mxnet.create instead.")
        return live

    @property
    def lr_mult(self) -> dict:
        return dict(self._live("lr_mult")["lr_mult"] or {})

    @property
    def wd_mult(self) -> dict:
        return dict(self._live("wd_mult")["wd_mult"] or {})

    def set_lr_mult(self, args_lr_mult) -> None:
        """MXNet's ``set_lr_mult``: ``{name or index: multiplier}`` replaces the learning-rate multipliers."""
        self._set("lr_mult", args_lr_mult)

    def set_wd_mult(self, args_wd_mult) -> None:
        """MXNet's ``set_wd_mult``: replaces the weight-decay multipliers (with ``param_idx2name``, names
        not ending in ``_weight``/``_gamma`` still get 0 unless given here)."""
        self._set("wd_mult", args_wd_mult)

    def _set(self, what: str, args) -> None:
        live = self._live(f"set_{what}")
        if not isinstance(args, dict):
            raise TypeError(f"optimizer.set_{what}(...): expected a dict of name or index -> multiplier; "
                            f"got {type(args).__name__}.")
        example = next(iter(args.items()), ("fc1_weight", 1.0))
        if live.get("tree_inits"):
            raise RuntimeError(
                f"optimizer.set_{what}({args!r}): this optimizer's init has already made a state for a parameter "
                f"tree, and that state holds its {what}: MXNet's next update would use the new multipliers, the "
                f"state would not. For index-by-index updates type updater = gradxform.mxnet.get_updater(opt) "
                f"before any init (its updates read set_{what}); for a gradxform.Trainer type "
                f"trainer.optimizer.param_dict[{example[0]!r}].{what} = {example[1]!r}; else build the optimizer "
                f"with {what}={args!r} instead.")
        for k, v in args.items():
            multipliers(["k"], {"k": v}, 1.0, f"set_{what}[{k!r}]")  # a number >= 0, checked now
        live[what] = dict(args)
        live["version"] = live.get("version", 0) + 1
