"""The errors of the API as the SDK raises them."""

from __future__ import annotations

import json
from typing import Any


class APIError(Exception):
    """An error answer of the API: its HTTP status, its code (for
    programs: "not_found", "stale_attempt", ...) and its one-sentence
    message. op names the call and what it was about."""

    def __init__(self, op: str, status: int, code: str, message: str):
        super().__init__(f"{op}: {status} {code}: {message}")
        self.op, self.status, self.code, self.message = op, status, code, message

    @property
    def transient(self) -> bool:
        """The call may succeed if repeated: 429 or a 5xx."""
        return self.status == 429 or self.status >= 500

    @classmethod
    def from_answer(cls, op: str, status: int, body: bytes) -> "APIError":
        try:
            e: Any = json.loads(body)
        except ValueError:
            e = None
        if isinstance(e, dict) and e.get("code"):
            return cls(op, status, str(e["code"]), str(e.get("message", "")))
        # A proxy or gateway answered, not the API.
        return cls(op, status, "unexpected_answer", body[:200].decode("utf-8", "replace"))


# Answers of the worker routes that end an attempt for this worker: the
# server has decided, and repeating the call cannot change that.
REFUSALS = frozenset({(409, "already_claimed"), (409, "stale_attempt"), (409, "illegal_transition"), (401, "invalid_token")})


def is_refusal(err: BaseException) -> bool:
    return isinstance(err, APIError) and (err.status, err.code) in REFUSALS
