"""The stack's secrets file and the Redis password the client commands find beside up.json."""

from __future__ import annotations

import json
import os

import pytest

from infra.cli.state import client_settings, write_up_state
from infra.tokens import make_home, redis_password, stored_redis_password, tokens_file, with_password, without_password
from pipeline.settings import Settings


@pytest.mark.parametrize("url, shown", [
    ("redis://:s3cret@127.0.0.1:6380/0", "redis://127.0.0.1:6380/0"),
    ("redis://trainer:s%40cret@redis.lab:6379/2", "redis://trainer@redis.lab:6379/2"),  # an ACL user stays
    ("rediss://127.0.0.1:6380/0", "rediss://127.0.0.1:6380/0"),
])
def test_without_password_keeps_everything_but_the_credentials(url, shown):
    assert without_password(url) == shown


def test_with_password_quotes_it_and_leaves_named_credentials_alone():
    assert with_password("redis://127.0.0.1:6380/0", "a@b/c") == "redis://:a%40b%2Fc@127.0.0.1:6380/0"
    assert with_password("redis://:own@127.0.0.1:6380/0", "other") == "redis://:own@127.0.0.1:6380/0"
    assert with_password("redis://trainer@redis.lab:6379/2", "p w") == "redis://trainer:p%20w@redis.lab:6379/2"


def test_the_embedded_password_is_generated_once_and_kept_private(tmp_path):
    settings = Settings(home=tmp_path)
    first = redis_password(settings)
    assert first and redis_password(settings) == first == stored_redis_password(settings)
    assert tokens_file(settings).stat().st_mode & 0o077 == 0
    assert redis_password(settings, "redis://:given%21@10.0.0.5:6379/0") == "given!"  # remembered
    assert stored_redis_password(settings) == "given!"
    assert redis_password(settings, "redis://10.0.0.6:6379/0") is None  # moved to one without a password:
    assert stored_redis_password(settings) is None  # the client commands stop sending the old one
    assert "api_token" not in json.loads(tokens_file(settings).read_text())  # only what was asked for


def test_client_commands_get_the_password_up_json_leaves_out(tmp_path, monkeypatch):
    for name in [k for k in os.environ if k.startswith("POLAR_") or k == "REDIS_URL"]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("POLAR_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    settings = Settings(home=tmp_path)
    password = redis_password(settings)
    write_up_state(settings, {"pid": os.getpid(), "redis_url": "redis://127.0.0.1:6390/0"})
    assert client_settings().redis_url == with_password("redis://127.0.0.1:6390/0", password)
    monkeypatch.setenv("POLAR_REDIS_URL", "redis://other:6379/0")  # an explicit variable wins, as it is
    assert client_settings().redis_url == "redis://other:6379/0"


def test_a_new_home_is_the_users_alone_and_an_old_one_keeps_its_mode(tmp_path):
    new = Settings(home=tmp_path / "fresh" / "polar")
    redis_password(new)  # what first writes into it
    assert new.home.stat().st_mode & 0o077 == 0 and tokens_file(new).stat().st_mode & 0o077 == 0
    (tmp_path / "shared").mkdir(mode=0o755)
    (tmp_path / "shared").chmod(0o755)
    old = Settings(home=tmp_path / "shared")
    make_home(old)
    assert old.home.stat().st_mode & 0o777 == 0o755


def test_a_home_anyone_may_write_or_a_link_in_place_of_tokens_json_gets_no_secrets(tmp_path):
    """A home someone else made world-writable (under /tmp), its tokens.json a link to their 0666
    file: every secret of the stack was written into that file."""
    import pytest

    from infra.tokens import with_tokens
    from pipeline.errors import ConfigError

    open_home = tmp_path / "open"
    open_home.mkdir()
    open_home.chmod(0o777)
    with pytest.raises(ConfigError, match="or by anyone"):
        make_home(Settings(home=open_home))
    open_home.chmod(0o770)  # its group's members could plant a link where a log is appended
    with pytest.raises(ConfigError, match="writable by its group"):
        make_home(Settings(home=open_home))
    theirs = tmp_path / "theirs.json"
    theirs.write_text("")
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "tokens.json").symlink_to(theirs)
    with pytest.raises(ConfigError, match="tokens.json"):
        with_tokens(Settings(home=home))
    assert theirs.read_text() == ""
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o700)
    (loose / "tokens.json").write_text("{}")
    (loose / "tokens.json").chmod(0o666)
    with_tokens(Settings(home=loose))
    assert (loose / "tokens.json").stat().st_mode & 0o077 == 0  # the owner's alone once it holds secrets


def test_a_home_another_user_could_swap_is_refused(tmp_path):
    """A link of another user's as POLAR_HOME (they can point it elsewhere later), or a folder on
    its way anyone may write in without the sticky bit: the home was accepted, and what the
    stack wrote later could go to a folder of theirs."""
    import os

    import pytest

    from pipeline.errors import ConfigError

    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    open_parent = tmp_path / "open"
    open_parent.mkdir()
    open_parent.chmod(0o777)  # no sticky bit: anyone may rename what is in it
    with pytest.raises(ConfigError, match="writable by others and not sticky"):
        make_home(Settings(home=open_parent / "home"))
    open_parent.chmod(0o1777)  # as /tmp: only the owner may rename its entries
    make_home(Settings(home=open_parent / "home"))
    link = tmp_path / "link"
    link.symlink_to(mine)
    make_home(Settings(home=link))  # a link of one's own is fine
    if os.getuid() == 0:  # (only root can give a link to another user)
        os.lchown(link, 65534, 65534)
        with pytest.raises(ConfigError, match="another user's"):
            make_home(Settings(home=link))
