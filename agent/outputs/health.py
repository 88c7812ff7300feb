"""The agent's own health on the metrics port: is the store keeping up, is the job API
turning clients away. Read from the writer's and the API's counters at scrape time,
so watching costs the tick loop nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily
from prometheus_client.registry import Collector

from joulestat.outputs import metric_catalog as mc


class AgentHealth(Collector):
    """``writer``: the StoreWriter (or None); ``api_rejections``: reason -> count."""

    def __init__(self, writer: Any, api_rejections: Callable[[], dict[str, int]]) -> None:
        self.writer = writer
        self.api_rejections = api_rejections

    def collect(self) -> Iterator[Any]:
        writer = self.writer
        if writer is not None:
            spool = writer.spool
            yield GaugeMetricFamily(mc.AGENT_STORE_BUFFERED.family_name,
                                    mc.AGENT_STORE_BUFFERED.help, value=writer.buffered_rows)
            yield GaugeMetricFamily(mc.AGENT_STORE_SPOOLED.family_name,
                                    mc.AGENT_STORE_SPOOLED.help,
                                    value=spool.bytes if spool is not None else 0)
            rows = CounterMetricFamily(mc.AGENT_STORE_ROWS.family_name, mc.AGENT_STORE_ROWS.help,
                                       labels=mc.AGENT_STORE_ROWS.labels)
            for outcome, value in (("written", writer.written_rows),
                                   ("spooled", writer.spooled_rows),
                                   ("folded", writer.folded_rows),
                                   ("dropped", writer.dropped_rows)):
                rows.add_metric([outcome], value)
            yield rows
            yield CounterMetricFamily(mc.AGENT_SPOOL_WRITE_FAILURES.family_name,
                                      mc.AGENT_SPOOL_WRITE_FAILURES.help,
                                      value=writer.spool_write_failures)
            lost = CounterMetricFamily(mc.AGENT_LOST_ENERGY.family_name,
                                       mc.AGENT_LOST_ENERGY.help,
                                       labels=mc.AGENT_LOST_ENERGY.labels)
            for reason, joules in writer.losses.joules().items():
                lost.add_metric([reason.value], joules)
            yield lost
            yield GaugeMetricFamily(mc.AGENT_STORE_UP.family_name, mc.AGENT_STORE_UP.help,
                                    value=0 if writer.failing else 1)
            yield SummaryMetricFamily(mc.AGENT_STORE_FLUSH_SECONDS.family_name,
                                      mc.AGENT_STORE_FLUSH_SECONDS.help,
                                      count_value=writer.flushes,
                                      sum_value=writer.flush_seconds_sum)
        rejections = CounterMetricFamily(mc.AGENT_API_REJECTIONS.family_name,
                                         mc.AGENT_API_REJECTIONS.help,
                                         labels=mc.AGENT_API_REJECTIONS.labels)
        for reason, value in sorted(self.api_rejections().items()):
            rejections.add_metric([reason], value)
        yield rejections
