"""Reading framework parameter files without the framework, and mapping them onto a JAX tree.

* `read_gluon_params`: Gluon ``net.save_parameters`` / ``mx.nd.save`` files (``.params``);
* `read_paddle_params`: ``paddle.save(layer.state_dict(), 'x.pdparams')``;
* `read_mindspore_params`: ``mindspore.save_checkpoint(net, 'x.ckpt')``;
* `read_params`: any of the three, the format told from the file's first bytes.

Each returns ``{name: numpy array}`` in the file's order, under the same
rules as the optimizer-state readers: nothing is unpickled with ``pickle``
(Paddle's pickle goes through the restricted interpreter of `_pickle`, with
numpy arrays of numeric dtypes as the only globals), everything the reader
allocates is bounded by 4x the file's length + 1 MiB, and every failure is a
`MigrateError` naming the file (`UnsafePickleError` for a forbidden global).

`to_tree` puts such arrays into the leaves of a tree you already have (a
flax nnx ``nnx.state(model)``, linen variables, an equinox module, a dict) by
an explicit name mapping, with the layout changes frameworks need (see
`LAYOUTS`).
"""
from __future__ import annotations

import re
import struct
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._tree import param_names
from ._errors import MigrateError, short
from ._ndarray import Budget, RowSparse, _Reader, decode_from, nbytes_of
from ._pickle import (
    _BUDGET_FACTOR,
    _BUDGET_SLACK,
    NUMPY_GLOBALS,
    read_bytes,
    safe_loads,
)
from ._mindspore import _PREFIXES, read_mindspore_checkpoint
from ._state import at_boundary

__all__ = [
    "LAYOUTS",
    "detect_format",
    "read_gluon_params",
    "read_mindspore_params",
    "read_paddle_params",
    "read_params",
    "to_tree",
]

_LIST_MAGIC = 0x112           # MXNet's kMXAPINDArrayListMagic (src/c_api/c_api.cc)
_ENTRY_BYTES = 400            # Python objects per entry (name, array header, dict slot), charged to the budget
_PADDLE_NAMES = "StructuredToParameterName@@"


def _budget(data: bytes) -> Budget:
    return Budget(_BUDGET_FACTOR * len(data) + _BUDGET_SLACK)


# ---------------------------------------------------------------------------
# Gluon / MXNet: the NDArray list file
# ---------------------------------------------------------------------------
@at_boundary("read_gluon_params")
def read_gluon_params(fname) -> dict[str, np.ndarray]:
    """``{name: array}`` from an MXNet NDArray file: Gluon ``net.save_parameters``
    (names ``0.weight``, ``dense0.bias``, ...), ``ParameterDict.save`` or
    ``mx.nd.save`` of a dict (``arg:``/``aux:`` prefixes of a Module checkpoint
    are kept as written). A file of an unnamed list gives ``{'0': ..., '1': ...}``.

    Layout (``NDArray::Save`` list; MXNet 1.9.1 ``src/ndarray/ndarray.cc``)::

        uint64 0x112, uint64 reserved, uint64 n, n x NDArray, uint64 m (0 or n), m x (uint64 len, utf-8)

    Row-sparse arrays are made dense (their dense size charged to the budget).
    Raises `MigrateError` for a truncated, corrupt or oversized file.
    """
    data, label = read_bytes(fname, "read_gluon_params")
    what = f"read_gluon_params({label!r})"
    budget = _budget(data)
    r = _Reader(data, what, budget)
    magic, _reserved = r.take("<QQ")
    if magic != _LIST_MAGIC:
        raise MigrateError(f"{what}: not an MXNet NDArray file (magic 0x{magic:X}, expected 0x112).")
    (n,) = r.take("<Q")
    if n * 12 > len(data) - r.off:  # an NDArray takes at least 12 bytes
        raise MigrateError(f"{what}: the file says it holds {n} arrays but has {len(data) - r.off} bytes left; "
                           "it is truncated or corrupt.")
    arrays = []
    for i in range(n):
        budget.take(_ENTRY_BYTES, what)
        a = decode_from(r, f"{what}: array {i}", sparse=True)
        if a is None:
            raise MigrateError(f"{what}: array {i} has no storage (an uninitialised NDArray).")
        if isinstance(a, RowSparse):
            budget.take(nbytes_of(a.shape, np.dtype(a.dtype)), what)
            a = a.dense()
        arrays.append(a)
    (m,) = r.take("<Q")
    if m not in (0, n):
        raise MigrateError(f"{what}: {n} arrays but {m} names; the file is corrupt.")
    names = []
    for i in range(m):
        (length,) = r.take("<Q")
        if length > len(data) - r.off:
            raise MigrateError(f"{what}: name {i} is {length} bytes long but only {len(data) - r.off} are left; "
                               "the file is truncated.")
        raw = data[r.off:r.off + length]
        r.off += length
        try:
            names.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise MigrateError(f"{what}: name {i} ({short(raw)}) is not UTF-8 text.") from None
    if r.off != len(data):
        raise MigrateError(f"{what}: {len(data) - r.off} bytes after the last name; the file is corrupt.")
    if not m:
        names = [str(i) for i in range(n)]
    out: dict[str, np.ndarray] = {}
    for name, a in zip(names, arrays):
        if name in out:
            raise MigrateError(f"{what}: the name {short(name)} appears twice.")
        out[name] = a
    return out


# ---------------------------------------------------------------------------
# Paddle: a pickle of {name: ndarray}
# ---------------------------------------------------------------------------
def _paddle_file(fname, who: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    data, label = read_bytes(fname, who)
    what = f"{who}({label!r})"
    raw = safe_loads(data, what, allowed=(NUMPY_GLOBALS,))
    if not isinstance(raw, dict):
        raise MigrateError(f"{what}: expected a dict of arrays (paddle.save(layer.state_dict(), ...)); got "
                           f"{type(raw).__name__}.")
    structured = raw.get(_PADDLE_NAMES, {})
    if not isinstance(structured, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in structured.items()):
        raise MigrateError(f"{what}: {_PADDLE_NAMES!r} should map parameter names to names; got "
                           f"{short(structured)}.")
    out = {}
    for k, v in raw.items():
        if k == _PADDLE_NAMES:
            continue
        if not isinstance(k, str):
            raise MigrateError(f"{what}: key {short(k)} is not a parameter name (text).")
        if not isinstance(v, np.ndarray):
            raise MigrateError(f"{what}: {short(k)} is a {type(v).__name__}, not an array; is this an "
                               "optimizer state (.pdopt) rather than parameters (.pdparams)?")
        out[k] = v
    return out, dict(structured)


@at_boundary("read_paddle_params")
def read_paddle_params(fname) -> dict[str, np.ndarray]:
    """``{structured name: array}`` from ``paddle.save(layer.state_dict(), 'x.pdparams')``
    (``0.weight``, ``1._mean``, ...; Paddle's ``StructuredToParameterName@@``
    bookkeeping left out). A Paddle ``Linear`` weight is stored ``(in, out)``.

    Read with the restricted unpickler (numpy arrays of numeric dtypes only):
    `UnsafePickleError` for any other global, `MigrateError` for a corrupt file
    or a value that is not an array."""
    return _paddle_file(fname, "read_paddle_params")[0]


# ---------------------------------------------------------------------------
# MindSpore: the .ckpt protobuf
# ---------------------------------------------------------------------------
_MS_OPTIMIZER_SCALARS = ("global_step", "learning_rate", "momentum", "beta1_power", "beta2_power", "afactor_step",
                         "current_iterator_step", "last_overflow_iterator_step", "epoch_num", "step_num")


@at_boundary("read_mindspore_params")
def read_mindspore_params(fname, *, optimizer_entries: bool = False) -> dict[str, np.ndarray]:
    """``{name: array}`` from a MindSpore ``.ckpt`` (``ms.save_checkpoint(net, ...)``),
    read by the same protobuf reader as `read_mindspore_checkpoint`. Text
    entries are left out; so, unless ``optimizer_entries=True``, are the
    entries an optimizer adds to a training checkpoint (``moment1.<p>`` and the
    other slots of a parameter ``<p>`` in the file, ``global_step``,
    ``learning_rate``, ``beta1_power``, ...). A ``Dense`` weight is ``(out, in)``.

    The format holds no count of its entries: a file cut between two entries
    reads as the entries before the cut (`to_tree` then names the missing
    ones; a file saved with ``crc_check=True`` is checked whole). A cut inside
    an entry is a `MigrateError`."""
    ckpt = read_mindspore_checkpoint(fname)
    arrays = {k: v for k, v in ckpt.items() if isinstance(v, np.ndarray) and v.dtype.kind != "U"}
    if optimizer_entries:
        return arrays
    def is_slot(tag):
        return tag in _MS_OPTIMIZER_SCALARS or any(tag.startswith(p) and tag[len(p):] in arrays for p in _PREFIXES)

    return {k: v for k, v in arrays.items() if not is_slot(k)}


# ---------------------------------------------------------------------------
# Any of them
# ---------------------------------------------------------------------------
def detect_format(data: bytes) -> str:
    """``'gluon'``, ``'paddle'`` or ``'mindspore'`` from a file's first bytes:
    the NDArray list magic, a pickle's PROTO opcode, or a protobuf field 1 of
    wire type 2 (a MindSpore checkpoint's first ``value``)."""
    if len(data) >= 8 and struct.unpack_from("<Q", data)[0] == _LIST_MAGIC:
        return "gluon"
    if data[:1] == b"\x80" and len(data) > 1 and data[1] <= 5:
        return "paddle"
    if data[:1] == b"\x0a":
        return "mindspore"
    raise MigrateError(f"not a parameter file gradxform reads (first bytes {short(bytes(data[:8]))}): expected "
                       "an MXNet NDArray file (.params), a Paddle pickle (.pdparams) or a MindSpore .ckpt.")


@at_boundary("read_params")
def read_params(fname) -> dict[str, np.ndarray]:
    """`read_gluon_params`, `read_paddle_params` or `read_mindspore_params`,
    chosen by `detect_format` from the file's bytes (not its name)."""
    data, label = read_bytes(fname, "read_params")
    try:
        fmt = detect_format(data)
    except MigrateError as err:
        raise MigrateError(f"read_params({label!r}): {err}") from None
    import io
    buf = io.BytesIO(data)
    buf.name = label
    return {"gluon": read_gluon_params, "paddle": read_paddle_params,
            "mindspore": read_mindspore_params}[fmt](buf)


# ---------------------------------------------------------------------------
# Mapping onto a JAX tree
# ---------------------------------------------------------------------------
def _oi_to_flax(a: np.ndarray) -> np.ndarray:
    """``(out, in, *spatial)`` -> ``(*spatial, in, out)``: Dense (out, in) -> kernel (in, out),
    Conv OIHW -> HWIO (OIW -> WIO, OIDHW -> DHWIO)."""
    return np.transpose(a, tuple(range(2, a.ndim)) + (1, 0))


def _flax_to_oi(a: np.ndarray) -> np.ndarray:
    return np.transpose(a, (a.ndim - 1, a.ndim - 2) + tuple(range(a.ndim - 2)))


def _need(ndim_ok, name, fn):
    def t(a):
        if not ndim_ok(a.ndim):
            raise ValueError(f"layout {name!r} does not apply to a {a.ndim}-D array")
        return fn(a)
    return t


#: Named layout changes a rule may ask for (or pass any callable array -> array, or an axes tuple).
#: Layouts of the frameworks (weights of Dense/Linear and Conv; BatchNorm vectors need none):
#:
#: ================  ==========================  ======================  ==========================
#: framework         Dense/Linear weight          Conv weight             BatchNorm
#: ================  ==========================  ======================  ==========================
#: MXNet / Gluon     ``(out, in)``                OIHW                    gamma, beta, running_mean, running_var
#: Paddle            ``(in, out)``                OIHW                    weight, bias, _mean, _variance
#: MindSpore         ``(out, in)``                OIHW                    gamma, beta, moving_mean, moving_variance
#: flax nnx / linen  kernel ``(in, out)``         kernel HWIO             scale, bias, mean, var (linen: batch_stats)
#: equinox           weight ``(out, in)``         weight OIHW             weight, bias (running stats in eqx State)
#: ================  ==========================  ======================  ==========================
#:
#: So MXNet/MindSpore -> flax: ``'to_flax'`` for Dense and Conv; Paddle -> flax: none for Linear,
#: ``'to_flax'`` for Conv; MXNet/MindSpore -> equinox: none; Paddle -> equinox: ``'T'`` for Linear.
LAYOUTS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "T": _need(lambda n: n == 2, "T", lambda a: a.T),
    "to_flax": _need(lambda n: n >= 2, "to_flax", _oi_to_flax),
    "from_flax": _need(lambda n: n >= 2, "from_flax", _flax_to_oi),
    "OIHW->HWIO": _need(lambda n: n == 4, "OIHW->HWIO", _oi_to_flax),
    "HWIO->OIHW": _need(lambda n: n == 4, "HWIO->OIHW", _flax_to_oi),
}


def _layout_fn(layout, where: str) -> tuple[Callable[[np.ndarray], Any] | None, str]:
    if layout is None:
        return None, ""
    if callable(layout):
        return layout, getattr(layout, "__name__", "callable")
    if isinstance(layout, tuple):
        return (lambda a: np.transpose(a, layout)), f"transpose{layout}"
    if isinstance(layout, str) and layout in LAYOUTS:
        return LAYOUTS[layout], layout
    raise ValueError(f"to_tree: {where}: unknown layout {layout!r}; use one of {sorted(LAYOUTS)}, an axes "
                     "tuple or a callable.")


def _rule_fn(rules) -> Callable[[str], Any]:
    """``rules`` as a function source name -> target | (target, layout) | None (ignored) | _NO_RULE."""
    if callable(rules):
        return rules
    if isinstance(rules, Mapping):
        return lambda name: rules.get(name, _NO_RULE)
    pairs = []
    for item in rules:
        if not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
            raise TypeError(f"to_tree(rules=...): a regex rule is (pattern, target[, layout]); got {item!r}.")
        pairs.append((re.compile(item[0]), item[1], item[2] if len(item) == 3 else None))

    def by_regex(name):
        for pat, target, layout in pairs:
            m = pat.fullmatch(name)
            if m:
                return None if target is None else (m.expand(target), layout)
        return _NO_RULE
    return by_regex


_NO_RULE = object()


def to_tree(named_arrays: Mapping[str, Any], like, rules=None, *, ignore=None):
    """``like`` with each array leaf replaced by the named array ``rules`` maps onto it.

    Args:
      named_arrays: ``{source name: array}`` (what `read_params` returns).
      like: the target tree: ``nnx.state(model)``, linen ``variables``, an
        equinox module, any pytree. Its array leaves are named by their key
        paths joined by ``/`` (``l1/kernel``, ``bn/mean``; `gradxform.param_names`);
        other leaves (an equinox activation function) are kept.
      rules: how a source name becomes a target name, one of

        * a dict ``{source: target}`` or ``{source: (target, layout)}``;
        * a list of ``(regex, target[, layout])``: the first pattern that
          fully matches the source name wins, ``target`` may use its groups
          (``r'\\1/kernel'``);
        * a callable ``source -> target | (target, layout) | None``.

        A target of ``None`` drops that source on purpose. Default: the names
        are the same. ``layout``: a name in `LAYOUTS` (``'T'``, ``'to_flax'``,
        ``'OIHW->HWIO'``, ...), an axes tuple, or a callable.
      ignore: source names no rule maps that may go unused (not meant for
        this tree): a regex (full match) or an iterable of names. A name a rule
        maps is mapped.

    Returns: a tree of ``like``'s structure, each mapped leaf a ``jax.Array``
    of the target leaf's dtype. Use ``nnx.update(model, tree)`` for nnx.

    Raises: `MigrateError` listing every problem at once: a source name that
    maps to nothing (unused) or to a name ``like`` does not have, two sources
    on one target, a target left without a source, and a shape that does not
    fit (naming both names, both shapes and the layout applied, and saying
    when a transpose would have fit).
    """
    if ignore is None:
        ignored = lambda n: False
    elif isinstance(ignore, str):
        pat = re.compile(ignore)
        ignored = lambda n: pat.fullmatch(n) is not None
    else:
        ig = set(ignore)
        ignored = ig.__contains__
    leaves, treedef = jax.tree_util.tree_flatten(like)
    names = param_names(like)
    slots = {n: i for i, (n, leaf) in enumerate(zip(names, leaves)) if hasattr(leaf, "shape")
             and hasattr(leaf, "dtype")}
    rule = _rule_fn(rules) if rules is not None else (lambda n: n if n in slots else _NO_RULE)
    filled: dict[str, str] = {}
    claimed: set[str] = set()    # targets some source maps to (a problem with it is named once)
    new = list(leaves)
    problems: list[str] = []
    unused: list[str] = []
    for src, arr in named_arrays.items():
        target = rule(src)
        if target is _NO_RULE:
            if not ignored(src):
                unused.append(src)
            continue
        if target is None:
            continue
        layout = None
        if isinstance(target, tuple):
            target, layout = target
        if not isinstance(target, str) or target not in slots:  # slots: {name: index}
            problems.append(f"source {src!r} maps to {target!r}, which the target tree does not have")
            continue
        claimed.add(target)
        if target in filled:
            problems.append(f"sources {filled[target]!r} and {src!r} both map to {target!r}")
            continue
        fn, lname = _layout_fn(layout, f"rule for {src!r}")
        a = np.asarray(arr)
        leaf = leaves[slots[target]]
        try:
            b = fn(a) if fn else a
        except ValueError as err:
            problems.append(f"source {src!r} {a.shape} -> {target!r}: {err}")
            continue
        want = tuple(leaf.shape)
        if tuple(b.shape) != want:
            how = f" ({tuple(b.shape)} after layout {lname!r})" if lname else ""
            hint = ""
            if a.ndim == 2 and tuple(a.shape[::-1]) == want and not lname:
                hint = " (its transpose fits: add layout 'T', or 'to_flax' for a flax kernel)"
            elif a.ndim >= 2 and tuple(_oi_to_flax(a).shape) == want and not lname:
                hint = " (layout 'to_flax' fits)"
            problems.append(f"source {src!r} has shape {a.shape}{how}; target {target!r} has "
                            f"shape {want}{hint}")
            continue
        filled[target] = src
        new[slots[target]] = jnp.asarray(b, dtype=leaf.dtype)
    missing = [t for t in slots if t not in claimed]
    lines = problems
    if unused:
        lines.append(f"unused source names (no rule maps them; pass ignore= to drop them): {unused[:20]}"
                     + (" ..." if len(unused) > 20 else ""))
    if missing:
        lines.append(f"target leaves with no source: {missing[:20]}" + (" ..." if len(missing) > 20 else ""))
    if lines:
        raise MigrateError("to_tree: the parameters do not fit the target tree:\n  " + "\n  ".join(lines))
    return jax.tree_util.tree_unflatten(treedef, new)
