"""Reading a Paddle optimizer state (``paddle.save(opt.state_dict(), 'x.pdopt')``) without Paddle:
ASGD, and SGD ... Rprop (`ACCUMULATORS` maps Paddle's accumulator names to gradxform's state).

Format (Paddle 3.x dygraph; ``tools/PADDLE_NOTES.md`` section 3): a plain
pickle (protocol 2-4) of a dict whose values are numpy arrays::

    "<param>_d_<u>"  float, param shape            running sum of the stored gradients
    "<param>_y_<u>"  float, [batch_num, *shape]   the last batch_num gradients (ring buffer)
    "<param>_m_<u>"  int64, [1]                   steps applied to the parameter
    "LR_Scheduler"   {"last_epoch": int, "last_lr": float, ...}   when the lr is a scheduler
    "master_weights" {param: array}               multi_precision float16/bfloat16 only
    "StructuredToParameterName@@"                 bookkeeping, ignored

``<param>`` is the Paddle parameter name (``linear_0.w_0``) and ``<u>`` a
per-process unique-name counter (``_0`` in a fresh process); an optimizer
built with ``name='foo'`` writes ``<param>_foo_d_<u>``. The pickle is read
with the restricted unpickler: only numpy arrays, dtypes and scalars.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, cast

import jax
import numpy as np

from .._state_paths import find_states, is_leaf_vector, state_paths
from .._tree import param_names
from .._warn import warn_at_caller
from ..paddle._adam import AdamaxState, AdamState, LambState
from ..paddle._adaptive import AdadeltaState, AdagradState, NAdamState, RAdamState, RMSPropState, RpropState
from ..paddle._asgd import ASGDState
from ..paddle._sgd import MomentumState
from ..pieces.internal import MasterWeightsState
from ..pieces.internal import StepState
from ..paddle._plateau import PlateauState
from ._errors import refuse_unmigratable, short
from ._loss_scale import paddle_scaler
from ._pickle import NUMPY_GLOBALS, MigrateError, read_bytes, safe_loads
from .._ranges import Range, declared_range
from ._state import Slot, at_boundary, checked_count, checked_value, fill_state

__all__ = ["read_paddle_state_dict", "from_paddle_state_dict", "to_paddle_state_dict", "paddle_accumulators",
           "ACCUMULATORS"]

#: state class -> {field: Paddle accumulator name}; fields listed in the class's
#: ``per_leaf_fields`` are Paddle's ``[1]`` (or parameter-shaped, all equal) powers,
#: held as one vector with an entry per leaf (flatten order), each parameter's own value
ACCUMULATORS = {
    MomentumState: {"velocity": "velocity"},
    AdamState: {"moment1": "moment1", "moment2": "moment2", "moment2_max": "moment2_max",
                "beta1_pow": "beta1_pow_acc", "beta2_pow": "beta2_pow_acc"},
    AdamaxState: {"moment": "moment", "inf_norm": "inf_norm", "beta1_pow": "beta1_pow_acc"},
    LambState: {"moment1": "moment1", "moment2": "moment2", "beta1_pow": "beta1_pow_acc",
                "beta2_pow": "beta2_pow_acc"},
    AdagradState: {"moment": "moment"},
    AdadeltaState: {"avg_squared_grad": "_avg_squared_grad", "avg_squared_update": "_avg_squared_update"},
    RMSPropState: {"momentum": "momentum", "mean_square": "mean_square", "mean_grad": "mean_grad"},
    NAdamState: {"moment1": "moment1", "moment2": "moment2", "momentum_decay_pow": "momentum_decay_pow",
                 "beta2_pow": "beta2_pow", "mu_product": "mu_product"},
    RAdamState: {"moment1": "moment1", "moment2": "moment2", "beta1_pow": "beta1_pow", "beta2_pow": "beta2_pow",
                 "rho": "rho"},
    RpropState: {"prevs": "prevs", "learning_rates": "learning_rates"},
}

WHO = "from_paddle_state_dict"
_IGNORED = ("StructuredToParameterName@@",)
_SPECIAL = ("LR_Scheduler", "master_weights")


def _to_numpy(v, key: str):
    if isinstance(v, np.ndarray):
        return v
    if isinstance(v, (dict, str, int, float)) or v is None:
        return v
    if hasattr(v, "numpy"):  # a paddle Tensor, when the dict comes straight from opt.state_dict()
        return np.asarray(v.numpy())
    if hasattr(v, "__array__"):
        return np.asarray(v)
    raise MigrateError(f"{WHO}: entry {short(key)} is a {type(v).__name__}; expected an array.")


@at_boundary(WHO)
def read_paddle_state_dict(path_or_dict) -> dict[str, Any]:
    """The optimizer state dict as ``{key: numpy array | dict}`` (bookkeeping removed)."""
    if isinstance(path_or_dict, Mapping):
        raw, label = dict(path_or_dict), "state_dict"
    else:
        data, label = read_bytes(path_or_dict, WHO)
        raw = safe_loads(data, f"{WHO}({label!r})", allowed=(NUMPY_GLOBALS,))
        if not isinstance(raw, dict):
            raise MigrateError(f"{WHO}({label!r}): expected a dict (paddle.save(opt.state_dict(), ...)); "
                               f"got {type(raw).__name__}.")
    out = {}
    for k, v in raw.items():
        if k in _IGNORED:
            continue
        if not isinstance(k, str):
            raise MigrateError(f"{WHO}({label!r}): key {short(k)} is not a string.")
        if k == "master_weights" and isinstance(v, Mapping):
            out[k] = {mk: _to_numpy(mv, f"master_weights[{mk!r}]") for mk, mv in v.items()}
        else:
            out[k] = _to_numpy(v, k)
    return out


_ACC = re.compile(r"^(.+)_([dym])_\d+$")


def _index_accumulators(keys) -> dict[str, list[tuple[str, str]]]:
    """``{prefix: [(accumulator, key)]}``, prefix = the key without ``_<d|y|m>_<n>``."""
    index: dict[str, list[tuple[str, str]]] = {}
    for key in keys:
        m = _ACC.match(key)
        if m is not None:
            index.setdefault(m.group(1), []).append((m.group(2), key))
    return index


def _accumulators(index, sd: dict, pname: str, gname: str) -> dict[str, tuple[str, np.ndarray]]:
    entries = list(index.get(pname, []))
    if not entries:  # an optimizer built with name='foo' writes '<param>_foo_d_0'
        entries = [e for prefix, es in index.items() if prefix.startswith(pname + "_") for e in es]
    found: dict[str, tuple[str, np.ndarray]] = {}
    for acc, key in entries:
        if acc in found:
            raise MigrateError(f"{WHO}: parameter {gname!r} (Paddle {pname!r}) has two '{acc}' accumulators "
                               f"({found[acc][0]!r}, {key!r}); keep one optimizer's entries.")
        found[acc] = (key, sd[key])
    return found


@at_boundary(WHO)
def from_paddle_state_dict(path_or_dict, params, tx, names: Mapping[str, str] | None = None, *, state=None,
                           scaler=None):
    """The gradxform state of ``tx`` (``gradxform.create('paddle.<optimizer>', ...)``
    with the run's hyperparameters: SGD ... Rprop, ASGD) continuing a Paddle run.

    Restores each parameter's accumulators (`ACCUMULATORS`: ``velocity``,
    ``moment1``, ``beta1_pow_acc``, ...; ASGD's ``d``, ``y`` ring buffer and
    step count ``m``), ``master_weights`` and, when the run used an
    ``LRScheduler``, the schedule position (``last_epoch``) and an in-graph
    `PaddleReduceOnPlateau`'s state, so the next ``tx.update`` is Paddle's
    next ``opt.step()``. When ``tx`` reads a scheduler object the user steps
    (`gradxform.paddle.lr`, ReduceOnPlateau included), ``'LR_Scheduler'`` is
    that object's: restore it with ``sched.set_state_dict(sd['LR_Scheduler'])``
    (the stateful optimizer's ``opt.set_state_dict(path, names=...)`` does
    both).

    Args:
      path_or_dict: a ``.pdopt`` file (path or binary file object) or the
        state dict itself (numpy arrays or Paddle tensors).
      params: the parameters (as for ``tx.init``).
      tx: the gradxform optimizer.
      names: gradxform parameter name ('/'-joined key path) -> Paddle
        parameter name (``linear_0.w_0``); default identical.
      state: the state to write the file's values into (default
        ``tx.init(params)``): what it holds beyond Paddle's layout (a
        ``set_lr`` rate, the step count without a scheduler) is kept, as
        Paddle's ``set_state_dict`` keeps the optimizer's own attributes.
      scaler: a mixed-precision run's ``GradScaler.state_dict()`` (the dict,
        or the file ``paddle.save`` wrote it to): its ``scale`` and counters
        go into ``tx``'s `gradxform.pieces.dynamic_loss_scale` (a
        `MigrateError` says what to wrap ``tx`` in when it scales no loss).

    Raises: `MigrateError` naming the parameter for a missing or extra entry
    or a shape/dtype that does not fit; `UnsafePickleError` for a pickle
    naming anything but numpy arrays.
    """
    state0 = tx.init(params) if state is None else state
    refuse_unmigratable(state0, WHO, "paddle")  # before the file is read
    sd = read_paddle_state_dict(path_or_dict)
    gnames = param_names(params)
    leaves = jax.tree.leaves(params)
    names = dict(names or {})
    unknown = sorted(set(names) - set(gnames))
    if unknown:
        raise MigrateError(f"{WHO}(names=...): {unknown[0]!r} is not a parameter name; the names are "
                           f"{gnames[:8]}{' ...' if len(gnames) > 8 else ''}.")
    held = getattr(tx, "lr_scheduler", None) is not None  # a scheduler object the user steps (paddle.lr)
    if scaler is not None:  # checked before the optimizer's file is read into the state
        state0 = paddle_scaler(scaler, state0, WHO)
    if find_states(state0, ASGDState):
        return _fill_asgd(sd, params, leaves, gnames, names, state0, held)
    return _fill_accumulators(sd, params, leaves, gnames, names, state0, held)


def _paddle_name(g, names, keys):
    """The Paddle name of gradxform parameter ``g``: ``names[g]``, else ``g``
    itself when the state's keys use it, else ``g`` with '/' as '.' (a nested
    tree's 'dense/weight' is Paddle's 'dense.weight')."""
    p = names.get(g, g)
    if g not in names and "/" in g and not any(k.startswith(p + "_") for k in keys):
        p = g.replace("/", ".")
    return p


def _names_advice(keys, acc: str, gnames) -> str:
    """What to type when the file names its parameters otherwise (Paddle's
    automatic names, ``linear_0.w_0``, for a port's ``fc1/weight``): the
    mapping, where to pass it, and some of the file's own keys."""
    pat = re.compile(r"_" + re.escape(acc) + r"_\d+$")
    mine = sorted(k for k in keys if pat.search(k)) or sorted(keys)
    shown = ", ".join(repr(k) for k in mine[:4]) + (", ..." if len(mine) > 4 else "")
    files = sorted({pat.sub("", k) for k in mine})[:3]
    example = f"{{{gnames[0]!r}: <its Paddle name{', e.g. one of ' + repr(files) if files else ''}>, ...}}" \
        if gnames else "{...}"
    return (f"pass names={{gradxform name: Paddle name}} for every parameter if the file names them otherwise "
            f"(names={example}): opt.set_state_dict(path, names=...) on a gradxform.paddle optimizer holding "
            "its parameters, or state = gradxform.migrate.from_paddle_state_dict(path, params, tx, names=...). "
            f"The file's keys are {shown or 'none'}; keep one optimizer's entries in it.")


def _fill_accumulators(sd, params, leaves, gnames, names, state0, held):
    keys = [k for k in sd if k not in _SPECIAL]
    used: set[str] = set()
    per_leaf: dict = {}
    nodes = [n for _, n in state_paths(state0) if type(n) in ACCUMULATORS]
    treedef = jax.tree.structure(params)
    for node in nodes:
        cls = type(node)
        pows = getattr(cls, "per_leaf_fields", ())
        for field, acc in ACCUMULATORS[cls].items():
            if field not in node._fields or not (is_leaf_vector(node, field, len(leaves)) if field in pows
                                                 else jax.tree.structure(getattr(node, field)) == treedef):
                continue  # amsgrad off (moment2_max is ()), or not this piece's tree
            values = []
            for g, leaf in zip(gnames, leaves):
                p = _paddle_name(g, names, keys)
                pat = re.compile(r"^" + re.escape(p) + r"_(?:[^.]*_)?" + re.escape(acc) + r"_\d+$")
                hits = [k for k in keys if pat.match(k)]
                if len(hits) > 1:
                    raise MigrateError(f"{WHO}: {len(hits)} '{acc}' accumulators ({hits[0]!r}, {hits[1]!r}) for "
                                       f"parameter {g!r}; keep one optimizer's entries.")
                if not hits:
                    raise MigrateError(f"{WHO}: no '{acc}' accumulator ('{p}_{acc}_0') for parameter {g!r}; "
                                       + _names_advice(keys, acc, gnames))
                arr = sd[hits[0]]
                if not isinstance(arr, np.ndarray):
                    raise MigrateError(f"{WHO}: {hits[0]!r} is a {type(arr).__name__}, not an array.")
                used.add(hits[0])
                if field in pows:  # Paddle's [1] (or parameter-shaped) running product
                    if arr.size == 0 or not np.all(arr.reshape(-1) == arr.reshape(-1)[0]):
                        raise MigrateError(f"{WHO}: {hits[0]!r} should hold one value; got shape {arr.shape}.")
                    arr = arr.reshape(-1)[:1].reshape(())
                values.append(arr)
            per_leaf[Slot(cls, field)] = values  # a power: into its vector's entry for the leaf
    extra = sorted(set(keys) - used)
    if extra:
        raise MigrateError(f"{WHO}: the state has {extra[0]!r}, which belongs to no accumulator of tx "
                           f"({len(extra)} such entries); was it saved by another optimizer or model?")
    masters = [(sd.get("master_weights") or {}).get(_paddle_name(g, names, keys)) for g in gnames]
    if any(m is not None for m in masters):
        per_leaf[Slot(MasterWeightsState, "master")] = [None if m is None else np.asarray(m) for m in masters]
    whole = _scheduler_slots(sd, None, len(gnames), held)
    hint = "was tx made with gradxform.create('paddle.<optimizer>', ...) with the run's options?"
    return fill_state(state0, params, per_leaf, whole, who=WHO, hint=hint)


def _scheduler_slots(sd, position, n_leaves, held=False) -> dict:
    """The schedule's position (``LR_Scheduler.last_epoch``) as step counts, and
    ReduceOnPlateau's state; ``position``: the optimizer's own count (ASGD).

    ``held``: tx reads a scheduler object the user steps (`gradxform.paddle.lr`):
    the entry is that object's state (``sched.set_state_dict(sd['LR_Scheduler'])``,
    which the stateful optimizer's ``set_state_dict`` does), not the optimizer
    state's. Its ``last_epoch`` (epochs for a scheduler stepped per epoch, metric
    steps for ReduceOnPlateau) then only marks the state as resumed, for
    `gradxform.schedules.ScheduleRestartError`; ASGD keeps its own count."""
    whole = {}
    sched = sd.get("LR_Scheduler")
    if sched is not None:
        if not isinstance(sched, dict) or "last_epoch" not in sched:
            raise MigrateError(f"{WHO}: 'LR_Scheduler' should be a scheduler state dict with 'last_epoch'.")
        last_epoch = checked_count(sched["last_epoch"], f"{WHO}: LR_Scheduler last_epoch")
        if position is not None and last_epoch != position and not held:
            # at the user's line (a fixed stacklevel 4 pointed into at_boundary's wrapper in _state.py)
            warn_at_caller(f"{WHO}: the LRScheduler was stepped {last_epoch} times over {position} optimizer "
                           "steps; gradxform advances a schedule once per update, so the learning rate "
                           "continues from the scheduler's position but then moves once per update.")
        position = last_epoch if position is None or not held else position
        if "best" in sched and not held:  # ReduceOnPlateau: each value checked (issue 27 item 5) before it is stored
            best = sched.get("best")
            what = f"{WHO}: LR_Scheduler"
            whole.update({
                Slot(PlateauState, "last_lr"): np.float32(checked_value(
                    sched.get("last_lr"), f"{what} last_lr", cast(Range, declared_range(None, "learning_rate")))),
                Slot(PlateauState, "best"): np.float32(0.0 if best is None else checked_value(best, f"{what} best",
                                                                                              Range())),
                Slot(PlateauState, "has_best"): np.asarray(best is not None, np.int32),
                Slot(PlateauState, "num_bad_epochs"): np.int32(checked_count(sched.get("num_bad_epochs", 0),
                                                                             f"{what} num_bad_epochs")),
                Slot(PlateauState, "cooldown_counter"): np.int32(checked_count(sched.get("cooldown_counter", 0),
                                                                               f"{what} cooldown_counter"))})
    if position is not None:
        whole[Slot(StepState, "count")] = np.asarray(position, np.int32)
        whole.setdefault(Slot(StepState, "leaf_counts"), np.full(n_leaves, position, np.int32))
    return whole


def _fill_asgd(sd, params, leaves, gnames, names, state0, held):
    keys = [k for k in sd if k not in _SPECIAL]
    used: set[str] = set()
    d_vals, y_vals, counts, masters = [], [], [], []
    index = _index_accumulators(keys)
    for g, leaf in zip(gnames, leaves):
        p = _paddle_name(g, names, keys)
        acc = _accumulators(index, sd, p, g)
        for a in "dym":
            if a not in acc:
                raise MigrateError(f"{WHO}: no '{a}' accumulator ('{p}_{a}_0') for parameter {g!r}"
                                   + ("" if p == g else f" (Paddle name {p!r})") + "; "
                                   + _names_advice(keys, a, gnames))
        shape = tuple(np.shape(leaf))
        (kd, d), (ky, y), (km, m) = acc["d"], acc["y"], acc["m"]
        used.update((kd, ky, km))
        for key, arr in ((kd, d), (ky, y), (km, m)):
            if not isinstance(arr, np.ndarray):
                raise MigrateError(f"{WHO}: {key!r} is a {type(arr).__name__}, not an array.")
        if d.shape != shape:
            raise MigrateError(f"{WHO}: {kd!r} has shape {d.shape} but parameter {g!r} has shape {shape}; was "
                               "the state saved for other parameters?")
        if y.shape[1:] != shape:
            raise MigrateError(f"{WHO}: {ky!r} has shape {y.shape}; parameter {g!r} of shape {shape} needs "
                               f"(batch_num,) + {shape}.")
        if m.size != 1 or not np.issubdtype(m.dtype, np.integer):
            raise MigrateError(f"{WHO}: {km!r} should be one integer step count; got {m.dtype} {m.shape}.")
        d_vals.append(d)
        y_vals.append(y)
        counts.append(checked_count(m, f"{WHO}: {km!r}"))
        mw = (sd.get("master_weights") or {}).get(p)
        masters.append(None if mw is None else np.asarray(mw))
    extra = sorted(set(keys) - used)
    if extra:
        raise MigrateError(f"{WHO}: the state has {extra[0]!r}, which belongs to no parameter in params "
                           f"({len(extra)} such entries); was it saved for another model?")
    asgd = find_states(state0, ASGDState)
    leaf_y = jax.tree.leaves(asgd[0].y if asgd else None)
    for g, y, t in zip(gnames, y_vals, leaf_y):
        if t is not None and y.shape[0] != np.shape(t)[0]:
            raise MigrateError(f"{WHO}: parameter {g!r} keeps {y.shape[0]} gradients (batch_num={y.shape[0]}) "
                               f"in the file but tx was made with batch_num={np.shape(t)[0]}.")
    per_leaf = {Slot(ASGDState, "d"): d_vals, Slot(ASGDState, "y"): y_vals}
    if any(m is not None for m in masters):
        per_leaf[Slot(MasterWeightsState, "master")] = masters
    count = np.asarray(counts, np.int32)
    position = int(count.max()) if len(count) else 0
    whole = _scheduler_slots(sd, position, len(gnames), held)
    # each parameter's own m (a parameter without a gradient at a step is skipped by Paddle and not
    # counted), not the position's: _scheduler_slots fills every leaf with the position
    whole[Slot(StepState, "leaf_counts")] = count
    hint = "was tx made with gradxform.create('paddle.asgd', ...) (and the run's LRScheduler)?"
    return fill_state(state0, params, per_leaf, whole, who=WHO, hint=hint)


# Paddle keeps these running products as one-element [1] tensors; the others (NAdam, RAdam) parameter-shaped
_POW_AS_ONE = (AdamState, AdamaxState, LambState)
_LOW = (np.dtype("float16"), np.dtype(jax.numpy.bfloat16))


def paddle_name_map(params) -> dict[str, str]:
    """gradxform name -> the Paddle name `to_paddle_state_dict` writes: the
    name with '/' as '.' (``dense/kernel`` -> ``dense.kernel``), the form the
    reader maps back."""
    out = {g: g.replace("/", ".") for g in param_names(params)}
    seen: dict[str, str] = {}
    for g, p in out.items():
        if p in seen:
            raise ValueError(f"state_dict: parameters {seen[p]!r} and {g!r} both become Paddle name {p!r}; "
                             "rename one of them.")
        seen[p] = g
    return out


def paddle_accumulators(state, params) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """``({accumulator: {paddle_name: array}}, {paddle_name: master weight})``
    of ``state`` in Paddle's layout (Paddle's ``opt._accumulators`` and
    ``opt._master_weights``): the inverse of what `from_paddle_state_dict`
    reads. Arrays are copies (host numpy), so a later donated step leaves them valid."""
    gnames, leaves = param_names(params), jax.tree.leaves(params)
    pnames = [paddle_name_map(params)[g] for g in gnames]
    treedef = jax.tree.structure(params)
    accs: dict[str, dict[str, np.ndarray]] = {}
    asgd = find_states(state, ASGDState)
    if asgd:
        step = find_states(state, StepState)[0]
        counts = ([step.count] * len(leaves) if step.leaf_counts is None
                  else list(np.asarray(step.leaf_counts)) if hasattr(step.leaf_counts, "shape")  # a vector
                  else treedef.flatten_up_to(step.leaf_counts))
        for acc, tree in (("d", asgd[0].d), ("y", asgd[0].y)):
            accs[acc] = {p: np.array(v, copy=True) for p, v in zip(pnames, treedef.flatten_up_to(tree))}
        accs["m"] = {p: np.asarray(c, np.int64).reshape(1) for p, c in zip(pnames, counts)}
    for _, node in state_paths(state):
        cls = type(node)
        if cls not in ACCUMULATORS:
            continue
        pows = getattr(cls, "per_leaf_fields", ())
        for field, acc in ACCUMULATORS[cls].items():
            if field in pows:  # a vector, each parameter's own power
                if not is_leaf_vector(node, field, len(leaves)):
                    continue
                vec = np.array(getattr(node, field), copy=True)
                accs.setdefault(acc, {}).update(
                    (p, vec[i].reshape(1) if cls in _POW_AS_ONE else np.full(np.shape(leaf), vec[i], vec.dtype))
                    for i, (p, leaf) in enumerate(zip(pnames, leaves)))
                continue
            if field not in node._fields or jax.tree.structure(getattr(node, field)) != treedef:
                continue
            out = accs.setdefault(acc, {})
            for p, v in zip(pnames, treedef.flatten_up_to(getattr(node, field))):
                out[p] = np.array(v, copy=True)
    masters = {}
    for mw in find_states(state, MasterWeightsState):
        for p, leaf, m in zip(pnames, leaves, treedef.flatten_up_to(mw.master)):
            if np.dtype(jax.numpy.result_type(leaf)) in _LOW and np.size(m):
                masters[p] = np.array(m, copy=True)
    return accs, masters


def to_paddle_state_dict(state, params, lr_scheduler_state: dict | None = None) -> dict[str, Any]:
    """Paddle's ``opt.state_dict()`` of ``state``: ``{'<param>_<accumulator>_0':
    array, ..., 'master_weights': {param: array} (float16/bfloat16 leaves
    under multi_precision), 'LR_Scheduler': lr_scheduler_state}`` (the last
    when given), as Paddle 3.3.1 ``Optimizer.state_dict``
    (``paddle/optimizer/optimizer.py``) writes it for a fresh process.
    `from_paddle_state_dict` reads it back bit for bit."""
    accs, masters = paddle_accumulators(state, params)
    out: dict[str, Any] = {}
    for acc, per in accs.items():
        for p, v in per.items():
            out[f"{p}_{acc}_0"] = v
    if masters:
        out["master_weights"] = masters
    if lr_scheduler_state is not None:
        out["LR_Scheduler"] = dict(lr_scheduler_state)
    return out
