"""The wire protocol of both daemons: one JSON object per request and per reply, over pyzmq (REQ
clients, a ROUTER in the daemon) on a Unix-domain socket (ipc://).

Request: {"op": "<name>", ...arguments}.  Reply: {"ok": true, ...} or {"ok": false, "error": "..."}.
Readers and writers share these functions, so a malformed or oversized message gets the same clear
error from either daemon.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq

MAX_REQUEST_BYTES = 64 * 1024
# zmq drops a peer that sends more than this before we see it; above MAX_REQUEST_BYTES so that a
# merely oversized request still gets a clear error reply.
ZMQ_MAX_MSG = 16 * 1024 * 1024


class ProtocolError(ValueError):
    """A request that cannot be served; its message goes back to the client."""


class DaemonUnavailable(ConnectionError):
    """No daemon answered on the socket."""


def endpoint(path: Path) -> str:
    return f"ipc://{path}"


def decode_request(frames: list[bytes]) -> dict[str, Any]:
    if len(frames) != 1:
        raise ProtocolError(f"expected one message frame, got {len(frames)}")
    raw = frames[0]
    if len(raw) > MAX_REQUEST_BYTES:
        raise ProtocolError(f"request too large ({len(raw)} bytes, at most {MAX_REQUEST_BYTES})")
    try:
        msg = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProtocolError(f"request is not valid JSON: {e}") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("op"), str):
        raise ProtocolError('request must be a JSON object with a string "op"')
    return msg


def encode(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode()


def get_int(msg: dict[str, Any], key: str, *, minimum: int | None = None, default: Any = ...) -> int:
    """A required (or defaulted) integer argument, with a clear error otherwise."""
    if key not in msg:
        if default is ...:
            raise ProtocolError(f"missing argument {key!r}")
        return default
    value = msg[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(f"argument {key!r} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ProtocolError(f"argument {key!r} must be >= {minimum}, got {value}")
    return value


def get_str(msg: dict[str, Any], key: str, choices: tuple[str, ...], default: str | None = None) -> str:
    value = msg.get(key, default)
    if value not in choices:
        raise ProtocolError(f"argument {key!r} must be one of {', '.join(choices)}, got {value!r}")
    return value


@dataclass(frozen=True)
class Peer:
    """Who sent a request: the kernel's SO_PEERCRED of the Unix-socket connection (not client-supplied)."""

    uid: int
    gid: int
    pid: int


def peer_credentials(frame: zmq.Frame) -> Peer | None:
    # libzmq appends ":uid:gid:pid" from SO_PEERCRED to the peer address of ipc connections.
    try:
        uid, gid, pid = (int(x) for x in frame.get("Peer-Address").rsplit(":", 3)[1:])
    except (ValueError, zmq.ZMQError, AttributeError):
        return None
    return Peer(uid, gid, pid)


Handler = Callable[[dict[str, Any]], dict[str, Any]]


def serve_one(sock: zmq.Socket, handlers: dict[str, Handler], on_error: Callable[[str], None]) -> None:
    """Receive one request on the ROUTER socket, dispatch it, send one reply to a REQ peer.

    A ROUTER rather than a REP socket: a REP socket that got junk from a non-ZMTP peer was seen to
    stop delivering later, legitimate requests; with ROUTER we see the envelope and drop what no
    REQ client could have sent.
    """
    try:
        # Non-blocking: a peer that connects and sends junk can wake the poller with nothing to read.
        parts = sock.recv_multipart(zmq.NOBLOCK, copy=False)
    except zmq.Again:
        return
    if len(parts) < 3 or parts[1].bytes != b"":
        on_error("dropped a message without a REQ envelope")
        return
    msg: dict[str, Any] = {}
    try:
        msg = decode_request([p.bytes for p in parts[2:]])
        msg["_peer"] = peer_credentials(parts[2])
        handler = handlers.get(msg["op"])
        if handler is None:
            raise ProtocolError(f"unknown op {msg['op']!r}; known: {', '.join(sorted(handlers))}")
        reply = {"ok": True, **handler(msg)}
    except ProtocolError as e:
        on_error(str(e))
        reply = {"ok": False, "error": str(e)}
    except Exception as e:  # a failing handler is one failed request, never the daemon's end
        logging.getLogger("vmsched.protocol").exception("request %r failed", msg.get("op"))
        reply = {"ok": False, "error": f"internal error in {msg.get('op')!r}: {type(e).__name__}: {e}"}
    sock.send_multipart([parts[0].bytes, b"", encode(reply)])


def bind_rep(ctx: zmq.Context, path: Path) -> zmq.Socket:
    """The daemon's request socket (a ROUTER that serves REQ clients, see `serve_one`)."""
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.MAXMSGSIZE, ZMQ_MAX_MSG)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.ROUTER_MANDATORY, 0)  # a client that left meanwhile: drop its reply
    if path.exists():
        path.unlink()  # stale socket of a dead daemon; callers check no live daemon owns it
    sock.bind(endpoint(path))
    return sock


class Client:
    """Request/reply client with a timeout; a failed request never leaves the socket unusable."""

    def __init__(self, path: Path, timeout_s: float = 5.0, what: str = "daemon") -> None:
        self.path = Path(path)
        self.timeout_ms = int(timeout_s * 1000)
        self.what = what
        self._ctx = zmq.Context.instance()
        self._sock: zmq.Socket | None = None

    def _socket(self) -> zmq.Socket:
        if self._sock is None:
            s = self._ctx.socket(zmq.REQ)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.RCVTIMEO, self.timeout_ms)
            s.setsockopt(zmq.SNDTIMEO, self.timeout_ms)
            s.connect(endpoint(self.path))
            self._sock = s
        return self._sock

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close(0)
            self._sock = None

    def request_raw(self, payload: bytes) -> dict[str, Any]:
        if not self.path.exists():
            raise DaemonUnavailable(f"no {self.what} socket at {self.path} (is the {self.what} running?)")
        sock = self._socket()
        try:
            sock.send(payload)
            return json.loads(sock.recv())
        except zmq.Again:
            self.close()
            raise DaemonUnavailable(f"the {self.what} at {self.path} did not answer in time") from None

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        """Send a request; return the reply or raise ProtocolError with the daemon's message."""
        reply = self.request_raw(encode({"op": op, **args}))
        if not reply.get("ok"):
            raise ProtocolError(reply.get("error", "request failed"))
        return reply

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
