"""``mindspore.nn.dynamic_lr`` (MindSpore 2.x): the builders of learning-rate lists, so that a
MindSpore script's imports work as written::

    from gradxform.mindspore.dynamic_lr import piecewise_constant_lr, warmup_lr
    nn.dynamic_lr.cosine_decay_lr(0.01, 0.1, 100, 10, 2)     # import gradxform.mindspore as nn

The functions are ``gradxform.mindspore``'s own (``gradxform.mindspore.warmup_lr``, ...): Python
lists, value for value as MindSpore's. ``__all__`` is MindSpore's.
"""
from ._dynamic_lr import (cosine_decay_lr, exponential_decay_lr, inverse_decay_lr, natural_exp_decay_lr,
                          piecewise_constant_lr, polynomial_decay_lr, warmup_lr)

__all__ = ["piecewise_constant_lr", "exponential_decay_lr", "natural_exp_decay_lr", "inverse_decay_lr",
           "cosine_decay_lr", "polynomial_decay_lr", "warmup_lr"]
