"""User errors: a mistake in what the user gave (a config key or value, a recipe, task or model
name, a path, a row of a data file), as opposed to a bug in reasonrl.

The command line prints a user error as its message alone and exits with status 2 (the usage
error convention); any other exception is a bug and keeps its traceback. Every user error is a
``ValueError`` (so ``except ValueError`` and ``pytest.raises(ValueError)`` still catch it); the
two path errors are also the ``OSError`` Python itself would raise for them.
"""

from __future__ import annotations


class UserError(ValueError):
    """Bad input from the user; the message names the offending item and the fix."""


class MissingPathError(UserError, FileNotFoundError):
    """A file or folder the user named does not exist (or is not the kind expected)."""


class ExistingPathError(UserError, FileExistsError):
    """A folder the user named already holds something that must not be overwritten."""


__all__ = ["ExistingPathError", "MissingPathError", "UserError"]
