"""Continue a training run from the optimizer state MXNet/Gluon, MindSpore or Paddle saved.

Each reader returns a state for a gradxform optimizer ``tx`` (made with
`gradxform.create` and the run's hyperparameters) such that the next
``tx.update`` computes the framework's next step. No framework is needed, and
no file is unpickled without an allow-list (see `UnsafePickleError`).
"""
from ._gluon import from_gluon_states, read_gluon_states
from ._pickle import MigrateError, UnsafePickleError

__all__ = ["from_gluon_states", "read_gluon_states", "MigrateError", "UnsafePickleError"]
