"""Framework-neutral chainable pieces. Each is an optax-compatible
``(init, update)`` pair whose numeric hyperparameters live in its state."""
from ._centralization import centralize_gradients
from ._clipping import clip_by_global_norm, clip_by_value, global_norm
from ._decay import add_decayed_weights, add_decoupled_weight_decay, provide_weight_decay
from ._guards import all_finite, dynamic_loss_scale, skip_nonfinite
from ._masking import gated, lazy_rows
from ._moments import (bias_correction, ema, scale_by_accumulated_squares, scale_by_adam_moments,
                       scale_by_adamax, scale_by_centered_rms, scale_by_rms, sign, trace)
from ._precision import with_master_weights
from ._scaling import rescale, scale, unscale
from ._step import scale_by_learning_rate, scale_by_lr, track_step
from ._trust import provide_lars_ratio, scale_by_corrected_moments, scale_by_trust_ratio, trace_with_lr_ratio
from ._rules import (averaged_sgd_step, running_bias_correction, scale_by_adadelta, scale_by_infinity_norm,
                     scale_by_row_accumulated_squares, scale_by_rprop)

__all__ = [
    "add_decayed_weights", "add_decoupled_weight_decay", "all_finite", "dynamic_loss_scale",
    "skip_nonfinite", "bias_correction", "centralize_gradients", "clip_by_global_norm",
    "clip_by_value", "ema", "gated", "global_norm", "lazy_rows", "provide_weight_decay", "rescale",
    "scale", "scale_by_accumulated_squares", "scale_by_adam_moments", "scale_by_adamax",
    "scale_by_centered_rms", "scale_by_learning_rate", "scale_by_lr", "scale_by_rms", "sign",
    "track_step", "trace", "unscale", "with_master_weights",
    "scale_by_corrected_moments", "scale_by_trust_ratio", "provide_lars_ratio", "trace_with_lr_ratio",
    "averaged_sgd_step", "running_bias_correction", "scale_by_adadelta", "scale_by_infinity_norm", "scale_by_rprop",
    "scale_by_row_accumulated_squares",
]
