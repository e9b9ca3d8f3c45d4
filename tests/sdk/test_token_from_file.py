"""The SDK and the CLI take the bearer token from a file (FABRICTWIN_TOKEN_FILE), so it never has to be
on a command line where `ps` shows it."""

from __future__ import annotations

import pytest
from fabrictwin import Client, InvalidArgumentError
from fabrictwin.cli import main
from fabrictwin.client import Addresses

from services.common.config import ServiceConfig
from tests.common.scripted_services import scripted_definitions

from .conftest import definitions_build


@pytest.fixture
def guarded(serve):
    return serve(
        definitions_build(scripted_definitions()),
        ServiceConfig(service="scripted", port=0, auth_token="s3cret"),
    )


def test_the_token_file_in_the_environment_is_read(tmp_path):
    (tmp_path / "token").write_text("s3cret\n")
    found = Addresses.from_env({"FABRICTWIN_TOKEN_FILE": str(tmp_path / "token")})
    assert found.token == "s3cret"


def test_the_token_itself_in_the_environment_still_works():
    assert Addresses.from_env({"FABRICTWIN_TOKEN": "s3cret"}).token == "s3cret"


def test_a_token_and_a_token_file_together_are_refused(tmp_path):
    (tmp_path / "token").write_text("a")
    with pytest.raises(InvalidArgumentError, match="FABRICTWIN_TOKEN_FILE"):
        Addresses.from_env({"FABRICTWIN_TOKEN_FILE": str(tmp_path / "token"), "FABRICTWIN_TOKEN": "b"})


def test_an_unreadable_token_file_is_refused_naming_it(tmp_path):
    with pytest.raises(InvalidArgumentError, match=r"FABRICTWIN_TOKEN_FILE.*absent"):
        Addresses.from_env({"FABRICTWIN_TOKEN_FILE": str(tmp_path / "absent")})


def test_a_client_reads_its_token_from_a_file(guarded, tmp_path):
    (tmp_path / "token").write_text("s3cret\n")
    with Client(topology=guarded.address, token_file=str(tmp_path / "token")) as client:
        assert client.fabrics.get("ok").name == "fabrics/ok"


def test_a_client_from_the_environment_uses_the_token_file(guarded, tmp_path):
    (tmp_path / "token").write_text("s3cret")
    env = {"FABRICTWIN_TOPOLOGY_ADDRESS": guarded.address, "FABRICTWIN_TOKEN_FILE": str(tmp_path / "token")}
    with Client.from_env(env) as client:
        assert client.fabrics.get("ok").name == "fabrics/ok"


def test_the_cli_uses_the_token_file_from_the_environment(guarded, tmp_path, monkeypatch, capsys):
    (tmp_path / "token").write_text("s3cret\n")
    monkeypatch.delenv("FABRICTWIN_TOKEN", raising=False)
    monkeypatch.setenv("FABRICTWIN_TOKEN_FILE", str(tmp_path / "token"))
    assert main([f"--topology={guarded.address}", "fabric", "get", "ok", "--json"]) == 0
    assert '"name": "fabrics/ok"' in capsys.readouterr().out


def test_the_cli_names_an_unreadable_token_file_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FABRICTWIN_TOKEN_FILE", str(tmp_path / "absent"))
    assert main(["health"]) == 2
    err = capsys.readouterr().err
    assert "FABRICTWIN_TOKEN_FILE" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_the_cli_takes_the_token_from_a_file_given_by_flag(guarded, tmp_path, monkeypatch, capsys):
    (tmp_path / "token").write_text("s3cret\n")
    monkeypatch.delenv("FABRICTWIN_TOKEN", raising=False)
    monkeypatch.delenv("FABRICTWIN_TOKEN_FILE", raising=False)
    argv = [f"--topology={guarded.address}", "--token-file", str(tmp_path / "token"), "fabric", "get", "ok"]
    assert main([*argv, "--json"]) == 0
    assert '"name": "fabrics/ok"' in capsys.readouterr().out
    assert main([argv[0], "--token-file", str(tmp_path / "absent"), *argv[3:]]) == 2
    assert "--token-file" in capsys.readouterr().err
