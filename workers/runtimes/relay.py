"""The proxy relay for runtimes without a network (``network: none`` or ``allow_internet:
false``): a stdlib-only Python script run inside the runtime that listens on its loopback and
pipes each connection to the proxy's Unix socket, mounted into the runtime. The agent's model
calls reach the proxy; nothing else leaves. (Needs ``python3`` in the runtime's image.)

The socket's *folder* is mounted, not the socket file: a restarted proxy makes a new socket file,
which a file mount would not see, so runtimes would lose the proxy for good. The folder must
therefore hold nothing but the socket (checked at start)."""

from __future__ import annotations

from pathlib import Path

RELAY_PORT = 18091  # on the runtime's own loopback
SOCKET_DIR_MOUNT = "/polar/proxy"  # where the proxy socket's folder appears inside a container
SCRIPT_PATH = ".polar/relay.py"  # under the session directory

SCRIPT = r'''
import os, socket, sys, threading

def pipe(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

def serve(port, path):
    # Connect by a relative name: a socket path longer than 107 bytes cannot be connected to.
    os.chdir(os.path.dirname(path) or ".")
    path = os.path.basename(path)
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(256)
    while True:
        client, _ = server.accept()
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(path)
        except OSError:
            client.close()
            continue
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=pipe, args=(a, b), daemon=True).start()

serve(int(sys.argv[1]), sys.argv[2])
'''


def write_script(session_dir: Path) -> Path:
    path = session_dir / SCRIPT_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SCRIPT)
    return path


def socket_folder(proxy_socket: str | None) -> tuple[str, str]:
    """The host folder to mount for ``proxy_socket`` and the socket's name in it; refused when
    there is no socket or its folder holds anything else (it is mounted into every runtime)."""
    from pipeline.errors import RuntimeStartError

    if not proxy_socket:
        raise RuntimeStartError("a runtime without a network needs the proxy's Unix socket (POLAR_PROXY_SOCKET)")
    path = Path(proxy_socket)
    try:
        others = [p.name for p in path.parent.iterdir() if p.name != path.name and not p.is_socket()]
    except OSError as exc:
        raise RuntimeStartError(f"the proxy socket's folder {path.parent} cannot be read: {exc}") from exc
    if others:
        raise RuntimeStartError(f"the proxy socket's folder {path.parent} is mounted into runtimes, so it must hold "
                                f"only the socket; it also holds {sorted(others)[:5]}")
    return str(path.parent), path.name


def relay_url(url: str) -> str:
    """``url`` (the proxy's, as the host sees it) as reached through the relay."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    return urlunsplit((parts.scheme or "http", f"127.0.0.1:{RELAY_PORT}", parts.path, parts.query, parts.fragment))
