"""joulestat dashboard: the Streamlit entry point (``joulestat dashboard`` starts it).

Only navigation lives here (the page list is :func:`joulestat.dashboard.ui.app_pages`); each page
is a module in ``pages/`` and reads the store through :mod:`joulestat.dashboard.state`,
read-only. Run by hand with ``streamlit run dashboard/app.py -- --db URL`` (or
``JOULESTAT_DB=URL``).
"""

from __future__ import annotations

import streamlit as st

from joulestat.dashboard import state, ui

ui.configure_page()
navigation = st.navigation(ui.app_pages())
ui.sidebar(state.db_url())
with state.inside_app():
    navigation.run()
