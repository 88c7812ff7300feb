"""Comparisons the way published ones are written ("×6.3 throughput, −92 % energy per
inference, $2.00 vs $25.00 per million inferences, 3 instances for 100k/h"), in one place:

* :mod:`~joulestat.reports.compare.table`: the arithmetic (rows per job, setup, label
  value or model; deltas against a baseline; SLA sizing), from plain numbers;
* :mod:`~joulestat.reports.compare.figures`: stored jobs made into those numbers, priced
  as every other figure is;
* :mod:`~joulestat.reports.compare.words`: the comparison written out, as ``joulestat
  compare`` prints it (text and JSON) and as the dashboard's sentences read.

``joulestat compare`` (:mod:`joulestat.cli.compare`) and the Compare page
(:mod:`joulestat.dashboard.comparison`) only pick options and call these.
"""
