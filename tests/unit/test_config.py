from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from joulestat.runtime.settings import ConfigError, add_options, parse_duration_s, resolve

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
