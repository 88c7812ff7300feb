"""The files of a folder of this checkout that git would list: what a wheel built from a
commit of the tree is built from (tracked files, and new ones git does not ignore),
found in process by reading the ``.gitignore`` files rather than by running git.

The reader takes the pattern forms this repository writes (``name``, ``*.ext``,
``name/`` for folders only, ``/name`` anchored to the .gitignore's folder, comments,
blank lines) and refuses the others (``!`` negation, ``**``) rather than guess at them.
tests/system/test_packaging_git.py holds it to ``git ls-files --cached --others
--exclude-standard`` on the real checkout, so a difference from git shows there.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath


@dataclass(frozen=True)
class IgnoreRule:
    """One line of a .gitignore in ``base``."""

    base: Path
    parts: tuple[str, ...]  # the pattern, split on "/"
    anchored: bool  # matched against the path from ``base``, not any name in it
    dirs_only: bool

    def matches(self, path: Path, is_dir: bool) -> bool:
        if self.dirs_only and not is_dir:
            return False
        try:
            relative = PurePosixPath(path.relative_to(self.base).as_posix()).parts
        except ValueError:
            return False
        if not self.anchored:
            return fnmatch.fnmatchcase(relative[-1], self.parts[0])
        return len(relative) == len(self.parts) and all(
            fnmatch.fnmatchcase(name, part) for name, part in zip(relative, self.parts,
                                                                   strict=True))


def read_gitignore(path: Path) -> list[IgnoreRule]:
    """The rules of the .gitignore at ``path`` (none if there is no such file)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    rules = []
    for raw in lines:
        line = raw.rstrip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("!") or "**" in line or line.startswith("\\"):
            raise ValueError(f"{path}: {line!r}: a pattern form this reader does not take")
        dirs_only = line.endswith("/")
        pattern = line.strip("/") if dirs_only else line.lstrip("/")
        # git: a slash at the start or in the middle anchors the pattern to its folder.
        anchored = line.startswith("/") or "/" in pattern
        rules.append(IgnoreRule(path.parent, tuple(pattern.split("/")), anchored, dirs_only))
    return rules


def _ignored(rules: list[IgnoreRule], path: Path, is_dir: bool) -> bool:
    return any(rule.matches(path, is_dir) for rule in rules)


def files_git_would_list(root: Path, folders: list[str]) -> list[Path]:
    """Every file under ``root / folder`` for each of ``folders`` that no .gitignore of
    ``root`` or of a folder on the way ignores, sorted; an ignored folder is not entered."""
    found: list[Path] = []

    def walk(folder: Path, rules: list[IgnoreRule]) -> None:
        rules = rules + read_gitignore(folder / ".gitignore")  # a folder's reach below it
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            path = Path(entry.path)
            if entry.is_dir(follow_symlinks=False):
                if not _ignored(rules, path, True):
                    walk(path, rules)
            elif not _ignored(rules, path, False):
                found.append(path)

    for folder in folders:
        # The .gitignore files from the root down to the folder apply, and the folder or
        # one on the way there may itself be ignored.
        rules: list[IgnoreRule] = []
        here, ignored = root, False
        for name in Path(folder).parts:
            rules += read_gitignore(here / ".gitignore")
            here = here / name
            ignored = ignored or _ignored(rules, here, True)
        if not ignored:
            walk(here, rules)
    return sorted(found)
