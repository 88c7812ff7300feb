"""Stage two of the measurement, between the sensors and the outputs: the sampler that
reads every sensor once a tick, the pipeline that hands each tick to attribution and its
result to the sinks, the tick loop that paces it, and the :class:`~joulestat.pipeline.sink.Sink`
protocol every output implements (the store's writer, the Prometheus and OTLP exporters).
The same pipeline runs in the daemon and in embedded mode; :mod:`joulestat.runtime`
assembles it from settings."""
