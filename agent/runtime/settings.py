"""Settings for every subcommand: flags > env (JOULESTAT_*) > TOML file > defaults.

One table of options serves every subcommand, so a setting means the same thing and is
validated the same way whether it comes from ``--db``, ``JOULESTAT_DB`` or ``db = ...``
in the file named by ``--config`` / ``JOULESTAT_CONFIG``. Validation happens once, when
the command starts; a bad value stops it with a message naming the setting and where
the value came from.

What a command resolved reaches each layer as that layer's own frozen, typed section
(:class:`joulestat.devices.factory.DeviceSettings`,
:class:`joulestat.store.writer.WriterSettings`, ...), never as a dict:
:meth:`ResolvedSettings.section` builds one from this table. A section is declared in the
layer that reads it (a layer may import only itself and the layers below, and this
module sits above them all), with no defaults of its own: each field is filled by the
option of the same name (or the one whose ``field`` names it, where the field carries
its unit: ``interval`` fills ``interval_s``), so a default is written once, here, and a
field no option fills is an error (``tests/unit/runtime/test_settings.py`` checks every section).
An option a command does not offer takes its default in the sections it builds.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from joulestat.attribution.shares import IdlePolicy
from joulestat.core.errors import ConfigError
from joulestat.core.otlp_options import OtlpProtocol, parse_endpoint, parse_headers
from joulestat.core.setting_parsers import (
    member_of,
    number_in,
    optional_number_in,
    parse_bool,
    parse_db_url,
    parse_directory,
    parse_duration_s,
    parse_existing_file,
    parse_http_url,
    parse_log_level,
    parse_optional_path,
    parse_optional_text,
    parse_retention_s,
    parse_size_bytes,
    parse_text,
)
from joulestat.host.pod_names import PodNames

log = logging.getLogger(__name__)

ENV_PREFIX = "JOULESTAT_"
# Secrets: the environment or the config file is the way to give them; a flag shows them
# to every user of the node in /proc/<pid>/cmdline, and is said so (issue 47).
SECRET_OPTIONS = frozenset({"api_token", "electricity_maps_token"})
# Environment variables earlier versions read, and what replaced them: still set, they
# would otherwise be ignored without a word and a job would miss its agent.
RETIRED_ENV = {"JOULESTAT_AGENT": "JOULESTAT_AGENT_URL"}


@dataclass(frozen=True)
class Option:
    """One setting; ``metrics_port`` is ``--metrics-port`` and ``JOULESTAT_METRICS_PORT``."""

    name: str
    parse: Callable[[Any], Any]
    default: Any
    help: str
    metavar: str | None = None
    shown: str | None = None  # the default as a user would write it, for --help
    field: str | None = None  # the section field it fills, when not its name (units)

    @property
    def field_name(self) -> str:
        return self.field or self.name

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


def _discover(value: Any) -> frozenset[str]:
    from joulestat.host.discovery import parse_discover_option

    if isinstance(value, list | tuple):
        value = ",".join(str(v) for v in value)
    return parse_discover_option(str(value))


def _serving_allow(value: Any) -> tuple[str, ...]:
    """``--serving-metrics-allow``, checked now (imported late, like ``_discover``)."""
    from joulestat.host.serving_address import parse_serving_allow

    return parse_serving_allow(value)


def _prices(value: Any) -> Any:
    """A ``--prices`` file, read and checked now (imported late, like ``_discover``)."""
    from joulestat.carbon.prices import prices_option

    return prices_option(value)


OPTIONS: dict[str, Option] = {
    opt.name: opt
    for opt in (
        Option("config", parse_existing_file, None,
               "TOML file of settings (flags and env win)", "FILE"),
        Option("db", parse_db_url, None, "SQLAlchemy URL of the store (default: SQLite in the "
               "user data dir)", "URL"),
        Option("db_wait", parse_duration_s, 300.0,
               "how long the agent keeps trying a store that does not answer at "
               "start-up; it measures, serves metrics and the job API and spools its "
               "rows meanwhile, then stops (0: stop at once)",
               "AGE", "5m", field="db_wait_s"),
        Option("log_level", parse_log_level, "INFO", "DEBUG, INFO, WARNING or ERROR", "LEVEL"),
        Option("interval", number_in(float, 0.05, 60, " s"), 1.0,
               "seconds between ticks, 0.05..60", "S", field="interval_s"),
        Option("sysfs_root", parse_directory, Path("/sys"), "where sysfs is mounted", "DIR"),
        Option("procfs_root", parse_directory, Path("/proc"), "where procfs is mounted", "DIR"),
        Option("node", parse_text, None, "node name (default: hostname)", "NAME"),
        Option("instance_type", parse_text, None, "instance type (default: detected, else 'local')",
               "TYPE"),
        Option("region", parse_optional_text, None, "cloud region or location (default: detected)",
               "REGION"),
        Option("cloud_metadata", parse_bool, True, "ask the cloud metadata service for instance "
               "type and region when DMI says this is a cloud VM", "BOOL"),
        Option("metrics_port", number_in(int, 0, 65535), 9464,
               "Prometheus port (0 disables the endpoint)", "PORT"),
        Option("metrics_host", parse_text, "127.0.0.1", "address the metrics endpoint binds to",
               "HOST"),
        Option("flush_interval", number_in(float, 0.2, 300, " s"), 10.0,
               "seconds between store writes; a crash loses nothing (the next start covers "
               "the gap from its checkpoint), so this only sets how fresh the store is", "S",
               field="flush_interval_s"),
        Option("raw_retention", parse_retention_s, 7 * 86400.0,
               "how long raw ticks are kept before only minute rollups remain", "AGE", "7d",
               field="raw_retention_s"),
        Option("replay", parse_existing_file, None,
               "replay a CSV trace (t_s,component,device,watts) instead of hardware", "FILE"),
        Option("nvml", parse_bool, True, "read NVIDIA GPUs through NVML when a driver is present",
               "BOOL"),
        Option("neuron_max_power_w", optional_number_in(1.0, 5000.0), None,
               "maximum power of one AWS Neuron device in watts: the driver reports percent "
               "of it and AWS publishes none (docs/methodology.md)", "W"),
        Option("neuron_monitor", parse_optional_path, None,
               "file neuron-monitor writes its JSON lines to (per-process Neuron use, and "
               "the estimate when the driver has no power)", "FILE"),
        Option("api_port", number_in(int, 0, 65535), 9465,
               "port of the local job API (0 disables it)", "PORT"),
        Option("api_host", parse_text, "127.0.0.1",
               "address the job API binds to; anything but loopback needs --api-token", "HOST"),
        Option("api_token", parse_optional_text, None,
               "bearer token the job API requires on every request", "TOKEN"),
        Option("agent_url", parse_http_url, "http://127.0.0.1:9465",
               "URL of the node agent's job API, for `joulestat run` and track()", "URL"),
        Option("idle_policy", member_of(IdlePolicy), IdlePolicy.SHARE,
               "share: idle CPU/DRAM power goes to running jobs by their dynamic share; "
               "exclude: it stays unattributed. Every job records the policy it was "
               "attributed under (its agent label idle_policy)", "POLICY"),
        Option("discover", _discover, frozenset(),
               "turn processes of these schedulers into jobs: docker,k8s,slurm,sagemaker",
               "KINDS"),
        Option("kube_pods", member_of(PodNames), PodNames.AUTO,
               "name discovered pods' jobs after the pod (namespace, name, labels) from a "
               "pod list: apiserver (needs RBAC list on pods), kubelet (its port 10250, "
               "needs nodes/proxy; else read-only 10255), auto (apiserver when running in "
               "a pod with a service account) or off (pod-<uid8>)", "MODE"),
        Option("serving_metrics_allow", _serving_allow, (),
               "where a job's serving_metrics URL may point besides this node (loopback "
               "and the node's own addresses, the default): host names, IP addresses or "
               "CIDR networks, comma-separated; link-local addresses (169.254.0.0/16, "
               "fe80::/10) never (docs/llm-serving.md)", "HOSTS", "none"),
        Option("job_retention", parse_duration_s, 300.0,
               "how long ended jobs stay exported to Prometheus", "AGE", "5m",
               field="job_retention_s"),
        Option("spool_dir", parse_optional_path, None,
               "where rows wait on disk while the store is away (default: the data dir's "
               "spool/<node>); kept across restarts", "DIR"),
        Option("spool_max", parse_size_bytes, 256 * 1024**2,
               "cap on the spool; past it the oldest batches go, with an error", "SIZE",
               "256MiB", field="spool_max_bytes"),
        Option("max_jobs", number_in(int, 1, 100_000), 1000,
               "cap on running jobs the agent tracks; past it registering answers 429",
               "N"),
        Option("max_job_series", number_in(int, 1, 100_000), 500,
               "cap on jobs exported to Prometheus at once (a warning when reached)", "N"),
        Option("otlp_endpoint", parse_endpoint, None,
               "OpenTelemetry collector to push node and job metrics to over OTLP "
               "(needs the otel extra); OTLP/HTTP posts to URL/v1/metrics when the URL "
               "has no path; gRPC takes host:port (default port 4317). Unset: no export "
               "(docs/opentelemetry.md)", "URL"),
        Option("otlp_protocol", member_of(OtlpProtocol), OtlpProtocol.HTTP_PROTOBUF,
               "OTLP transport: http/protobuf or grpc", "PROTOCOL"),
        Option("otlp_headers", parse_headers, (),
               "headers sent with every OTLP export, key=value,key2=value2 as in "
               "OTEL_EXPORTER_OTLP_HEADERS (values percent-encoded; never logged)",
               "HEADERS", "none"),
        Option("otlp_interval", number_in(float, 0.05, 3600, " s"), 10.0,
               "seconds between OTLP exports (at the first tick after each), 0.05..3600",
               "S", field="otlp_interval_s"),
        Option("carbon_intensity", optional_number_in(0, 5000), None,
               "grid carbon intensity in gCO2e/kWh, instead of the region's", "G",
               field="carbon_intensity_g_per_kwh"),
        Option("pue", optional_number_in(1.0, 5.0), None,
               "power usage effectiveness, instead of the provider default", "PUE"),
        Option("price_per_hour", optional_number_in(0, 10_000), None,
               "instance price in USD/hour, instead of the catalog's", "USD",
               field="price_per_hour_usd"),
        Option("prices", _prices, None,
               "CSV of instance_type,usd_per_hour: your own hourly price per instance type "
               "(negotiated, Savings Plan, spot, SageMaker); --price-per-hour still wins",
               "FILE"),
        Option("electricity_maps_token", parse_optional_text, None,
               "Electricity Maps API token for live grid intensity (optional)", "TOKEN"),
        Option("electricity_maps_url", parse_http_url, "https://api.electricitymap.org",
               "Electricity Maps API base URL", "URL"),
    )
}


FIELD_OPTIONS: dict[str, Option] = {opt.field_name: opt for opt in OPTIONS.values()}
Section = TypeVar("Section")


class ResolvedSettings(Mapping[str, Any]):
    """What one command resolved: option name -> value (read-only), and the typed
    sections built from it for the layers (:meth:`section`)."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self._values = MappingProxyType(dict(values))

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def section(self, cls: type[Section], **given: Any) -> Section:
        """``cls`` (a frozen dataclass of a layer) with each field from the option that
        fills it: this command's value, else the option's default. ``given`` fills fields
        no option does (the node's detected name, say) or overrides one on purpose."""
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):  # type: ignore[arg-type]
            if field.name in given:
                values[field.name] = given[field.name]
                continue
            option = FIELD_OPTIONS.get(field.name)
            if option is None:
                if field.default is dataclasses.MISSING \
                        and field.default_factory is dataclasses.MISSING:
                    raise TypeError(f"{cls.__name__}.{field.name}: no option fills it")
                continue
            values[field.name] = self._values.get(option.name, option.default)
        return cls(**values)


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
    except UnicodeDecodeError as exc:  # tomllib decodes the bytes before it parses
        raise ConfigError(f"config file {path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} "
                          f"at offset {exc.start}); TOML files are UTF-8") from None
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
) -> ResolvedSettings:
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
            if name in SECRET_OPTIONS:
                log.warning("%s on the command line can be read by every user of the node "
                            "(/proc/<pid>/cmdline, ps): give it as %s or as %s in the "
                            "--config file (mode 0600)", opt.flag, opt.env, name)
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
    return ResolvedSettings(settings)


def _warn_retired(env: Mapping[str, str], names: list[str]) -> None:
    for old, new in RETIRED_ENV.items():
        option = new.removeprefix(ENV_PREFIX).lower()
        if env.get(old) and option in names and not env.get(new):
            logging.getLogger("joulestat.runtime.settings").warning(
                "%s is no longer read (it is %s now); ignoring %s=%s", old, new, old, env[old])
