"""Learning-rate schedules of the MindSpore and Paddle families as pure,
vectorised functions ``sched(step, base_lr=None) -> lr`` of the framework's
step index (updates completed), plus Paddle's ReduceOnPlateau as a piece.
See `gradxform.schedules._common` for the protocol."""
from ._common import Constant, Schedule, as_schedule, on_completed_steps
from ._mindspore import (CosineDecayLR, DynamicLR, ExponentialDecayLR, InverseDecayLR, NaturalExpDecayLR,
                         PolynomialDecayLR, WarmUpLR)
from ._paddle import (CosineAnnealingDecay, CyclicLR, ExponentialDecay, InverseTimeDecay, LambdaDecay,
                      LinearLR, LinearWarmup, MultiStepDecay, NaturalExpDecay, NoamDecay, OneCycleLR,
                      PiecewiseDecay, PolynomialDecay, ReduceOnPlateau, StepDecay)

__all__ = [
    "Schedule", "Constant", "as_schedule", "on_completed_steps",
    # MindSpore (mindspore.nn.learning_rate_schedule) and its list learning rate
    "ExponentialDecayLR", "NaturalExpDecayLR", "InverseDecayLR", "CosineDecayLR", "PolynomialDecayLR",
    "WarmUpLR", "DynamicLR",
    # Paddle (paddle.optimizer.lr)
    "StepDecay", "MultiStepDecay", "ExponentialDecay", "NaturalExpDecay", "InverseTimeDecay",
    "PolynomialDecay", "PiecewiseDecay", "CosineAnnealingDecay", "LinearWarmup", "NoamDecay",
    "LambdaDecay", "OneCycleLR", "CyclicLR", "LinearLR", "ReduceOnPlateau",
]
