"""Moved to the package `orchestrator.config` (a layer of its own above the model); this module only
re-exports its names until every import is rewritten."""

from orchestrator.config import *  # noqa: F401,F403
from orchestrator.config import __all__  # noqa: F401
