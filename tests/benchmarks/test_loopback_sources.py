"""benchmarks.sources: a request carrying the source header leaves from that loopback address, the header
itself is not sent, and a request without it is untouched (a local server records what it saw)."""

import http.server
import threading

import httpx

from benchmarks import sources


class _Seen(http.server.BaseHTTPRequestHandler):
    seen: list = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.seen.append((self.client_address[0], self.headers.get(sources.SOURCE_HEADER)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_requests_leave_from_their_visitors_address():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Seen)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        sources.install()
        sources.install()  # idempotent
        with httpx.Client(headers=sources.headers(sources.address(1))) as c:
            assert c.get(url).status_code == 200
        assert httpx.get(url, headers=sources.headers(sources.address(7))).status_code == 200
        assert httpx.get(url).status_code == 200
    finally:
        server.shutdown()
        server.server_close()
    assert _Seen.seen == [("127.0.0.3", None), ("127.0.0.9", None), ("127.0.0.1", None)]
    assert sources.address(0) == "127.0.0.2" and sources.address(252) == "127.0.1.1"
