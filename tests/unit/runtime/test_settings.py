"""The settings every command resolves (joulestat.runtime.settings): flag over
environment over config file over default, errors that name the setting or the file,
durations, and each section's fields filled by exactly one option of the declared type."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from joulestat.core.errors import ConfigError
from joulestat.core.setting_parsers import parse_duration_s
from joulestat.runtime.settings import add_options, resolve

NAMES = ["config", "interval", "db", "metrics_port", "raw_retention", "node"]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_options(parser, NAMES)
    return parser.parse_args(argv)


def test_precedence_flag_over_env_over_file_over_default(tmp_path: Path) -> None:
    config = tmp_path / "joulestat.toml"
    config.write_text('interval = 5\nmetrics_port = 9999\nnode = "from-file"\n')
    env = {"JOULESTAT_INTERVAL": "2", "JOULESTAT_CONFIG": str(config)}
    settings = resolve(parse(["--interval", "0.5"]), NAMES, env)
    assert settings["interval"] == 0.5  # flag beats env and file
    assert settings["metrics_port"] == 9999  # file beats default
    assert settings["node"] == "from-file"
    assert settings["raw_retention"] == 7 * 86400  # default
    settings = resolve(parse([]), NAMES, env)
    assert settings["interval"] == 2.0  # env beats file


def test_joulestat_table_and_dashes_in_file(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[joulestat]\nmetrics-port = 1234\nraw-retention = "2h"\n')
    settings = resolve(parse(["--config", str(config)]), NAMES, {})
    assert settings["metrics_port"] == 1234
    assert settings["raw_retention"] == 7200


@pytest.mark.parametrize(
    ("argv", "env", "named"),
    [
        (["--interval", "0"], {}, "--interval"),
        (["--interval", "61"], {}, "--interval"),
        ([], {"JOULESTAT_INTERVAL": "fast"}, "JOULESTAT_INTERVAL"),
        (["--metrics-port", "70000"], {}, "--metrics-port"),
        (["--db", "not-a-url"], {}, "--db"),
        (["--raw-retention", "1m"], {}, "--raw-retention"),
        (["--config", "/nonexistent.toml"], {}, "--config"),
    ],
)
def test_bad_values_name_the_setting(argv: list[str], env: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        resolve(parse(argv), NAMES, env)


def test_bad_file_value_and_unknown_key_name_the_file(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("interval = -1\n")
    with pytest.raises(ConfigError, match="interval in the config file"):
        resolve(parse(["--config", str(config)]), NAMES, {})
    config.write_text("intervall = 1\n")
    with pytest.raises(ConfigError, match="unknown setting.*intervall"):
        resolve(parse(["--config", str(config)]), NAMES, {})
    config.write_text("interval = [\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        resolve(parse(["--config", str(config)]), NAMES, {})


def test_durations() -> None:
    assert parse_duration_s("90") == 90
    assert parse_duration_s("15m") == 900
    assert parse_duration_s("7d") == 7 * 86400
    with pytest.raises(ValueError, match="duration"):
        parse_duration_s("soon")


def test_config_error_is_the_shared_one() -> None:
    """Raised below config (sensor factory, store bootstrap) and caught by the CLI as one
    class, whichever module a caller imports it from."""
    from joulestat.core import errors, setting_parsers

    assert ConfigError is errors.ConfigError
    assert parse_duration_s is setting_parsers.parse_duration_s


# -- typed sections: each layer's settings, generated from the one option table ----------

def sections() -> list[type]:
    from joulestat.api.agent_client import AgentAddress
    from joulestat.api.server import ApiSettings
    from joulestat.attribution.accounting import AttributionSettings
    from joulestat.carbon.footprint import CarbonSettings
    from joulestat.devices.factory import DeviceSettings
    from joulestat.host.identity import NodeSettings
    from joulestat.host.usage import HostSettings
    from joulestat.outputs.otlp import OtlpSettings
    from joulestat.outputs.prometheus import MetricsSettings
    from joulestat.pipeline.tick_loop import TickSettings
    from joulestat.store.writer import StoreSettings

    return [DeviceSettings, HostSettings, NodeSettings, AttributionSettings, StoreSettings,
            MetricsSettings, ApiSettings, AgentAddress, CarbonSettings, TickSettings,
            OtlpSettings]


def test_every_section_field_is_filled_by_one_option_and_defaults_live_there() -> None:
    import dataclasses

    from joulestat.runtime.settings import FIELD_OPTIONS, OPTIONS

    filled: set[str] = set()
    for cls in sections():
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, cls
        for field in dataclasses.fields(cls):
            option = FIELD_OPTIONS.get(field.name)
            if option is None:  # a constant of its layer, never a setting
                assert field.default is not dataclasses.MISSING, (cls, field.name)
                continue
            filled.add(option.name)
            if field.default is not dataclasses.MISSING:  # one default, the table's
                assert field.default == option.default, (cls, field.name)
    # What no section takes is read by the command line itself.
    assert set(OPTIONS) - filled == {"config", "log_level"}


def test_sections_hold_parsed_values_of_their_declared_types() -> None:
    """Every option at its default, and at a value a user writes, lands in its section
    as the type the section declares (a Path, an enum member, seconds as a float)."""
    import dataclasses
    import types
    import typing

    from joulestat.runtime.settings import OPTIONS

    given = {"idle_policy": "EXCLUDE", "kube_pods": "kubelet", "interval": "0.5",
             "discover": "k8s,docker", "spool_max": "1GiB", "raw_retention": "2h",
             "replay": __file__, "neuron_monitor": "/tmp/nm.json", "region": "eu-west-1"}
    for values in ({}, given):
        resolved = resolve(values, [n for n in OPTIONS if n != "config"], env={})
        for cls in sections():
            section = resolved.section(cls)
            hints = typing.get_type_hints(cls)
            for field in dataclasses.fields(cls):
                value, hint = getattr(section, field.name), hints[field.name]
                allowed = typing.get_args(hint) if isinstance(hint, types.UnionType) \
                    else (hint,)
                allowed = tuple(typing.get_origin(a) or a for a in allowed)
                assert isinstance(value, allowed), (cls.__name__, field.name, value, hint)
    resolved = resolve(given, list(given), env={})
    assert str(resolved.section(sections()[3]).idle_policy) == "exclude"


def test_a_section_takes_the_commands_value_else_the_tables_default() -> None:
    from joulestat.store.writer import StoreSettings

    store = resolve({"flush_interval": "3"}, ["flush_interval"], env={}).section(StoreSettings)
    assert (store.flush_interval_s, store.raw_retention_s, store.db) == (3.0, 7 * 86400, None)
    with pytest.raises(TypeError, match="no option fills it"):
        from dataclasses import dataclass

        @dataclass(frozen=True)
        class Stray:
            not_an_option: int

        resolve({}, [], env={}).section(Stray)


def test_a_secret_on_the_command_line_is_said_and_the_env_or_file_is_not(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 47: `--api-token` on the command line is readable by every user in
    /proc/PID/cmdline. The documented ways (JOULESTAT_API_TOKEN, api_token in the
    --config file) are taken quietly; the flag works, with a WARNING naming them."""
    config = tmp_path / "agent.toml"
    config.write_text('api_token = "from-the-file"\n')
    parser = argparse.ArgumentParser()
    add_options(parser, ["api_token", "config"])
    with caplog.at_level("WARNING", logger="joulestat.runtime.settings"):
        from_file = resolve(parser.parse_args(["--config", str(config)]), ["api_token"], env={})
        from_env = resolve(parser.parse_args([]), ["api_token"],
                           env={"JOULESTAT_API_TOKEN": "from-the-env"})
        assert not caplog.records
        from_flag = resolve(parser.parse_args(["--api-token", "on-argv"]), ["api_token"],
                            env={})
    assert (from_file["api_token"], from_env["api_token"], from_flag["api_token"]) == (
        "from-the-file", "from-the-env", "on-argv")
    [said] = caplog.records
    assert "JOULESTAT_API_TOKEN" in said.getMessage() and "/proc" in said.getMessage()
    assert "on-argv" not in said.getMessage()
