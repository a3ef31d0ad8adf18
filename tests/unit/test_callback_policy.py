"""Where a callback may point (pure): every spelling of this machine's loopback is loopback, and
this service's own endpoints (API, proxy, engine, Flower) are refused however they are written."""

from __future__ import annotations

import pytest

from pipeline.callback_policy import LOOPBACK, canonical_host, refusal
from pipeline.settings import Settings

SETTINGS = Settings(api_url="http://127.0.0.1:8090", proxy_url="http://127.0.0.1:8091",
                    upstream_url="http://10.0.0.7:8000,http://10.0.0.8:8000", flower_url="http://127.0.0.1:5555")


@pytest.mark.parametrize("host", ["localhost", "LOCALHOST.", "127.0.0.1", "127.1", "127.0.0.2", "2130706433",
                                  "0x7f.0.0.1", "0177.0.0.1", "0x7f000001", "[::1]", "::ffff:127.0.0.1",
                                  "[0:0:0:0:0:ffff:7f00:1]", "0.0.0.0", "0", "::", "api.localhost"])
def test_every_spelling_of_loopback_is_loopback(host):
    assert canonical_host(host) == LOOPBACK


@pytest.mark.parametrize("host, want", [("10.0.0.7", "10.0.0.7"), ("012.0.0.7", "10.0.0.7"), ("167772167", "10.0.0.7"),
                                        ("::ffff:10.0.0.7", "10.0.0.7"), ("Receiver.Lab", "receiver.lab"),
                                        ("deadbeef.example", "deadbeef.example")])
def test_other_hosts_keep_one_normal_form(host, want):
    assert canonical_host(host) == want


@pytest.mark.parametrize("url", ["http://2130706433:8091/admin/pause", "http://127.1:8091/admin/pause",
                                 "http://[::ffff:127.0.0.1]:8090/rollout/task/submit", "http://0:8090/",
                                 "http://0x7f.1:5555/api/worker/shutdown/x", "http://localhost:5555/",
                                 "http://167772168:8000/v1/completions", "http://[::ffff:a00:7]:8000/"])
def test_own_endpoints_are_refused_however_written(url):
    assert refusal(url, SETTINGS) == "callback_url points at this service's own endpoints"


def test_a_name_resolving_to_an_own_endpoint_is_refused_at_delivery():
    url = "http://callbacks.example:8091/admin/pause"
    assert refusal(url, SETTINGS) is None  # at submit: the name is not resolved
    assert refusal(url, SETTINGS, resolved=["203.0.113.9", "127.0.0.1"]) is not None
    assert refusal(url, SETTINGS, resolved=["203.0.113.9"]) is None


def test_other_ports_and_hosts_receive_callbacks():
    assert refusal("http://127.0.0.1:9000/hook", SETTINGS) is None
    assert refusal("https://hooks.example/done", SETTINGS) is None
    assert refusal("http://127.0.0.1:99999/", SETTINGS) == "callback_url has an invalid port"


def test_the_allowed_hosts_setting_admits_only_those():
    strict = SETTINGS.replace(callback_allowed_hosts="hooks.example")
    assert refusal("https://hooks.example/done", strict) is None
    assert "POLAR_CALLBACK_ALLOWED_HOSTS" in refusal("https://elsewhere.example/", strict)


def test_a_template_is_accepted_at_submission_and_refused_at_delivery():
    url = "http://{trainer_host}:{callback_port}/callback/task_result"  # Polar's example (nothing renders it)
    assert refusal(url, SETTINGS) is None
    assert refusal(url, SETTINGS, delivering=True) == "callback_url is a template nothing filled in"
    assert refusal("http://127.0.0.1:8091/admin/pause?x={}", SETTINGS, delivering=True) is not None


def test_an_own_endpoint_by_its_service_address_is_refused_at_delivery():
    """compose/Kubernetes: the API is http://api:8090; a callback to its IP is the API too."""
    settings = SETTINGS.replace(api_url="http://api:8090")
    url = "http://10.89.0.5:8090/rollout/task/submit"
    assert refusal(url, settings) is None  # nothing resolved at submission
    assert refusal(url, settings, own_resolved=[("10.89.0.5", 8090)]) is not None
    assert refusal(url, settings, own_resolved=[("10.89.0.5", 9000)]) is None  # another port: another service


@pytest.mark.parametrize("url, resolved", [("http://169.254.169.254/latest/meta-data/", []),
                                           ("http://metadata.example/", ["169.254.169.254"]),
                                           ("http://[fe80::1]:8080/", []),
                                           ("http://[fd00:ec2::254]/latest/", []),
                                           ("http://100.100.100.200/latest/meta-data/", []),
                                           ("http://[::ffff:169.254.169.254]/", [])])
def test_link_local_addresses_a_clouds_metadata_service_are_refused_unless_listed(url, resolved):
    assert "link-local" in (refusal(url, SETTINGS, resolved=resolved) or "")
    listed = Settings(**{**SETTINGS.model_dump(), "callback_allowed_hosts": "169.254.169.254,fe80::1,metadata.example,"
                                                                              "fd00:ec2::254,100.100.100.200"})
    assert refusal(url, listed, resolved=resolved) is None


def test_a_callback_urls_credentials_are_never_shown():
    from pipeline.stores.callbacks import without_userinfo

    assert without_userinfo("https://bot:s3cret@hooks.example/x?token=abc") == "https://***@hooks.example/x?***"
    assert without_userinfo("https://hooks.example/x") == "https://hooks.example/x"
