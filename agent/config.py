"""Settings for every subcommand: flags > env (JOULESTAT_*) > TOML file > defaults.

One table of options serves every subcommand, so a setting means the same thing and is
validated the same way whether it comes from ``--db``, ``JOULESTAT_DB`` or ``db = ...``
in the file named by ``--config`` / ``JOULESTAT_CONFIG``. Validation happens once, when
the command starts; a bad value stops it with a message naming the setting and where
the value came from.
"""

from __future__ import annotations

import argparse
import logging
import os
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_PREFIX = "JOULESTAT_"
# Environment variables earlier versions read, and what replaced them: still set, they
# would otherwise be ignored without a word and a job would miss its agent.
RETIRED_ENV = {"JOULESTAT_AGENT": "JOULESTAT_AGENT_URL"}


class ConfigError(ValueError):
    """A setting has a value the command cannot use."""


@dataclass(frozen=True)
class Option:
    """One setting; ``metrics_port`` is ``--metrics-port`` and ``JOULESTAT_METRICS_PORT``."""

    name: str
    parse: Callable[[Any], Any]
    default: Any
    help: str
    metavar: str | None = None
    shown: str | None = None  # the default as a user would write it, for --help

    @property
    def shown_default(self) -> str | None:
        """``7d`` rather than ``604800.0``, ``none`` rather than ``frozenset()``."""
        if self.shown is not None:
            return self.shown
        default = self.default
        if default is None:
            return None
        if isinstance(default, float) and default.is_integer():
            return str(int(default))
        if isinstance(default, frozenset | set | tuple | list):
            return ",".join(sorted(default)) or "none"
        if isinstance(default, bool):
            return "true" if default else "false"
        return str(default)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()


def _number(kind: type, low: float | None = None, high: float | None = None, unit: str = ""):
    def parse(value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError(f"expected a number, got {value!r}")
        try:
            number = kind(value)
        except (TypeError, ValueError):
            raise ValueError(f"expected a number, got {value!r}") from None
        if number != number:  # NaN
            raise ValueError("expected a number, got NaN")
        if (low is not None and number < low) or (high is not None and number > high):
            raise ValueError(f"must be between {low} and {high}{unit}, got {value}")
        return number

    return parse


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected text, got {value!r}")
    text = value.strip()
    if not text:
        raise ValueError("must not be empty")
    if any(ord(ch) < 32 for ch in text):
        raise ValueError("must not contain control characters")
    return text


def _optional_text(value: Any) -> str | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return _text(value)


def _directory(value: Any) -> Path:
    path = Path(_text(value))
    if not path.is_dir():
        raise ValueError(f"{path} is not a directory")
    return path


def _existing_file(value: Any) -> Path | None:
    if value is None:
        return None
    path = Path(_text(value))
    if not path.is_file():
        raise ValueError(f"{path} does not exist or is not a file")
    return path


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


_DURATION_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration_s(value: Any) -> float:
    """``90``, ``90s``, ``15m``, ``6h``, ``7d`` -> seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        text = _text(value).lower()
        unit = text[-1] if text[-1] in _DURATION_UNITS_S else "s"
        number = text[:-1] if text[-1] in _DURATION_UNITS_S else text
        try:
            seconds = float(number) * _DURATION_UNITS_S[unit]
        except ValueError:
            raise ValueError(
                f"expected a duration like 90s, 15m, 6h or 7d, got {value!r}"
            ) from None
    if seconds <= 0:
        raise ValueError(f"must be positive, got {value!r}")
    return seconds


def _retention_s(value: Any) -> float:
    seconds = parse_duration_s(value)
    if seconds < 600:
        raise ValueError(f"must be at least 10m so minutes can be rolled up, got {value!r}")
    return seconds


_SIZE_UNITS = {"": 1, "k": 1024, "kib": 1024, "m": 1024**2, "mib": 1024**2, "g": 1024**3,
               "gib": 1024**3}


def parse_size_bytes(value: Any) -> int:
    """``268435456``, ``256MiB``, ``1G`` -> bytes (binary prefixes)."""
    text = str(value).strip().lower().replace(" ", "")
    number = text.rstrip("kmgib")
    unit = text[len(number):]
    if unit not in _SIZE_UNITS:
        raise ValueError(f"expected a size like 256MiB or 1GiB, got {value!r}")
    try:
        size = int(float(number) * _SIZE_UNITS[unit])
    except ValueError:
        raise ValueError(f"expected a size like 256MiB or 1GiB, got {value!r}") from None
    if size < 1024 * 1024:
        raise ValueError(f"must be at least 1MiB, got {value!r}")
    return size


def _optional_path(value: Any) -> Path | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return Path(_text(value)).expanduser()


def _db_url(value: Any) -> str:
    url = _text(value)
    if "://" not in url:
        raise ValueError(
            f"expected a SQLAlchemy URL such as sqlite:///path.db or "
            f"postgresql+psycopg://user@host/db, got {value!r}"
        )
    return url


def _log_level(value: Any) -> str:
    level = _text(value).upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ValueError(f"expected DEBUG, INFO, WARNING or ERROR, got {value!r}")
    return level


def _optional_number(low: float, high: float):
    parse_number = _number(float, low, high)

    def parse(value: Any) -> float | None:
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        return parse_number(value)

    return parse


def _choice(*choices: str):
    def parse(value: Any) -> str:
        text = _text(value).lower()
        if text not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {value!r}")
        return text

    return parse


def _http_url(value: Any) -> str:
    url = _text(value).rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"expected an http:// or https:// URL, got {value!r}")
    return url


def _discover(value: Any) -> frozenset[str]:
    from agent.jobs.discovery import parse_discover_option

    if isinstance(value, list | tuple):
        value = ",".join(str(v) for v in value)
    return parse_discover_option(str(value))


def _prices(value: Any) -> Any:
    """A ``--prices`` file, read and checked now (imported late, like ``_discover``)."""
    from agent.carbon.prices import prices_option

    return prices_option(value)


OPTIONS: dict[str, Option] = {
    opt.name: opt
    for opt in (
        Option("config", _existing_file, None, "TOML file of settings (flags and env win)", "FILE"),
        Option("db", _db_url, None, "SQLAlchemy URL of the store (default: SQLite in the "
               "user data dir)", "URL"),
        Option("db_wait", parse_duration_s, 300.0,
               "how long the agent keeps trying a store that does not answer at start-up",
               "AGE", "5m"),
        Option("log_level", _log_level, "INFO", "DEBUG, INFO, WARNING or ERROR", "LEVEL"),
        Option("interval", _number(float, 0.05, 60, " s"), 1.0,
               "seconds between ticks, 0.05..60", "S"),
        Option("sysfs_root", _directory, Path("/sys"), "where sysfs is mounted", "DIR"),
        Option("procfs_root", _directory, Path("/proc"), "where procfs is mounted", "DIR"),
        Option("node", _text, None, "node name (default: hostname)", "NAME"),
        Option("instance_type", _text, None, "instance type (default: detected, else 'local')",
               "TYPE"),
        Option("region", _optional_text, None, "cloud region or location (default: detected)",
               "REGION"),
        Option("cloud_metadata", _bool, True, "ask the cloud metadata service for instance type "
               "and region when DMI says this is a cloud VM", "BOOL"),
        Option("metrics_port", _number(int, 0, 65535), 9464,
               "Prometheus port (0 disables the endpoint)", "PORT"),
        Option("metrics_host", _text, "127.0.0.1", "address the metrics endpoint binds to",
               "HOST"),
        Option("flush_interval", _number(float, 0.2, 300, " s"), 10.0,
               "seconds between store writes; a crash loses nothing (the next start covers "
               "the gap from its checkpoint), so this only sets how fresh the store is", "S"),
        Option("raw_retention", _retention_s, 7 * 86400.0,
               "how long raw ticks are kept before only minute rollups remain", "AGE", "7d"),
        Option("replay", _existing_file, None,
               "replay a CSV trace (t_s,component,device,watts) instead of hardware", "FILE"),
        Option("nvml", _bool, True, "read NVIDIA GPUs through NVML when a driver is present",
               "BOOL"),
        Option("neuron_max_power_w", _optional_number(1.0, 5000.0), None,
               "maximum power of one AWS Neuron device in watts: the driver reports percent "
               "of it and AWS publishes none (docs/methodology.md)", "W"),
        Option("neuron_monitor", _optional_path, None,
               "file neuron-monitor writes its JSON lines to (per-process Neuron use, and "
               "the estimate when the driver has no power)", "FILE"),
        Option("api_port", _number(int, 0, 65535), 9465,
               "port of the local job API (0 disables it)", "PORT"),
        Option("api_host", _text, "127.0.0.1",
               "address the job API binds to; anything but loopback needs --api-token", "HOST"),
        Option("api_token", _optional_text, None,
               "bearer token the job API requires on every request", "TOKEN"),
        Option("agent_url", _http_url, "http://127.0.0.1:9465",
               "URL of the node agent's job API, for `joulestat run` and track()", "URL"),
        Option("idle_policy", _choice("share", "exclude"), "share",
               "share: idle CPU/DRAM power goes to running jobs by their dynamic share; "
               "exclude: it stays unattributed", "POLICY"),
        Option("discover", _discover, frozenset(),
               "turn processes of these schedulers into jobs: docker,k8s,slurm,sagemaker",
               "KINDS"),
        Option("job_retention", parse_duration_s, 300.0,
               "how long ended jobs stay exported to Prometheus", "AGE", "5m"),
        Option("spool_dir", _optional_path, None,
               "where rows wait on disk while the store is away (default: the data dir's "
               "spool/<node>); kept across restarts", "DIR"),
        Option("spool_max", parse_size_bytes, 256 * 1024**2,
               "cap on the spool; past it the oldest batches go, with an error", "SIZE",
               "256MiB"),
        Option("max_jobs", _number(int, 1, 100_000), 1000,
               "cap on running jobs the agent tracks; past it registering answers 429",
               "N"),
        Option("max_job_series", _number(int, 1, 100_000), 500,
               "cap on jobs exported to Prometheus at once (a warning when reached)", "N"),
        Option("carbon_intensity", _optional_number(0, 5000), None,
               "grid carbon intensity in gCO2e/kWh, instead of the region's", "G"),
        Option("pue", _optional_number(1.0, 5.0), None,
               "power usage effectiveness, instead of the provider default", "PUE"),
        Option("price_per_hour", _optional_number(0, 10_000), None,
               "instance price in USD/hour, instead of the catalog's", "USD"),
        Option("prices", _prices, None,
               "CSV of instance_type,usd_per_hour: your own hourly price per instance type "
               "(negotiated, Savings Plan, spot, SageMaker); --price-per-hour still wins",
               "FILE"),
        Option("electricity_maps_token", _optional_text, None,
               "Electricity Maps API token for live grid intensity (optional)", "TOKEN"),
        Option("electricity_maps_url", _http_url, "https://api.electricitymap.org",
               "Electricity Maps API base URL", "URL"),
    )
}


def add_options(parser: argparse.ArgumentParser, names: Iterable[str]) -> None:
    """Add ``--flag`` for each named option; unset flags stay absent so precedence works."""
    for name in names:
        opt = OPTIONS[name]
        default = opt.shown_default
        shown = f" [default: {default}]" if default is not None else ""
        parser.add_argument(
            opt.flag,
            dest=name,
            default=argparse.SUPPRESS,
            metavar=opt.metavar,
            help=f"{opt.help}{shown}; env {opt.env}",
        )


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"config file {path}: cannot read: {exc.strerror}") from None
    # Accept both flat keys and a [joulestat] table; keys may use - or _.
    table = data.get("joulestat", data)
    if not isinstance(table, dict):
        raise ConfigError(f"config file {path}: [joulestat] must be a table")
    return {str(k).replace("-", "_"): v for k, v in table.items() if not isinstance(v, dict)}


def resolve(
    args: argparse.Namespace | Mapping[str, Any],
    names: Iterable[str],
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Settings for ``names``, each from the first of flag, env, TOML file, default."""
    env = os.environ if env is None else env
    given = vars(args) if isinstance(args, argparse.Namespace) else dict(args)
    names = list(names)

    file_values: dict[str, Any] = {}
    config_raw = given.get("config") or env.get(OPTIONS["config"].env)
    config_origin = "--config" if given.get("config") else OPTIONS["config"].env
    if config_raw:
        try:
            config_path = OPTIONS["config"].parse(config_raw)
        except ValueError as exc:
            raise ConfigError(f"{config_origin}: {exc}") from None
        file_values = _read_toml(config_path)
        unknown = sorted(set(file_values) - set(OPTIONS))
        if unknown:
            raise ConfigError(
                f"config file {config_path}: unknown setting(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(OPTIONS))}"
            )

    _warn_retired(env, names)
    settings: dict[str, Any] = {}
    for name in names:
        opt = OPTIONS[name]
        if name in given and given[name] is not None:
            raw, origin = given[name], opt.flag
        elif opt.env in env and env[opt.env] != "":
            raw, origin = env[opt.env], opt.env
        elif name in file_values:
            raw, origin = file_values[name], f"{name} in the config file"
        else:
            settings[name] = opt.default
            continue
        try:
            settings[name] = opt.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{origin}: {exc}") from None
    return settings


def _warn_retired(env: Mapping[str, str], names: list[str]) -> None:
    for old, new in RETIRED_ENV.items():
        option = new.removeprefix(ENV_PREFIX).lower()
        if env.get(old) and option in names and not env.get(new):
            logging.getLogger("agent.config").warning(
                "%s is no longer read (it is %s now); ignoring %s=%s", old, new, old, env[old])
