"""Users' own verifiers and environments, found by name (``loading``), and a user's verifier run on completions in
killable worker processes or the kernel sandbox (``runner``)."""

from ratchet.verifiers.plugins.loading import (
    ENVIRONMENT_GROUP,
    VERIFIER_GROUP,
    Plugin,
    PluginError,
    load_plugin,
)
from ratchet.verifiers.plugins.runner import PluginVerifier, resolve_verifier, verify_plugin_batch

__all__ = [
    "ENVIRONMENT_GROUP",
    "VERIFIER_GROUP",
    "Plugin",
    "PluginError",
    "PluginVerifier",
    "load_plugin",
    "resolve_verifier",
    "verify_plugin_batch",
]
