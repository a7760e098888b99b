"""Memory (CATALOGUE.md section 7): what the model carries from one segment to the next.

A memory module gives each layer the hidden states prepended to its keys/values
(``prefix(layer, state)``); the state itself is an explicit object the caller passes in and gets
back, so nothing leaks between users.
"""
from __future__ import annotations

from .registry import Variant, register

MEMORY: dict = {}

register(MEMORY, Variant("none", "Vaswani et al. 2017",
                         "No memory: each call sees only its own tokens.", build=None))
