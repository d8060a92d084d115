"""MindSpore's loss-scaling objects (``mindspore.amp`` and the ``mindspore.nn`` cells), as a
script names them: constructing one raises a TypeError giving the gradxform line that replaces
it, with the script's own values (`gradxform.pieces.dynamic_loss_scale`, in the state: a step
unscales, checks, skips and moves the scale; docs/first-ten-minutes-mindspore.md). ``all_finite``
works as MindSpore's. The cells are also ``gradxform.mindspore.TrainOneStepWithLossScaleCell``,
``DynamicLossScaleUpdateCell`` and ``FixedLossScaleUpdateCell``::

    from gradxform.mindspore import amp      # for: from mindspore import amp
"""
from __future__ import annotations

from ..pieces import all_finite  # MindSpore's ms.amp.all_finite: gradxform's own (a scalar bool, jittable)

__all__ = ["DynamicLossScaler", "StaticLossScaler", "DynamicLossScaleManager", "FixedLossScaleManager", "all_finite",
           "DynamicLossScaleUpdateCell", "FixedLossScaleUpdateCell", "TrainOneStepWithLossScaleCell"]

_HOW = ("; differentiate gradxform.scale_loss(loss, state) (the loss times the scale), and one "
        "updates, state = tx.update(grads, state, params) unscales, checks the gradients, skips an overflowing "
        "step and moves the scale (MindSpore's scale/unscale/all_finite/adjust, or the cell's step). "
        "docs/first-ten-minutes-mindspore.md has the rows.")


def _dynamic(what: str, scale, factor, window) -> TypeError:
    return TypeError(f"{what}: a MindSpore loss-scaling object; in gradxform the scale is optimizer state. Write: "
                     f"tx = gradxform.pieces.dynamic_loss_scale(opt, {float(scale)!r}, growth_interval={window!r}, "
                     f"growth={float(factor)!r}, backoff={1 / float(factor)!r}, min_scale=1.0, check_updates=False, "
                     f"check_state=False) with the optimizer's loss_scale=1.0" + _HOW)


def _fixed(what: str, scale) -> TypeError:
    return TypeError(f"{what}: a MindSpore loss-scaling object; in gradxform the scale is optimizer state. Write: "
                     f"tx = gradxform.pieces.dynamic_loss_scale(opt, {float(scale)!r}, growth=1.0, backoff=1.0, "
                     "check_updates=False, check_state=False) with the optimizer's loss_scale=1.0" + _HOW)


class DynamicLossScaler:
    """``mindspore.amp.DynamicLossScaler(scale_value, scale_factor, scale_window)``: raises, naming the port."""

    def __init__(self, scale_value, scale_factor, scale_window):
        raise _dynamic("amp.DynamicLossScaler", scale_value, scale_factor, scale_window)


class StaticLossScaler:
    """``mindspore.amp.StaticLossScaler(scale_value)``: raises, naming the port."""

    def __init__(self, scale_value):
        raise _fixed("amp.StaticLossScaler", scale_value)


class DynamicLossScaleManager:
    """``mindspore.amp.DynamicLossScaleManager(init_loss_scale=2**24, scale_factor=2, scale_window=2000)``."""

    def __init__(self, init_loss_scale=2 ** 24, scale_factor=2, scale_window=2000):
        raise _dynamic("amp.DynamicLossScaleManager", init_loss_scale, scale_factor, scale_window)


class FixedLossScaleManager:
    """``mindspore.amp.FixedLossScaleManager(loss_scale=128.0, drop_overflow_update=True)``."""

    def __init__(self, loss_scale=128.0, drop_overflow_update=True):
        if drop_overflow_update:
            raise _fixed("amp.FixedLossScaleManager", loss_scale)
        raise TypeError(f"amp.FixedLossScaleManager(drop_overflow_update=False): in gradxform give the optimizer "
                        f"loss_scale={float(loss_scale)!r} and multiply the loss by {float(loss_scale)!r} before "
                        "jax.grad (no overflow check, as MindSpore's).")


class DynamicLossScaleUpdateCell:
    """``mindspore.nn.DynamicLossScaleUpdateCell(loss_scale_value, scale_factor, scale_window)``."""

    def __init__(self, loss_scale_value, scale_factor, scale_window):
        raise _dynamic("nn.DynamicLossScaleUpdateCell", loss_scale_value, scale_factor, scale_window)


class FixedLossScaleUpdateCell:
    """``mindspore.nn.FixedLossScaleUpdateCell(loss_scale_value)``."""

    def __init__(self, loss_scale_value):
        raise _fixed("nn.FixedLossScaleUpdateCell", loss_scale_value)


class TrainOneStepWithLossScaleCell:
    """``mindspore.nn.TrainOneStepWithLossScaleCell(network, optimizer, scale_sense)``."""

    def __init__(self, network, optimizer, scale_sense):
        del network, optimizer, scale_sense
        raise TypeError("nn.TrainOneStepWithLossScaleCell: in gradxform a training step is your own function: "
                        "grads = jax.grad(lambda p: gradxform.scale_loss(loss_fn(p, x, y), state))(params); updates, "
                        "state = tx.update(grads, state, params); params = optax.apply_updates(params, updates), with "
                        "tx = gradxform.pieces.dynamic_loss_scale(opt, ...) built from the scale_sense cell (construct "
                        "nn.DynamicLossScaleUpdateCell(...) here to see its line).")

