"""Learning-rate schedules of the MXNet, MindSpore and Paddle families as
pure, vectorised functions of each framework's own step index, under one
protocol (`gradxform.schedules._common`: each schedule says how it is
indexed and what a new base learning rate means), plus Paddle's
ReduceOnPlateau as a piece. The Paddle classes carry a ``Paddle`` prefix
(`PaddleStepDecay`, ..., `PaddleReduceOnPlateau`) because they are the
in-graph versions of Paddle's formulas, stepped once per update, while
Paddle's own stateful objects, which a ported script steps itself, are
``gradxform.paddle.lr.<Name>``. The MXNet classes are also importable as
`gradxform.lr_scheduler`, which alone exports their base class
``LRScheduler``."""
from ._common import (COMPLETED, NUM_UPDATE, REPLACE, SCALE, Constant, FunctionSchedule, Schedule,
                      on_completed_steps)
from ._held import HeldRate, ScheduleRestartError
from ._user import HostScheduleError, UserSchedule, as_schedule, as_update_schedule, mxnet_style, optax_style
from ._mindspore import (CosineDecayLR, DynamicLR, ExponentialDecayLR, InverseDecayLR, NaturalExpDecayLR,
                         PolynomialDecayLR, WarmUpLR, LearningRateSchedule)
from ._mxnet import CosineScheduler, FactorScheduler, MultiFactorScheduler, PolyScheduler
from ._paddle import (PaddleCosineAnnealingDecay, PaddleCyclicLR, PaddleExponentialDecay, PaddleInverseTimeDecay,
                      PaddleLambdaDecay, PaddleLinearLR, PaddleLinearWarmup, PaddleMultiStepDecay,
                      PaddleNaturalExpDecay, PaddleNoamDecay, PaddleOneCycleLR, PaddlePiecewiseDecay,
                      PaddlePolynomialDecay, PaddleStepDecay)
from ..paddle._plateau import PaddleReduceOnPlateau

__all__ = [
    "Schedule", "FunctionSchedule", "Constant", "as_schedule", "as_update_schedule", "on_completed_steps",
    "NUM_UPDATE", "COMPLETED", "REPLACE", "SCALE",
    # a user's own callables (gradxform.schedules._user)
    "UserSchedule", "mxnet_style", "optax_style", "HostScheduleError",
    # a scheduler object the user steps, read by each update (gradxform.schedules._held)
    "HeldRate", "ScheduleRestartError",
    # MXNet (mxnet.lr_scheduler; also gradxform.lr_scheduler, with the base class LRScheduler)
    "FactorScheduler", "MultiFactorScheduler", "PolyScheduler", "CosineScheduler",
    # MindSpore (mindspore.nn.learning_rate_schedule) and its list learning rate
    "ExponentialDecayLR", "NaturalExpDecayLR", "InverseDecayLR", "CosineDecayLR", "PolynomialDecayLR",
    "WarmUpLR", "DynamicLR", "LearningRateSchedule",
    # Paddle (paddle.optimizer.lr's formulas, in the graph; its stateful objects are gradxform.paddle.lr)
    "PaddleStepDecay", "PaddleMultiStepDecay", "PaddleExponentialDecay", "PaddleNaturalExpDecay",
    "PaddleInverseTimeDecay", "PaddlePolynomialDecay", "PaddlePiecewiseDecay", "PaddleCosineAnnealingDecay",
    "PaddleLinearWarmup", "PaddleNoamDecay", "PaddleLambdaDecay", "PaddleOneCycleLR", "PaddleCyclicLR",
    "PaddleLinearLR", "PaddleReduceOnPlateau",
]
