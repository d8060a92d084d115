"""Learning-rate schedules of the MXNet, MindSpore and Paddle families as
pure, vectorised functions of each framework's own step index, under one
protocol (`gradxform.schedules._common`: each schedule says how it is
indexed and what a new base learning rate means), plus Paddle's
ReduceOnPlateau as a piece. The MXNet classes are also importable as
`gradxform.lr_scheduler`."""
from ._common import (COMPLETED, NUM_UPDATE, REPLACE, SCALE, Constant, FunctionSchedule, Schedule,
                      on_completed_steps)
from ._held import HeldRate, ScheduleRestartError
from ._user import HostScheduleError, UserSchedule, as_schedule, as_update_schedule, mxnet_style, optax_style
from ._mindspore import (CosineDecayLR, DynamicLR, ExponentialDecayLR, InverseDecayLR, NaturalExpDecayLR,
                         PolynomialDecayLR, WarmUpLR, LearningRateSchedule)
from ._mxnet import CosineScheduler, FactorScheduler, LRScheduler, MultiFactorScheduler, PolyScheduler
from ._paddle import (CosineAnnealingDecay, CyclicLR, ExponentialDecay, InverseTimeDecay, LambdaDecay,
                      LinearLR, LinearWarmup, MultiStepDecay, NaturalExpDecay, NoamDecay, OneCycleLR,
                      PiecewiseDecay, PolynomialDecay, StepDecay)
from ..paddle._plateau import ReduceOnPlateau

__all__ = [
    "Schedule", "FunctionSchedule", "Constant", "as_schedule", "as_update_schedule", "on_completed_steps",
    "NUM_UPDATE", "COMPLETED", "REPLACE", "SCALE",
    # a user's own callables (gradxform.schedules._user)
    "UserSchedule", "mxnet_style", "optax_style", "HostScheduleError",
    # a scheduler object the user steps, read by each update (gradxform.schedules._held)
    "HeldRate", "ScheduleRestartError",
    # MXNet (mxnet.lr_scheduler; also gradxform.lr_scheduler)
    "LRScheduler", "FactorScheduler", "MultiFactorScheduler", "PolyScheduler", "CosineScheduler",
    # MindSpore (mindspore.nn.learning_rate_schedule) and its list learning rate
    "ExponentialDecayLR", "NaturalExpDecayLR", "InverseDecayLR", "CosineDecayLR", "PolynomialDecayLR",
    "WarmUpLR", "DynamicLR", "LearningRateSchedule",
    # Paddle (paddle.optimizer.lr)
    "StepDecay", "MultiStepDecay", "ExponentialDecay", "NaturalExpDecay", "InverseTimeDecay",
    "PolynomialDecay", "PiecewiseDecay", "CosineAnnealingDecay", "LinearWarmup", "NoamDecay",
    "LambdaDecay", "OneCycleLR", "CyclicLR", "LinearLR", "ReduceOnPlateau",
]
