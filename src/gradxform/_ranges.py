"""Argument ranges in one place: the declared range of every hyperparameter,
and the one check that every argument checker delegates to.

A hyperparameter is stored as a float32 scalar (`gradxform._hyper`), so it is
judged as stored: the value is rounded to float32 first, and a float32
subnormal counts as 0 (XLA flushes them to zero on CPU and GPU). Then ``1e40``
is ``inf`` and is refused; ``beta2=1 - 1e-10`` is ``1.0`` and is outside
``[0, 1)``; ``epsilon=1e-46`` is ``0`` and is outside ``(0, inf)``. NaN and
+/-inf are refused everywhere.

Each hyperparameter's range lives once: `GENERIC` (the pieces, and any
owner without its own entry; a piece module adds its new names with
`register_range`, and a piece whose argument has another range than the
generic one declares it under the piece's name with `register_ranges`; the
pieces' own checks are `check_hyper` calls that read these, never literal
bounds), one table per family (`FAMILY`), and per-optimizer
overrides (`OWNER`), which each optimizer's `Declaration` gives
(``ranges=``, in its family module). `declared_range(owner, name)` reads them
most specific first. Construction (`check_hyper`, and the
family checkers `mxnet._common.check_unit`, `mindspore._common.check_float`
without explicit bounds) and `gradxform.set_hyper` read the same entry: the
state remembers which optimizer made each hyperparameter (`tag_owner` marks
the keys of its ``hyper`` dicts with the owner, see `HyperName`), so
``set_hyper`` checks a MindSpore ``momentum`` against MindSpore's range and an
MXNet one against MXNet's.

Framework semantics (see ``tools/*_NOTES.md``) and the decisions taken where a
framework does not check:

* MindSpore validates with ``_checkparam`` (``check_non_negative_float`` etc.);
  its ranges are copied here as they are: ``momentum >= 0`` (no upper bound),
  ``beta1, beta2`` in ``(0, 1)``, RMSProp's ``decay >= 0`` ("decay is not
  checked to be < 1"), FTRL's ``learning_rate > 0`` and ``lr_power <= 0``,
  AdaFactor's ``decay_rate`` in ``(0, 1)`` and ``weight_decay`` in ``[0, 1)``.
* MXNet 1.9 checks none of its optimizer arguments. gradxform keeps the ranges
  it always had for MXNet (``momentum, beta1, beta2, rho, gamma1, gamma2`` in
  ``[0, 1)``: outside it the moving averages grow without bound; ``epsilon >
  0``), and gives the arguments that had no set_hyper check the range their
  constructor already used (``lamda, lamda1, beta, wd_lh, schedule_decay >=
  0``, ``clip_weights > 0``). AdaGrad's ``eps`` is ``>= 0`` at construction
  and now at ``set_hyper`` too (it was ``> 0`` there only): 0 is MXNet's
  value range and gives 0/0 only for an exactly zero gradient history.
* ``learning_rate >= 0`` in every family. MXNet and Paddle would take a
  negative rate (gradient ascent); gradxform refused it before this table and
  keeps refusing it (negate the loss instead), because a negative rate is far
  more often a sign error, and `test_errors` pins it.
* ``rescale_grad`` may be any finite number, as in MXNet (``0`` switches the
  update off; the Trainer sets ``1/batch_size``); a negative value is taken as
  MXNet takes it.
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

__all__ = ["Range", "check_bool", "check_value", "real_value", "check_hyper", "declared_range", "register_range", "register_ranges", "stored_float32",
           "HyperName", "owner_of", "GENERIC", "FAMILY", "OWNER", "ANY", "NON_NEGATIVE", "POSITIVE", "NON_POSITIVE",
           "UNIT_HALF_OPEN", "UNIT_CLOSED", "UNIT_OPEN"]


@dataclasses.dataclass(frozen=True)
class Range:
    """An interval of finite values; ``None`` for an unbounded side."""
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, v: float) -> bool:
        if not math.isfinite(v):
            return False
        if self.low is not None and (v <= self.low if self.low_open else v < self.low):
            return False
        if self.high is not None and (v >= self.high if self.high_open else v > self.high):
            return False
        return True

    def __str__(self) -> str:
        lo = "(-inf" if self.low is None else ("(" if self.low_open else "[") + _bound(self.low)
        hi = "inf)" if self.high is None else _bound(self.high) + (")" if self.high_open else "]")
        return f"{lo}, {hi}"


def _bound(x: float) -> str:
    """A range's end as written: an integer in full (``2147483646``), else ``%g``."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"


ANY = Range()
NON_NEGATIVE = Range(low=0.0)
POSITIVE = Range(low=0.0, low_open=True)
NON_POSITIVE = Range(high=0.0)
UNIT_HALF_OPEN = Range(low=0.0, high=1.0, high_open=True)   # [0, 1)
UNIT_CLOSED = Range(low=0.0, high=1.0)                       # [0, 1]
UNIT_OPEN = Range(low=0.0, high=1.0, low_open=True, high_open=True)  # (0, 1)

_TINY32 = float(np.finfo(np.float32).tiny)


def stored_float32(value) -> float:
    """``value`` as the float32 scalar it will be stored as (subnormals as 0),
    returned as a Python float; NaN stays NaN, overflow becomes +/-inf."""
    try:
        wide = np.asarray(value, dtype=np.float64)
    except OverflowError:  # an int beyond float64 (10**400): +/-inf, as real_value judges it
        wide = np.float64(math.inf if value > 0 else -math.inf)
    with np.errstate(over="ignore", invalid="ignore"):
        v = float(np.float32(wide))
    if v != 0.0 and abs(v) < _TINY32:
        v = math.copysign(0.0, v)
    return v


def _never_real(value: Any) -> bool:
    """A bool, string, bytes, complex or None: not a real number whatever its value (a
    function of its own: an isinstance inline would narrow ``value`` for the checker)."""
    return isinstance(value, (bool, np.bool_, str, bytes, complex, np.complexfloating)) or value is None


def real_value(owner: str, name: str, value: Any) -> tuple[float, bool]:
    """``(value as a Python float, whether it overflowed float64)``, whatever
    its type: a Python int or float, a NumPy scalar, a 0-d (or one-element)
    NumPy or JAX array, ``fractions.Fraction``... An integer beyond float64
    (``10**400``) is +/-inf, judged as such. A TypeError naming the argument
    for what is not a real number: a bool, a string (``'0.1'``), a complex of
    any kind (``0.1+1j``, ``np.complex64``), an array of another size, None."""
    bad = _never_real(value)
    dtype = getattr(value, "dtype", None)
    if not bad and dtype is not None:
        try:
            dt = np.dtype(dtype)
            bad = dt == np.bool_ or not (jnp.issubdtype(dt, np.integer)
                                         or jnp.issubdtype(dt, np.floating))
        except TypeError:  # an extended dtype (a PRNG key)
            bad = True
        if not bad and np.size(value) != 1:
            bad = True
        elif not bad and np.ndim(value):
            value = np.asarray(value).reshape(())
    if not bad:
        try:
            return float(value), False
        except OverflowError:  # an int beyond float64
            try:
                return (math.inf if value > 0 else -math.inf), True
            except TypeError:
                pass
        except (TypeError, ValueError):
            pass
    raise TypeError(f"{owner}({name}=...): {name} must be a number (a real int or float, or a scalar array "
                    f"of one); got {value!r}.")


def check_value(owner: str, name: str, value, rng: Range, *, allow_none: bool = False,
                as_stored: bool = True, suffix: str = "") -> None:
    """The one range check, every route's (construction, `gradxform.set_hyper`,
    `set_learning_rate`, a value written into a state before an eager update,
    schedule arguments): the value as a real number whatever its type
    (`real_value`: TypeError for a bool, a string, a complex, None), then
    ValueError naming the argument, the range and the value. ``as_stored``:
    judge the float32 value (hyperparameters and everything kept as float32);
    False for integers kept as Python ints."""
    if value is None and allow_none:
        return
    if isinstance(value, jax.core.Tracer):  # optax.inject_hyperparams rebuilds the optimizer inside jit
        raise TypeError(f"{owner}({name}=...): got a traced value ({value!r}): the optimizer is being built "
                        f"inside jit (optax.inject_hyperparams does that). gradxform keeps {name} in the state "
                        f"already: build it once and change it between or inside steps with "
                        f"gradxform.set_hyper(state, {name}=...), no recompile.")
    exact, overflow = real_value(owner, name, value)
    judged = stored_float32(exact) if as_stored else exact
    if judged in rng:
        return
    why = ""
    if overflow:
        why = ", beyond float64" + (" (inf as float32)" if as_stored else "")
    elif exact in rng or (math.isfinite(exact) and not math.isfinite(judged)):
        why = f", which is {judged!r} as float32"
    raise ValueError(f"{owner}({name}=...): {name} must be in {rng}; got {value!r}{why}.{suffix}")


# -- the declared ranges -------------------------------------------------------------

# the groups' own values of a hyperparameter (`gradxform._group_hyper`): learning_rate_groups -> learning_rate
_GROUP_SUFFIX = re.compile(r"_groups$")

GENERIC: dict[str, Range] = {
    "learning_rate": NON_NEGATIVE, "wd": NON_NEGATIVE, "weight_decay": NON_NEGATIVE,
    "rescale_grad": ANY, "loss_scale": POSITIVE,
    "clip_gradient": POSITIVE, "max_norm": POSITIVE, "clip_norm": POSITIVE,
    "clip_min": ANY, "clip_max": ANY, "l1_coeff": NON_NEGATIVE, "l2_coeff": NON_NEGATIVE,
    # the pieces' own ranges (trace/ema/scale_by_rms accept 1: a constant average)
    "momentum": UNIT_CLOSED, "decay": UNIT_CLOSED, "gamma1": UNIT_CLOSED, "gamma2": UNIT_CLOSED,
    "beta1": UNIT_HALF_OPEN, "beta2": UNIT_HALF_OPEN, "epsilon": POSITIVE, "eps": NON_NEGATIVE,
}

FAMILY: dict[str, dict[str, Range]] = {
    "mxnet": {
        "learning_rate": NON_NEGATIVE, "wd": NON_NEGATIVE, "rescale_grad": ANY, "clip_gradient": POSITIVE,
        "momentum": UNIT_HALF_OPEN, "beta1": UNIT_HALF_OPEN, "beta2": UNIT_HALF_OPEN,
        "rho": UNIT_HALF_OPEN, "gamma1": UNIT_HALF_OPEN, "gamma2": UNIT_HALF_OPEN,
        "epsilon": POSITIVE, "eps": NON_NEGATIVE,
        "lamda": NON_NEGATIVE, "wd_lh": NON_NEGATIVE, "schedule_decay": NON_NEGATIVE,
        "clip_weights": POSITIVE, "lamda1": NON_NEGATIVE, "beta": NON_NEGATIVE,
    },
    "mindspore": {
        "learning_rate": NON_NEGATIVE, "weight_decay": NON_NEGATIVE, "loss_scale": POSITIVE,
        "momentum": NON_NEGATIVE, "dampening": NON_NEGATIVE,
        "beta1": UNIT_OPEN, "beta2": UNIT_OPEN, "epsilon": POSITIVE,
        "decay": NON_NEGATIVE, "l1": NON_NEGATIVE, "l2": NON_NEGATIVE, "lr_power": NON_POSITIVE,
        "coefficient": NON_NEGATIVE, "clip_threshold": NON_NEGATIVE, "decay_rate": UNIT_OPEN,
        "epsilon1": NON_NEGATIVE, "epsilon2": NON_NEGATIVE,
    },
    "paddle": {
        "learning_rate": NON_NEGATIVE, "weight_decay": NON_NEGATIVE,
        "l1_coeff": NON_NEGATIVE, "l2_coeff": NON_NEGATIVE,
        "clip_norm": POSITIVE, "clip_min": ANY, "clip_max": ANY,
    },
}

# Per-optimizer ranges: each optimizer's `Declaration` gives its own (``ranges=``),
# registered under the name the factory is registered as
# (`gradxform._registry.register_family`); a piece
# declares the ranges of its own new hyperparameters beside it (`register_range`).
OWNER: dict[str, dict[str, Range]] = {}


def _family(owner: str | None) -> str | None:
    return owner.split(".", 1)[0] if owner and "." in owner else None


def declared_range(owner: str | None, name: str) -> Range | None:
    """The range of hyperparameter ``name`` of ``owner`` (an optimizer such as
    ``"mxnet.sgd"``, or None): the owner's override, its family's entry, the
    generic one; None where nothing is declared."""
    base = _GROUP_SUFFIX.sub("", name)
    fam = _family(owner)
    for table in (OWNER.get(owner or "", {}), FAMILY.get(fam or "", {}), GENERIC):
        if base in table:
            return table[base]
    return None


def register_range(name: str, rng: Range, *, owner: str | None = None) -> None:
    """Declares the range of a hyperparameter a new piece (``owner=None``) or
    optimizer owns."""
    if owner is None:
        GENERIC[name] = rng
    else:
        OWNER.setdefault(owner, {})[name] = rng


def register_ranges(owner: str, ranges: dict[str, Range]) -> None:
    """Declares the ranges of a piece's own arguments (``owner``: the piece's
    name, as its checks pass it to `check_hyper`) where `GENERIC` has none
    for a name, or another one."""
    for name, rng in ranges.items():
        register_range(name, rng, owner=owner)


def check_bool(owner: str, name: str, value) -> bool:
    """``value`` if it is a bool (not merely truthy), else a TypeError naming the argument."""
    if not isinstance(value, bool):
        raise TypeError(f"{owner}({name}=...): {name} must be a bool; got {value!r}.")
    return value


def check_flag(owner: str, name: str, value):
    """A three-way choice, None (decide for me), True or False: ``value``, else a
    TypeError naming the argument."""
    if value not in (None, False, True):
        raise TypeError(f"{owner}({name}=...): expected None, True or False; got {value!r}.")
    return value


def check_hyper(owner: str, name: str, value, *, allow_none: bool = False, arg: str | None = None) -> None:
    """Checks a hyperparameter against its declared range (for ``owner``);
    ``arg``: the argument's name in messages where it differs (``eps[0]``)."""
    rng = declared_range(owner, name)
    if rng is None:
        raise KeyError(f"{owner}: no declared range for hyperparameter {name!r} (add it to gradxform._ranges).")
    check_value(owner, arg or name, value, rng, allow_none=allow_none)


# -- which optimizer made a hyperparameter ----------------------------------------------

class HyperName(str):
    """A ``hyper`` dict key that remembers its owner: equal to (and hashed
    as) the plain name, so lookups, pytree structures and checkpoints see
    the name; the key objects travel through jit and tree maps with the
    dict's structure, and `set_hyper` reads ``owner`` from them."""

    owner: str

    def __new__(cls, name: str, owner: str):
        self = super().__new__(cls, name)
        self.owner = owner
        return self

    def __reduce__(self):
        return (HyperName, (str(self), self.owner))


def owner_of(key) -> str | None:
    return getattr(key, "owner", None)
