"""Every EXPLORER_* variable is read in one place: sizes in bytes or as a fraction, counts and durations
with their floors, unusable counts and durations falling back to their defaults, unusable sizes refused
with the variable's name."""

import pytest

from explorer.runtime import budget, settings
from explorer.runtime.cache import cache_budget
from explorer.runtime.pool import available_bytes
from models import ConfigError


@pytest.mark.parametrize(
    "text, available, expected",
    [("2G", 10, 2 << 30), ("512MiB", 10, 512 << 20), ("0.5", 1000, 500), ("1500", 10, 1500), ("1.5k", 0, 1536)],
)
def test_sizes_in_bytes_units_or_a_fraction_of_the_available_memory(text, available, expected):
    assert settings.parse_size(text, available) == expected


@pytest.mark.parametrize("bad", ["", "-1", "lots", "0", "1e400"])
def test_an_unusable_size_is_refused_naming_the_variable(bad):
    with pytest.raises(ConfigError) as err:
        settings.parse_size(bad, 10, settings.CACHE_BYTES)
    assert err.value.field == settings.CACHE_BYTES


def test_the_budgets_follow_the_environment_and_default_to_a_share_of_the_machine(monkeypatch):
    monkeypatch.delenv(settings.REQUEST_BUDGET, raising=False)
    monkeypatch.delenv(settings.CACHE_BYTES, raising=False)
    avail = available_bytes()
    assert 0 < budget.request_budget() <= min(avail // 4, settings.MAX_DEFAULT_BUDGET) + (64 << 20)
    assert 0 < cache_budget() <= min(avail // 10, settings.MAX_DEFAULT_CACHE) + (64 << 20)
    monkeypatch.setenv(settings.REQUEST_BUDGET, "3M")
    monkeypatch.setenv(settings.CACHE_BYTES, "5M")
    assert budget.request_budget() == 3 << 20 and cache_budget() == 5 << 20


@pytest.mark.parametrize(
    "raw, ttl", [("", 3600.0), ("5", 5.0), ("0", 1.0), ("-3", 1.0), ("abc", 3600.0), ("nan", 3600.0), ("inf", 3600.0)]
)
def test_session_ttl(monkeypatch, raw, ttl):
    monkeypatch.setenv(settings.SESSION_TTL, raw)
    assert settings.session_ttl() == ttl


@pytest.mark.parametrize(
    "name, read, default",
    [
        (settings.COMPUTE_SLOTS, settings.compute_slots, 2),
        (settings.QUEUE_SIZE, settings.queue_size, 64),
        (settings.THREADS, settings.threads, 1),
    ],
)
@pytest.mark.parametrize("raw, expected", [("", None), ("3", 3), ("0", 1), ("-2", 1), ("two", None), ("2.5", None)])
def test_counts_have_a_floor_of_one_and_fall_back_to_their_default(monkeypatch, name, read, default, raw, expected):
    monkeypatch.setenv(name, raw)
    assert read() == (default if expected is None else expected)
