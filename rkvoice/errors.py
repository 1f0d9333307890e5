"""One error type for the whole pipeline: a stage, a short code and a message a user can act on."""

from __future__ import annotations


class RkvoiceError(Exception):
    """An error with a stage name, a machine-readable code and a human message.

    The message names the problem and, where there is one, the fix. The CLI prints
    ``str(err)`` as one line and exits non-zero; it never shows a traceback for these.
    """

    def __init__(self, stage: str, code: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.stage}: {self.message}"


def is_device_error(exc: BaseException) -> bool:
    """A missing/busy/unplugged microphone: retried with backoff, not a failed turn."""
    return isinstance(exc, RkvoiceError) and exc.stage == "audio" and exc.code.startswith("device")
