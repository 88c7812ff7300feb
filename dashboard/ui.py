"""Pieces every page shares: the store check, the viewer's timezone, period choices.

A page starts with :func:`open_page`, which runs :func:`require_data`: that stops the
page with instructions (how to start the agent and run a job) when the store has nothing
to show, instead of letting an empty query fall over further down.
"""

from __future__ import annotations

from datetime import datetime, tzinfo
from pathlib import Path
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import streamlit as st

from joulestat.carbon.prices import PricesError
from joulestat.core.redact import redact_text
from joulestat.dashboard import costing, fmt, state

PERIODS_S = {"Last hour": 3600.0, "Last 24 hours": 86400.0, "Last 7 days": 7 * 86400.0,
             "Last 30 days": 30 * 86400.0, "All time": None}
SHORT = {"Last hour": "1 h", "Last 24 hours": "24 h", "Last 7 days": "7 d",
         "Last 30 days": "30 d", "All time": "all time"}
SAMPLE_HINT = ("To look around first, fill a sample store and open it:\n\n"
               "```sh\npython -m joulestat.demo.sample_store sqlite:////tmp/joulestat-sample.db\n"
               "joulestat dashboard --db sqlite:////tmp/joulestat-sample.db\n```")


def viewer_tz() -> tzinfo:
    """The browser's timezone when Streamlit knows it, else the server's own."""
    name = getattr(st.context, "timezone", None)
    if name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    local = datetime.now().astimezone().tzinfo
    return local if local is not None else ZoneInfo("UTC")


def tz_label(tz: tzinfo) -> str:
    return getattr(tz, "key", None) or datetime.now(tz).strftime("%Z") or "local time"


def to_local(epoch_s: float, tz: tzinfo) -> datetime:
    """Wall-clock time in ``tz``, without tzinfo: tables and charts then show the
    viewer's clock whatever the browser or Arrow would do with an offset."""
    return datetime.fromtimestamp(epoch_s, tz).replace(tzinfo=None)


def app_pages() -> list[Any]:
    """The app's pages. Each ``url_path`` is its file's name, the path Streamlit's
    file-based mode gives it too, so a link means the same page in both modes."""
    folder = Path(__file__).resolve().parent / "pages"
    return [
        st.Page(folder / "overview.py", title="Overview", icon=":material/dashboard:",
                default=True),
        st.Page(folder / "jobs.py", title="Jobs", icon=":material/list:", url_path="jobs"),
        st.Page(folder / "job_detail.py", title="Job detail", icon=":material/timeline:",
                url_path="job_detail"),
        st.Page(folder / "compare.py", title="Compare", icon=":material/compare_arrows:",
                url_path="compare"),
        st.Page(folder / "load_curve.py", title="Load curve", icon=":material/show_chart:",
                url_path="load_curve"),
    ]


def configure_page() -> None:
    st.set_page_config(page_title="joulestat", page_icon=":material/bolt:", layout="wide")


def sidebar(url: str) -> None:
    with st.sidebar:
        st.caption(f"Store: `{state.shown_url(url)}` (read-only)")
        try:
            st.caption(f"Prices: {costing.price_source()}")
        except PricesError as exc:  # a bad JOULESTAT_PRICES: nothing can be priced
            st.error(f"{costing.ENV_PRICES}: {exc}")
            st.stop()


def enter() -> None:
    """Every page's first call: make sure the app's navigation is in place.

    Streamlit still knows its older multipage mode, where a ``pages/`` folder next to
    the main script is a list of pages shown by file name. Until app.py's
    ``st.navigation`` has run once in the server, a first request that deep-links a
    page (``/jobs``) runs the page file alone, in that mode. Such a run declares the
    app's navigation itself (same pages, same paths) and carries on, so the reader sees
    the app's sidebar and nothing is rerun. AppTest runs every page this way.
    """
    if not state.in_app():
        configure_page()
        st.navigation(app_pages())
        sidebar(state.db_url())


def require_data(url: str) -> None:
    """Stop the page with what to do when the store has nothing to show."""
    found = state.status(url)
    if found.state == "ok":
        return
    shown = state.shown_url(url)
    start = (f"Start the agent on each node, writing to this store:\n\n"
             f"```sh\njoulestat agent --db '{shown}'\n```\n\n"
             f"then measure a job:\n\n"
             f"```sh\njoulestat run --name bert-serve --kind inference "
             f"--label concurrency=8 -- python serve.py\n```\n\n"
             f"(or `from joulestat import track` inside your code; see docs/jobs.md).")
    if found.state in ("missing", "empty"):
        st.info(f"**No measurements yet** in `{shown}`.\n\n{start}\n\nOr measure two "
                f"minutes of real jobs on this machine: `joulestat demo --db '{shown}'`."
                f"\n\n{SAMPLE_HINT}")
    elif found.state == "no-schema":
        st.info(f"**`{shown}` has no joulestat tables yet.** The agent creates them when it "
                f"starts (or run `joulestat db upgrade --db '{shown}'`).\n\n{start}")
    elif found.state == "outdated":
        st.warning(f"The store is at schema revision `{found.detail}`; this dashboard reads "
                   f"`{state.HEAD_REVISION}`. Run `joulestat db upgrade --db '{shown}'` (the "
                   "dashboard itself never writes or migrates).")
    elif found.state == "newer":
        st.warning(f"The store is at schema revision `{found.detail}`, which this joulestat "
                   f"does not know: it knows revisions up to `{state.HEAD_REVISION}`. A newer "
                   "joulestat made this store: upgrade joulestat to read it.")
    else:
        st.error(f"Cannot read the store `{shown}`: {fmt.md(redact_text(str(found.detail)))}")
    st.stop()


ENERGY_IS_HELP = ("measured: read from a hardware counter; estimated: computed by the model "
                  "named (docs/methodology.md); not stated: imported from a file that does "
                  "not say how it measured")


def named_columns(name: str, name_px: int | None = None, energy_is_px: int | None = None
                  ) -> dict[str, Any]:
    """``column_config`` for a table's first two columns: the row's name and how its
    energy was obtained (:data:`joulestat.dashboard.fmt.ENERGY_IS`), pinned at the left, so they
    stay on screen however far the reader scrolls to the figures past the screen's
    edge (the Compare table's provenance was once its 13th column, never seen). Widths
    in pixels where a wide table must keep room for its figures; None fits the text."""
    return {name: st.column_config.Column(width=name_px, pinned=True),
            fmt.ENERGY_IS: st.column_config.Column(width=energy_is_px, pinned=True,
                                                   help=ENERGY_IS_HELP)}


class Page(NamedTuple):
    """What every page reads before its own widgets: the store, now and the viewer's
    timezone. A tuple, so a page unpacks it: ``url, now, tz = ui.open_page("Jobs")``."""

    url: str
    now_s: float
    tz: tzinfo


def open_page(title: str) -> Page:
    """Every page's opening, in one place so no page forgets a step: the app's
    navigation (:func:`enter`), the title, and a stop with instructions when the store
    has nothing to show (:func:`require_data`)."""
    enter()
    url = state.db_url()
    st.title(title)
    require_data(url)
    return Page(url, state.now_s(), viewer_tz())


def period_picker(key: str, default: str = "Last 24 hours") -> tuple[str, float | None]:
    """A period choice; returns its label and length in seconds (None: all time)."""
    options = list(PERIODS_S)
    if st.session_state.get(key) not in options:  # the default, set as state so a page
        st.session_state[key] = default          # may seed it (from its URL) first
    label = st.selectbox("Period", options, key=key)
    return label, PERIODS_S[label]
