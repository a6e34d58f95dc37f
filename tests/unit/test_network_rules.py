"""``[[network.allow]]`` (issue 45, items 3 and 5): URL patterns, the hostile URLs a cell may send, the suggested
TOML, and config errors at cellgate.toml's file:line (through ``load_settings`` and a real file)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from cellgate.gate._errors import ConfigError
from cellgate.gate.config import load_settings
from cellgate.gate.network.rules import (
    Match,
    NetworkRule,
    NetworkSettings,
    NoMatch,
    Target,
    decide,
    may_reach,
    parse_target,
)


def rules(*allow: dict[str, Any], **network: Any) -> NetworkSettings:
    return NetworkSettings.model_validate({"allow": list(allow), **network})


def decided(settings: NetworkSettings, url: str, method: str = "GET") -> int | None:
    """The index of the rule that allows ``method`` on ``url``, or None."""
    result = decide(settings, method, parse_target(url))
    return result.index if isinstance(result, Match) else None


# --- parsing the target ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("url", "expected"), [
    ("https://api.example.com/v1/x?q=1", Target("https", "api.example.com", 443, "/v1/x", "q=1")),
    ("HTTPS://API.Example.COM", Target("https", "api.example.com", 443, "/", "")),
    ("http://api.example.com:80/a#frag", Target("http", "api.example.com", 80, "/a", "")),
    ("https://api.example.com:8443/a", Target("https", "api.example.com", 8443, "/a", "")),
    ("https://api.example.com./a", Target("https", "api.example.com", 443, "/a", "")),
    ("https://Bücher.example/b", Target("https", "xn--bcher-kva.example", 443, "/b", "")),
    ("https://[::1]:9000/", Target("https", "::1", 9000, "/", "")),
    ("https://[0:0::1]/", Target("https", "::1", 443, "/", "")),
    ("https://api.example.com/v1/%7euser/%41", Target("https", "api.example.com", 443, "/v1/~user/A", "")),
    ("https://api.example.com/a%2fb", Target("https", "api.example.com", 443, "/a%2Fb", "")),
    ("https://api.example.com/v1/../admin", Target("https", "api.example.com", 443, "/admin", "")),
    ("https://api.example.com/v1/%2e%2e/admin", Target("https", "api.example.com", 443, "/admin", "")),
    ("https://api.example.com/v1/%2E./x/./y/.", Target("https", "api.example.com", 443, "/x/y/", "")),
    ("https://api.example.com/../../x", Target("https", "api.example.com", 443, "/x", "")),
    ("https://api.example.com/é", Target("https", "api.example.com", 443, "/%C3%A9", "")),
    ("https://evil.com#@api.example.com/", Target("https", "evil.com", 443, "/", "")),
    ("https://evil.com?@api.example.com/", Target("https", "evil.com", 443, "/", "@api.example.com/")),
])
def test_a_target_is_normalized_before_it_is_matched(url: str, expected: Target) -> None:
    assert parse_target(url) == expected


def test_the_url_sent_on_is_the_normalized_one() -> None:
    assert parse_target("HTTPS://API.example.com:443/v1/%2e%2e/b?x=%2e").url() == "https://api.example.com/b?x=%2e"
    assert parse_target("http://[::1]:8080/").url() == "http://[::1]:8080/"


@pytest.mark.parametrize(("url", "fragment"), [
    ("https://api.example.com@evil.com/", "its host is 'evil.com'"),
    ("https://user:pw@api.example.com/", "user info"),
    ("ftp://api.example.com/", "only http and https"),
    ("/v1/items", "not an absolute URL"),
    ("https://api.example.com/a b", "space or a control"),
    ("https://api.example.com/a\nb", "space or a control"),
    ("https://api.ex\tample.com/", "space or a control"),
    ("https://api.example.com/v1/..%2fadmin", "decodes it further"),
    ("https://api.example.com/v1/%252e%252e/admin", "decodes it further"),
    ("https://api.example.com/v1/..;/admin", "decodes it further"),
    ("https://api.example.com/v1/a\\..\\admin", "backslash"),
    ("https://api.example.com/%zz", "does not start an escape"),
    ("https://127.1/", "four decimal parts"),
    ("https://0x7f.0.0.1/", "four decimal parts"),
    ("https://2130706433/", "four decimal parts"),
    ("https://0177.0.0.1/", "four decimal parts"),
    ("https://api.example.com:0/", "port '0'"),
    ("https://api.example.com:99999/", "port"),
    ("https://::1/", "in brackets"),
    ("https://[::1/", "in brackets"),
    ("https://api.example.com:8o/", "not host[:port]"),
    ("https://[fe80::1%25eth0]/", "'%'"),
    ("https://exa%6dple.com/", "'%'"),
    ("https://-bad-.example/", "not a host name"),
    ("https:///path", "no host"),
])
def test_a_hostile_or_malformed_url_is_refused_naming_it(url: str, fragment: str) -> None:
    with pytest.raises(ValueError, match="URL") as caught:
        parse_target(url)
    assert fragment in str(caught.value)
    assert repr(url) in str(caught.value)


# --- matching ---------------------------------------------------------------------------------------------------

def test_a_leading_star_label_matches_subdomains_never_the_bare_domain() -> None:
    settings = rules({"url": "https://*.example.com"})
    assert decided(settings, "https://api.example.com/x") == 0
    assert decided(settings, "https://a.b.example.com/") == 0
    assert decided(settings, "https://example.com/") is None
    assert decided(settings, "https://evilexample.com/") is None
    assert decided(settings, "https://example.com.evil.org/") is None
    assert decided(settings, "http://api.example.com/") is None  # another scheme
    assert decided(settings, "https://api.example.com:8443/") is None  # another port


def test_the_whole_host_star_matches_any_host_on_its_scheme_and_port() -> None:
    settings = rules({"url": "https://*/status"})
    assert decided(settings, "https://anything.test/status") == 0
    assert decided(settings, "https://8.8.8.8/status") == 0
    assert decided(settings, "https://anything.test/status/x") is None
    assert decided(settings, "http://anything.test/status") is None


def test_ports_are_exact_and_default_to_the_schemes() -> None:
    settings = rules({"url": "http://localhost:8765/"}, {"url": "https://api.example.com/"})
    assert decided(settings, "http://localhost:8765/") == 0
    assert decided(settings, "http://localhost/") is None
    assert decided(settings, "https://api.example.com:443/") == 1
    assert decided(settings, "https://api.example.com:444/") is None


def test_path_stars_match_any_characters_slashes_too_and_no_path_is_every_path() -> None:
    settings = rules({"url": "https://a.test/v1/*/items"}, {"url": "https://b.test"}, {"url": "https://c.test/exact"})
    assert decided(settings, "https://a.test/v1/x/items") == 0
    assert decided(settings, "https://a.test/v1/x/y/items") == 0
    assert decided(settings, "https://a.test/v1/items") is None
    assert decided(settings, "https://a.test/v1/x/items/more") is None
    assert decided(settings, "https://b.test/") == 1
    assert decided(settings, "https://b.test/any/path?q") == 1
    assert decided(settings, "https://c.test/exact?query=ignored") == 2
    assert decided(settings, "https://c.test/exact/") is None
    assert decided(settings, "https://c.test/EXACT") is None  # paths are case-sensitive


def test_dot_segment_and_escape_tricks_do_not_leave_an_allowed_prefix() -> None:
    settings = rules({"url": "https://api.example.com/v1/*"})
    assert decided(settings, "https://api.example.com/v1/items") == 0
    for url in ("https://api.example.com/v1/../admin", "https://api.example.com/v1/%2e%2e/admin",
                "https://api.example.com/v1/%2E%2e/admin", "https://api.example.com/v1/./../admin"):
        assert decided(settings, url) is None, url
    assert decided(settings, "https://api.example.com/v1/a/../b") == 0  # stays below /v1/


def test_pattern_and_target_escapes_compare_alike() -> None:
    settings = rules({"url": "https://a.test/%7Euser/*"})
    assert decided(settings, "https://a.test/~user/x") == 0
    assert decided(settings, "https://a.test/%7euser/x") == 0


def test_hosts_compare_case_blind_and_by_idna() -> None:
    settings = rules({"url": "https://bücher.example/*"}, {"url": "https://API.Example.com/*"})
    assert decided(settings, "https://xn--bcher-kva.example/a") == 0
    assert decided(settings, "https://BÜCHER.example/a") == 0
    assert decided(settings, "https://api.EXAMPLE.com/a") == 1


def test_methods_default_to_get_and_head_star_is_any_but_trace() -> None:
    settings = rules({"url": "https://a.test/"}, {"url": "https://b.test/", "methods": ["*"]},
                     {"url": "https://c.test/", "methods": ["post", "Put"]})
    assert [decided(settings, "https://a.test/", m) for m in ("GET", "HEAD", "POST")] == [0, 0, None]
    assert decided(settings, "https://b.test/", "DELETE") == 1
    assert decided(settings, "https://c.test/", "PUT") == 2
    assert settings.allow[2].methods == ["POST", "PUT"]
    trace = decide(settings, "TRACE", parse_target("https://b.test/"))
    assert isinstance(trace, NoMatch) and "not one the gate forwards" in trace.reason
    lower = decide(settings, "post", parse_target("https://c.test/"))
    assert isinstance(lower, NoMatch) and "upper-case: POST" in lower.reason


def test_the_first_matching_rule_decides() -> None:
    settings = rules({"url": "https://a.test/admin/*", "decision": "approve"}, {"url": "https://a.test/*"})
    first = decide(settings, "GET", parse_target("https://a.test/admin/x"))
    assert isinstance(first, Match) and first.label == "network.allow[0]" and first.rule.decision == "approve"
    assert decided(settings, "https://a.test/other") == 1


def test_a_refusal_names_the_rule_that_matched_the_url_and_its_methods() -> None:
    settings = rules({"url": "https://x.test/y"})
    none = decide(settings, "GET", parse_target("https://x.test/z?token=1"))
    assert isinstance(none, NoMatch) and none.reason == "no [[network.allow]] rule matches https://x.test/z"
    method = decide(settings, "POST", parse_target("https://x.test/y"))
    assert isinstance(method, NoMatch)
    assert method.reason == "network.allow[0] matches https://x.test/y but allows only GET, HEAD, not POST"
    assert method.suggestion == '[[network.allow]]\nurl = "https://x.test/y*"\nmethods = ["POST"]'


@pytest.mark.parametrize(("method", "url"), [
    ("POST", "https://x.test/y"), ("GET", "http://localhost:8765/a/b?c=d"), ("DELETE", "https://[::1]:9/"),
    ("PUT", 'https://x.test/a"quote'), ("GET", "https://bücher.example/é"), ("PATCH", "https://x.test/a%2Fb"),
    ("GET", "https://x.test/star*in*path"),
])
def test_the_suggested_toml_loaded_allows_exactly_that_request(tmp_path: Path, method: str, url: str) -> None:
    refused = decide(NetworkSettings(), method, parse_target(url))
    assert isinstance(refused, NoMatch)
    config = tmp_path / "cellgate.toml"
    config.write_text(refused.suggestion + "\n")
    settings = load_settings(config).network
    assert isinstance(decide(settings, method, parse_target(url)), Match)
    assert isinstance(decide(settings, "OPTIONS" if method != "OPTIONS" else "GET", parse_target(url)), NoMatch)


def test_may_reach_says_whether_any_rule_could_match_on_the_host_and_port() -> None:
    settings = rules({"url": "https://api.example.com/v1/*"}, {"url": "https://*.cdn.test"})
    assert may_reach(settings, "https", "API.example.com", 443)
    assert may_reach(settings, "https", "a.cdn.test", 443)
    assert not may_reach(settings, "https", "cdn.test", 443)
    assert not may_reach(settings, "https", "api.example.com", 8443)
    assert not may_reach(settings, "http", "api.example.com", 443)
    assert not may_reach(settings, "https", "bad host", 443)
    assert not may_reach(NetworkSettings(), "https", "api.example.com", 443)


def test_only_a_rule_that_names_an_address_names_it_literally() -> None:
    literal, ipv6, named, wild = rules({"url": "http://127.0.0.1:8765/"}, {"url": "https://[::1]/"},
                                       {"url": "https://localhost/"}, {"url": "https://*/"}).allow
    assert literal.names_literally("127.0.0.1") and literal.names_literally("::ffff:127.0.0.1")
    assert not literal.names_literally("127.0.0.2")
    assert ipv6.names_literally("0:0::1") and ipv6.names_literally("[::1]")
    assert not named.names_literally("127.0.0.1")
    assert not wild.names_literally("10.0.0.1")


# --- inject ---------------------------------------------------------------------------------------------------

def test_inject_fills_its_variables_and_says_which_is_missing_for_which_rule() -> None:
    settings = rules({"url": "https://api.example.com/*",
                      "inject": {"header": "Authorization", "value": "Bearer ${API_TOKEN}:${ORG_ID}"}})
    match = decide(settings, "GET", parse_target("https://api.example.com/x"))
    assert isinstance(match, Match) and match.rule.inject is not None
    assert match.rule.inject.env_names() == ["API_TOKEN", "ORG_ID"]
    assert match.injected({"API_TOKEN": "t0k", "ORG_ID": "7"}) == ("Authorization", "Bearer t0k:7")
    with pytest.raises(ValueError, match=r"network.allow\[0\] injects header Authorization from \$\{ORG_ID\}, "
                                         r"but ORG_ID is not set"):
        match.injected({"API_TOKEN": "t0k"})
    with pytest.raises(ValueError, match="ORG_ID is empty"):
        match.injected({"API_TOKEN": "t0k", "ORG_ID": ""})
    with pytest.raises(ValueError, match="line break") as caught:
        match.injected({"API_TOKEN": "t0k\r\nX-Evil: 1", "ORG_ID": "7"})
    assert "t0k" not in str(caught.value)


@pytest.mark.parametrize(("inject", "fragment"), [
    ({"header": "Authorization", "value": "Bearer sk-live-123"}, "names no environment variable"),
    ({"header": "Authorization", "value": "Bearer $TOKEN"}, "'$' that does not start"),
    ({"header": "Authorization", "value": "Bearer ${token}"}, "not an environment variable name"),
    ({"header": "Authorization", "value": "Bearer ${1X}"}, "not an environment variable name"),
    ({"header": "Auth Header", "value": "${T}"}, "not a header name"),
    ({"header": "Host", "value": "${T}"}, "sets itself"),
    ({"header": "X-Key", "value": "a\n${T}"}, "line break"),
])
def test_a_bad_inject_is_refused(inject: dict[str, str], fragment: str) -> None:
    with pytest.raises(ValueError, match="inject") as caught:
        NetworkRule.model_validate({"url": "https://a.test/", "inject": inject})
    assert fragment in str(caught.value)


# --- config errors at file:line ---------------------------------------------------------------------------------

CONFIG = """\
[network]
timeout = 5

[[network.allow]]
url = "https://api.example.com/v1/*"

[[network.allow]]
url = "https://*.example.org/*"
methods = ["POST"]

[[network.allow]]
url = {url}
methods = {methods}
inject = {inject}
"""


def load(tmp_path: Path, url: str = '"https://ok.test/*"', methods: str = '["GET"]',
         inject: str = '{ header = "Authorization", value = "Bearer ${T}" }', extra: str = "") -> Path:
    path = tmp_path / "cellgate.toml"
    path.write_text(CONFIG.format(url=url, methods=methods, inject=inject) + extra)
    return path


def test_a_valid_network_section_loads_with_its_rules(tmp_path: Path) -> None:
    settings = load_settings(load(tmp_path)).network
    assert settings.timeout == 5 and len(settings.allow) == 3 and settings.allow[2].inject is not None
    assert settings.response_limit_mb(settings.allow[0]) == 100
    assert tomllib.loads(load(tmp_path).read_text())["network"]["allow"][2]["url"] == "https://ok.test/*"


@pytest.mark.parametrize(("change", "line", "fragment"), [
    ({"url": '"https://api.*.example.com/"'}, 12, "a wildcard is only a leading '*.' label"),
    ({"url": '"https://*.10.0.0.1/"'}, 12, "never an address"),
    ({"url": '"ftp://a.test/"'}, 12, "only http and https"),
    ({"url": '"https://a.test/v1/../admin"'}, 12, "without '.' or '..'"),
    ({"url": '"https://a.test/?q=1"'}, 12, "must look like"),
    ({"methods": '["FETCH"]'}, 13, "'FETCH' is not a method"),
    ({"methods": '["TRACE"]'}, 13, "'TRACE' is not a method"),
    ({"methods": "[]"}, 13, "allows no method"),
    ({"url": '"http://ok.test/*"'}, 14, "clear text"),
    ({"url": '"https://*/"'}, 14, "hosts nobody named"),
    ({"url": '"https://*.com/*"'}, 14, "hosts nobody named"),
    ({"inject": '{ header = "Authorization", value = "Bearer sk-1" }'}, 14, "names no environment variable"),
    ({"extra": "max_response_mb = 0\n"}, 15, "greater than 0"),
])
def test_config_errors_point_at_the_rules_line(tmp_path: Path, change: dict[str, str], line: int,
                                               fragment: str) -> None:
    path = load(tmp_path, **change)
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: network.allow.2."), message
    assert fragment in message


@pytest.mark.parametrize(("key", "value", "line"), [("timeout", "0", 2), ("timeout", "-1", 2),
                                                    ("max_request_mb", "0", 2), ("max_response_mb", "-5", 2)])
def test_section_limits_must_be_positive(tmp_path: Path, key: str, value: str, line: int) -> None:
    path = tmp_path / "cellgate.toml"
    path.write_text(f'[network]\n{key} = {value}\n\n[[network.allow]]\nurl = "https://a.test/"\n')
    with pytest.raises(ConfigError, match=rf"^{path}:{line}: network.{key} = .*greater than 0"):
        load_settings(path)


def test_an_unknown_key_of_a_rule_is_named_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "cellgate.toml"
    path.write_text('[[network.allow]]\nurl = "https://a.test/"\n\n[[network.allow]]\nurl = "https://b.test/"\n'
                    "method = [\"POST\"]\n")
    with pytest.raises(ConfigError, match=rf"^{path}:6: unknown key 'network.allow.1.method'.*'methods'"):
        load_settings(path)
