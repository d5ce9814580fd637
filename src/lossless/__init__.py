"""lossless: how fast is an LLM endpoint really, and is it still the same model?"""

from lossless.errors import (
    CheckpointError,
    EndpointError,
    LosslessError,
    ModelError,
    ModelFetchError,
    UsageError,
)

__version__ = "0.1.0"

__all__ = [
    "CheckpointError",
    "EndpointError",
    "LosslessError",
    "ModelError",
    "ModelFetchError",
    "UsageError",
    "__version__",
]
