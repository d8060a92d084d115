"""gradxform: functional gradient transformations for JAX, with MXNet, MindSpore
and Paddle optimizers that give their frameworks' numbers step for step."""
from . import lr_scheduler, mxnet, pieces
from ._base import GradientTransformation, apply_updates, chain, identity
from ._hyper import get_hyper, get_learning_rate, hyper_names, set_hyper, set_learning_rate
from ._registry import create, register, registered_names
from ._tree import param_names
from ._errors import validated
from ._fused import fused
from .pieces._guards import NonFiniteError, check_guard, get_loss_scale, guard_status, scale_loss
from . import migrate
from . import checkpoint, trainer
from .checkpoint import CheckpointError, load_state, save_state
from .trainer import Trainer, per_device_grads, split_batch
from . import mindspore, paddle, schedules

__version__ = "0.1.0"

__all__ = [
    "GradientTransformation", "apply_updates", "chain", "identity",
    "create", "register", "registered_names",
    "get_hyper", "set_hyper", "hyper_names", "get_learning_rate", "set_learning_rate",
    "param_names", "lr_scheduler", "mxnet", "pieces",
    "validated", "fused", "NonFiniteError", "check_guard", "guard_status", "get_loss_scale", "scale_loss",
    "migrate",
    "checkpoint", "trainer", "Trainer", "per_device_grads", "split_batch",
    "save_state", "load_state", "CheckpointError",
    "mindspore", "paddle", "schedules",
]
