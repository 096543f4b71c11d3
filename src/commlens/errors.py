"""Errors raised by commlens.

User mistakes raise a subclass of :class:`CommlensError`; the CLI prints its
message on one line and exits with ``exit_code``. Internal invariants use
``assert``.
"""

from __future__ import annotations


class CommlensError(Exception):
    """Base class of every error commlens reports to a user."""

    exit_code: int = 2


class UsageError(CommlensError, ValueError):
    """Bad input from the user: an argument, a config value, a combination."""


class RunFormatError(CommlensError):
    """A run directory or one of its files is foreign, corrupt or missing."""


class CommandError(CommlensError):
    """A command failed; carries the exit code the CLI should return."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code
