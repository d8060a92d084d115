"""The two errors of `gradxform.migrate`."""
from __future__ import annotations

__all__ = ["MigrateError", "UnsafePickleError"]


class MigrateError(ValueError):
    """A state file that cannot be turned into a gradxform state: corrupt,
    truncated, hostile, or not matching the parameters or the optimizer."""


class UnsafePickleError(MigrateError):
    """The pickle names a global outside the allow-list, or asks for a
    construct a state file never needs; nothing was called."""
