"""The worker protocol as the SDK speaks it (docs/api.md, "Workers").

The one definition of what crosses the wire is the Go package
shared/protocol; this module mirrors the few parts a Python worker needs:
the API's time format, Go duration strings, event ids, and the limits a
completion is checked against before it is sent, so that the SDK never
sends what the API would refuse.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import time

# Limits of a worker's reports (shared/protocol: MaxOutputBytes and the rest).
MAX_OUTPUT_BYTES = 16 << 10
MAX_OUTPUT_REF_BYTES = 2048
MAX_ERROR_CATEGORY_LEN = 64
MAX_REASON_BYTES = 4096
MAX_EVENT_ID_LEN = 128
# What a worker reads of an answer of the worker routes (protocol.MaxAnswerBytes).
MAX_ANSWER_BYTES = 2 << 20

OUTCOME_SUCCEEDED = "succeeded"
OUTCOME_FAILED = "failed"
OUTCOME_CANCELLED = "cancelled"

# Error categories the SDK itself reports.
CATEGORY_ERROR = "error"
CATEGORY_TIMEOUT = "timeout"
CATEGORY_CANCELLED = "cancelled"
CATEGORY_WORKER_SHUTDOWN = "worker_shutdown"
CATEGORY_WORKER_DEADLINE = "worker_deadline"

# Results of a completion.
RESULT_APPLIED = "applied"
RESULT_DUPLICATE = "duplicate"
RESULT_STALE = "stale"

_SNAKE_CASE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
_EVENT_ID = re.compile(r"^[A-Za-z0-9._-]+$")


def format_time(t: float | _dt.datetime) -> str:
    """The API's time format: RFC 3339 in UTC with milliseconds."""
    if not isinstance(t, _dt.datetime):
        t = _dt.datetime.fromtimestamp(t, _dt.timezone.utc)
    t = t.astimezone(_dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def parse_time(s: str | None) -> float | None:
    """Reads an RFC 3339 time with any offset into seconds since the epoch;
    None for an absent or empty one."""
    if not s:
        return None
    return _dt.datetime.fromisoformat(s.replace("z", "Z")).timestamp()


_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(s: str | None) -> float:
    """Reads a Go duration string ("90s", "1m30s", "1.5h") into seconds; 0
    for an absent or empty one. Raises ValueError for any other text."""
    if not s:
        return 0.0
    sign, rest = 1.0, s
    if rest[0] in "+-":
        sign, rest = (-1.0 if rest[0] == "-" else 1.0), rest[1:]
    if rest == "0":
        return 0.0
    total, pos = 0.0, 0
    while pos < len(rest):
        m = _DURATION_PART.match(rest, pos)
        if not m:
            raise ValueError(f"duration {s!r}: want a Go duration string such as \"90s\"")
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos == 0:
        raise ValueError(f"duration {s!r}: want a Go duration string such as \"90s\"")
    return sign * total


_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_event_id(now: float | None = None) -> str:
    """A fresh ULID: 48 bits of milliseconds and 80 random bits, in
    Crockford base32. One per fact; a repeated call keeps its id."""
    ms = int((time.time() if now is None else now) * 1000) & ((1 << 48) - 1)
    n = (ms << 80) | int.from_bytes(os.urandom(10), "big")
    return "".join(_CROCKFORD[(n >> (5 * i)) & 31] for i in range(25, -1, -1))


class FieldError(ValueError):
    """A field the contract refuses: too_large is the API's 413, else 422."""

    def __init__(self, field: str, message: str, too_large: bool = False):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.too_large = too_large


def check_event_id(event_id: str) -> None:
    if not event_id:
        raise FieldError("event_id", "event_id is required on every worker route.")
    if len(event_id) > MAX_EVENT_ID_LEN or not _EVENT_ID.match(event_id) or event_id == "deps":
        raise FieldError("event_id", f"event_id must be 1 to {MAX_EVENT_ID_LEN} characters of A-Z, a-z, 0-9, '.', '_' and '-', not \"deps\".")


def check_category(category: str) -> None:
    if len(category) > MAX_ERROR_CATEGORY_LEN:
        raise FieldError("error_category", f"error_category is over {MAX_ERROR_CATEGORY_LEN} characters.", too_large=True)
    if category and not _SNAKE_CASE.match(category):
        raise FieldError("error_category", "error_category must be snake_case (lower-case letters, digits and single underscores).")


def check_output_ref(ref: str) -> None:
    if len(ref.encode()) > MAX_OUTPUT_REF_BYTES:
        raise FieldError("output_ref", f"output_ref is over {MAX_OUTPUT_REF_BYTES} bytes.", too_large=True)
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in ref):
        raise FieldError("output_ref", "output_ref must be printable UTF-8 without control characters.")


def check_output(encoded: bytes) -> None:
    if len(encoded) > MAX_OUTPUT_BYTES:
        raise FieldError("output", f"output is {len(encoded)} bytes encoded, over {MAX_OUTPUT_BYTES}.", too_large=True)


def clip_reason(s: str) -> str:
    """The last MAX_REASON_BYTES of s, cut at a character boundary: the end
    of an error output says most."""
    b = s.encode("utf-8", "replace")
    if len(b) <= MAX_REASON_BYTES:
        return s
    return b[-MAX_REASON_BYTES:].decode("utf-8", "ignore")
