"""Users' own verifiers and environments, found by name (``ratchet.verifiers.plugins.loading``)."""

from ratchet.verifiers.plugins.loading import (
    ENVIRONMENT_GROUP,
    VERIFIER_GROUP,
    Plugin,
    PluginError,
    load_plugin,
)

__all__ = ["ENVIRONMENT_GROUP", "VERIFIER_GROUP", "Plugin", "PluginError", "load_plugin"]
