"""A job's credential: its token, derived from a secret the agent keeps beside its spool.

Apart from the job API's server (:mod:`joulestat.api.server`, which checks the
``X-Joulestat-Job-Token`` header against it) because it is its own concern: how the
secret is made, kept private and refused when it is not (issue 47: a key another user
planted let them end root's jobs), and how a token is derived from it so that nothing
per job is stored and a restarted agent still honours the tokens it gave.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import secrets
from pathlib import Path

from joulestat.core.errors import ConfigError

log = logging.getLogger(__name__)

JOB_SECRET_BYTES = 32
JOB_SECRET_FILE = "job-token.key"  # in the agent's spool directory


def job_token(secret: bytes, job_id: str) -> str:
    """The credential of ``job_id``: HMAC-SHA256 of the id under the agent's secret.

    Derived, not drawn and kept, so nothing per job is stored (no token nor hash in
    the store, readable by whoever reads the reports) and a job restored after a
    restart is still ended by its registrant, provided the secret is the same
    (:func:`load_job_secret`)."""
    digest = hmac.new(secret, job_id.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def load_job_secret(path: Path | None) -> bytes:
    """The agent's job-token secret from ``path`` (created 0600 on first use), so a
    restarted agent honours the tokens it gave; None, or a file that cannot be made
    or read: a secret for this process only (logged), and jobs restored after a
    restart can then be ended only by the agent's own expiry, not their registrant."""
    if path is None:
        return secrets.token_bytes(JOB_SECRET_BYTES)
    if not path.exists():
        # Written whole under a temporary name, then linked: two agents starting at once
        # agree on one secret, and none reads a half-written one.
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(secrets.token_bytes(JOB_SECRET_BYTES))
                out.flush()
                os.fsync(out.fileno())
            try:
                os.link(temporary, path)
            except FileExistsError:
                pass
        except OSError as exc:
            log.warning("cannot create the job-token secret %s (%s); job tokens will not "
                        "survive a restart", path, exc.strerror or exc)
            return secrets.token_bytes(JOB_SECRET_BYTES)
        finally:
            temporary.unlink(missing_ok=True)
    _check_secret_file(path)
    try:
        secret = path.read_bytes()
    except OSError as exc:
        secret = b""
        reason = str(exc.strerror or exc)
    else:
        reason = f"{len(secret)} bytes, expected {JOB_SECRET_BYTES}"
    if len(secret) != JOB_SECRET_BYTES:
        log.warning("job-token secret %s unusable (%s); job tokens will not survive a "
                    "restart", path, reason)
        return secrets.token_bytes(JOB_SECRET_BYTES)
    return secret


def _check_secret_file(path: Path) -> None:
    """Stop the agent (:class:`ConfigError` naming the file) when the job-token secret
    is not its user's own private file: another user who wrote it (issue 47: an
    all-zero key in a spool directory they made) knows every job's token."""
    from joulestat.store.durability import NotOurs, check_ours

    try:
        found = check_ours(path)
    except NotOurs as exc:
        raise ConfigError(f"job-token secret: {exc.strerror}") from None
    except OSError:
        return  # gone meanwhile: the read below says so
    if found.st_mode & 0o077:
        raise ConfigError(f"job-token secret {path} is readable or writable by other users "
                          f"(mode {found.st_mode & 0o777:o}); whoever could read or write it "
                          "knows every job's token: remove it (the agent makes a new one, "
                          "and running jobs' tokens change) or chmod 600 it")


__all__ = ["JOB_SECRET_BYTES", "JOB_SECRET_FILE", "job_token", "load_job_secret"]
