"""Secret handling for librdkafka properties.

Stream metadata carries client settings such as ``sasl.password``. They reach
the clients that need them, and nothing else: ``repr``/``str`` redact them,
admin responses redact them, logs never see them (FLINK-37304 is the bug this
avoids). Better still, a secret is not held at all: a value that is only
a ConfigProvider reference (:mod:`multikafka.core._references`) holds no
secret, so it is shown as it is and may go to any reader.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from multikafka.core._references import is_reference

#: What a secret value is replaced with in every output.
REDACTED = "<redacted>"

_SECRET_KEY = re.compile(
    r"(password|secret|token|credential|jaas|private|\.key$|key\.pem|keystore|truststore\.pem)",
    re.IGNORECASE,
)


def is_secret(key: str) -> bool:
    """Whether the librdkafka property ``key`` holds a secret."""
    return bool(_SECRET_KEY.search(key))


def _holds_secret(key: str, value: str) -> bool:
    return is_secret(key) and not is_reference(value)


class Properties(Mapping[str, str]):
    """An immutable ``str -> str`` map of librdkafka settings that redacts secrets
    in ``repr``/``str`` and :meth:`redacted`. Use :meth:`as_librdkafka_dict` to
    hand the real values to a client."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, str] | None = None) -> None:
        self._items: dict[str, str] = dict(sorted((items or {}).items()))

    def __getitem__(self, key: str) -> str:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Properties):
            return self._items == other._items
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self._items.items()))

    def __repr__(self) -> str:
        return f"Properties({self.redacted()!r})"

    __str__ = __repr__

    def redacted(self) -> dict[str, str]:
        """The settings with every secret value replaced by :data:`REDACTED`."""
        return {k: (REDACTED if _holds_secret(k, v) else v) for k, v in self._items.items()}

    def has_secrets(self) -> bool:
        """Whether any setting holds a secret (a reference to one does not)."""
        return any(_holds_secret(k, v) for k, v in self._items.items())

    def as_librdkafka_dict(self) -> dict[str, str]:
        """The real settings, for a librdkafka client. Never log the result."""
        return dict(self._items)

    def merged_over(self, stored: Properties) -> Properties:
        """These settings, with every value still :data:`REDACTED` taken from
        ``stored`` (so a document read back from the admin API can be put again)."""
        return Properties(
            {k: stored.get(k, v) if v == REDACTED else v for k, v in self._items.items()}
        )
