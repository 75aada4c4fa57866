"""Errors of the queue functions, typed by SQLSTATE.

Every error a queue call raises is a QueueError carrying the server's
SQLSTATE, message, DETAIL and HINT, with the psycopg error as its cause.
CE001 (the lease is no longer the caller's) is a LeaseLostError, with the
reason its DETAIL gives.
"""
import re

import psycopg

from . import _protocol

LEASE_LOST = _protocol.SQLSTATES["lease_lost"]

# What the DETAIL of a CE001 says became of the task (clients/protocol/statements.json).
_REASONS = tuple((reason, re.compile(pattern)) for reason, pattern in _protocol.LEASE_LOST_REASONS)


class QueueError(Exception):
    """An error raised by a concurrency_ext queue function."""

    def __init__(self, message, sqlstate=None, detail=None, hint=None):
        super().__init__(message)
        self.message = message
        self.sqlstate = sqlstate
        self.detail = detail
        self.hint = hint

    def __str__(self):
        return self.message if not self.detail else f"{self.message} ({self.detail})"


class LeaseLostError(QueueError):
    """SQLSTATE CE001: the task is not held under this lease any more.

    reason is "cancelled", "completed", "reclaimed" (claimed again by another
    lease), "unleased" (ready again or dead) or "gone" (the task does not
    exist); detail is the server's own sentence. Whatever the reason, the work
    done under the lease must be rolled back: the runtime does that for the
    handler's transaction.
    """

    def __init__(self, message, sqlstate=LEASE_LOST, detail=None, hint=None):
        super().__init__(message, sqlstate, detail, hint)
        self.reason = "gone"
        for reason, pattern in _REASONS:
            if detail and pattern.search(detail):
                self.reason = reason
                break


def translate(error):
    """The QueueError for a psycopg error (LeaseLostError for CE001)."""
    diag = error.diag
    cls = LeaseLostError if error.sqlstate == LEASE_LOST else QueueError
    translated = cls(diag.message_primary or str(error), sqlstate=error.sqlstate, detail=diag.message_detail,
                     hint=diag.message_hint)
    translated.__cause__ = error
    return translated


class _Translating:
    """Context manager: re-raises psycopg errors as QueueError."""

    def __enter__(self):
        return self

    def __exit__(self, kind, error, tb):
        if isinstance(error, psycopg.Error) and error.sqlstate:
            raise translate(error) from error
        return False


translating = _Translating()
