"""A TCP gate on 127.0.0.1 in front of a fake server: a server under a burst, that takes only
`max_open` connections at once and resets the rest (RST as soon as accepted), or resets the
first `reset_first` connections outright — connection failures a real client meets.

    with FakeModelServer() as model, TcpGate(model.port, max_open=2) as gate:
        client = AnthropicClient(api_key="k", base_url=gate.url)   # through the gate
        gate.resets          # connections reset so far
        gate.peak_open       # the most connections open through it at once

    with full_listener() as port: ...   # a port whose connections hang (a connect timeout)
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Iterator
from typing import Self


class TcpGate:
    def __init__(self, upstream_port: int, *, max_open: int = 1_000, reset_first: int = 0) -> None:
        self.upstream_port = upstream_port
        self.max_open = max_open
        self.reset_first = reset_first
        self.resets = 0
        self.accepted = 0
        self.open = 0
        self.peak_open = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self._stopping = False
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(timeout=5)

    def _accept_loop(self) -> None:
        while not self._stopping:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self.accepted += 1
                refuse = self.accepted <= self.reset_first or self.open >= self.max_open
                if refuse:
                    self.resets += 1
                else:
                    self.open += 1
                    self.peak_open = max(self.peak_open, self.open)
            if refuse:
                _reset(client)
                continue
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        except OSError:
            _reset(client)
            self._closed()
            return

        def pump(src: socket.socket, dst: socket.socket) -> None:
            try:
                while data := src.recv(65536):
                    dst.sendall(data)
            except OSError:
                pass
            finally:  # one side gone: end the other (wakes the other pump's recv)
                for sock in (src, dst):
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)

        back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
        back.start()
        pump(client, upstream)
        back.join(timeout=5)
        for sock in (client, upstream):
            with contextlib.suppress(OSError):
                sock.close()
        self._closed()

    def _closed(self) -> None:
        with self._lock:
            self.open -= 1


def _reset(sock: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0): the client reads "connection reset by peer"."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()


@contextlib.contextmanager
def full_listener() -> Iterator[int]:
    """A port whose listen queue is full and never accepted from: a connection to it hangs (the
    kernel drops the SYN) until the client's connect timeout, like a server swamped by a burst."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=0)
    port = int(listener.getsockname()[1])
    fillers = []
    for _ in range(8):  # fill the accept queue (backlog 0 still takes one or two)
        sock = socket.socket()
        sock.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            sock.connect(("127.0.0.1", port))
        fillers.append(sock)
    try:
        yield port
    finally:
        for sock in fillers:
            sock.close()
        listener.close()
