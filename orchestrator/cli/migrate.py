"""`leasewise migrate`: live-migrate one VM by hand (filled in by the drivers work)."""

from . import app  # noqa: F401
