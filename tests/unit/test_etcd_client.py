"""etcd settings from flags and variables, and the client's choice of member
(no etcd needed: clients connect lazily)."""

from __future__ import annotations

from pathlib import Path

import pytest

from multikafka.coordinator.config import CoordinatorConfig, etcd_from, etcd_settings
from multikafka.coordinator.state.etcd import Etcd
from multikafka.core.exceptions import ValidationError

INTERNALS = (
    "multikafka.coordinator.config",
    "multikafka.coordinator.state.etcd",
)


async def test_two_calls_failing_on_one_member_move_on_once() -> None:
    """The watch and a call both see member A go: the client moves to B once,
    not to C (or, with two members, back to A)."""
    etcd = Etcd(etcd_from("http://a:2379,http://b:2379,http://c:2379"))
    on_a = etcd._client
    await etcd._move(ConnectionError("a down"), on_a)
    await etcd._move(ConnectionError("a down"), on_a)
    assert etcd.endpoint.host == "b"
    await etcd._move(ConnectionError("b down"), etcd._client)
    assert etcd.endpoint.host == "c"
    await etcd.close()


ETCD_VARIABLES = [
    "MULTIKAFKA_ETCD",
    "MULTIKAFKA_ETCD_CA",
    "MULTIKAFKA_ETCD_CERT",
    "MULTIKAFKA_ETCD_KEY",
    "MULTIKAFKA_ETCD_USER",
    "MULTIKAFKA_ETCD_PASSWORD_FILE",
]


@pytest.fixture(autouse=True)
def no_etcd_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ETCD_VARIABLES:
        monkeypatch.delenv(variable, raising=False)


@pytest.mark.parametrize(
    "variable", ["MULTIKAFKA_ETCD_CERT", "MULTIKAFKA_ETCD_KEY", "MULTIKAFKA_ETCD_PASSWORD_FILE"]
)
def test_an_etcd_setting_given_alone_is_refused_not_ignored(
    variable: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Each etcd variable counts (the client certificate, its key or a
    password file alone once left the coordinator on plain, open etcd)."""
    given = tmp_path / "given"
    given.write_text("x")
    monkeypatch.setenv(variable, str(given))
    with pytest.raises(ValidationError, match=r"^etcd: give both"):
        CoordinatorConfig.from_env()


def test_etcd_flags_win_over_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MULTIKAFKA_ETCD", "http://from-env:2379")
    assert etcd_settings() == etcd_from("http://from-env:2379")
    assert etcd_settings(urls="http://from-flag:2379") == etcd_from("http://from-flag:2379")


def test_no_etcd_setting_means_the_default() -> None:
    assert etcd_settings() is None
