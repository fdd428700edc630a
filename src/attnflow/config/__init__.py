"""Settings and the method registry: the two tables every layer reads (imports the errors only, so
that the CLI and the app build their options from them without loading torch)."""

from attnflow.config.registry import Context, Method, methods
from attnflow.config.settings import Settings

__all__ = ["Context", "Method", "Settings", "methods"]
