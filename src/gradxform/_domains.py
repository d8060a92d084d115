"""What a loaded optimizer state may hold: each state class's declared domains, and the one check.

A value that parses but that no run reaches (a negative second moment, a NaN
first moment, a step count of -5, a beta power of 1.5) makes the next update
NaN or silently wrong, so every loader refuses it before anything is built:
`gradxform.checkpoint.load_state`, ``Trainer.load_states`` (a state tree)
and every `gradxform.migrate` reader (through ``fill_state``, where each one
assembles its state).

A state class declares, beside its fields, ``domains = {field: domain}``:
a `gradxform._ranges.Range` (finite values in an interval), or a function of
the state node giving one (or None: unchecked) where the rule's meaning
depends on its hyperparameters (a ``TraceState`` is a momentum of any sign
or a sum of squares; an RMS average with ``decay > 1``, which MindSpore and
Paddle accept, can turn negative). Fields without a declaration, and
non-numeric leaves (PRNG keys), are not checked. The declarations are read
here only, on the host with NumPy, once per load: never inside ``jit``.
"""
from __future__ import annotations

from typing import Callable, Union

import jax
import jax.numpy as jnp
import numpy as np

from ._ranges import NON_NEGATIVE, UNIT_CLOSED, Range
from ._state_paths import state_paths

__all__ = ["FINITE", "NON_NEGATIVE_FINITE", "POWER", "FLAG", "COUNT", "MAX_COUNT", "Domain", "domain_error",
           "non_negative_if"]

MAX_COUNT = 2**31 - 2  # the next update must still fit gradxform's int32 counters

FINITE = Range()                    # first moments, momenta, master weights: any sign, never NaN/Inf
NON_NEGATIVE_FINITE = NON_NEGATIVE  # second moments, squared-gradient sums and averages, infinity norms
# running products of factors in [0, 1] (beta1^t, MindSpore's beta1_power): 1 at the start, and 0 is
# reached: float32 underflows (MXNet Nadam's m_schedule after ~110 updates, 0.9^t after ~1000)
POWER = UNIT_CLOSED
FLAG = UNIT_CLOSED                  # int32/float 0/1 flags
COUNT = Range(low=0.0, high=float(MAX_COUNT))

Domain = Union[Range, Callable[[tuple], Union[Range, None]]]


def non_negative_if(*keys: str, at_most: float | None = None) -> Callable:
    """A domain for a field whose meaning its node's ``hyper`` tells: non-negative
    (and finite) when ``hyper`` holds one of ``keys`` (every value of it, and of
    the groups' own values of it ``<key>_groups``, ``<= at_most`` when given), else
    only finite. ``TraceState.trace`` is a sum of squares where the piece holds
    an epsilon, a momentum elsewhere; an average ``d s + (1 - d) g^2`` stays
    non-negative only while ``d <= 1``."""
    def domain(node) -> Range:
        hyper = getattr(node, "hyper", None)
        hyper = hyper if isinstance(hyper, dict) else {}
        held = [v for k, v in hyper.items() for key in keys if str(k) in (key, key + "_groups")]
        if not held:
            return FINITE
        if at_most is not None and any(float(np.max(np.asarray(v, np.float64))) > at_most for v in held):
            return FINITE
        return NON_NEGATIVE_FINITE
    return domain


def _host(leaf):
    """The leaf's values as a NumPy array (the addressable ones of an array
    spread over processes), or None for what is not a number (keys, abstract
    shapes, None)."""
    if leaf is None or isinstance(leaf, jax.ShapeDtypeStruct):
        return None
    dtype = getattr(leaf, "dtype", None)
    if dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key):
        return None
    if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
        parts = [np.asarray(s.data).reshape(-1) for s in leaf.addressable_shards]
        a = np.concatenate(parts) if parts else np.zeros((0,), leaf.dtype)
    else:
        a = np.asarray(leaf)
    if a.dtype == np.bool_ or not (np.issubdtype(a.dtype, np.number) or jnp.issubdtype(a.dtype, np.floating)):
        return None
    if jnp.issubdtype(a.dtype, np.floating) and a.dtype.itemsize < 4:
        a = a.astype(np.float32)  # bfloat16, float16, float8: compared in float32 (exact)
    return a


def _outside(a: np.ndarray, rng: Range) -> np.ndarray:
    """Where ``a`` is not in ``rng`` (NaN and +/-Inf never are)."""
    bad = ~np.isfinite(a) if np.issubdtype(a.dtype, np.inexact) else np.zeros(a.shape, bool)
    if rng.low is not None:
        bad |= (a <= rng.low) if rng.low_open else (a < rng.low)
    if rng.high is not None:
        bad |= (a >= rng.high) if rng.high_open else (a > rng.high)
    return bad


def domain_error(state) -> str | None:
    """Why ``state`` (any pytree holding optimizer states: a state, a Trainer's
    checkpoint tree) holds a value outside its class's declared ``domains``, or
    None. The message names the class and field, the leaf's path in ``state``
    (and its parameter, the path inside the field), the first offending value
    and its index."""
    for path, node in state_paths(state):
        domains: dict[str, Domain] = getattr(type(node), "domains", {})
        for field, domain in domains.items():
            rng = domain(node) if callable(domain) else domain
            value = getattr(node, field, None)
            if rng is None or value is None:
                continue
            for sub, leaf in jax.tree_util.tree_flatten_with_path(value)[0]:
                a = _host(leaf)
                if a is None or a.size == 0:
                    continue
                bad = _outside(a, rng)
                if not bad.any():
                    continue
                i = int(np.argmax(bad.reshape(-1)))
                v = a.reshape(-1)[i]
                v = int(v) if np.issubdtype(a.dtype, np.integer) else float(v)
                where = jax.tree_util.keystr(tuple(path) + (jax.tree_util.GetAttrKey(field),) + tuple(sub))
                leaf_name = f" of parameter leaf {jax.tree_util.keystr(sub)}" if sub else ""
                index = f", element {tuple(int(k) for k in np.unravel_index(i, a.shape))}" if a.ndim else ""
                return (f"{type(node).__name__}.{field} must be in {rng}; got {v!r} at state{where}"
                        f"{leaf_name}{index} ({int(bad.sum())} such value(s) in this leaf)")
    return None
