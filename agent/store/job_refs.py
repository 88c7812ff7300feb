"""What job a user means: an id, a unique id prefix, or a name, resolved in one place
(:func:`resolve_job`), on the :class:`~joulestat.store.jobs.JobRef` records of
:mod:`joulestat.store.jobs`.

Job ids are 32 hex digits unless a job was given one (``--job-id``), so people type
names or the first few digits. Every command that takes
a job (``joulestat report``, ``joulestat compare --jobs/--baseline``, the dashboard's
``?job=``) resolves it here, so they all read a reference the same way and fail the
same way. Precedence, first match wins:

1. **exact id**: the job with that id (a job's id never changes, so what worked in a
   script keeps working);
2. **exact name**: every run of that name, by start time; a command wanting one job
   takes the latest and says so;
3. **unique id prefix** of at least :data:`MIN_PREFIX` characters: the one job whose id
   starts with it; several such jobs are an error listing them (shorter prefixes are
   not tried: ``ab`` would match a different job as the store grows).

A name wins over an id prefix (a name is what the user chose to call the job); the
resolution then lists the jobs whose ids the reference also starts with, so a command
can say so. Nothing matching is an error that suggests close names (``difflib``).
Prefixes compare with ``substr`` (exact, case-sensitive on SQLite and PostgreSQL
alike), guarded by an escaped ``LIKE`` that an index can use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.engine import Connection, Engine

from joulestat.store.jobs import JobRef, ref_columns, refs_of, started_text
from joulestat.store.schema import JOBS

MIN_PREFIX = 4  # characters; a shorter reference is an id or a name, never a prefix
MAX_LISTED = 20  # candidates an ambiguity error lists before "and N more"
MAX_SUGGESTIONS = 3

How = Literal["id", "name", "prefix"]


@dataclass(frozen=True, slots=True)
class Resolution:
    """What a reference resolved to.

    ``jobs``: the job (by id or prefix), or every run of the name by start time.
    ``shadowed``: other jobs the reference could have meant and lost to the precedence
    (another job's id prefix under a name; a name's runs under an exact id).
    """

    ref: str
    how: How
    jobs: tuple[JobRef, ...]
    shadowed: tuple[JobRef, ...] = ()

    @property
    def latest(self) -> JobRef:
        """The one job a single-job command uses: the latest run of a name."""
        return self.jobs[-1]

    def notes(self, doing: str) -> list[str]:
        """What a single-job command should tell the user on stderr: which run of a
        name it took (``doing``: "reporting"), and what the precedence set aside."""
        notes = []
        if self.how == "name" and len(self.jobs) > 1:
            job = self.latest
            notes.append(f"{self.ref!r} names {len(self.jobs)} runs; {doing} the latest, "
                         f"{job.id} started {started_text(job.started_s)} "
                         "(give an id for another)")
        notes += self.shadow_notes()
        return notes

    def shadow_notes(self) -> list[str]:
        """The precedence's choice, said when another job could have been meant."""
        if not self.shadowed:
            return []
        others = ", ".join(job.id for job in self.shadowed[:MAX_LISTED])
        more = len(self.shadowed) - MAX_LISTED
        others += f" and {more} more" if more > 0 else ""
        if self.how == "id":
            return [f"{self.ref!r} is a job id and also the name of {others}; using the id"]
        return [f"{self.ref!r} is a job name and also the start of the id of {others}; "
                "using the name (give more of the id for the other)"]


class JobRefError(LookupError):
    """A reference that names no job, or no single one. ``str()`` is the message a
    command prints; ``candidates`` and ``suggestions`` are there for other front ends."""

    def __init__(self, message: str, ref: str, candidates: tuple[JobRef, ...] = (),
                 suggestions: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.ref = ref
        self.candidates = candidates
        self.suggestions = suggestions

    def __str__(self) -> str:
        return str(self.args[0])


class UnknownJobRef(JobRefError):
    """No job has this id, id prefix or name."""


class AmbiguousJobRef(JobRefError):
    """Several jobs' ids start with this prefix (and no job has it as id or name)."""


def _select(where: ColumnElement[bool], kind: str | None) -> Any:
    query = ref_columns().where(where)
    return query.where(JOBS.c.kind == kind) if kind is not None else query


def _prefix_of(prefix: str) -> ColumnElement[bool]:
    """Ids starting with ``prefix``: LIKE for an index, ``substr`` for exactness (SQLite's
    LIKE ignores ASCII case; ``_`` is a wildcard, hence the escape)."""
    ids = JOBS.c.id
    return (ids.startswith(prefix, autoescape=True)
            & (func.substr(ids, 1, len(prefix)) == prefix) & (ids != prefix))


def _of_kind(kind: str | None) -> str:
    return f"{kind} " if kind is not None else ""


def _unknown(connection: Connection, ref: str, kind: str | None,
             by_name: bool = True) -> UnknownJobRef:
    what = "id, id prefix or name" if by_name else "id or id prefix"
    message = f"no {_of_kind(kind)}job with {what} {ref!r} in the store"
    if 0 < len(ref) < MIN_PREFIX:
        starting = connection.execute(
            select(func.count()).select_from(_select(_prefix_of(ref), kind).subquery())
        ).scalar_one()
        if starting:
            message += (f" ({starting} id(s) start with it: give at least {MIN_PREFIX} "
                        "characters of an id)")
    if not by_name:
        named = connection.execute(select(func.count()).select_from(
            _select(JOBS.c.name == ref, kind).subquery())).scalar_one()
        if named:
            import shlex  # error paths only: the agent's store path never pays for them

            message += (f" ({ref!r} is the name of {named} job(s): give their ids; "
                        f"`joulestat jobs --name {shlex.quote(ref)}` lists them)")
        return UnknownJobRef(message + " (joulestat jobs lists them)" if not named
                             else message, ref)
    names_query = select(JOBS.c.name).distinct()
    if kind is not None:
        names_query = names_query.where(JOBS.c.kind == kind)
    names = [str(n) for n in connection.execute(names_query).scalars()]
    import difflib

    close = tuple(difflib.get_close_matches(ref, names, n=MAX_SUGGESTIONS, cutoff=0.6))
    if close:
        message += "; did you mean " + " or ".join(repr(name) for name in close) + "?"
    message += " (joulestat jobs lists them)"
    return UnknownJobRef(message, ref, suggestions=close)


def _ambiguous(connection: Connection, ref: str, kind: str | None,
               found: list[JobRef], by_name: bool = True) -> AmbiguousJobRef:
    listed = found[:MAX_LISTED]
    total = len(found)
    if total > MAX_LISTED:
        total = connection.execute(
            select(func.count()).select_from(_select(_prefix_of(ref), kind).subquery())
        ).scalar_one()
    others = "(or the whole id, or the name)" if by_name else "(or the whole id)"
    lines = [f"{ref!r} is the start of {total} {_of_kind(kind)}job ids; give more of "
             f"the id {others}:", *(f"  {job.line()}" for job in listed)]
    if total > len(listed):
        lines.append(f"  ... and {total - len(listed)} more")
    return AmbiguousJobRef("\n".join(lines), ref, candidates=tuple(listed))


def resolve_job(engine: Engine, ref: str, kind: str | None = None,
                by_name: bool = True) -> Resolution:
    """Resolve ``ref`` (an id, a unique id prefix, or a name) among the stored jobs, or
    those of ``kind``, by the precedence of this module's doc.

    ``by_name=False``: ids and id prefixes only, for a command that must name one job
    exactly (``joulestat jobs delete``: a name may stand for many runs); a reference
    that is only a name is then unknown, and the error says it is a name.

    Raises :class:`UnknownJobRef` (nothing matches; close names suggested) or
    :class:`AmbiguousJobRef` (a prefix of several ids; the candidates listed).
    """
    jobs = JOBS.c
    with engine.connect() as connection:
        by_id = refs_of(connection, _select(jobs.id == ref, kind))
        runs = refs_of(connection, _select(jobs.name == ref, kind)) if by_name else []
        if by_id:
            return Resolution(ref, "id", tuple(by_id),
                              tuple(j for j in runs if j.id != ref))
        by_prefix: list[JobRef] = []
        if len(ref) >= MIN_PREFIX:
            by_prefix = refs_of(connection, _select(_prefix_of(ref), kind).limit(MAX_LISTED + 1))
        if runs:
            named = {j.id for j in runs}
            return Resolution(ref, "name", tuple(runs),
                              tuple(j for j in by_prefix if j.id not in named))
        if len(by_prefix) == 1:
            return Resolution(ref, "prefix", tuple(by_prefix))
        if by_prefix:
            raise _ambiguous(connection, ref, kind, by_prefix, by_name)
        raise _unknown(connection, ref, kind, by_name)
