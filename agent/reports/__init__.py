"""Per-job reports, comparisons and imports.

:mod:`joulestat.reports.model` builds THE report, a plain JSON-able dict whose shape is
``docs/report-schema.json``; every format (``json_report``, ``csv_report``,
``html_report``, ``pdf_report``) renders that dict and nothing else, so the figures
are the same whichever format a reader gets. :mod:`joulestat.reports.importer` reads such
reports (and CodeCarbon ``emissions.csv`` files) back into a store.
:mod:`joulestat.reports.compare.table` compares jobs (``joulestat compare``).
:mod:`joulestat.reports.sources` says which figures were measured (for reports, compare and
the dashboard alike), :mod:`joulestat.reports.narrative` writes the headline and the notes,
and :mod:`joulestat.reports.external` keeps another tool's own CO2e beside joulestat's.
Numbers people read are formatted by :mod:`joulestat.core.units`.
"""
