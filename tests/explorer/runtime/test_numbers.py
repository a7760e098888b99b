"""One strict reader of whole numbers (``explorer.runtime.numbers.whole_number``): every hostile value is
refused naming its field, never an internal error."""

import pytest

from explorer.runtime.numbers import whole_number
from explorer.runtime.text import as_text
from models import ConfigError


@pytest.mark.parametrize("value, expected", [(3, 3), ("3", 3), (" 7 ", 7), (2.0, 2), ("4.0", 4), ("-1", -1)])
def test_whole_numbers_are_read(value, expected):
    assert whole_number(value, "position", -1, 10) == expected


@pytest.mark.parametrize(
    "value",
    [
        "NaN",
        "nan",
        "inf",
        "-inf",
        "1e400",
        float("nan"),
        float("inf"),
        2.5,
        "2.5",
        True,
        None,
        [],
        {},
        "",
        "x",
        "9" * 41,
        "1e3",
        -2,
        11,
        "0x10",
    ],
)
def test_hostile_numbers_are_refused_naming_the_field(value):
    with pytest.raises(ConfigError) as err:
        whole_number(value, "earlier", -1, 10)
    assert err.value.field == "earlier" and "earlier" in str(err.value)


def test_the_refusal_says_what_is_accepted():
    with pytest.raises(ConfigError, match="a layer in 0..3"):
        whole_number("NaN", "later", 0, 3, what="a layer in 0..3")
    with pytest.raises(ConfigError, match="a whole number in 1..256"):
        whole_number("1e400", "cells", 1, 256)


def test_a_lone_surrogate_is_refused_as_invalid_text():
    with pytest.raises(ConfigError) as err:
        as_text("abc\ud800def")
    assert err.value.field == "text" and "surrogate" in str(err.value)
    assert as_text("ünïcödé ✓") == "ünïcödé ✓"
