"""Reading MXNet 1.x optimizer states: Gluon ``Trainer.save_states`` and Module ``.states`` files.

Format (MXNet 1.9.1 ``Updater.get_states``; ``tools/MXNET_NOTES.md`` section 8):
``pickle.dumps((states, optimizer))`` from Gluon, ``pickle.dumps(states)``
from the Module API, where ``states = {index: state}`` and each state is
None, an NDArray, or a (nested) tuple of them, laid out per optimizer::

    SGD/ccSGD, NAG, Signum, LBSGD  mom (None when momentum == 0)
    LARS                           mom (None when momentum == 0); the object's cur_lr
    Adam, Adamax, Nadam, LAMB      (mean, var)
    AdaGrad, GroupAdaGrad          history ((rows, 1) for GroupAdaGrad)
    RMSProp                        (n,)  or, centered, (n, g, delta)
    AdaDelta                       (acc_g, acc_delta)
    FTML (d, v, z)   Ftrl (z, n)   DCASGD (mom or None, previous_weight)   SGLD None

With ``multi_precision`` a float16 parameter's state is ``(w32, state)``, or
``(state, w32)`` for SGD, ccSGD and NAG. The optimizer object carries the
per-index update counts (``_index_update_count``), ``num_update``, Nadam's
shared ``m_schedule``, LBSGD's gradient accumulators and the scheduler.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import numpy as np

from .._state_paths import find_states
from .._tree import _without_variable_value, key_name, param_names
from ..mxnet._adaptive import AdaDeltaState, FTMLState, MXNetFtrlState, NadamState
from ..mxnet._momentum import DCASGDState, LBSGDState, NAGState
from ..pieces.internal import CenteredRmsState, CorrectedMomentsState, LrRatioTraceState, MomentsState, TraceState
from ..pieces.internal import MasterWeightsState
from ..pieces.internal import StepState
from ._errors import migratable, refuse_unmigratable, short
from ._pickle import MXNDArray, MigrateError, PickledObject, RowSparse, read_bytes
from ._state import (Slot, at_boundary, checked_count, checked_value, fill_state, has_slot, resolve_order,
                     warn_hyper_mismatch)
from ._user_class import check_user_scheduler, load_gluon_pickle
from .._warn import warn_at_caller

__all__ = ["from_gluon_states", "read_gluon_states"]

WHO = "from_gluon_states"


class _Rule(NamedTuple):
    inner: Any                               # component name, or a tuple of names
    targets: dict                            # component -> (Slot, sign)
    master_last: bool = False                # mp layout (state, w32) instead of (w32, state)
    per_row: bool = False                    # one value per row, shape (rows, 1) (GroupAdaGrad's history)


_MOM = Slot(TraceState, "trace", "momentum")
_MASTER = Slot(MasterWeightsState, "master")
_COUNT, _NUM_UPDATE = Slot(StepState, "leaf_counts"), Slot(StepState, "count")


def _rule(name: str, opt: PickledObject | None) -> _Rule:
    if name in ("sgd", "ccsgd"):
        return _Rule("mom", {"mom": (_MOM, 1.0)}, master_last=True)
    if name == "nag":
        return _Rule("mom", {"mom": (Slot(NAGState, "mom"), 1.0)}, master_last=True)
    if name == "signum":  # MXNet keeps -EMA(g): mom = m*mom - (1-m)*g
        return _Rule("mom", {"mom": (_MOM, -1.0)})
    if name == "lbsgd":
        return _Rule("mom", {"mom": (_MOM, 1.0)})
    if name in ("adam", "adamax"):
        return _Rule(("mean", "var"), {"mean": (Slot(MomentsState, "mu"), 1.0),
                                       "var": (Slot(MomentsState, "nu"), 1.0)})
    if name == "lars":  # mom (None when momentum == 0), in the momentum-corrected trace
        return _Rule("mom", {"mom": (Slot(LrRatioTraceState, "trace", "momentum"), 1.0)}, master_last=True)
    if name == "lamb":  # Adam's (mean, var), in LAMB's corrected-moments piece
        return _Rule(("mean", "var"), {"mean": (Slot(CorrectedMomentsState, "mu"), 1.0),
                                       "var": (Slot(CorrectedMomentsState, "nu"), 1.0)})
    if name == "nadam":
        return _Rule(("mean", "var"), {"mean": (Slot(NadamState, "mu"), 1.0),
                                       "var": (Slot(NadamState, "nu"), 1.0)})
    if name in ("adagrad", "groupadagrad"):  # GroupAdaGrad's history is one per row, (rows, 1)
        return _Rule("history", {"history": (Slot(TraceState, "trace", "eps"), 1.0)},
                     per_row=name == "groupadagrad")
    if name == "rmsprop":
        centered = bool(opt.attrs.get("centered", False)) if opt is not None else None
        if centered is None:
            raise MigrateError(f"{WHO}: an RMSProp file without the optimizer object; cannot tell "
                               "centered from not.")
        if centered:
            return _Rule(("n", "g", "delta"), {"n": (Slot(CenteredRmsState, "n"), 1.0),
                                               "g": (Slot(CenteredRmsState, "g"), 1.0),
                                               "delta": (Slot(TraceState, "trace", "gamma2"), 1.0)})
        return _Rule(("n",), {"n": (Slot(TraceState, "trace", "gamma1"), 1.0)})
    if name == "adadelta":
        return _Rule(("acc_g", "acc_delta"), {"acc_g": (Slot(AdaDeltaState, "acc_g"), 1.0),
                                              "acc_delta": (Slot(AdaDeltaState, "acc_delta"), 1.0)})
    if name == "ftml":
        return _Rule(("d", "v", "z"), {c: (Slot(FTMLState, c), 1.0) for c in ("d", "v", "z")})
    if name == "ftrl":
        return _Rule(("z", "n"), {c: (Slot(MXNetFtrlState, c), 1.0) for c in ("z", "n")})
    if name == "dcasgd":
        return _Rule(("mom", "previous_weight"),
                     {"mom": (_MOM, 1.0), "previous_weight": (Slot(DCASGDState, "previous_weight"), 1.0)})
    if name == "sgld":
        return _Rule(None, {})
    raise MigrateError(f"{WHO}: MXNet optimizer {name!r} is not supported (supported: "
                       f"{', '.join(sorted(n.split('.', 1)[1] for n in migratable('mxnet')))}).")


# MXNet attribute -> gradxform hyperparameter, for the mismatch warning.
_HYPER = {"wd": "wd", "rescale_grad": "rescale_grad", "momentum": "momentum", "beta1": "beta1",
          "beta2": "beta2", "epsilon": "epsilon", "gamma1": "gamma1", "gamma2": "gamma2", "rho": "rho",
          "lamda1": "lamda1", "beta": "beta", "lamda": "lamda", "wd_lh": "wd_lh",
          "schedule_decay": "schedule_decay", "float_stable_eps": "eps", "clip_weights": "clip_weights",
          "clip_gradient": "clip_gradient"}


_MAX_STATE_ITEMS = 16  # the most an MXNet state holds: (w32, (n, g, delta)) is 6


def _plain(x, what: str, budget: list | None = None):
    """Pickled state -> numpy arrays / None / tuples, at most ``_MAX_STATE_ITEMS``
    items in all: a tuple shared many times over (DUP) is refused, not walked
    as a tree."""
    budget = [_MAX_STATE_ITEMS] if budget is None else budget
    budget[0] -= 1
    if budget[0] < 0:
        raise MigrateError(f"{WHO}: {what} holds more than {_MAX_STATE_ITEMS} items (nested or shared); an "
                           "MXNet state is an NDArray, None, or a tuple of a few of them.")
    if x is None:
        return None
    if isinstance(x, MXNDArray):
        return x.value
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, (tuple, list)):
        return tuple(_plain(c, what, budget) for c in x)
    raise MigrateError(f"{WHO}: {what} holds a {type(x).__name__}; MXNet states are NDArrays, None "
                       "or tuples of them.")


@at_boundary(WHO)
def read_gluon_states(fname) -> tuple[dict[int, Any], PickledObject | None]:
    """Reads a Gluon/Module states file without MXNet: ``({index: state}, optimizer)``.

    States are numpy arrays, None, or tuples of them; ``optimizer`` is a
    `PickledObject` (attribute record) or None for Module files. A scheduler
    of the script's own class is read as a record too, and only there
    (`gradxform.migrate._user_class`).
    """
    data, label = read_bytes(fname, WHO)
    obj = load_gluon_pickle(data, f"{WHO}({label!r})")
    if isinstance(obj, tuple) and len(obj) == 2:
        states, opt = obj
    else:
        states, opt = obj, None
    if not isinstance(states, dict):
        raise MigrateError(f"{WHO}({label!r}): expected a dict of per-index states; got "
                           f"{type(states).__name__}. Is this a Trainer.save_states / .states file?")
    if opt is not None and not isinstance(opt, PickledObject):
        raise MigrateError(f"{WHO}({label!r}): the second item is a {type(opt).__name__}, not an "
                           "MXNet optimizer.")
    out = {}
    for k, v in states.items():
        if isinstance(k, str) and k.isdigit() and len(k) < 10:
            k = int(k)
        if not isinstance(k, int) or isinstance(k, bool):
            raise MigrateError(f"{WHO}({label!r}): state key {short(k)} is not an integer index (a kvstore "
                               "driven with string keys); not supported.")
        out[k] = _plain(v, f"state {k}")
    return out, opt


def _index(k, what: str) -> int:
    if isinstance(k, str) and k.isdigit() and len(k) < 10:
        k = int(k)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise MigrateError(f"{WHO}: {what} is keyed by {short(k)}, not by an MXNet index.")
    return int(k)


def _attr(opt, name, default=None):
    return opt.attrs.get(name, default) if opt is not None else default


@at_boundary(WHO)
def from_gluon_states(fname, params, tx, order=None, *, optimizer: str | None = None,
                      num_update: int | None = None):
    """The gradxform state of ``tx`` that continues an MXNet run saved by Gluon
    ``Trainer.save_states`` (or the Module API's ``.states`` file).

    ``tx`` must be the same MXNet optimizer with the same hyperparameters,
    made by `gradxform.create`; for Gluon set ``rescale_grad=1/batch_size``
    (``Trainer.step(batch_size)`` does it in MXNet). Every state array, each
    parameter's update count, ``num_update`` (which drives an lr schedule),
    Nadam's ``m_schedule``, LBSGD's gradient accumulators and float32 master
    weights (``multi_precision``) are restored, so the next ``tx.update``
    computes MXNet's next step.

    Args:
      fname: path (or binary file object) of the states file. It is read with
        a restricted unpickler: no MXNet needed, no code run.
      params: the parameters (same pytree as for ``tx.init``).
      tx: the gradxform optimizer.
      order: gradxform parameter names ('/'-joined key paths) in the
        Trainer's parameter order, so MXNet index ``i`` is ``order[i]``.
        Default: Gluon's order (`gluon_order`). Gluon's Trainer sorts the
        parameters by their full Gluon name, and a nested block's parameter
        is named by its path joined by '_' (``{'dense0': {'weight': ...}}``
        is ``dense0_weight``), so ``dense10_*`` comes before ``dense1_*``,
        which is not JAX's leaf order (``dense1/*`` first); a list of arrays
        keeps its order (MXNet index ``i`` is leaf ``str(i)``).
      optimizer: the MXNet optimizer name; only for Module files, which do
        not hold the optimizer object.
      num_update: updates done so far; only for Module files (they hold no
        counts), where it is required.

    Returns: the state, a drop-in for ``tx.init(params)``.

    Raises: `MigrateError` (a ValueError) naming the parameter for a missing
    or extra index, or a shape that does not fit; `UnsafePickleError` for a
    file that names anything but MXNet arrays and optimizer records.
    """
    state0 = tx.init(params)
    refuse_unmigratable(state0, WHO, "mxnet")  # before the file is read
    states, opt = read_gluon_states(fname)
    names = param_names(params)
    leaves = jax.tree.leaves(params)
    n = len(names)
    pos = resolve_order(params, order, len(states), WHO) if order is not None else gluon_order(params)
    idx2name = _attr(opt, "idx2name", {}) or {}

    def label(i):
        mx = idx2name.get(i)
        return f"parameter {names[pos[i]]!r} (MXNet index {i}" + (f", {short(mx)})" if mx else ")")

    extra = sorted(k for k in states if not 0 <= k < n)
    if extra:
        raise MigrateError(f"{WHO}: the file has a state for MXNet index {extra[0]} but there are only "
                           f"{n} parameters (indices 0..{n - 1}); was it saved for another model, or by "
                           "a Module on several devices?")
    missing = [i for i in range(n) if i not in states]
    if missing:
        raise MigrateError(f"{WHO}: the file has no state for {label(missing[0])}; it holds indices "
                           f"{sorted(states)}.")

    if opt is not None:
        name = opt.class_name.lower()
        if optimizer is not None and optimizer.lower() != name:
            raise MigrateError(f"{WHO}(optimizer={optimizer!r}): the file holds an MXNet {opt.class_name}.")
    elif optimizer is None:
        raise MigrateError(f"{WHO}: this file holds no optimizer object (Module API .states); pass "
                           "optimizer='<mxnet name>' and num_update=<updates done>.")
    else:
        name = optimizer.lower()
    rule = _rule(name, opt)
    if opt is not None:
        _check_attr_types(opt)
    mp = _attr(opt, "multi_precision", False) if opt is not None else has_slot(state0, params, _MASTER)
    if not isinstance(mp, (bool, np.bool_, int)):
        raise MigrateError(f"{WHO}: the optimizer's multi_precision is {short(mp)}; MXNet keeps a bool.")
    mp = bool(mp)
    comps = rule.inner if isinstance(rule.inner, tuple) else (() if rule.inner is None else (rule.inner,))
    values: dict[str, list] = {c: [None] * n for c in comps}
    masters: list = [None] * n
    for i in range(n):
        leaf = leaves[pos[i]]
        st = states[i]
        mp_leaf = mp and np.dtype(leaf.dtype) == np.float16
        if mp_leaf:
            if not (isinstance(st, tuple) and len(st) == 2):
                raise MigrateError(f"{WHO}: {label(i)} is float16 under multi_precision, so its state "
                                   f"should be a (state, float32 weight) pair; got {_shape_of(st)}.")
            inner, master = (st[0], st[1]) if rule.master_last else (st[1], st[0])
            master = _check_array(master, leaf, f"{label(i)}: the float32 master weight", np.float32)
            masters[pos[i]] = master
            st = inner
        if rule.inner is None:
            if st is not None:
                raise MigrateError(f"{WHO}: {label(i)} has a state {_shape_of(st)}; MXNet {name} keeps none.")
            continue
        if isinstance(rule.inner, str):
            st = (st,)
        if not (isinstance(st, tuple) and len(st) == len(comps)):
            raise MigrateError(f"{WHO}: {label(i)}: MXNet {name} keeps {'(' + ', '.join(comps) + ')'}; "
                               f"the file has {_shape_of(states[i])}.")
        for c, a in zip(comps, st):
            if a is not None:
                a = _check_array(a, leaf, f"{label(i)}: state {c!r}", None,
                                 shape=(np.shape(leaf)[0], 1) if rule.per_row and np.ndim(leaf) else None)
            values[c][pos[i]] = a

    per_leaf: dict[Slot, list] = {}
    for c in comps:
        present = [v is not None for v in values[c]]
        if not any(present):
            continue  # e.g. momentum 0: MXNet keeps None
        if not all(present):
            i = present.index(False)
            raise MigrateError(f"{WHO}: state {c!r} is None for parameter {names[i]!r} but not for others.")
        slot, sign = rule.targets[c]
        per_leaf[slot] = [v if sign == 1.0 else (sign * v).astype(v.dtype) for v in values[c]]
    if any(m is not None for m in masters):
        if not has_slot(state0, params, _MASTER):
            raise MigrateError(f"{WHO}: the run used multi_precision (float32 master weights) for float16 "
                               "parameters; create tx with multi_precision=True.")
        per_leaf[_MASTER] = masters

    whole: dict[Slot, Any] = {}
    if opt is not None:
        begin = checked_count(_attr(opt, "begin_num_update", 0) or 0, f"{WHO}: begin_num_update")
        counts = _attr(opt, "_index_update_count", None)
        if counts is None:
            counts = (_attr(opt, "_all_index_update_counts", {}) or {}).get(0, {})
        count = np.full((n,), begin, np.int32)
        if not isinstance(counts, dict):
            raise MigrateError(f"{WHO}: the optimizer's update counts are a {type(counts).__name__}, not a dict.")
        for k, c in counts.items():
            k = _index(k, "an update count")
            if not 0 <= k < n:
                raise MigrateError(f"{WHO}: the optimizer counts updates of MXNet index {k}, but there "
                                   f"are {n} parameters.")
            count[pos[k]] = checked_count(c, f"{WHO}: the update count of {label(k)}")
        whole[_COUNT] = count
        whole[_NUM_UPDATE] = np.asarray(checked_count(_attr(opt, "num_update", begin), f"{WHO}: num_update"),
                                        np.int32)
        if name == "nadam":
            # a product of momenta in (0, 1): 1 at the start, and 0 once it underflows (MXNet's
            # float64 after ~900 updates; gradxform's float32 after ~110), `NadamState.domains`
            whole[Slot(NadamState, "m_schedule")] = np.asarray(checked_value(
                _attr(opt, "m_schedule", 1.0), f"{WHO}: m_schedule", NadamState.domains["m_schedule"]), np.float32)
        if name == "lbsgd":
            _lbsgd_accumulators(opt, state0, params, pos, per_leaf, whole)
        if name == "lars" and has_slot(state0, params, Slot(LrRatioTraceState, "last_lr")):
            whole[Slot(LrRatioTraceState, "last_lr")] = _lars_last_lr(opt, state0, n)
    else:
        if num_update is None:
            raise MigrateError(f"{WHO}: a Module .states file holds no update counts; pass num_update="
                               "<updates done so far> (it drives schedules and bias corrections).")
        num_update = checked_count(num_update, f"{WHO}(num_update=...)")
        whole[_COUNT] = np.full((n,), num_update, np.int32)
        whole[_NUM_UPDATE] = np.asarray(num_update, np.int32)

    hint = (f"was tx made with gradxform.create({name!r}, ...) and the run's options "
            "(momentum, centered, multi_precision)?")
    new_state = fill_state(state0, params, per_leaf, whole, who=WHO, hint=hint)
    if opt is not None:
        port_sched = getattr(tx, "lr_scheduler", None)
        _check_hypers(opt, new_state, port_sched)
        check_user_scheduler(opt.attrs.get("lr_scheduler"), port_sched, WHO, opt.attrs.get("num_update"))
    return new_state


def _is_name(key) -> bool:
    """A path entry Gluon names a parameter by: a dict key that is text, or an attribute."""
    return isinstance(key, jax.tree_util.GetAttrKey) or (
        isinstance(key, jax.tree_util.DictKey) and isinstance(key.key, str))


def gluon_order(params) -> list[int]:
    """The leaf position of each MXNet index when no ``order`` is given: one rule
    for `from_gluon_states` and ``Trainer.load_states``.

    MXNet 1.9.1's ``gluon.Trainer`` numbers the parameters of the dict it is
    given in sorted-key order (``sorted(params.keys())``), the keys being Gluon
    names: a nested block's parameter is its blocks' names and its own joined
    by '_' (``dense0_weight``). So where every path entry of ``params`` is a
    dict key or an attribute, index ``i`` is the ``i``-th leaf by its
    '_'-joined path (``dense0_bias, dense0_weight, dense10_bias, ...,
    dense1_bias``), whatever JAX's leaf order (which sorts each level apart:
    ``dense1/*`` before ``dense10/*``). A tree with list positions at the top
    (a list of arrays, or of layers) keeps its leaf order: index ``i`` is leaf
    ``str(i)``. Any other tree (list positions below dict keys) has no Gluon
    name; its leaf order is taken where it agrees with the sorted '_'-joined
    paths, and otherwise `MigrateError` asks for ``order``.
    """
    paths = [_without_variable_value(p) for p, _ in jax.tree_util.tree_flatten_with_path(params)[0]]
    leaf = list(range(len(paths)))
    if not paths or all(p and not _is_name(p[0]) for p in paths):
        return leaf  # a sequence at the top: MXNet index i is leaf i
    gluon = ["_".join(key_name(k) for k in p) for p in paths]
    ranked = sorted(leaf, key=gluon.__getitem__)
    slash = param_names(params)
    how = (f"pass order=[gradxform names in the Trainer's order]: trainer.load_states(fname, order=['{slash[0]}', "
           "...]) or from_gluon_states(fname, params, tx, order=[...]) (print(sorted(net.collect_params().keys())) "
           "in the MXNet script lists the Trainer's order)")
    same = next(((a, j) for a, j in zip(ranked, ranked[1:]) if gluon[a] == gluon[j]), None)
    if same is not None:
        raise MigrateError(f"{WHO}: parameters {slash[same[0]]!r} and {slash[same[1]]!r} have the same Gluon "
                           f"name {gluon[same[0]]!r} (their paths joined by '_'), so Gluon's sorted order cannot "
                           f"tell them apart; {how}.")
    if all(_is_name(k) for p in paths for k in p) or ranked == leaf:
        return ranked
    odd = next(slash[i] for i, p in enumerate(paths) if not all(_is_name(k) for k in p))
    raise MigrateError(f"{WHO}: cannot tell Gluon's parameter order: {odd!r} has a list position below a dict "
                       f"key, which no Gluon name has, and JAX's leaf order differs from the sorted names; {how}; "
                       "or key every level by name ({'dense0': {'weight': ...}}).")


def _lars_last_lr(opt, state0, n: int) -> np.ndarray:
    """Each parameter's rate at its last update: MXNet LARS keeps one ``cur_lr``
    on the optimizer (the scheduler's, before multipliers), which its next step
    divides by (momentum correction, ``lr / last_lr``); times each leaf's
    ``lr_mult`` as the state holds it. 0 (no correction) before any update."""
    cur = _attr(opt, "cur_lr", None)
    if cur is None:
        return np.zeros((n,), np.float32)
    cur = checked_value(cur, f"{WHO}: LARS cur_lr", LrRatioTraceState.domains["last_lr"])
    found = find_states(state0, StepState)
    mult = found[0].lr_mult if found else None
    mults = np.ones((n,), np.float32) if mult is None else np.asarray(mult, np.float32).reshape(n)
    return (np.float32(cur) * mults).astype(np.float32)


def _lbsgd_accumulators(opt, state0, params, pos, per_leaf, whole):
    cum = _attr(opt, "cumgrads", {}) or {}
    leaves = jax.tree.leaves(params)
    grads, counts = [None] * len(leaves), None
    if not isinstance(cum, dict):
        raise MigrateError(f"{WHO}: LBSGD's cumgrads are a {type(cum).__name__}, not a dict.")
    for k, entry in cum.items():
        k = _index(k, "an LBSGD accumulator")
        if not isinstance(entry, dict) or not 0 <= k < len(leaves):
            raise MigrateError(f"{WHO}: LBSGD accumulator {short(k)} is malformed.")
        # MXNet's _cumulate_gradient writes both keys and reads num_cums from any non-empty
        # record (KeyError without it); an empty one it takes as no record (`if cgrad:`).
        if not entry:
            continue
        if not {"cum_grad", "num_cums"} <= entry.keys():
            raise MigrateError(f"{WHO}: LBSGD accumulator {k} is malformed: it has the keys "
                               f"{short(sorted(map(str, entry)))}; MXNet writes 'cum_grad' and 'num_cums'.")
        g = entry["cum_grad"]
        g = g.value if isinstance(g, MXNDArray) else g
        leaf = leaves[pos[k]]
        grads[pos[k]] = (np.zeros(np.shape(leaf), np.dtype(leaf.dtype)) if np.isscalar(g)
                         else _check_array(g, leaf, f"LBSGD accumulator {k}", None))
        if counts is None:
            counts = {}
        counts[pos[k]] = checked_count(entry["num_cums"], f"{WHO}: LBSGD num_cums of index {k}")
    if any(g is not None for g in grads):
        per_leaf[Slot(LBSGDState, "cum_grad")] = grads
    if counts:
        init = checked_count(_attr(opt, "init_updates", 0) or 0, f"{WHO}: LBSGD init_updates")
        vec = np.full((len(leaves),), init, np.int32)
        for j, c in counts.items():
            vec[j] = c
        whole[Slot(LBSGDState, "num_cums")] = vec


def _check_attr_types(opt: PickledObject) -> None:
    """The optimizer attributes gradxform reads hold what MXNet keeps there: a
    number or None for each hyperparameter, a record or None for the
    scheduler, a dict for ``idx2name``; anything else is a corrupt file."""
    for m in (*_HYPER, "lr"):
        v = opt.attrs.get(m)
        if v is not None and (isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.number))):
            raise MigrateError(f"{WHO}: the optimizer's {m} is {short(v)}; MXNet keeps a number there.")
    sched = opt.attrs.get("lr_scheduler")
    if sched is not None and not isinstance(sched, PickledObject):
        raise MigrateError(f"{WHO}: the optimizer's lr_scheduler is {short(sched)}, not a scheduler record.")
    if not isinstance(opt.attrs.get("idx2name", {}) or {}, dict):
        raise MigrateError(f"{WHO}: the optimizer's idx2name is {short(opt.attrs['idx2name'])}, not a dict.")


_RESCALE_NOTE = ("Gluon's Trainer sets rescale_grad to 1/batch_size at every step, so the file holds the last "
                 "step's (an AMP run's: 1/(loss_scale*batch_size)); give tx rescale_grad=1/batch_size, not the "
                 "file's value (gradxform.Trainer sets it itself, as Gluon's).")


def _check_hypers(opt: PickledObject, state, port_sched=None) -> None:
    """Warns where tx's hyperparameters or its use of a scheduler differ from the run's;
    ``port_sched``: tx's scheduler object, which counts as one where the Trainer evaluates it
    on the host (a Python rule JAX cannot trace: its state holds no schedule)."""
    expected = {g: opt.attrs[m] for m, g in _HYPER.items()
                if isinstance(opt.attrs.get(m), (int, float)) and not isinstance(opt.attrs.get(m), bool)}
    sched = opt.attrs.get("lr_scheduler")
    if sched is None and isinstance(opt.attrs.get("lr"), (int, float)):
        expected["learning_rate"] = opt.attrs["lr"]
    warn_hyper_mismatch(state, expected, WHO, notes={"rescale_grad": _RESCALE_NOTE})
    scheduled = [bool(np.asarray(h["scheduled"])) for h in _step_hypers(state)]
    if scheduled and (sched is not None) != (any(scheduled) or port_sched is not None):
        warn_at_caller(f"{WHO}: the run {'used' if sched is not None else 'did not use'} an lr_scheduler "
                       f"({getattr(sched, 'class_name', None)}) but tx {'does not' if sched is not None else 'does'};"
                       " the learning rates will differ.")


def _step_hypers(state):
    return [node.hyper for node in find_states(state, StepState)]


def _shape_of(st, depth: int = 0) -> str:
    if st is None:
        return "None"
    if isinstance(st, (np.ndarray, RowSparse)):
        return f"an array {st.shape}"
    if isinstance(st, tuple):  # states are small (`_plain`); this bounds the walk anyway
        if depth >= 3:
            return "(...)"
        inner = [_shape_of(s, depth + 1) for s in st[:4]] + (["..."] if len(st) > 4 else [])
        return "(" + ", ".join(inner) + ")"
    return type(st).__name__


def _check_array(a, leaf, what: str, dtype, shape: tuple | None = None) -> np.ndarray:
    """``a`` as a dense array once its shape (``shape``, default the
    parameter's), dtype and values fit ``leaf``."""
    if not isinstance(a, (np.ndarray, RowSparse)):
        raise MigrateError(f"{WHO}: {what} is {_shape_of(a)}, not an array.")
    want = tuple(np.shape(leaf)) if shape is None else tuple(shape)
    if a.shape != want:
        raise MigrateError(f"{WHO}: {what} has shape {a.shape} but the parameter has shape "
                           f"{tuple(np.shape(leaf))}" + ("" if shape is None else f" (its state {want})")
                           + "; was the file saved for other parameters or another order?")
    if dtype is not None and a.dtype != np.dtype(dtype):
        raise MigrateError(f"{WHO}: {what} is {a.dtype}; expected {np.dtype(dtype)}.")
    if not np.issubdtype(a.dtype, np.floating):
        raise MigrateError(f"{WHO}: {what} is {a.dtype}, not a floating-point array.")
    a = a.dense() if isinstance(a, RowSparse) else a
    if not np.all(np.isfinite(a)):
        raise MigrateError(f"{WHO}: {what} holds NaN or Inf; MXNet's state was already diverged when "
                           "it was saved (resume from an earlier checkpoint).")
    return a
