"""`convert_run`: a framework's run (parameter file + optimizer state + schedule position) as one
gradxform checkpoint, and `load_run` to read it back."""
from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import jax.numpy as jnp
import numpy as np

from ..checkpoint import load_state, read_metadata, save_state
from .._state_paths import find_states
from ..pieces.internal import StepState
from .._registry import registered_names
from ._errors import FRAMEWORKS, MigrateError, frameworkless_message
from ._gluon import from_gluon_states, read_gluon_states
from ._mindspore import (
    _PREFIXES,
    from_mindspore_checkpoint,
    read_mindspore_checkpoint,
)
from ._paddle import from_paddle_state_dict, read_paddle_state_dict
from ._params import _paddle_file, read_gluon_params, read_mindspore_params

__all__ = ["BUFFER_NAMES", "convert_run", "load_run"]

#: Names of entries no optimizer updates (BatchNorm running statistics), the default for
#: Gluon, whose state file holds no names: ``running_mean``/``running_var`` (Gluon),
#: ``_mean``/``_variance`` (Paddle), ``moving_mean``/``moving_variance`` (MindSpore).
BUFFER_NAMES = r".*(running_mean|running_var|moving_mean|moving_variance|\._mean|\._variance)"


def _plain(x):
    """A value for the checkpoint's meta (msgpack): numpy scalars as Python numbers."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    return x


def convert_run(framework: str, params_file, state_file, tx, out=None, *, trainable: Iterable[str] | None = None):
    """Turns a framework's saved run into one gradxform checkpoint.

    Args:
      framework: ``'mxnet'`` (Gluon ``net.save_parameters`` + ``Trainer.save_states``),
        ``'paddle'`` (``.pdparams`` + ``.pdopt``, whose ``LR_Scheduler`` gives the
        schedule position) or ``'mindspore'`` (``save_checkpoint(net)`` +
        ``save_checkpoint(opt)``, whose ``global_step`` gives it).
      params_file: the parameter file (a path or a binary file object).
      state_file: the optimizer-state file (a path or a binary file object).
      tx: the gradxform optimizer with the run's hyperparameters and schedule
        (as for `from_gluon_states`, `from_paddle_state_dict`, `from_mindspore_checkpoint`).
      out: where to write the checkpoint (`gradxform.save_state`); None: write nothing.
      trainable: the names the optimizer updates, in the optimizer's order
        (Gluon: the Trainer's parameter order). Default: Paddle, the
        parameters with accumulators in the ``.pdopt``; MindSpore, those with
        slots (or present) in the optimizer checkpoint; Gluon, every name
        but `BUFFER_NAMES`, in the file's order (a Trainer built on
        the trainable parameters in the network's order).

    Returns: ``{'params': {name: array}, 'buffers': {name: array}, 'opt_state': state}``,
    names as in the parameter file and arrays in the framework's layout
    (`to_tree` maps ``params`` and ``buffers`` onto a model). The file's
    ``meta`` holds ``framework``, ``names``, ``trainable``, ``shapes``,
    ``dtypes``, ``step`` (updates done) and the framework's schedule entry
    (Paddle ``LR_Scheduler``, MindSpore ``global_step``, Gluon ``num_update``).
    Restore with ``gradxform.load_state(out, like=...)`` or `load_run` (``out, tx``).

    Raises: `MigrateError` (from the readers) for a file that does not fit.
    """
    if framework not in FRAMEWORKS:
        if any(k.split(".", 1)[0] == framework for k in registered_names()):  # gradxform's own family (neutral)
            raise MigrateError(frameworkless_message(f"convert_run(framework={framework!r})", framework,
                                                     f"{framework!r} is gradxform's own family, not a framework"))
        raise ValueError(f"convert_run(framework=...): one of {FRAMEWORKS}; got {framework!r}.")
    meta: dict[str, Any] = {"framework": framework}
    if framework == "mxnet":
        arrays = read_gluon_params(params_file)
        pat = re.compile(BUFFER_NAMES)
        order = list(trainable) if trainable is not None else [n for n in arrays if not pat.fullmatch(n)]
        params = _pick(arrays, order, "mxnet")
        state = from_gluon_states(state_file, params, tx, order=order)
        _, opt = read_gluon_states(state_file)
        num_update = getattr(opt, "attrs", {}).get("num_update") if opt is not None else None
        if isinstance(num_update, (int, np.integer)):
            meta["num_update"] = int(num_update)
    elif framework == "paddle":
        arrays, internal = _paddle_file(params_file, "convert_run")
        sd = read_paddle_state_dict(state_file)
        if trainable is None:
            keys = list(sd)
            order = [n for n in arrays if any(k.startswith(internal.get(n, n) + "_") for k in keys)]
        else:
            order = list(trainable)
        params = _pick(arrays, order, "paddle")
        names = {n: internal[n] for n in order if n in internal}
        state = from_paddle_state_dict(sd, params, tx, names=names)
        if "LR_Scheduler" in sd:
            meta["LR_Scheduler"] = _plain(sd["LR_Scheduler"])
    else:
        arrays = read_mindspore_params(params_file)
        ckpt = read_mindspore_checkpoint(state_file)
        if trainable is None:
            slotted = [n for n in arrays if any(p + n in ckpt for p in _PREFIXES)]
            order = slotted or [n for n in arrays if n in ckpt]
        else:
            order = list(trainable)
        params = _pick(arrays, order, "mindspore")
        state = from_mindspore_checkpoint(state_file, params, tx)
        if "global_step" in ckpt:
            meta["global_step"] = _plain(np.asarray(ckpt["global_step"]).reshape(-1)[0])
    steps = find_states(state, StepState)
    if steps:
        meta["step"] = int(np.asarray(steps[0].count))
    params = {n: jnp.asarray(a) for n, a in params.items()}
    buffers = {n: jnp.asarray(a) for n, a in arrays.items() if n not in params}
    meta.update(names=list(arrays), trainable=order, shapes={n: list(a.shape) for n, a in arrays.items()},
                dtypes={n: str(a.dtype) for n, a in arrays.items()})
    tree = {"params": params, "buffers": buffers, "opt_state": state}
    if out is not None:
        save_state(out, tree, meta=meta)
    return tree


def _pick(arrays: dict, order: list, framework: str) -> dict:
    unknown = [n for n in order if n not in arrays]
    if unknown:
        raise MigrateError(f"convert_run({framework!r}): trainable name {unknown[0]!r} is not in the parameter "
                           f"file; it holds {list(arrays)[:12]}.")
    if not order:
        raise MigrateError(f"convert_run({framework!r}): no parameter of the file has optimizer state; pass "
                           "trainable=[names].")
    return {n: arrays[n] for n in order}


def load_run(path, tx):
    """The tree `convert_run` wrote to ``path``, read back with `gradxform.load_state`
    (the ``like`` built from the file's meta: shapes, dtypes, ``tx.init``)."""
    meta = read_metadata(path)
    zeros = {n: jnp.zeros(meta["shapes"][n], meta["dtypes"][n]) for n in meta["names"]}
    params = {n: zeros[n] for n in meta["trainable"]}
    like = {"params": params, "buffers": {n: a for n, a in zeros.items() if n not in params},
            "opt_state": tx.init(params)}
    return load_state(path, like=like)
