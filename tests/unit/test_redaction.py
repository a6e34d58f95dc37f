"""What ``redact`` does to a tool's error text before the cell sees it (issue 43, new-user item 5): host paths,
credentials and secrets go; URLs and relative paths stay as written."""

from __future__ import annotations

import pytest

from cellgate.gate.calls.redaction import redact


@pytest.mark.parametrize("text", [
    "http://example.com/ is not allowlisted",
    "https://api.example.com/v1/items/7?page=2 answered 404",
    "HTTPS://Example.COM/a/b/ moved",
    "ftp://mirror.example.org/pub/debian/ is not allowlisted",
    "postgresql://db.internal:5432/orders is down",
])
def test_a_url_reaches_the_cell_as_written(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize("text", ["a/b not found", "src/pkg/mod.py: bad", "./data/x.csv and ../up/there", "1/2/3"])
def test_a_relative_path_is_not_a_host_path(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize("text, expected", [
    ("cannot open /home/operator/secrets/db.json", "cannot open <host path>"),
    ("File \"/usr/lib/python3.11/json/decoder.py\", line 3", "File \"<host path>\", line 3"),
    ("/etc/passwd: denied", "<host path>: denied"),
    ("jar:file:/srv/app/lib/x.jar", "jar:file:<host path>"),
    # A URL that names a file on this host is a host path.
    ("file:///home/operator/report.pdf is too large", "file://<host path> is too large"),
    ("FILE://localhost/home/operator/x", "FILE://<host path>"),
    ("sqlite:///home/operator/app.db is locked", "sqlite://<host path> is locked"),
    ("http://example.com/ref and /var/lib/app/x.db", "http://example.com/ref and <host path>"),
])
def test_a_host_path_is_scrubbed_also_beside_or_in_a_url(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_a_password_in_a_url_is_redacted_and_the_rest_kept() -> None:
    assert redact("https://ann:hunter22@example.com/repo.git refused") == "https://[redacted]@example.com/repo.git refused"
    assert redact("https://ann@example.com/x") == "https://ann@example.com/x"  # a user name alone is no secret


def test_credentials_and_known_secrets_are_still_redacted_in_and_out_of_urls() -> None:
    said = redact("GET https://example.com/x?token=abc123def failed: Authorization: Bearer abcdefghijkl; key s3cr3tv",
                  secrets=["s3cr3tv"])
    assert "abc123def" not in said and "abcdefghijkl" not in said and "s3cr3tv" not in said
    assert said.startswith("GET https://example.com/x?[redacted] failed")
