"""Framework-neutral chainable pieces. Each is an optax-compatible
``(init, update)`` pair whose numeric hyperparameters live in its state.

Each module lists its public pieces in ``PUBLIC``; this package re-exports
exactly those (so a new piece is added in its own module, nothing else).
State classes and helpers that other packages build on are in
`gradxform.pieces.internal`."""
from . import (_centralization, _clipping, _decay, _guards, _masking, _moments, _precision, _rules, _scaling,
               _step, _trust)

_MODULES = (_centralization, _clipping, _decay, _guards, _masking, _moments, _precision, _scaling, _step, _trust,
            _rules)
globals().update({name: getattr(module, name) for module in _MODULES for name in module.PUBLIC})
__all__ = [name for module in _MODULES for name in module.PUBLIC]
