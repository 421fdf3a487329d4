"""The error types the command line reports without a traceback: bad user input (it always names where
the problem is), and a real run that failed because one of its processes died."""

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

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        # Raised in a worker process (reproduce, sweep), it must unpickle in the parent with both fields.
        return (type(self), (self.where, self.message))


class RunFailure(RuntimeError):
    """A real run was abandoned because one of its processes died (killed, crashed, out of memory).

    The message names the process; the run wrote no result. The CLI prints it and exits 1.
    """
