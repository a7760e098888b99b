"""``ConfigError``: the one exception an invalid configuration raises (a leaf module).

Every family module raises it from its own checks, so it lives apart from ``ModelConfig``: the
config imports the registries to validate a choice, and the registries must not import the config
back.
"""

from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """An invalid configuration: the message names the field, the value and what is allowed."""

    def __init__(self, field_name: str, value: Any, allowed: str):
        self.field = field_name
        self.value = value
        self.allowed = allowed
        super().__init__(f"{field_name}={value!r} is not valid: {allowed}")
