"""The Paddle family (``gradxform.create('paddle.<name>', ...)``): ``paddle.optimizer``
of Paddle 3.3 (SGD, Momentum, Adam, AdamW, Adamax, Adagrad, Adadelta, RMSProp,
Lamb, NAdam, RAdam, Rprop, ASGD) with Paddle's keywords and defaults, its
gradient clips and regularizers (Paddle's class names, and snake_case), and
Paddle's ``get_lr`` / ``set_lr``; with ``parameters=`` arrays, the stateful
``paddle.optimizer.Optimizer`` object (`Optimizer`: ``step``,
``state_dict``, ...; `gradxform.paddle._face`). Shared machinery: `gradxform.paddle._common`."""
from .._registry import by_class_name, register_family
from . import _adam, _adaptive, _asgd
from ._clip import (ClipGradByGlobalNorm, ClipGradByNorm, ClipGradByValue, clip_grad_by_global_norm,
                    clip_grad_by_norm, clip_grad_by_value)
from ._common import ParamInfo, get_lr, set_lr
from ._face import Optimizer  # paddle.optimizer.Optimizer: the stateful face (parameters=<arrays>)
from ._regularizer import L1Decay, L2Decay, l1_decay, l2_decay
from . import _sgd

_OPTIMIZERS = register_family("paddle", (_sgd, _adam, _adaptive, _asgd))
globals().update(_OPTIMIZERS)
__getattr__ = by_class_name(_OPTIMIZERS, __name__)  # paddle.optimizer.AdamW(...)
__all__ = [
    *_OPTIMIZERS, "ClipGradByGlobalNorm", "ClipGradByNorm", "ClipGradByValue", "clip_grad_by_global_norm",
    "clip_grad_by_norm", "clip_grad_by_value", "L1Decay", "L2Decay", "l1_decay", "l2_decay", "ParamInfo",
    "get_lr", "set_lr", "Optimizer",
]
from . import lr, regularizer  # paddle.optimizer.lr and paddle.regularizer, as modules

__all__ += ["lr", "regularizer"]
