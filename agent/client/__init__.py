"""What ML code imports: ``track``, ``count``, ``serving``, ``current_job`` (re-exported by
the ``joulestat`` package itself), and how a job names itself to the programs it starts."""
