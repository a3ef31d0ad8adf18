"""Abort the engine call of a client that has gone.

An agent stopped at its deadline (or killed, or cancelled) closes its connection while the engine
is still sampling its answer. Nothing will read that answer, yet the engine would go on
generating it -- GPU time for nothing, and a call POSTRUN's in-flight drain waits for. vLLM and
SGLang abort a request whose HTTP connection closes, so the proxy closes its engine connection
as soon as its own client's closes.

How it is seen: after its request the client sends nothing until the answer (HTTP/1.1, no
pipelining), so its socket turning readable while the engine works means an EOF or a reset. A
gevent io watcher on the client socket (no greenlet of its own: the hub runs the check) peeks at
it; on an EOF it throws an exception into the greenlet waiting for the engine, as
``gevent.Timeout`` does (a BaseException no handler on the way takes for its own), and the
transport closes the engine connection on the way out; the watch raises ``ClientGone``. The watch
covers only the engine call (``watching``), where the greenlet waits on upstream sockets and
holds nothing else. Bytes instead of an EOF (a pipelined request) end the watch undecided.
Outside gunicorn's gevent workers (the in-process tests, Flask's server) nothing is watched.
"""

from __future__ import annotations

import socket
from contextlib import contextmanager
from typing import Any, Iterator

from proxy.errors import ClientGone

try:
    import gevent
    from gevent import monkey as _monkey

    _GEVENT = _monkey.is_module_patched("socket")
except ImportError:  # pragma: no cover - gevent is a dependency of the proxy
    _GEVENT = False

_READ = 1  # libev/libuv's read event


class _Left(BaseException):
    """Thrown into the waiting greenlet, as gevent.Timeout is: a BaseException, so no handler of
    the code it interrupts (``except ProxyError``, ``except Exception``) takes it for its own;
    ``watching`` turns it into ``ClientGone`` on the way out."""


def client_socket(environ: dict[str, Any]) -> Any:
    """The client's socket, under gunicorn's gevent workers; None elsewhere."""
    return environ.get("gunicorn.sock") if _GEVENT else None


@contextmanager
def watching(client: Any) -> Iterator[None]:
    """Raise ``ClientGone`` in this greenlet if ``client`` closes its connection meanwhile."""
    if client is None:
        yield
        return
    try:
        fd = client.fileno()
    except OSError:
        yield
        return
    target = gevent.getcurrent()
    watcher = gevent.get_hub().loop.io(fd, _READ)

    def readable() -> None:  # runs in the hub: must not block
        watcher.stop()
        closed = _closed(client)
        if closed is False:  # a spurious wake-up: watch on
            watcher.start(readable)
        elif closed:
            target.throw(left)

    left = _Left()
    watcher.start(readable)
    try:
        yield
    except _Left as exc:
        if exc is not left:
            raise  # an outer watch's
        raise ClientGone("the client closed its connection before the answer; the engine call was aborted") from None
    finally:
        watcher.stop()
        watcher.close()


def has_left(client: Any) -> bool:
    """Whether ``client`` (a socket from ``client_socket``, or None) has closed its connection:
    one non-blocking peek, for a call that waits without a watch (parked by a pause)."""
    return client is not None and _closed(client) is True


def _closed(client: Any) -> bool | None:
    """True: EOF or reset; False: nothing to read yet; None: bytes waiting (undecided)."""
    timeout = client.gettimeout()
    client.settimeout(0.0)  # gevent sockets wait out EAGAIN unless their timeout is 0
    try:
        return not client.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return False
    except OSError:
        return True
    except ValueError:  # a TLS socket cannot peek: undecided
        return None
    finally:
        client.settimeout(timeout)
