"""Error messages as gRPC sends them: bounded in bytes, always UTF-8."""

from __future__ import annotations

import pytest

from multikafka.core._grpc_codes import MAX_DETAILS, clip
from multikafka.core.exceptions import ValidationError

INTERNALS = ("multikafka.core._grpc_codes",)


def test_short_text_is_unchanged() -> None:
    assert clip("stream 'x' not found") == "stream 'x' not found"


@pytest.mark.parametrize("char", ["x", "\u00e9", "\u20ac", "\U0001f600"])
def test_long_text_is_cut_to_the_limit_in_bytes(char: str) -> None:
    text = char * 3000
    clipped = clip(text)
    head, _, rest = clipped.partition("... (")
    assert len(head.encode()) <= MAX_DETAILS
    assert len(head.encode()) > MAX_DETAILS - 4  # never more than one character short
    assert head == char * len(head)  # no character cut in half
    assert rest == f"{len(text.encode()) - len(head.encode())} more bytes)"


def test_lone_surrogates_are_escaped() -> None:
    assert clip("key \udc80") == "key \\udc80"


def test_validation_error_escapes_what_is_not_text() -> None:
    error = ValidationError("properties.\ud800", "bad value \udfff")
    assert str(error) == "properties.\\ud800: bad value \\udfff"
    str(error).encode("utf-8")
