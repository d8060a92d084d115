"""What every framework optimizer gets around its chain: float32 master
weights or the float16 warning, and the non-finite guard when asked for."""
from __future__ import annotations

from ._base import GradientTransformation, transformation
from .pieces._precision import warn_low_precision, with_master_weights

__all__ = ["finalize"]


def finalize(tx: GradientTransformation, *, multi_precision: bool = False,
             skip_nonfinite: bool = False) -> GradientTransformation:
    """Wraps a framework optimizer's chain.

    ``multi_precision``: run the chain in float32 on master copies of
    float16/bfloat16 parameters; otherwise such parameters warn at ``init``
    as MXNet does. ``skip_nonfinite``: a step with a NaN/Inf gradient changes
    nothing (see `gradxform.pieces.skip_nonfinite`).
    """
    if multi_precision:
        tx = with_master_weights(tx)
    else:
        inner = tx

        def init(params):
            warn_low_precision(params)
            return inner.init(params)

        tx = transformation(init, inner.update)
    if skip_nonfinite:
        from .pieces._guards import skip_nonfinite as guard  # noqa: PLC0415  (reliability layer)
        tx = guard(tx)
    return tx
