"""``ModelConfig.delta_json``: the key of results stored with the code (the fields off their defaults)."""

import json

from models import ModelConfig
from models.config import FIELDS


def test_the_default_config_has_an_empty_delta():
    assert ModelConfig().delta_json() == "{}"


def test_the_delta_names_exactly_the_changed_fields_and_rebuilds_the_config():
    cfg = ModelConfig(n_layers=3, norm_placement="post", ffn="moe", layer_schedule="full:dense,full")
    delta = json.loads(cfg.delta_json())
    assert delta == {"n_layers": 3, "norm_placement": "post", "ffn": "moe", "layer_schedule": "full:dense,full"}
    assert ModelConfig.from_dict(delta) == cfg
    assert all(getattr(cfg, k) == FIELDS[k].default for k in FIELDS if k not in delta)
