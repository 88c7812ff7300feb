"""What ``joulestat demo`` runs and the dashboard's sample data: the demo's jobs and how
they are measured (:mod:`joulestat.demo.jobs`), its CPU run of training and serving jobs
(:mod:`joulestat.demo.training_serving`) and their workloads
(:mod:`joulestat.demo.workers`), its LLM-serving run (:mod:`joulestat.demo.llm_stages`)
and that run's server (:mod:`joulestat.demo.llm`), and the sample store (``python -m
joulestat.demo.sample_store URL``: simulated nodes and jobs written through the store's
own writer). The command line (options, checks, what it prints) is
:mod:`joulestat.cli.demo`."""
