"""Binding: a busy port is a one-line UsageError (exit code 2), and port 0 gets a real number."""

from __future__ import annotations

import socket

import pytest

from lossless.errors import UsageError
from lossless.server.main import bind, url_of


def test_a_busy_port_is_a_usage_error() -> None:
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        with pytest.raises(UsageError, match=f"cannot listen on 127.0.0.1:{port}"):
            bind("127.0.0.1", port)


def test_port_zero_gets_a_free_port_and_a_loopback_url() -> None:
    with bind("127.0.0.1", 0) as sock:
        assert url_of(sock, "127.0.0.1") == f"http://127.0.0.1:{sock.getsockname()[1]}"
    with bind("0.0.0.0", 0) as sock:  # bound everywhere: reached through loopback
        assert url_of(sock, "0.0.0.0").startswith("http://127.0.0.1:")
