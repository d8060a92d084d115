"""Clear errors at the boundary: `validated(tx)` checks what a step is given.

Shapes, dtypes and pytree structures are static under ``jit``, so every check
here runs in Python while the step is traced and costs nothing per compiled
step (without jit it costs a tree flatten per call; the state check is cached
per parameter signature). Each message names the argument, the pytree path
(`jax.tree_util.keystr`), what was given and what to do.

Decisions:

* **Integer and boolean leaves are an error**, at ``init`` and at ``update``:
  an optimizer's arithmetic on them is never what was meant (MXNet and
  PyTorch refuse them too). Keep step counters, masks and other non-trainable
  values out of the tree you optimise (`optax.partition`, or a separate
  state). Complex leaves are accepted (they are inexact).
* **Gradient dtypes must equal parameter dtypes** (after JAX's canonicalisation:
  float64 is float32 unless x64 is on). The one exception is a float32 gradient
  for a float16/bfloat16 parameter under ``multi_precision=True``, which the
  float32 master weights take as it is.
* **The state is checked against ``jax.eval_shape(tx.init, params)``**:
  same structure, shapes and dtypes, so a state from another optimizer, or for
  other parameters, is refused before it produces a wrong number.
"""
from __future__ import annotations

import warnings
from typing import Any

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jax.tree_util import keystr, tree_flatten_with_path

from ._base import GradientTransformation, run_inner, transformation
from ._spec import Fusion, declare
from ._hyper import HYPER_FIELDS, READ_ONLY
from ._domains import COUNT
from ._group_values import expand_groups
from ._group_hyper import GroupHyper
from ._hyper import _raw
from ._ranges import Range, check_value, declared_range, owner_of, stored_float32
from ._state_paths import get_path, is_optax_placeholder, map_states, state_paths, written_out
from .pieces.internal import per_leaf_counts

__all__ = ["validated", "check_params", "check_updates", "check_state", "first_difference"]

LOW_PRECISION = (np.dtype(jnp.float16), np.dtype(jnp.bfloat16))


def _dtype(x) -> np.dtype:
    dt = getattr(x, "dtype", None)
    if dt is None:
        dt = jnp.result_type(x)
    return np.dtype(jax.dtypes.canonicalize_dtype(dt))


def _shape(x) -> tuple:
    return tuple(np.shape(x))


def _is_array_like(x) -> bool:
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return True
    return isinstance(x, (int, float, complex, bool, np.number, np.bool_))


def _node_difference(ta, tb, depth: int, offset: int):
    """First node where two treedefs differ: (depth, leaf offset, a's node, b's node) or None."""
    if ta.num_nodes == 1 and ta.num_leaves == 1 and tb.num_nodes == 1 and tb.num_leaves == 1:
        return None
    try:
        same = ta.node_data() == tb.node_data()
        same = bool(same)
    except Exception:  # noqa: BLE001  (aux data that does not compare)
        same = False
    ca, cb = ta.children(), tb.children()
    if not same or len(ca) != len(cb):
        return depth, offset, ta, tb
    for x, y in zip(ca, cb):
        found = _node_difference(x, y, depth + 1, offset)
        if found:
            return found
        offset += x.num_leaves
    return None


def _describe_node(t) -> str:
    data = t.node_data()
    if data is None:
        return "a leaf"
    kind, aux = data
    name = getattr(kind, "__name__", str(kind))
    if kind is dict:
        return f"a dict with keys {list(aux)}"
    if hasattr(kind, "_fields"):
        return f"a {name} with fields {list(kind._fields)}"
    if kind in (list, tuple):
        return f"a {name} of length {t.num_nodes and len(t.children())}"
    return f"a {name}"


def first_difference(a, b, a_name: str, b_name: str) -> str | None:
    """A sentence naming the first path where the structures of ``a`` and ``b``
    differ, or None when they have the same structure."""
    ta, tb = jax.tree.structure(a), jax.tree.structure(b)
    if ta == tb:
        return None
    pa, _ = tree_flatten_with_path(a)
    pb, _ = tree_flatten_with_path(b)
    ka = [keystr(p) for p, _ in pa]
    kb = [keystr(p) for p, _ in pb]
    if ka != kb:
        sb = set(kb)
        sa = set(ka)
        for k in ka:
            if k not in sb:
                return f"{a_name}{k} has no counterpart in {b_name}"
        for k in kb:
            if k not in sa:
                return f"{b_name}{k} has no counterpart in {a_name}"
        for x, y in zip(ka, kb):
            if x != y:
                return f"leaf order differs at {a_name}{x} / {b_name}{y}"
    found = _node_difference(ta, tb, 0, 0)
    if found is None:
        return f"{a_name} and {b_name} differ in structure ({ta} vs {tb})"
    depth, offset, na, nb = found
    keys = pa[offset][0][:depth] if offset < len(pa) else ()
    where = keystr(tuple(keys))
    return (f"{a_name}{where} is {_describe_node(na)} but {b_name}{where} is "
            f"{_describe_node(nb)}")


def check_params(params, who: str = "init") -> None:
    """Every leaf of ``params`` is a floating-point (or complex) array."""
    for path, leaf in tree_flatten_with_path(params)[0]:
        where = f"params{keystr(path)}"
        if not _is_array_like(leaf):
            raise TypeError(f"{who}: {where} is a {type(leaf).__name__}, not an array; every leaf of "
                            "params must be an array (or a number).")
        dt = _dtype(leaf)
        if not jnp.issubdtype(dt, jnp.inexact):
            raise TypeError(
                f"{who}: {where} is {dt}; optimizers update floating-point leaves only. Keep "
                "integer and boolean values (step counters, masks, embeddings ids) out of the tree "
                "you optimise, e.g. with optax.partition or a separate state.")


def check_updates(updates, params, who: str = "update", *, master_weights: bool = False) -> None:
    """``updates`` (the gradients) match ``params``: structure, shape and dtype,
    leaf by leaf. With ``params=None`` only the leaves of ``updates`` are checked."""
    if params is not None:
        diff = first_difference(updates, params, "updates", "params")
        if diff:
            raise ValueError(f"{who}: the gradients and the parameters have different pytree "
                             f"structures: {diff}.")
    u_leaves = tree_flatten_with_path(updates)[0]
    p_leaves = [leaf for _, leaf in tree_flatten_with_path(params)[0]] if params is not None \
        else [None] * len(u_leaves)
    for (path, u), p in zip(u_leaves, p_leaves):
        where = keystr(path)
        if not _is_array_like(u):
            raise TypeError(f"{who}: updates{where} is a {type(u).__name__}, not an array.")
        du = _dtype(u)
        if not jnp.issubdtype(du, jnp.inexact):
            raise TypeError(f"{who}: updates{where} is {du}; gradients must be floating point "
                            "(integer and boolean leaves have no gradient; keep them out of the "
                            "tree you optimise).")
        if p is None:
            continue
        su, sp = _shape(u), _shape(p)
        if su != sp:
            raise ValueError(f"{who}: updates{where} has shape {su} but params{where} has shape "
                             f"{sp}; the gradient must have the parameter's shape.")
        dp = _dtype(p)
        if du != dp:
            if master_weights and dp in LOW_PRECISION and du == np.dtype(np.float32):
                continue
            hint = ("cast the gradients to the parameters' dtype; to train float16/bfloat16 "
                    "parameters with float32 master weights keep the parameters in low precision "
                    "and pass multi_precision=True")
            raise TypeError(f"{who}: updates{where} is {du} but params there are {dp}; {hint}.")


def _abstract(tree):
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(_shape(x), _dtype(x)), tree)


def _written_as(expected, state, params):
    """``expected`` with each optional per-leaf field (`StepState.lr_mult`, ...) written out
    where ``state`` holds it per leaf."""
    def one(path, node):
        try:
            there = get_path(state, path)
        except (AttributeError, IndexError, KeyError, TypeError):
            return node
        for field in getattr(type(node), "optional_fields", {}):
            if getattr(node, field) is None and getattr(there, field, None) is not None:
                node = written_out(node, field, params)
        return node
    return map_states(one, expected)


def check_state(state, expected, who: str = "update") -> None:
    """``state`` has the structure, shapes and dtypes of ``expected`` (what
    ``init`` makes for these parameters, as from `jax.eval_shape`). Per-leaf
    numbers held per group (`GroupValues`) compare as the per-leaf vectors
    they stand for: a regrouping (a multiplier set on one parameter) is the
    same optimizer's state."""
    state, expected = expand_groups(state, abstract=True), expand_groups(expected, abstract=True)
    diff = first_difference(state, expected, "state", "init(params)")
    if diff:
        raise ValueError(f"{who}: the optimizer state does not come from this optimizer's init for "
                         f"these parameters: {diff}. Was it made by another optimizer, or for "
                         "other parameters? Call init(params) on this optimizer.")
    for (path, s), e in zip(tree_flatten_with_path(state)[0], jax.tree.leaves(expected)):
        where = f"state{keystr(path)}"
        if not _is_array_like(s):
            raise TypeError(f"{who}: {where} is a {type(s).__name__}, not an array.")
        if _shape(s) != tuple(e.shape) or _dtype(s) != np.dtype(e.dtype):
            raise ValueError(f"{who}: {where} is {_dtype(s)}{list(_shape(s))} but this optimizer's "
                             f"init(params) makes {np.dtype(e.dtype)}{list(e.shape)}; was the state "
                             "made by another optimizer, or for other parameters? (A value written into "
                             "the state, e.g. by optax.tree_utils.tree_set, must be a Python number or "
                             f"an array of that dtype; gradxform.set_hyper checks hyperparameters.)")


def _is_number(x) -> bool:
    """A Python number, or a weakly typed scalar (the array jit makes of one)."""
    if isinstance(x, (bool, int, float, np.number, np.bool_)):
        return True
    return isinstance(x, jax.Array) and x.ndim == 0 and jax.typeof(x).weak_type


def as_init_dtypes(state, expected):
    """``state`` with each Python number in it (as ``optax.tree_utils.tree_set``
    writes one: ``tree_set(state, count=5)``, ``learning_rate=0.1``) made an
    array of the dtype ``init`` gives that slot (``expected``: from
    `jax.eval_shape`, same structure). Weakly typed scalars too: a Python
    float would otherwise turn a bfloat16 step's arithmetic weak (optax#1414)."""
    def one(s, e):
        if _is_number(s) and tuple(e.shape) == () and not jnp.issubdtype(e.dtype, jax.dtypes.prng_key):
            return jnp.asarray(s, e.dtype)
        return s
    return jax.tree.map(one, state, expected)


def check_written_hypers(state, who: str) -> None:
    """Every concrete hyperparameter in ``state`` lies in its owner's declared
    range, and every step count (a field declared `gradxform._domains.COUNT`)
    in ``[0, MAX_COUNT]``, whatever wrote it and whatever its type: a value put
    there by ``optax.tree_utils.tree_set`` (which checks nothing) as a Python
    number, a NumPy scalar or a JAX array is judged as `gradxform.set_hyper`
    would have judged it (`gradxform._ranges.check_value`), a ValueError
    naming the slot otherwise. An eager update calls it; inside jit the values
    are traced and cannot be judged (the step's own rules apply: a count is
    taken as the nearest end of its range, a scheduled rate that is not
    usable as 0). One transfer to the host for all of them."""
    found = []  # (name, value, range, as_stored, where)
    for path, node in state_paths(state):
        for field in HYPER_FIELDS:
            hyper = getattr(node, field, None) if field in node._fields else None
            for name, value in (hyper.items() if isinstance(hyper, dict) else ()):
                where = f"state{keystr(path)}.{field}[{str(name)!r}]"
                groups = value.groups if isinstance(value, GroupHyper) else None  # each group's value, judged alike
                value = _raw(value.values if groups is not None else value)
                if name in READ_ONLY or isinstance(value, jax.core.Tracer) or \
                        np.size(value) != (1 if groups is None else len(groups)):
                    continue
                found.append((str(name), value, declared_range(owner_of(name), name) or Range(), True,
                              where if groups is None else (where, groups)))
        for field, domain in getattr(type(node), "domains", {}).items():
            if domain is not COUNT or getattr(node, field, None) is None:
                continue
            for sub, leaf in tree_flatten_with_path(getattr(node, field))[0]:
                leaf = _raw(leaf)
                if not isinstance(leaf, jax.core.Tracer) and np.size(leaf) == 1:
                    found.append((field, leaf, COUNT, False, f"state{keystr(path)}.{field}{keystr(sub)}"))
    if not found:
        return
    values = jax.device_get([v for _, v, _, _, _ in found])
    spread = []  # a GroupHyper's vector as one entry per group
    for (name, written, rng, as_stored, where), value in zip(found, values):
        if isinstance(where, tuple):
            spread.extend(((name, 0.0, rng, as_stored, f"{where[0]} (group {g})"), x)
                          for g, x in zip(where[1], np.asarray(value).reshape(-1)))
        else:
            spread.append(((name, written, rng, as_stored, where), value))
    for (name, written, rng, as_stored, where), value in spread:
        if not isinstance(written, (bool, int, float, complex, str)):
            value = np.asarray(value).reshape(())
            # the stored value as a Python number, written as its dtype writes it (float32 -0.1: -0.1)
            value = float(str(value)) if np.issubdtype(value.dtype, np.floating) else value.item()
        if value.__class__ in (float, int) or isinstance(value, (np.floating, np.integer)):
            if (stored_float32(value) if as_stored else float(value)) in rng:
                continue  # the common case, without building a message
        how = "gradxform.set_hyper checks a value when it writes it" if as_stored else \
            f"a run's counts stop at {int(rng.high)}"
        check_value(who, name, value, rng, as_stored=as_stored,
                    suffix=f" ({where}, as written into the state, e.g. by optax.tree_utils.tree_set; {how})")


def validated(tx: GradientTransformation, *, master_weights: bool = False,
              name: str = "") -> GradientTransformation:
    """Wraps ``tx`` so that ``init`` and ``update`` check their arguments first.

    ``init(params)``: every leaf a floating-point array. ``update(grads, state,
    params)``: grads match params (structure, shapes, dtypes; float32 grads
    for low-precision params pass when ``master_weights``) and the state matches
    ``jax.eval_shape(tx.init, params)``. Checks run at trace time only; the
    numbers computed are those of ``tx``. ``name`` prefixes messages.
    """
    pre = f"{name}." if name else ""
    cache: dict[Any, Any] = {}

    def key_of(ref):
        leaves, treedef = jax.tree.flatten(ref)
        return treedef, tuple((_shape(x), _dtype(x)) for x in leaves)

    def expected_state(ref):
        key = key_of(ref)
        if key not in cache:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    cache[key] = jax.eval_shape(tx.init, _abstract(ref))
            except Exception:  # noqa: BLE001  (an init that needs concrete values: skip this check)
                cache[key] = None
        return cache[key]

    def init(params):
        check_params(params, f"{pre}init")
        state = tx.init(params)
        # what init made is what update expects: recorded here, the first
        # update need not trace init again (jax.eval_shape: 15% of the first
        # trace of MXNet Adam's update at 1,000 leaves)
        if not is_optax_placeholder(params):  # optax.tree_map_params' stand-in: no shapes to record
            cache.setdefault(key_of(params), jax.tree.map(lambda x: jax.ShapeDtypeStruct(_shape(x), _dtype(x)), state))
        return state

    @declare(inner=(tx,), fusion=Fusion())  # trace-time checks; on the fused path they see the flat buffers
    def update(updates, state, params=None, **extra_args):
        if params is not None:
            check_params(params, f"{pre}update")
        check_updates(updates, params, f"{pre}update", master_weights=master_weights)
        ref = params if params is not None else updates
        expected = expected_state(ref)
        if expected is not None:
            seen = expand_groups(state, abstract=True)  # whatever the multipliers' grouping
            if first_difference(seen, expand_groups(expected, abstract=True), "state", "init(params)"):
                # the other forms init's state takes: step counts per leaf after a masked update,
                # multipliers per leaf once set (trainer.optimizer.param_dict[i].lr_mult = v)
                for other in (per_leaf_counts(expected, ref), _written_as(expected, state, ref)):
                    if not first_difference(seen, expand_groups(other, abstract=True), "state", "init(params)"):
                        expected = other
                        break
            check_written_hypers(state, f"{pre}update")  # concrete values only: an eager update
            if any(_is_number(x) for x in jax.tree.leaves(state)):
                state = as_init_dtypes(state, expected)
            check_state(state, expected, f"{pre}update")
        return run_inner(tx, updates, state, params, **extra_args)

    return transformation(init, update)
