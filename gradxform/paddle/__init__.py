"""The Paddle family (``gradxform.create('paddle.<name>', ...)``): ASGD, with
Paddle's gradient clips and regularizers as pieces."""
from .._registry import register
from ._asgd import (asgd, clip_grad_by_global_norm, clip_grad_by_norm, clip_grad_by_value, l1_decay,
                    l2_decay)

__all__ = ["asgd", "clip_grad_by_global_norm", "clip_grad_by_norm", "clip_grad_by_value", "l1_decay", "l2_decay"]

register(family="paddle")(asgd)
