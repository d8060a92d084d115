"""gradxform: functional gradient transformations for JAX, with MXNet, MindSpore
and Paddle optimizers that give their frameworks' numbers step for step, and
optimizers no framework has (`gradxform.neutral`) that give optax's."""
from . import checkpoint, lr_scheduler, migrate, mindspore, mxnet, neutral, paddle, pieces, schedules, trainer
from ._base import (GradientTransformation, LocalKey, StepContext, apply_updates, chain, context_value, identity,
                    uses_context)
from ._errors import validated
from ._fused import fused
from ._group_values import GroupValues
from ._hyper import get_hyper, get_learning_rate, hyper_names, set_hyper, set_learning_rate
from ._registry import Declaration, create, declaration, declarations, register, registered_factory, registered_names
from ._tree import param_names
from .checkpoint import CheckpointError, load_state, save_state
from .pieces.internal import NonFiniteError, check_guard, get_loss_scale, guard_status, per_leaf_counts, scale_loss
from .trainer import Trainer, per_device_grads, split_batch
from . import _flax  # noqa: F401  (flax.serialization learns the state classes, where Flax is installed)

__version__ = "0.1.0"

__all__ = [
    # protocol
    "GradientTransformation", "apply_updates", "chain", "identity",
    # the step context pieces share in a chain
    "StepContext", "LocalKey", "uses_context", "context_value",
    # optimizers by name
    "create", "register", "registered_factory", "registered_names", "Declaration", "declaration", "declarations",
    # hyperparameters as state
    "get_hyper", "set_hyper", "hyper_names", "get_learning_rate", "set_learning_rate", "param_names",
    "per_leaf_counts", "GroupValues",
    # reliability
    "validated", "NonFiniteError", "check_guard", "guard_status", "get_loss_scale", "scale_loss",
    # speed
    "fused",
    # training and checkpoints
    "Trainer", "per_device_grads", "split_batch", "save_state", "load_state", "CheckpointError",
    # modules: families, pieces, schedules, migration
    "mxnet", "mindspore", "paddle", "neutral", "pieces", "lr_scheduler", "schedules", "migrate", "checkpoint",
    "trainer",
]
