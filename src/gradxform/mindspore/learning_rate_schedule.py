"""``mindspore.nn.learning_rate_schedule`` (MindSpore 2.x): the learning-rate Cells, so that a
MindSpore script's imports work as written::

    from gradxform.mindspore.learning_rate_schedule import WarmUpLR, PolynomialDecayLR, LearningRateSchedule
    nn.learning_rate_schedule.CosineDecayLR(0.001, 0.05, 10)     # import gradxform.mindspore as nn

The objects are `gradxform.schedules`' own (the same as ``gradxform.mindspore.WarmUpLR``, ...).
``__all__`` is MindSpore's; ``LearningRateSchedule``, the base class, is importable as in MindSpore
without being in it.
"""
from ..schedules import (CosineDecayLR, ExponentialDecayLR, InverseDecayLR, NaturalExpDecayLR, PolynomialDecayLR,
                         WarmUpLR)
from ..schedules import LearningRateSchedule as LearningRateSchedule  # MindSpore's base class, not in its __all__

__all__ = ["ExponentialDecayLR", "NaturalExpDecayLR", "InverseDecayLR", "CosineDecayLR", "PolynomialDecayLR",
           "WarmUpLR"]
