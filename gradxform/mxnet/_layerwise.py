"""MXNet 1.x layer-wise rules: lamb (GluonNLP's BERT pretraining optimizer).

Source: ``mxnet/optimizer/optimizer.py`` (1.9.1) ``LAMB._update_impl`` and its
kernels ``lamb_update_phase1`` / ``lamb_update_phase2`` (``mp_`` variants for
float16 with ``multi_precision``), read in ``tools/MXNET_NOTES.md``.
"""
from __future__ import annotations

from .._base import GradientTransformation
from .._ranges import check_bool
from ..pieces import scale_by_adam_moments, scale_by_corrected_moments, scale_by_lr, scale_by_trust_ratio
from ._common import check_unit, parse_options

__all__ = ["lamb"]
OPTIMIZERS = ("lamb",)  # registered as 'mxnet.<name>' by the family's __init__


def _bound(owner: str, name: str, value):
    """MXNet passes a bound to the kernel only when it is truthy, and the
    kernel applies it only when it is >= 0: None, 0 and negatives mean none."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{owner}({name}=...): must be None or a number; got {value!r}.")
    return float(value) if value > 0 else None


def lamb(learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-6, lower_bound=None, upper_bound=None,
         bias_correction=True, **kwargs) -> GradientTransformation:
    """MXNet LAMB (``LAMB.update`` -> ``lamb_update_phase1`` + ``lamb_update_phase2``)::

        g = clip(rescale_grad * grad, clip_gradient)
        m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
        u = m^ / (sqrt(v^) + epsilon) + wd * w      m^ = m / (1 - beta1^t), v^ = v / (1 - beta2^t)
                                                    (m, v themselves when bias_correction=False)
        r1 = clip(|w|, lower_bound, upper_bound);   r2 = |u|
        w -= lr * r1 / r2 * u                       (lr * u where r1 or r2 is 0)

    ``t`` is the parameter's own update count; norms are per parameter (L2,
    float32; of the float32 master copy with ``multi_precision``). The decay
    is added after the clip, so it is never clipped.

    Args:
      learning_rate: >= 0 (MXNet's default 0.001).
      beta1, beta2: in [0, 1). epsilon: > 0.
      lower_bound, upper_bound: None or a number; as MXNet, a bound that is
        not > 0 is no bound (static).
      bias_correction: bool (static).
      **kwargs: the common keywords (wd, rescale_grad, clip_gradient,
        lr_scheduler, multi_precision, ...).
    """
    owner = "mxnet.lamb"
    o = parse_options(owner, learning_rate, kwargs)
    check_unit(owner, beta1=beta1, beta2=beta2, epsilon=epsilon)
    check_bool(owner, "bias_correction", bias_correction)
    lower, upper = _bound(owner, "lower_bound", lower_bound), _bound(owner, "upper_bound", upper_bound)
    direction = (scale_by_corrected_moments(beta1, beta2, epsilon) if bias_correction
                 else scale_by_adam_moments(beta1, beta2, epsilon))
    return o.build(o.rescale(), o.clip(), direction, o.add_wd(), scale_by_trust_ratio(lower, upper), scale_by_lr())
