"""What puts the layers below together: a node's pipeline (sensors, sampler,
attribution, sinks) and its tick loop, how it is assembled from settings, the daemon
that runs it with its threads, embedded mode (the same pipeline inside a user's
process), the settings themselves, and the sample store (simulated nodes and jobs
written through the store's own writer, ``python -m joulestat.runtime.sample_store
URL``)."""
