"""A visitor is a client address (``explorer.app.server.visitors``): the peer's unless the app is told to read
the proxy's header; a header a client writes itself is never read where the app faces clients directly,
and past a known number of trusted proxies only the entry the outermost one wrote counts."""

from types import SimpleNamespace

import pytest

from explorer.app.server import visitors
from explorer.runtime import settings


@pytest.mark.parametrize(
    "mode, forwarded, expected",
    [
        ("socket", "1.2.3.4", "127.0.0.1"),  # a forged header changes nothing
        ("forwarded-first", "1.2.3.4, 10.0.0.9", "1.2.3.4"),  # opted in: the first entry, whoever wrote it
        ("space", "1.2.3.4", "127.0.0.1"),  # a Space, straight from loopback: the header is not read
        ("1", "6.6.6.6, 1.2.3.4", "1.2.3.4"),  # one trusted proxy: what the client wrote is left of it
        ("2", "6.6.6.6, 1.2.3.4, 10.0.0.9", "1.2.3.4"),
        ("forwarded-first", "not-an-address", "127.0.0.1"),  # junk: the peer's address
        ("forwarded-first", None, "127.0.0.1"),
    ],
)
def test_which_address_names_the_visitor(monkeypatch, mode, forwarded, expected):
    monkeypatch.setenv(settings.CLIENT_ADDRESS, mode)
    assert visitors.address("127.0.0.1", forwarded) == expected


def test_a_space_reads_the_entry_its_proxy_appends_by_default(monkeypatch):
    monkeypatch.delenv(settings.CLIENT_ADDRESS, raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)
    assert settings.client_address_mode() == "socket"
    monkeypatch.setenv("SPACE_ID", "someone/explorer")
    assert settings.client_address_mode() == "space"
    monkeypatch.setenv(settings.CLIENT_ADDRESS, "17")  # out of range: the default, logged
    assert settings.client_address_mode() == "space"


@pytest.mark.parametrize("forged", ["6.6.6.6", "6.6.6.6, 7.7.7.7", "1.1.1.1, 2.2.2.2, 3.3.3.3", "junk, 8.8.8.8"])
def test_forged_headers_never_name_another_visitor_on_a_space(monkeypatch, forged):
    """Under ``SPACE_ID``, what a client writes into ``X-Forwarded-For`` never becomes its address: straight to
    the app (loopback or a public peer) the peer names it; through the Space's proxy (a private peer, which
    appends the address it saw) the proxy's entry, the right-most, does."""
    monkeypatch.delenv(settings.CLIENT_ADDRESS, raising=False)
    monkeypatch.setenv("SPACE_ID", "someone/explorer")
    assert visitors.address("127.0.0.2", forged) == "127.0.0.2"
    assert visitors.address("93.184.216.34", forged) == "93.184.216.34"
    assert visitors.address("::ffff:127.0.0.3", forged) == "127.0.0.3"
    assert visitors.address("10.16.3.80", f"{forged}, 198.51.100.7") == "198.51.100.7"
    many = {visitors.address("127.0.0.2", f"9.9.9.{i}") for i in range(70)}
    assert many == {"127.0.0.2"}


def test_ipv6_counts_per_64_network_and_mapped_ipv4_as_ipv4():
    a = visitors.address("2001:db8:1:2:aaaa::1", None)
    assert a == visitors.address("2001:db8:1:2:ffff::9", None) == "2001:db8:1:2::/64"
    assert a != visitors.address("2001:db8:1:3::1", None)
    assert visitors.address("::ffff:10.1.2.3", None) == "10.1.2.3"


def test_a_request_scope_and_a_gradio_request_give_the_same_address(monkeypatch):
    monkeypatch.setenv(settings.CLIENT_ADDRESS, "forwarded-first")
    scope = {"client": ("10.9.9.9", 5000), "headers": [(b"x-forwarded-for", b"8.8.4.4"), (b"host", b"x")]}
    request = SimpleNamespace(client=SimpleNamespace(host="10.9.9.9"), headers={"x-forwarded-for": "8.8.4.4"})
    assert visitors.of_scope(scope) == visitors.of_request(request) == "8.8.4.4"
    assert visitors.of_request(None) is None and visitors.of_request(SimpleNamespace(session_hash="s")) is None
