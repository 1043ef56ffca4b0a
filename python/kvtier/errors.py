"""Exceptions raised by kvtier, one class per kvtier StatusCode (common/status.h).

Every failure of a call that talks to kvtierd, or of a local check (a malformed namespace
descriptor, a buffer of the wrong size), raises a subclass of :class:`KvtierError`. Its ``code`` is
the StatusCode name (``"BUSY"``) and its message is the one the C++ client produced; for an error
reply that is the daemon's own text. A miss is never an exception: lookups report a prefix and
gets report how many blocks were served.

Some classes also derive from the matching built-in, so generic handlers keep working:
``InvalidArgumentError`` is a ``ValueError``, ``TimeoutError`` a built-in ``TimeoutError``,
``PermissionDeniedError`` a ``PermissionError``.
"""
from __future__ import annotations

import builtins

__all__ = [
    "KvtierError", "NotFoundError", "AlreadyExistsError", "RejectedError", "BusyError",
    "DeviceError", "ChecksumMismatchError", "CorruptionError", "InvalidArgumentError",
    "TimeoutError", "ShuttingDownError", "PermissionDeniedError", "InternalError",
]


class KvtierError(Exception):
    """A failed kvtier call. ``code``: the StatusCode name; ``message``: what went wrong."""

    code = "UNKNOWN"

    def __init__(self, message: str, code: str | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class NotFoundError(KvtierError):
    """The namespace, lease or reservation does not exist (a missing block is not an error)."""
    code = "NOT_FOUND"


class AlreadyExistsError(KvtierError):
    """The key is already stored."""
    code = "ALREADY_EXISTS"


class RejectedError(KvtierError):
    """Can never succeed as asked (a block larger than any tier, a policy refusal)."""
    code = "REJECTED"


class BusyError(KvtierError):
    """No room or resource right now: retry later."""
    code = "BUSY"


class DeviceError(KvtierError):
    """A device, a driver or the connection failed (also: no daemon listening at the URL)."""
    code = "DEVICE_ERROR"


class ChecksumMismatchError(KvtierError):
    """Stored bytes did not match their checksum."""
    code = "CHECKSUM_MISMATCH"


class CorruptionError(KvtierError):
    """On-disk metadata is malformed or of an unknown version."""
    code = "CORRUPTION"


class InvalidArgumentError(KvtierError, ValueError):
    """A malformed or absurd argument; retrying the same call cannot help."""
    code = "INVALID_ARGUMENT"


class TimeoutError(KvtierError, builtins.TimeoutError):  # noqa: A001 - mirrors StatusCode
    """A deadline passed (connection, lease, reservation)."""
    code = "TIMEOUT"


class ShuttingDownError(KvtierError):
    """The daemon is stopping and accepts no new work."""
    code = "SHUTTING_DOWN"


class PermissionDeniedError(KvtierError, PermissionError):
    """Authentication or authorisation failed."""
    code = "PERMISSION_DENIED"


class InternalError(KvtierError):
    """A broken invariant in kvtier, or a reply the protocol does not allow: a bug."""
    code = "INTERNAL"


_BY_CODE = {cls.code: cls for cls in (
    NotFoundError, AlreadyExistsError, RejectedError, BusyError, DeviceError,
    ChecksumMismatchError, CorruptionError, InvalidArgumentError, TimeoutError,
    ShuttingDownError, PermissionDeniedError, InternalError)}


def _from_status(code: str, message: str) -> KvtierError:
    """The exception for a kvtier Status (called by the extension module)."""
    cls = _BY_CODE.get(code, KvtierError)
    return cls(message, code)
