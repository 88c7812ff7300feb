"""Per-job reports, comparisons and imports.

:mod:`agent.reports.model` builds THE report, a plain JSON-able dict whose shape is
``docs/report-schema.json``; every format (``json_report``, ``csv_report``,
``html_report``, ``pdf_report``) renders that dict and nothing else, so the figures
are the same whichever format a reader gets. :mod:`agent.reports.importer` reads such
reports (and CodeCarbon ``emissions.csv`` files) back into a store.
:mod:`agent.reports.compare` compares jobs (``joulestat compare``).
:mod:`agent.reports.sources` says which figures were measured (for reports, compare and
the dashboard alike), :mod:`agent.reports.narrative` writes the headline and the notes,
and :mod:`agent.reports.external` keeps another tool's own CO2e beside joulestat's.
Numbers people read are formatted by :mod:`agent.units`.
"""
