"""Hyperparameters as state: read and change them between steps without a recompile.

They work on any container of an optimizer state: a plain state, a Flax
``TrainState.opt_state``, and an ``nnx.Optimizer``'s ``opt_state`` (whose
leaves are ``nnx`` Variables: `set_hyper` writes into them in place and also
returns the state), and inside ``jit``, where values are traced: the range check then runs in the
program, and a value outside its range (NaN, a negative learning rate, epsilon 0,
Paddle's beta2 1.0) is not written: the slot keeps its previous value, since a
jitted program cannot raise. ``set_learning_rate``'s schedule check is skipped
there, and `get_learning_rate` returns an array.

Every piece keeps its numeric hyperparameters in a ``hyper`` dict field of its
state, as float32 scalars whatever the parameter dtype (a bfloat16 model keeps
``beta2=0.999`` as 0.999, not 1.0). Changing one with `set_hyper` swaps an
array of the same shape and dtype, so a jitted step never retraces. Values
are checked here, on the host, never inside the step.
"""
from __future__ import annotations

import difflib
import re

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jax.tree_util import GetAttrKey

from ._registry import _SYNONYMS  # the aliases create suggests (b1 -> beta1, lr -> learning_rate)
from ._group_hyper import GroupHyper, base_name, group_key
from ._ranges import HyperName, Range, check_value, declared_range, owner_of, register_range
from ._state_paths import map_states, state_paths
from ._tree import variable_value as _raw  # the array inside an nnx Variable (OptArray)

__all__ = [
    "hyper_scalar", "hyper_residual", "get_hyper", "set_hyper", "hyper_names",
    "get_learning_rate", "set_learning_rate", "check_range", "tag_owner",
]

HYPER_FIELDS = ("hyper", "hyperparams")  # ours, and optax.inject_hyperparams'
RESIDUAL_FIELD = "hyper_lo"  # optional float32 residuals of some hyperparameters
READ_ONLY = ("scheduled", "current_lr")


def hyper_scalar(value) -> jax.Array:
    return jnp.asarray(value, dtype=jnp.float32)


def hyper_residual(value) -> jax.Array:
    """``value - float32(value)`` as float32: with the float32 hyperparameter it
    carries about float64 precision, for the few rules that MXNet evaluates in
    float64 on the host (``1 - beta2**t`` loses 1e-5 relative in float32)."""
    v = np.float64(value)
    return jnp.asarray(np.float32(v - np.float64(np.float32(v))), dtype=jnp.float32)


def check_range(owner: str, name: str, value, *, low=None, high=None, low_open=False,
                high_open=False, allow_none=False) -> None:
    """Raises a ValueError that names the argument, the allowed range and the
    value, judged as the float32 it is stored as (`gradxform._ranges.check_value`)."""
    check_value(owner, name, value, Range(low, high, low_open, high_open), allow_none=allow_none)


def register_check(name: str, **range_kwargs) -> None:
    """Declares the generic range of hyperparameter ``name`` (`gradxform._ranges`)."""
    register_range(name, Range(**range_kwargs))


def _hyper_paths(state) -> list[tuple[tuple, dict]]:
    """``(path, dict)`` of every hyperparameter dict in ``state`` (a state
    node's ``hyper`` or ``hyperparams`` field), outermost state first."""
    return [(path + (GetAttrKey(f),), d) for path, node in state_paths(state) for f in HYPER_FIELDS
            if isinstance(d := getattr(node, f, None), dict)]


def _hyper_dicts(state) -> list[dict]:
    return [d for _, d in _hyper_paths(state)]


def _label(path) -> str:
    """A state path as ``where=`` takes it: ``'inner_states/a'``."""
    out = []
    for key in path:
        for attr in ("name", "key", "idx"):
            if hasattr(key, attr):
                out.append(str(getattr(key, attr)))
                break
        else:
            out.append(str(key))
    return "/".join(out)


def _holders(state) -> list[tuple[str, list[tuple[tuple, dict]]]]:
    """``[(label, [(path, hyper dict), ...]), ...]``: the hyperparameter dicts
    of ``state`` grouped by the optimizer holding them. Each gradxform
    optimizer has one step counter (`gradxform.pieces.StepState`); with
    several (two optimizers in ``optax.multi_transform``, ``optax.chain``,
    ``optax.partition``), an optimizer's dicts are those under its root: the
    shortest path of its counter that holds no other counter
    (``'inner_states/a'``). With one counter or none, every dict is one holder."""
    nodes = state_paths(state)
    dicts = [(path + (GetAttrKey(f),), d) for path, node in nodes for f in HYPER_FIELDS
             if isinstance(d := getattr(node, f, None), dict)]
    counters = [path for path, node in nodes if getattr(type(node), "step_counter", False)]  # StepState
    if len(counters) < 2:
        return [("", dicts)] if dicts else []

    def common(a, b):
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n
    roots = [t[:max(common(t, u) for u in counters if u is not t) + 1] for t in counters]
    groups: dict[tuple, list] = {r: [] for r in roots}
    for path, d in dicts:
        root = next((r for r in roots if path[:len(r)] == r), path[:-1])  # else: the node holding it
        groups.setdefault(root, []).append((path, d))
    return [(_label(r), g) for r, g in groups.items() if g]


EVERY = "*"  # where=EVERY: every optimizer holding the name


def _chosen(state, where, who: str, names) -> list[tuple[tuple, dict]]:
    """The ``(path, dict)`` pairs that ``who`` reads or writes: of the holder
    ``where`` names, or (``where=None``) of the one holder of each of
    ``names``; a ValueError naming the holders when several hold one and no
    ``where`` chooses."""
    holders = _holders(state)
    if where == EVERY or (where is None and len(holders) < 2):
        return [pd for _, group in holders for pd in group]
    labels = [label for label, _ in holders]
    if where is None:
        for name in names:
            having = [label for label, group in holders if any(name in d for _, d in group)]
            if len(having) > 1:
                example = {"get_hyper": f"get_hyper(state, {name!r}, where={having[0]!r})",
                           "set_hyper": f"set_hyper(state, {name}=..., where={having[0]!r})",
                           "get_learning_rate": f"get_learning_rate(state, where={having[0]!r})",
                           "set_learning_rate": f"set_learning_rate(state, lr, where={having[0]!r})"}[who]
                every = " (where='*': every one)" if who.startswith("set") else ""
                raise ValueError(
                    f"{who}: {len(having)} optimizers in this state hold {name!r}, at "
                    f"{', '.join(repr(h) for h in having)}; choose one: gradxform.{example}{every}.")
        return [pd for _, group in holders for pd in group]
    want = str(where).strip("/")
    hit = [h for h in holders if h[0] == want or h[0].endswith("/" + want)]
    if not hit:
        parts = want.split("/")
        hit = [h for h in holders if any(any(_label(p[:-1]).split("/")[i:i + len(parts)] == parts
                                                 for i in range(len(p))) for p, _ in h[1])]
    if len(hit) != 1:
        shown = ", ".join(repr(label) for label in labels) or "none"
        what = "no optimizer" if not hit else f"{len(hit)} optimizers ({', '.join(repr(h[0]) for h in hit)})"
        raise ValueError(f"{who}: where={where!r} names {what} in this state; its optimizers are at "
                         f"{shown}.")
    return hit[0][1]


def _unknown_name(who: str, name: str, known: list[str]) -> str:
    """``who: no hyperparameter 'learning_rat' in this state; did you mean 'learning_rate'? ...``"""
    former = _FORMER_GROUP_KEY.match(name)
    if former and group_key(former.group(1)) in known:  # gradxform < 0.3 named a group's own value so
        base, k = former.groups()
        return (f"{who}: a parameter group's own {base} is written {who}(state, group={k}, {base}=...) "
                f"(read: get_hyper(state, {base!r}, group={k})); {name!r} is no hyperparameter of this state.")
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    close = close or [s for s in _SYNONYMS.get(name, ()) if s in known][:1]
    hint = f"; did you mean {close[0]!r}?" if close else "."
    return f"{who}: no hyperparameter {name!r} in this state{hint} It holds: {', '.join(known)}."


def _traced(x) -> bool:
    return isinstance(_raw(x), jax.core.Tracer)


def in_range(value, rng: Range) -> jax.Array:
    """Whether ``value`` (traced) lies in ``rng``, judged as the float32 it is
    stored as: the in-program twin of `gradxform._ranges.check_value`."""
    v = jnp.asarray(value).astype(jnp.float32)
    ok = jnp.isfinite(v)
    if rng.low is not None:
        ok &= (v > rng.low) if rng.low_open else (v >= rng.low)
    if rng.high is not None:
        ok &= (v < rng.high) if rng.high_open else (v <= rng.high)
    return ok


def _walk(state, visit) -> None:
    """Calls ``visit(hyper_dict, path)`` for every hyperparameter dict in ``state``."""
    for path, d in _hyper_paths(state):
        visit(d, path)


_FORMER_GROUP_KEY = re.compile(r"^(.+)_group_(\d+)$")  # how a group's own value was named before: beta1_group_1


def hyper_names(state) -> list[str]:
    """The names of every hyperparameter held in ``state`` (a parameter group's
    own values of ``name`` as ``name + '_groups'``, `GroupHyper`)."""
    names: list[str] = []
    for d in _hyper_dicts(state):
        names.extend(str(k) for k in d if k not in names)
    return names


def _check_group(group, who: str) -> int:
    if isinstance(group, bool) or not isinstance(group, (int, np.integer)) or group < 0:
        raise TypeError(f"{who}(group=...): a parameter group's position in the optimizer's groups, an int "
                        f">= 0; got {group!r}.")
    return int(group)


def _group_error(dicts, name: str, group: int, who: str) -> Exception:
    """Why group ``group`` has no value of its own for ``name`` in ``dicts``."""
    held = [v for d in dicts for v in d.values() if isinstance(v, GroupHyper)]
    if not held:
        return ValueError(f"{who}(group={group}): this optimizer has no parameter groups with hyperparameters "
                          "of their own (groups come from MindSpore's and Paddle's group dicts; MXNet's "
                          "per-parameter multipliers are lr_mult/wd_mult).")
    own = sorted({g for d in dicts for g in getattr(d.get(group_key(name)), "groups", ())})
    return KeyError(f"{who}(group={group}, {name}=...): group {group} sets no {name} of its own; its leaves use "
                    f"the optimizer's {name} ({who}({name}=...) without group= changes it for every group that "
                    f"sets none). Groups with their own {name}: {own or 'none'}.")


def _holds_group(d: dict, name: str, group: int) -> bool:
    held = d.get(group_key(name))
    if held is not None and not isinstance(held, GroupHyper):
        raise TypeError(f"the state's {group_key(name)} is a {type(held).__name__}, not the GroupHyper its optimizer "
                        "made (replaced by optax.tree_utils.tree_set?), so which groups it holds is lost: write a "
                        f"group's value with gradxform.set_hyper(state, group=k, {name}=value), or all of them with "
                        f"set_hyper(state, {group_key(name)}=[...]).")
    return isinstance(held, GroupHyper) and group in held.groups


def get_hyper(state, name: str, *, where=None, group=None):
    """The current value of hyperparameter ``name`` in ``state`` (a float32 array).

    ``group=k``: the value parameter group ``k`` uses (MindSpore and Paddle
    groups, counted from 0 as given): its own (its entry of ``name + '_groups'``,
    a `GroupHyper`), else the optimizer's ``name``.

    Raises KeyError listing the known names (and the closest) when the state
    holds no such value, and ValueError naming their paths when several
    optimizers hold it (two inside ``optax.multi_transform``): ``where=``
    chooses one, by its path or its last key (``where='a'``, ``where='inner_states/a'``).
    """
    if where == EVERY:
        raise ValueError("get_hyper: where='*' reads no single value; name one optimizer's path.")
    if group is not None:
        group = _check_group(group, "get_hyper")
        dicts = [d for _, d in _chosen(state, where, "get_hyper", (name, group_key(name)))]
        own = [d[group_key(name)] for d in dicts if _holds_group(d, name, group)]
        if own:
            return own[0].of(group)
        if not any(name in d for d in dicts):
            raise _group_error(dicts, name, group, "get_hyper")
    found = [d[name] for _, d in _chosen(state, where, "get_hyper", (name,)) if name in d]
    if not found:
        raise KeyError(_unknown_name("get_hyper", name, hyper_names(state)))
    return _raw(found[0].values if isinstance(found[0], GroupHyper) else found[0])


def set_hyper(state, *, where=None, group=None, **values):
    """Returns ``state`` with the named hyperparameters replaced (every piece of
    the optimizer that holds one of these names gets the new value). Values
    are range-checked here; the jitted step does not retrace, because shapes
    and dtypes stay.

    ``group=k``: the values of parameter group ``k`` (MindSpore and Paddle
    groups, counted from 0 as given): ``set_hyper(s, group=1, beta1=0.8)``
    writes group 1's entry of ``beta1_groups`` (a `GroupHyper`); a KeyError
    names the groups that set ``beta1`` of their own when group ``k`` does
    not (its leaves use the optimizer's ``beta1``). ``beta1_groups=`` (a
    vector, one value per group holding it) writes them all.

    Several optimizers in one state (``optax.multi_transform``, ``chain``)
    that hold a name: a ValueError naming their paths, unless ``where=``
    chooses one (its path, ``'inner_states/a'``, or its last key, ``'a'``)
    or is ``'*'`` (every one).

    Inside ``jit`` (a traced value) the same ranges are checked in the
    program: a value outside the range of any piece holding the name leaves
    every slot of that name as it was (never written unchecked)."""
    if group is not None:
        group = _check_group(group, "set_hyper")
        dicts = [d for _, d in _chosen(state, where, "set_hyper", [group_key(k) for k in values])]
        for k in values:
            if not any(_holds_group(d, k, group) for d in dicts):
                raise _group_error(dicts, k, group, "set_hyper")
        values = {group_key(k): v for k, v in values.items()}  # one entry of each GroupHyper: `new_value`
    chosen = _chosen(state, where, "set_hyper", values)
    mine = {path[:-1] for path, _ in chosen}  # the state nodes written
    known = []
    for _, d in chosen:
        known.extend(str(k) for k in d if k not in known)
    accepted: dict[str, jax.Array] = {}  # traced values: whether each passed its ranges
    owners: dict[str, list] = {}   # name -> the owner of every slot holding it
    for _, d in chosen:
        for k in d:
            if owner_of(k) not in owners.get(k, ()):
                owners.setdefault(k, []).append(owner_of(k))
    for name, value in values.items():
        if name in READ_ONLY:
            raise KeyError(f"set_hyper: {name!r} is derived by the optimizer and cannot be set.")
        if name not in known:
            raise KeyError(_unknown_name("set_hyper", name, known))
        value = _raw(value)
        vectors = {np.shape(d[name])[-1:] for _, d in chosen if isinstance(d.get(name), GroupHyper)}
        if group is None and vectors:  # every group's own value at once: a vector, judged entry by entry
            if len(vectors) > 1 or {np.shape(value)[-1:]} != vectors or np.ndim(value) < 1:
                raise ValueError(f"set_hyper({name}=...): expected one value per group holding it, shape "
                                 f"{' or '.join(map(str, sorted(vectors)))}; got shape {np.shape(value)} "
                                 f"(group=k, {base_name(name)}=value writes one group's).")
        elif isinstance(value, (jax.Array, np.ndarray)) and np.ndim(value) != 0:
            raise ValueError(f"set_hyper({name}=...): expected a scalar; got shape {np.shape(value)}.")
        ranges = [(owner, declared_range(owner, name) or Range()) for owner in owners[name]]  # undeclared: finite
        if isinstance(value, jax.core.Tracer):
            accepted[name] = jnp.all(jnp.stack([in_range(value, rng) for _, rng in ranges]))
            continue
        shown = (base_name(name) or name) if group is not None else name  # as the caller wrote it
        for owner, rng in ranges:
            of = f"group {group}'s own value" if group is not None else ""
            of += ("; " if of else "") + (f"the range of {owner}" if owner else "")
            for x in (np.asarray(value).reshape(-1).tolist() if np.ndim(value) else [value]):
                check_value("set_hyper", shown, x, rng, suffix=f" ({of})" if of else "")

    def new_value(k, v):
        if k not in values:
            return v
        if isinstance(v, GroupHyper):  # the groups' own values: one entry (group=) or all
            if group is not None and group not in v.groups:
                return v
            raw = _raw(v.values)
            new = jnp.asarray(_raw(values[k]), dtype=raw.dtype)
            # the last axis is the groups' (a vmapped batch of states has its runs first)
            new = raw.at[..., v.groups.index(group)].set(new) if group is not None else jnp.broadcast_to(new, raw.shape)
            if k in accepted:
                new = jnp.where(accepted[k], new, raw)
            new = _placed_as(new, raw)
            if raw is not v.values:  # an nnx Variable: written in place
                v.values.set_value(new)
                return v
            return GroupHyper(new, v.groups)
        raw = _raw(v)
        new = jnp.broadcast_to(jnp.asarray(_raw(values[k]), dtype=jnp.asarray(raw).dtype), jnp.shape(raw))
        if k in accepted:
            new = jnp.where(accepted[k], new, raw)
        new = _placed_as(new, raw)
        if raw is not v:  # an nnx Variable: written in place, as nnx.Optimizer holds it
            v.set_value(new)
            return v
        return new

    def residual(k, old):
        if k not in accepted:
            return hyper_residual(values[k])
        # a traced value is already the float32 it is stored as: no residual
        return jnp.where(accepted[k], jnp.zeros((), jnp.float32), _raw(old))

    def write(path, node):
        kids = {}
        if path not in mine:
            return node
        for f in node._fields:
            child = getattr(node, f)
            if f in HYPER_FIELDS and isinstance(child, dict):
                kids[f] = {k: new_value(k, v) for k, v in child.items()}
            elif f == RESIDUAL_FIELD and isinstance(child, dict):
                kids[f] = {k: (residual(k, v) if k in values else v) for k, v in child.items()}
        return node._replace(**kids) if kids else node

    return map_states(write, state)


def _placed_as(new, old):
    """``new`` where ``old`` lives (a sharded step's replicated scalar stays on its devices:
    a value on another placement would retrace the step); a traced value as it is."""
    sharding = getattr(old, "sharding", None)
    if sharding is None or isinstance(new, jax.core.Tracer) or isinstance(old, jax.core.Tracer):
        return new
    return new if getattr(new, "sharding", None) == sharding else jax.device_put(new, sharding)


def tag_owner(state, owner: str):
    """Returns ``state`` with the keys of its ``hyper`` dicts marked as made by
    ``owner`` (`gradxform._ranges.HyperName`), so that `set_hyper` checks them
    against ``owner``'s declared ranges. Keys that already have an owner (an
    optimizer wrapped by another) keep it. Called by `gradxform._optimizer.finalize`."""
    def tag(k):
        return k if owner_of(k) or not isinstance(k, str) else HyperName(k, owner)

    def write(_, node):
        kids = {f: {tag(k): v for k, v in getattr(node, f).items()} for f in node._fields
                if f in HYPER_FIELDS and isinstance(getattr(node, f), dict)}
        return node._replace(**kids) if kids else node

    return map_states(write, state)


def _scheduled(state, where=None, who="get_learning_rate"):
    """Whether a schedule sets the learning rate: a bool, or a traced bool inside jit."""
    chosen = _chosen(state, where, who, ("learning_rate",))
    flags = [_raw(d["scheduled"]) for _, d in chosen if "scheduled" in d]
    if any(isinstance(f, jax.core.Tracer) for f in flags):
        return jnp.any(jnp.stack([jnp.asarray(f, bool).reshape(()) for f in flags]))
    return any(bool(f) for f in flags)


def get_learning_rate(state, *, where=None) -> float | jax.Array:
    """The learning rate the optimizer uses now, schedule included.

    Without a schedule this is the ``learning_rate`` hyperparameter; with one it
    is the schedule's value at the current update count (MXNet's
    ``optimizer.learning_rate``). Per-parameter ``lr_mult`` is not applied.
    Several optimizers in one state: ``where=`` chooses one (`set_hyper`);
    without it, a ValueError names their paths.
    """
    if where == EVERY:
        raise ValueError("get_learning_rate: where='*' reads no single value; name one optimizer's path.")
    scheduled = _scheduled(state, where)
    if isinstance(scheduled, jax.Array):  # inside jit
        lr = get_hyper(state, "learning_rate", where=where)
        current = (get_hyper(state, "current_lr", where=where) if "current_lr" in hyper_names(state) else lr)
        return jnp.where(scheduled, current, lr)
    if scheduled:
        return float(get_hyper(state, "current_lr", where=where))
    return float(get_hyper(state, "learning_rate", where=where))


def set_learning_rate(state, learning_rate: float, *, where=None):
    """Returns ``state`` with a new base learning rate (no recompile).

    As in MXNet, this is refused when the learning rate comes from a schedule
    (inside jit that check cannot run: the value is written). Several
    optimizers in one state: ``where=`` chooses one, or ``'*'`` every one
    (`set_hyper`); without it, a ValueError names their paths.
    """
    scheduled = _scheduled(state, where, "set_learning_rate")
    if not isinstance(scheduled, jax.Array) and scheduled:
        raise UserWarning("LRScheduler of the optimizer has already been defined. Note that "
                          "set_learning_rate can mutate the value of the learning rate of the "
                          "optimizer only when the LRScheduler of the optimizer is undefined.")
    return set_hyper(state, learning_rate=learning_rate, where=where)


SCHEDULE_BASES = (None, "file", "optimizer")  # load_state(schedule_base=...)


def _base_differences(loaded, like) -> list[tuple]:
    """``(path, file's base, like's base)`` for each step counter whose learning
    rate is scheduled and whose base ``learning_rate`` differs between ``loaded``
    (a state read from a file) and ``like`` (the optimizer's own). Values that
    are not concrete (abstract ``like`` leaves) are not compared."""
    out = []
    for (path, node), (_, mine) in zip(state_paths(loaded), state_paths(like)):
        if not getattr(type(node), "step_counter", False):
            continue
        got, want = (getattr(n, "hyper", {}) for n in (node, mine))
        try:
            scheduled = bool(np.asarray(got.get("scheduled", 0))) and "learning_rate" in got
            a, b = (float(np.asarray(h["learning_rate"])) for h in (got, want)) if scheduled else (0.0, 0.0)
        except (TypeError, ValueError, KeyError):  # abstract leaves, or another structure
            continue
        if a != b:
            out.append((path, a, b))
    return out


def settle_schedule_bases(loaded, like, schedule_base=None):
    """``loaded`` with each scheduled base ``learning_rate`` settled against
    ``like``'s. A loaded base rescales a MindSpore/Paddle schedule (``set_hyper``'s
    rule), so a run resumed into an optimizer built with another schedule
    (MindSpore scripts load with ``filter_prefix=['learning_rate']`` and slice
    their lr list) would train at a scaled rate. Where the two differ, the
    caller says which holds: ``'optimizer'`` (``like``'s, the schedule as built),
    ``'file'`` (the saved run's); None is a ValueError saying both."""
    if schedule_base not in SCHEDULE_BASES:
        raise ValueError(f"load_state(schedule_base=...): must be None, 'file' or 'optimizer'; got {schedule_base!r}.")
    diffs = _base_differences(loaded, like)
    if not diffs or schedule_base == "file":
        return loaded
    if schedule_base is None:
        path, a, b = diffs[0]
        a32, b32 = str(np.float32(a)), str(np.float32(b))  # as written: 0.01, not 0.009999999776482582
        where = f" (the optimizer at {_label(path)!r})" if len(state_paths(like)) > 1 and _label(path) else ""
        raise ValueError(f"the file's schedule base learning_rate {a32} differs from this optimizer's {b32}{where}: "
                         f"loaded, it would scale this schedule by {a / b if b else float('inf'):.6g} "
                         "(set_hyper's rule). Say which holds: load_state(..., schedule_base='optimizer') keeps "
                         "the schedule as built (MindSpore's filter_prefix=['learning_rate']), "
                         "schedule_base='file' the saved run's base.")
    mine = dict(state_paths(like))
    moved = {path for path, _, _ in diffs}

    def keep(path, node):
        if path not in moved:
            return node
        old = node.hyper["learning_rate"]
        new = np.asarray(mine[path].hyper["learning_rate"], dtype=np.asarray(old).dtype)
        return node._replace(hyper=dict(node.hyper, learning_rate=new))
    return map_states(keep, loaded)
