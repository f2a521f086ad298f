"""Secrets by reference: Kafka's ``ConfigProvider`` syntax in cluster properties.

A property value may hold references, resolved where the client runs (the
coordinator's pod for its own clients, the executor for a reader's):

* ``${file:PATH:KEY}``: the value of ``KEY`` in the Java properties file
  ``PATH`` (``key=value`` or ``key: value`` lines; ``#`` and ``!`` comments);
* ``${directory:PATH:FILE}``: the content of the file ``FILE`` in the folder
  ``PATH`` (as Kubernetes mounts a Secret; one trailing newline dropped);
* ``${env:VAR}``: the environment variable ``VAR``.

A value may be a reference alone (``${file:/etc/kafka/east.properties:sasl.password}``)
or text around references (a ``sasl.jaas.config`` naming two). The stream
document, etcd, the wire and every log keep the reference; only
:func:`resolve_properties` (called by :func:`multikafka.core._kafka_config.client_config`
as a client is made) sees values, and hands them straight to librdkafka. A
reference that cannot be resolved is a :class:`UnresolvedReferenceError` naming the
cluster, the property and the reference, never a partial connection.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import NamedTuple

from multikafka.core.exceptions import PreconditionError, ValidationError, shown

__all__ = [
    "PROVIDERS",
    "Reference",
    "UnresolvedReferenceError",
    "check_references",
    "is_reference",
    "references_in",
    "resolve_properties",
]

#: The providers understood, as Kafka names them.
PROVIDERS = ("file", "directory", "env")

#: ``${provider:rest}`` with a provider name of letters (Kafka's syntax).
_REFERENCE = re.compile(r"\$\{([A-Za-z][A-Za-z0-9_.-]*):([^}]*)\}")
#: Variables the coordinator holds its own credentials in: never a reference's target.
_OWN_VARIABLES = "MULTIKAFKA_"
#: Largest file a reference reads (a properties file or a Secret's key).
_MAX_FILE_BYTES = 1 << 20


class UnresolvedReferenceError(PreconditionError):
    """A reference could not be resolved here (FAILED_PRECONDITION: the
    environment, not the request, must change)."""


class Reference(NamedTuple):
    """One ``${provider:path:key}`` (``path`` empty for ``env``)."""

    provider: str
    path: str
    key: str
    #: The reference as written.
    text: str

    def __str__(self) -> str:
        return self.text


def references_in(value: str) -> Iterator[Reference]:
    """Every well-formed reference in ``value`` (unknown providers too; see
    :func:`check_references`)."""
    for m in _REFERENCE.finditer(value):
        provider, rest = m.group(1), m.group(2)
        if provider == "env":
            yield Reference(provider, "", rest, m.group(0))
            continue
        path, sep, key = rest.rpartition(":")
        yield Reference(provider, path if sep else "", key if sep else rest, m.group(0))


def is_reference(value: str) -> bool:
    """Whether ``value`` is one reference and nothing else (it holds no
    secret itself, so it may be shown)."""
    return _REFERENCE.fullmatch(value) is not None


def check_references(value: str, field: str) -> None:
    """Refuse a malformed reference in a document (``field``: where it is),
    at the put that carries it rather than at every client later."""
    for ref in references_in(value):
        if ref.provider not in PROVIDERS:
            raise ValidationError(
                field,
                f"{shown(ref.text)} names the config provider {shown(ref.provider)}; "
                f"use one of {', '.join(PROVIDERS)}",
            )
        if ref.provider == "env":
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", ref.key):
                raise ValidationError(
                    field, f"{shown(ref.text)}: write an environment variable as ${{env:NAME}}"
                )
            if ref.key.startswith(_OWN_VARIABLES):
                raise ValidationError(
                    field,
                    f"{shown(ref.text)}: {_OWN_VARIABLES}* variables hold multikafka's own "
                    "settings and credentials and are never handed to a Kafka client",
                )
            continue
        if not ref.path or not ref.key:
            raise ValidationError(
                field,
                f"{shown(ref.text)}: write ${{{ref.provider}:PATH:"
                f"{'KEY' if ref.provider == 'file' else 'FILE'}}} with an absolute PATH",
            )
        if not ref.path.startswith("/"):
            raise ValidationError(field, f"{shown(ref.text)}: the path must be absolute")
        if ref.provider == "directory" and ("/" in ref.key or ref.key in (".", "..")):
            raise ValidationError(
                field, f"{shown(ref.text)}: FILE is a name inside the folder, not a path"
            )


def resolve_properties(cluster: str, properties: Mapping[str, str]) -> dict[str, str]:
    """``properties`` with every reference replaced by its value, read here
    and now. :class:`UnresolvedReferenceError` (naming ``cluster``, the property and
    the reference, never a value) for the first that cannot be."""
    resolved = dict(properties)
    files: dict[str, dict[str, str]] = {}
    for key, value in properties.items():
        if "${" not in value:
            continue
        resolved[key] = _REFERENCE.sub(functools.partial(_value, cluster, key, files), value)
    return resolved


def _value(cluster: str, prop: str, files: dict[str, dict[str, str]], match: re.Match[str]) -> str:
    (ref,) = references_in(match.group(0))

    def fail(why: str) -> UnresolvedReferenceError:
        return UnresolvedReferenceError(
            f"cluster {shown(cluster)}: property {shown(prop)} refers to {shown(ref.text)}, "
            f"which cannot be resolved here: {why}"
        )

    try:
        check_references(ref.text, prop)
    except ValidationError as exc:
        raise fail(exc.problem) from None
    if ref.provider == "env":
        value = os.environ.get(ref.key)
        if value is None:
            raise fail(f"the environment variable {ref.key} is not set")
        return value
    if ref.provider == "directory":
        return _read(Path(ref.path) / ref.key, fail).removesuffix("\n")
    entries = files.get(ref.path)
    if entries is None:
        entries = files[ref.path] = _properties_file(_read(Path(ref.path), fail))
    if ref.key not in entries:
        raise fail(f"{ref.path} has no key {shown(ref.key)}")
    return entries[ref.key]


def _read(path: Path, fail: Callable[[str], UnresolvedReferenceError]) -> str:
    try:
        with path.open("rb") as f:
            data = f.read(_MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise fail(f"cannot read {path}: {exc.strerror}") from None
    if len(data) > _MAX_FILE_BYTES:
        raise fail(f"{path} is larger than {_MAX_FILE_BYTES:,} bytes")
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise fail(f"{path} is not UTF-8 text") from None


def _properties_file(text: str) -> dict[str, str]:
    """A Java properties file's ``key=value`` / ``key: value`` lines."""
    entries: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut < 0:
            entries[line] = ""
            continue
        entries[line[:cut].strip()] = line[cut + 1 :].strip()
    return entries
