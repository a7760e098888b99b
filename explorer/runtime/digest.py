"""A short stable digest of JSON-able data: what the figures show, how the controls look."""

from __future__ import annotations

import hashlib
import json


def digest(obj) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]
