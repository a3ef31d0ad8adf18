"""The secrets of a stack's control surfaces, generated once into ``$POLAR_HOME/tokens.json``
(mode 0600) and reused by every later ``polar up`` on that home, so clients keep working.

``with_tokens`` fills in whichever secret the settings lack; ``client_tokens`` gives the CLI's
client commands what they need. Secrets are never printed or logged: ``polar up`` prints the
file's path.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from pipeline.credentials import new_token
from pipeline.errors import ConfigError
from pipeline.settings import Settings

SECRETS = ("api_token", "admin_token", "flower_basic_auth", "callback_secret")
# Not a setting (it lives in the Redis URL): the stack's Redis password, generated for the embedded
# server, remembered for a configured one; the client commands add it to up.json's URL.
REDIS_PASSWORD = "redis_password"


def make_home(settings: Settings) -> Path:
    """``$POLAR_HOME``, created the user's alone when new: it holds these secrets, results,
    artifacts and Redis's files (an existing one keeps the mode its owner gave it)."""
    try:
        settings.home.mkdir(parents=True, exist_ok=True, mode=0o700)
        info = settings.home.stat()
    except OSError as exc:  # a file in its place, a folder it may not create
        why = "it is not a folder" if isinstance(exc, FileExistsError) else exc.strerror or str(exc)
        raise ConfigError(f"POLAR_HOME={settings.home} cannot hold this stack's files: {why}") from None
    # A folder someone else made (under /tmp, say) could hand them this stack's secrets, or
    # plant their own tokens -- or a link where a log goes, appended to as this user: it must be
    # this user's, and writable by no one else (its group neither).
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise ConfigError(f"POLAR_HOME={settings.home} is another user's folder, or writable by its group or by "
                          "anyone: it would hold this stack's secrets (use a folder of your own, e.g. the default "
                          f"~/.polar, or `chmod go-w {settings.home}`)")
    # Nor may anyone else be able to put another folder in its place: a link to it of another
    # user's (they can point it elsewhere later), or a folder on the way that another user owns,
    # or may write in without the sticky bit (/tmp has it), would let them move it.
    why = _replaceable(settings.home)
    if why:
        raise ConfigError(f"POLAR_HOME={settings.home}: {why}, so another user could swap the folder that holds "
                          "this stack's secrets (use a folder of your own, e.g. the default ~/.polar)")
    return settings.home


def _replaceable(home: Path) -> str | None:
    """Why another user could replace ``home`` (or a folder on its way) by one of theirs; None: no one can."""
    me = os.getuid()
    # (the folders on the way as given and as resolved: the same ones, mostly, looked at once)
    for path in dict.fromkeys([home.absolute(), *home.absolute().parents, *home.resolve().parents]):
        info = path.lstat()
        if info.st_uid not in (me, 0):
            return f"{path} is another user's"
        if path.is_symlink():
            continue  # (a link's own mode means nothing; its owner is checked above)
        if path != home.absolute() and info.st_mode & 0o022 and not info.st_mode & 0o1000:
            return f"{path} is writable by others and not sticky"
    return None


def tokens_file(settings: Settings) -> Path:
    return settings.home / "tokens.json"


def _load(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if k in (*SECRETS, REDIS_PASSWORD) and isinstance(v, str) and v} \
        if isinstance(data, dict) else {}


def _store(path: Path, stored: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # Never through a link (the secrets would go where it points), and the owner's alone whatever
    # mode a file already there had.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise ConfigError(f"cannot write {path} ({exc.strerror or exc}): the stack's secrets go there") from None
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(stored, f, indent=2)


def with_tokens(settings: Settings) -> Settings:
    """``settings`` with every control secret set: the configured one, else the home's stored
    one, else a new one (stored for the next start)."""
    missing = [name for name in SECRETS if not settings.secret(name)]
    values: dict[str, Any] = _stored_or_new(settings, missing)
    return settings.replace(**values) if values else settings


def stored_secret(settings: Settings, name: str) -> str:
    """The home's stored secret ``name``, else a new one, stored (``polar flower`` on its own)."""
    return _stored_or_new(settings, [name])[name]


def _stored_or_new(settings: Settings, names: list[str]) -> dict[str, str]:
    path = tokens_file(settings)
    stored = _load(path)
    new = {name: f"polar:{new_token()}" if name == "flower_basic_auth" else new_token()
           for name in names if name not in stored}
    if new:
        stored.update(new)
        _store(path, stored)
    return {name: stored[name] for name in names}


def client_tokens(settings: Settings) -> dict[str, str]:
    """The home's stored secrets the environment does not set (for the CLI's client commands)."""
    return {k: v for k, v in _load(tokens_file(settings)).items() if k in SECRETS and not settings.secret(k)}


def redis_password(settings: Settings, url: str | None = None) -> str | None:
    """The password of the stack's Redis, stored for the client commands: ``url``'s own when it
    has one (a configured server), None for a configured one without; with no ``url`` (the
    embedded server) the stored one, else a new one."""
    given = urlsplit(url).password if url else None
    path = tokens_file(settings)
    stored = _load(path)
    if url and given is None:  # a configured Redis without one: the client commands must not send one
        if REDIS_PASSWORD in stored:
            _store(path, {k: v for k, v in stored.items() if k != REDIS_PASSWORD})
        return None
    password = unquote(given) if given is not None else stored.get(REDIS_PASSWORD) or new_token()
    if stored.get(REDIS_PASSWORD) != password:
        _store(path, {**stored, REDIS_PASSWORD: password})
    return password


def stored_redis_password(settings: Settings) -> str | None:
    return _load(tokens_file(settings)).get(REDIS_PASSWORD)


def without_password(url: str) -> str:
    """``url`` with its password taken out (an ACL user name stays: it is no secret): what may
    be shown and written down."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    userinfo, _, host = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}@{host}" if user else host))


def with_password(url: str, password: str) -> str:
    """``url`` authenticated by ``password`` (for its user, if it names one), unless it has one."""
    parts = urlsplit(url)
    if parts.password is not None:
        return url
    user, _, host = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{user}:{quote(password, safe='')}@{host}"))
