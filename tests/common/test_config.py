"""load_config: flags beat FABRICTWIN_* variables beat defaults; bad values exit naming the culprit."""

from __future__ import annotations

import argparse
import os

import pytest

from services.common.config import DEFAULT_PORTS, ServiceConfig, load_config


def test_defaults_apply_when_neither_flag_nor_variable_is_set():
    config = load_config("topology", [], env={})
    assert config.port == DEFAULT_PORTS["topology"] == 50051
    assert config.host == "127.0.0.1"
    assert config.metrics_port == -1
    assert config.grace_seconds == 5.0
    assert config.extra == {}


def test_an_environment_variable_beats_the_default():
    env = {
        "FABRICTWIN_PORT": "6000",
        "FABRICTWIN_GRACE_SECONDS": "1.5",
        "FABRICTWIN_AUTH_TOKEN": "s3cret",
        "FABRICTWIN_TOPOLOGY_ADDRESS": "topology:50051",
    }
    config = load_config("simulator", [], env=env)
    assert (config.port, config.grace_seconds, config.auth_token) == (6000, 1.5, "s3cret")
    assert config.topology_address == "topology:50051"


def test_a_flag_beats_the_environment_variable():
    env = {"FABRICTWIN_PORT": "6000", "FABRICTWIN_MAX_MESSAGE_BYTES": "1024"}
    config = load_config("telemetry", ["--port", "7000"], env=env)
    assert config.port == 7000
    assert config.max_message_bytes == 1024


def test_load_config_reads_the_process_environment_by_default(monkeypatch):
    monkeypatch.setenv("FABRICTWIN_METRICS_PORT", "9100")
    assert load_config("orchestrator", []).metrics_port == 9100


def test_a_bad_environment_value_exits_naming_the_variable():
    with pytest.raises(SystemExit) as exited:
        load_config("topology", [], env={"FABRICTWIN_PORT": "fifty"})
    assert "FABRICTWIN_PORT" in str(exited.value.code)
    assert "'fifty'" in str(exited.value.code)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("FABRICTWIN_LOG_FORMAT", "xml"),
        ("FABRICTWIN_LOG_LEVEL", "LOUD"),
        ("FABRICTWIN_PORT", "70000"),
        ("FABRICTWIN_GRACE_SECONDS", "-1"),
    ],
)
def test_a_value_that_parses_but_cannot_work_exits_naming_the_variable(variable, value):
    with pytest.raises(SystemExit) as exited:
        load_config("topology", [], env={variable: value})
    assert variable in str(exited.value.code)


def test_a_bad_flag_value_exits_with_usage(capsys):
    with pytest.raises(SystemExit) as exited:
        load_config("topology", ["--port", "fifty"], env={})
    assert exited.value.code == 2
    assert "--port" in capsys.readouterr().err


def _snapshot_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--snapshot-cache", type=int, default=4)
    parser.add_argument("--strict-import", action="store_true")


def test_extra_flags_take_defaults_variables_and_flags_in_that_order():
    assert load_config("topology", [], env={}, extra_flags=_snapshot_flags).extra == {
        "snapshot_cache": 4,
        "strict_import": False,
    }
    env = {"FABRICTWIN_SNAPSHOT_CACHE": "16", "FABRICTWIN_STRICT_IMPORT": "true"}
    from_env = load_config("topology", [], env=env, extra_flags=_snapshot_flags)
    assert from_env.extra == {"snapshot_cache": 16, "strict_import": True}
    from_flag = load_config("topology", ["--snapshot-cache", "32"], env=env, extra_flags=_snapshot_flags)
    assert from_flag.extra["snapshot_cache"] == 32


def test_a_false_environment_value_turns_a_store_true_extra_flag_off():
    config = load_config(
        "topology", [], env={"FABRICTWIN_STRICT_IMPORT": "false"}, extra_flags=_snapshot_flags
    )
    assert config.extra["strict_import"] is False


@pytest.mark.parametrize(
    ("variable", "value"), [("FABRICTWIN_SNAPSHOT_CACHE", "many"), ("FABRICTWIN_STRICT_IMPORT", "perhaps")]
)
def test_a_bad_environment_value_of_an_extra_flag_exits_naming_the_variable(variable, value):
    with pytest.raises(SystemExit) as exited:
        load_config("topology", [], env={variable: value}, extra_flags=_snapshot_flags)
    assert variable in str(exited.value.code)


def test_sqlite_under_the_data_dir_is_the_database_when_none_is_configured(tmp_path):
    config = ServiceConfig(service="telemetry", data_dir=str(tmp_path / "state"))
    assert config.resolved_database_url() == f"sqlite:///{os.path.join(tmp_path, 'state', 'telemetry.db')}"
    assert (tmp_path / "state").is_dir()
    assert ServiceConfig(service="telemetry", database_url="postgresql://db/x").resolved_database_url() == (
        "postgresql://db/x"
    )


# Secrets: the bearer tokens come from files (or the environment), never needed on the command line.


def test_the_token_is_read_from_the_file_named_by_flag_or_variable(tmp_path):
    path = tmp_path / "token"
    path.write_text("s3cret\n")  # as `kubectl create secret --from-file` or `echo > file` leave it
    assert load_config("topology", ["--auth-token-file", str(path)], env={}).auth_token == "s3cret"
    from_env = load_config("topology", [], env={"FABRICTWIN_AUTH_TOKEN_FILE": str(path)})
    assert from_env.auth_token == "s3cret"
    assert from_env.auth_token_file == str(path)


def test_the_read_only_token_is_read_from_its_file(tmp_path):
    (tmp_path / "token").write_text("full")
    (tmp_path / "ro").write_text("look-only\n")
    env = {
        "FABRICTWIN_AUTH_TOKEN_FILE": str(tmp_path / "token"),
        "FABRICTWIN_READ_ONLY_TOKEN_FILE": str(tmp_path / "ro"),
    }
    config = load_config("telemetry", [], env=env)
    assert (config.auth_token, config.read_only_token) == ("full", "look-only")


def test_tokens_never_show_in_the_configs_repr(tmp_path):
    config = ServiceConfig(service="topology", auth_token="s3cret", read_only_token="look-only")
    assert "s3cret" not in repr(config) and "look-only" not in repr(config)


@pytest.mark.parametrize(
    ("files", "env", "names"),
    [
        ({}, {"FABRICTWIN_AUTH_TOKEN_FILE": "{d}/absent"}, "--auth-token-file"),
        ({"token": "\n"}, {"FABRICTWIN_AUTH_TOKEN_FILE": "{d}/token"}, "empty"),
        ({"token": "hunter2\nhunter3"}, {"FABRICTWIN_AUTH_TOKEN_FILE": "{d}/token"}, "one line"),
        (
            {"token": "a"},
            {"FABRICTWIN_AUTH_TOKEN_FILE": "{d}/token", "FABRICTWIN_AUTH_TOKEN": "b"},
            "not both",
        ),
        ({"ro": "r"}, {"FABRICTWIN_READ_ONLY_TOKEN_FILE": "{d}/ro"}, "needs a full token"),
        (
            {"t": "hunter2"},
            {"FABRICTWIN_AUTH_TOKEN_FILE": "{d}/t", "FABRICTWIN_READ_ONLY_TOKEN_FILE": "{d}/t"},
            "differ",
        ),
    ],
    ids=["missing file", "empty file", "two lines", "token and file", "read-only alone", "same token twice"],
)
def test_a_token_setting_that_cannot_work_exits_naming_it(tmp_path, files, env, names):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    env = {k: v.format(d=tmp_path) for k, v in env.items()}
    with pytest.raises(SystemExit) as exited:
        load_config("topology", [], env=env)
    message = str(exited.value.code)
    assert names in message
    assert "FABRICTWIN_" in message or "--" in message
    assert "hunter" not in message  # a token's text is never echoed


def test_peer_tls_settings_have_flags_and_variables():
    env = {"FABRICTWIN_PEER_TLS_CA": "/etc/ca.crt", "FABRICTWIN_PEER_TLS_CERT": "/etc/c.crt"}
    config = load_config("simulator", ["--peer-tls-key", "/etc/c.key"], env=env)
    assert (config.peer_tls_ca, config.peer_tls_cert, config.peer_tls_key) == (
        "/etc/ca.crt",
        "/etc/c.crt",
        "/etc/c.key",
    )
