"""runledger's worker SDK and API client for Python (docs/workers.md,
"Python").

A worker runs the attempts of one pool:

    import runledger

    def handle(task: runledger.Task):
        return {"rows": 42}           # the task's output

    runledger.Worker("default", handle, concurrency=4).run()
"""

import logging

from .client import Client, RunAnswer
from .config import ConfigError, LocalStack, find_local
from .errors import APIError
from .task import Cancelled, FenceUnavailable, LeaseLost, Stopped, Task, TaskError, permanent
from .worker import (REPORT_APPLIED, REPORT_DUPLICATE, REPORT_QUEUED, REPORT_REFUSED, REPORT_STALE, Worker)

# The SDK logs to "runledger" and its children; the application decides
# where that goes (logging.basicConfig, say).
logging.getLogger("runledger").addHandler(logging.NullHandler())

__all__ = [
    "APIError", "Cancelled", "Client", "ConfigError", "FenceUnavailable", "LeaseLost", "LocalStack", "REPORT_APPLIED",
    "REPORT_DUPLICATE", "REPORT_QUEUED", "REPORT_REFUSED", "REPORT_STALE", "RunAnswer", "Stopped", "Task", "TaskError",
    "Worker", "find_local", "permanent",
]
