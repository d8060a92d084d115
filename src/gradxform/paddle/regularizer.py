"""Paddle's ``paddle.regularizer`` module (3.3.1): ``L1Decay(coeff=0.0)`` and
``L2Decay(coeff=0.0)``, the same objects as ``gradxform.paddle.L1Decay`` /
``L2Decay`` (defined in `gradxform.paddle._regularizer`), so that
``from paddle.regularizer import L2Decay`` ports by changing its import."""
from ._regularizer import L1Decay, L2Decay

__all__ = ["L1Decay", "L2Decay"]
