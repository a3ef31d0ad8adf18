"""Which host texts count as this machine's loopback (the API's Host check, the CLI's binds)."""

import pytest

from pipeline.loopback import is_loopback_name


@pytest.mark.parametrize("host", ["localhost", "LOCALHOST.", "127.0.0.1", "127.3.2.1", "::1", "[::1]",
                                  "::ffff:127.0.0.1", "ip6-localhost", "api.localhost"])
def test_loopback_texts(host):
    assert is_loopback_name(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "127.evil.example", "127.0.0.1.nip.io", "localhost.evil.example",
                                  "10.0.0.1", "::ffff:10.0.0.1", "example.com", ""])
def test_names_that_may_reach_elsewhere_are_not(host):
    assert not is_loopback_name(host)
