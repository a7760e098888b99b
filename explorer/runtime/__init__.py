"""What every request needs, below the analyses: ``settings`` (every ``EXPLORER_*`` variable),
``configs`` (the one door for a config), ``text`` (the one path from a text to token ids),
``limits`` and ``budget`` (caps and the per-request memory budget), ``cache`` (byte-bounded memo),
``device``, ``load`` (how many requests compute now), ``presets``, ``untrusted``
(escaping and bounded parsing of hostile input), ``tokens``, ``digest``."""
