"""The one error type for bad user input: it always names where the problem is."""

from __future__ import annotations


class InputError(Exception):
    """A malformed scenario, trace or table, or an impossible cluster.

    ``where`` names the file (and line or field) so the user can fix it; the CLI prints the message and
    exits non-zero without writing a result.
    """

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message
