"""One node's ticks for the store tests, on SQLite and on PostgreSQL: a migrated store, a
node with a CPU and an accelerator, ticks of given energies, and a count of raw rows."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import text
from sqlalchemy.engine import Engine

from joulestat.core.records import DeviceInfo, NodeInfo
from joulestat.core.tick import Tick, TickEntry
from joulestat.store import migrate
from joulestat.store.engine import make_engine
from joulestat.store.nodes import minute_energy_rows
from joulestat.store.writer import StoreWriter

NODE = NodeInfo("node-a", "m5.large", "eu-west-1", "Xeon", "0.1.0")
DEVICES = [DeviceInfo("cpu", "0", "rapl", model="Xeon", index=0),
           DeviceInfo("accelerator", "0", "nvml_energy", model="H100", uuid="GPU-1", index=0)]
T0 = 1_700_000_040.0  # a minute boundary (1_700_000_040 = 28_333_334 * 60)
RETENTION_S = 600.0


def tick(t1_s: float, cpu_j: float = 10.0, gpu_j: float = 100.0, length_s: float = 1.0,
         gpu_source: str = "nvml_energy") -> Tick:
    return Tick(t1_s - length_s, t1_s, (TickEntry("cpu", "0", "rapl", cpu_j),
                                        TickEntry("accelerator", "0", gpu_source, gpu_j)))


def raw_count(engine: Engine) -> int:
    with engine.connect() as connection:
        return connection.execute(text("SELECT count(*) FROM tick_energy")).scalar_one()


def writer_for(engine: Engine, **kwargs) -> StoreWriter:
    kwargs.setdefault("raw_retention_s", RETENTION_S)
    return StoreWriter(engine, NODE, DEVICES, **kwargs)


def write_across_minute_ends(writer: StoreWriter) -> None:
    """Ticks either side of a minute's end and a GPU source change inside minute 1, then the
    rollup at ``T0 + 150`` (minute 2, incomplete then, is left out): see MINUTES_ACROSS_ENDS."""
    writer.add(tick(T0 + 60, length_s=2.0))  # ends exactly on the minute: closes minute 0
    writer.add(tick(T0 + 60.5, cpu_j=1.0, gpu_j=2.0, length_s=0.5))  # first tick of minute 1
    writer.add(tick(T0 + 61, cpu_j=3.0, gpu_j=4.0, length_s=0.5, gpu_source="nvml_power"))
    writer.add(tick(T0 + 125))  # minute 2 is not complete at now = T0 + 150
    assert writer.maintain(T0 + 150) is not None


# (minute start, component, energy J, covered s, source) after write_across_minute_ends
MINUTES_ACROSS_ENDS = [
    (T0, "accelerator", 100.0, 2.0, "nvml_energy"),
    (T0, "cpu", 10.0, 2.0, "rapl"),
    (T0 + 60, "accelerator", 6.0, 1.0, "nvml_energy+nvml_power"),
    (T0 + 60, "cpu", 4.0, 1.0, "rapl"),
]


def minute_rows(engine: Engine, node: str) -> list[tuple[float, str, float, float, str]]:
    """``node``'s minute rollups around T0, as MINUTES_ACROSS_ENDS lists them."""
    return [(r.minute_start_s, r.component, r.energy_j, r.covered_s, r.source)
            for r in minute_energy_rows(engine, node, T0 - 60, T0 + 600)]


@contextmanager
def migrated_engine(url: str) -> Iterator[Engine]:
    """An engine on the store at ``url``, migrated to head; disposed of afterwards."""
    engine = make_engine(url)
    migrate.upgrade(engine)
    try:
        yield engine
    finally:
        engine.dispose()
