"""The one error tree of lossless.

Every error a user can cause or meet is a ``LosslessError``; the CLI prints its message on one line
and exits with its ``exit_code`` (2: usage, input and connection problems), never with a traceback.
Third-party errors are translated at the boundary with ``raise ... from exc``.

    LosslessError
    ├── UsageError            a bad option, file or value given by the user
    │   └── InvalidRequest    (server/openai/protocol.py) a request refused with an OpenAI error body
    ├── ModelError
    │   ├── ModelFetchError   the embedded model could not be downloaded (names what was fetched)
    │   └── CheckpointError   a checkpoint file is corrupt or unsupported (names the file and why)
    └── EndpointError         an endpoint could not be reached or answered unusably (names the endpoint)
"""

from __future__ import annotations


class LosslessError(Exception):
    exit_code = 2


class UsageError(LosslessError):
    pass


class ModelError(LosslessError):
    pass


class ModelFetchError(ModelError):
    pass


class CheckpointError(ModelError):
    pass


class EndpointError(LosslessError):
    pass
