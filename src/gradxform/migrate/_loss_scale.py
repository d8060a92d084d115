"""A framework's loss scale, restored into `gradxform.pieces.dynamic_loss_scale`'s state.

A mixed-precision run saves the loss scale and its counters beside the
optimizer: MindSpore's ``TrainOneStepWithLossScaleCell`` checkpoint holds
``scale_sense`` (and, from ``DynamicLossScaleUpdateCell``,
``current_iterator_step`` and ``last_overflow_iterator_step``); Paddle's
``GradScaler.state_dict()`` is a file of its own (``scale``, ``incr_count``,
``decr_count`` and its settings). Resumed without them, the scale restarts at
its initial value: in float16 training other steps overflow, are skipped, and
the parameters part ways with the framework's run. So a file's scale is
restored where ``tx`` scales the loss, a file's scale that ``tx`` has no
place for is refused saying what to wrap ``tx`` in, and a ``tx`` that scales
the loss resumed from a file without one is warned about.
"""
from __future__ import annotations

from typing import Any, Mapping

import jax.numpy as jnp
import numpy as np

from .._hyper import get_hyper, hyper_names
from .._ranges import Range
from .._state_paths import find_states, map_states
from .._warn import warn_at_caller
from ..pieces.internal import LossScaleState
from ._pickle import NUMPY_GLOBALS, MigrateError, read_bytes, safe_loads
from ._state import checked_count, checked_value

__all__ = ["restored_scale", "mindspore_scale", "paddle_scaler"]

_POSITIVE_SCALE = Range(low=0.0, low_open=True, high=float(np.finfo(np.float32).max))  # a scale a run reaches


def restored_scale(state, scale: float, good_steps: int, bad_steps: int = 0):
    """``state`` with every `LossScaleState` at ``scale``, ``good_steps`` clean
    steps since its last change and ``bad_steps`` overflows in a row (the
    guard's count, which ``backoff_interval`` reads)."""
    def write(_, node):
        guard = node.guard._replace(consecutive=jnp.asarray(bad_steps, node.guard.consecutive.dtype))
        return node._replace(scale=jnp.asarray(scale, node.scale.dtype),
                             good_steps=jnp.asarray(good_steps, node.good_steps.dtype), guard=guard)
    return map_states(write, state, LossScaleState)


def _wrap_line(scale: float, window: Any, factor: Any) -> str:
    return (f"tx = gradxform.pieces.dynamic_loss_scale(tx, {scale:g}, growth_interval={window}, growth={factor}, "
            f"backoff=1/{factor}, min_scale=1.0, check_updates=False, check_state=False)")


def mindspore_scale(ckpt: Mapping[str, Any], state, who: str):
    """``state`` with the loss scale of a MindSpore checkpoint (``scale_sense``;
    the clean steps since the last change from ``current_iterator_step - 1 -
    last_overflow_iterator_step``, what ``DynamicLossScaleUpdateCell`` compares
    with its ``scale_window``)."""
    scalers = find_states(state, LossScaleState)
    if "scale_sense" not in ckpt:
        if scalers:
            warn_at_caller(f"{who}: tx scales the loss (dynamic_loss_scale) but the checkpoint holds no "
                           "'scale_sense' (the scale TrainOneStepWithLossScaleCell saves): the loss scale restarts "
                           f"at {float(scalers[0].scale):g}. Save the training cell (ms.save_checkpoint(train_net, "
                           "...)) to continue with the run's scale.")
        return state
    scale = checked_value(ckpt["scale_sense"], f"{who}: the checkpoint's 'scale_sense'", _POSITIVE_SCALE)
    if not scalers:
        raise MigrateError(f"{who}: the checkpoint holds 'scale_sense' = {scale:g}, the loss scale of a "
                           "TrainOneStepWithLossScaleCell, and tx does not scale the loss; continuing without it "
                           f"would train on gradients {scale:g} times too large. Wrap tx: "
                           + _wrap_line(scale, "<scale_window>", "<scale_factor>")
                           + " (a FixedLossScaleUpdateCell: growth=1.0, backoff=1.0), then load.")
    good = 0
    if "current_iterator_step" in ckpt and "last_overflow_iterator_step" in ckpt:
        cur = checked_count(ckpt["current_iterator_step"], f"{who}: the checkpoint's 'current_iterator_step'")
        last = checked_count(ckpt["last_overflow_iterator_step"],
                             f"{who}: the checkpoint's 'last_overflow_iterator_step'")
        if last >= cur:
            raise MigrateError(f"{who}: the checkpoint's 'last_overflow_iterator_step' ({last}) is not before its "
                               f"'current_iterator_step' ({cur}); DynamicLossScaleUpdateCell never saves that.")
        good = cur - 1 - last
    return restored_scale(state, scale, good)


_PADDLE_SETTINGS = (("incr_ratio", "growth_factor"), ("decr_ratio", "backoff_factor"),
                    ("incr_every_n_steps", "growth_interval"), ("decr_every_n_nan_or_inf", "backoff_interval"))


def paddle_scaler(scaler, state, who: str):
    """``state`` with the loss scale of Paddle's ``GradScaler.state_dict()``
    (a dict, or the file ``paddle.save`` wrote it to): ``scale``, its clean
    steps ``incr_count`` and overflows in a row ``decr_count``; a warning
    naming each setting that differs from ``tx``'s."""
    if isinstance(scaler, Mapping):
        sd, label = dict(scaler), "scaler"
    else:
        data, label = read_bytes(scaler, who)
        sd = safe_loads(data, f"{who}(scaler={label!r})", allowed=(NUMPY_GLOBALS,))
    if not isinstance(sd, dict) or "scale" not in sd:
        raise MigrateError(f"{who}(scaler=...): expected GradScaler.state_dict() (a dict with 'scale', "
                           f"'incr_count', 'decr_count', ...); got {type(sd).__name__}"
                           + (f" with keys {sorted(map(str, sd))[:8]}" if isinstance(sd, dict) else "") + ".")
    # every number checked before any is used (a message or the state): a file's text or vector is refused
    scale = checked_value(np.asarray(sd["scale"]), f"{who}(scaler=...): 'scale'", _POSITIVE_SCALE)
    settings = {theirs: checked_value(np.asarray(sd[theirs]), f"{who}(scaler=...): {theirs!r}", Range())
                for theirs, _ in _PADDLE_SETTINGS if theirs in sd}
    scalers = find_states(state, LossScaleState)
    if not scalers:
        raise MigrateError(f"{who}(scaler=...): tx does not scale the loss. Wrap it as the run's GradScaler: "
                           + _wrap_line(scale,
                                        f"{settings['incr_every_n_steps']:g}" if "incr_every_n_steps" in settings
                                        else "<incr_every_n_steps>",
                                        f"{settings['incr_ratio']:g}" if "incr_ratio" in settings else "<incr_ratio>")
                           + (f" and backoff_interval={settings['decr_every_n_nan_or_inf']:g}"
                              if settings.get("decr_every_n_nan_or_inf") not in (None, 1) else "") + ".")
    good = checked_count(np.asarray(sd.get("incr_count", 0)), f"{who}(scaler=...): 'incr_count'")
    bad = checked_count(np.asarray(sd.get("decr_count", 0)), f"{who}(scaler=...): 'decr_count'")
    differ = []
    for theirs, ours in _PADDLE_SETTINGS:
        if theirs not in settings:
            continue
        have = float(get_hyper(state, ours)) if ours in hyper_names(state) else 1.0  # backoff_interval: 1
        theirs_value = settings[theirs]
        if theirs_value != np.float32(have):
            differ.append(f"{theirs}={theirs_value:g} (tx's {ours}={have:g})")
    if differ:
        warn_at_caller(f"{who}(scaler=...): the run's GradScaler differs from tx's loss scaling: "
                       f"{', '.join(differ)}; the next steps follow tx's.")
    return restored_scale(state, scale, good, bad)
