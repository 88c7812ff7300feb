"""What ``joulestat demo`` runs and the dashboard's sample data: the demo's workloads
(:mod:`joulestat.demo.workers`), its LLM-serving run (:mod:`joulestat.demo.llm`), and the
sample store (``python -m joulestat.demo.sample_store URL``: simulated nodes and jobs
written through the store's own writer). The command itself is :mod:`joulestat.cli.demo`."""
