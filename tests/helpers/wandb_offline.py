"""Read what W&B wrote in offline mode: the records of a run's ``run-<id>.wandb`` file.

wandb 0.31 dropped its Python reader of this file (its core is Go now), so here is the
format as wandb's own writer made it (wandb/sdk/internal/datastore.py, wandb <= 0.19;
LevelDB's log format: https://github.com/google/leveldb/blob/main/doc/log_format.md):
a 7-byte header (``:W&B``, magic 0xBEE1, version 0), then 32 KiB blocks of records,
each with a 7-byte header (CRC32 uint32, length uint16, type uint8: full 1, first 2,
middle 3, last 4), a record split across blocks in first/middle/last pieces, the tail
of a block shorter than a header left as padding. Each whole record is a protobuf
``wandb.proto.wandb_internal_pb2.Record``.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HEADER = struct.Struct("<4sHB")
RECORD = struct.Struct("<IHB")
BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> list[bytes]:
    data = path.read_bytes()
    ident, magic, version = HEADER.unpack_from(data, 0)
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0), (ident, magic, version)
    found: list[bytes] = []
    pending = b""
    offset = HEADER.size
    while offset + RECORD.size <= len(data):
        left_in_block = BLOCK - offset % BLOCK
        if left_in_block < RECORD.size:  # padding at a block's end
            offset += left_in_block
            continue
        _crc, length, kind = RECORD.unpack_from(data, offset)
        if kind == 0 and length == 0:  # zeroed tail: nothing more written
            break
        piece = data[offset + RECORD.size:offset + RECORD.size + length]
        offset += RECORD.size + length
        if kind == FULL:
            found.append(piece)
        elif kind == FIRST:
            pending = piece
        elif kind == MIDDLE:
            pending += piece
        elif kind == LAST:
            found.append(pending + piece)
            pending = b""
    return found


@dataclass
class OfflineRun:
    """The history rows, config and artifacts a run recorded."""

    history: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    artifacts: list[tuple[str, str, list[str]]] = field(default_factory=list)


def read_run(root: Path) -> OfflineRun:
    """The one offline run under ``root`` (WANDB_DIR or a logger's save_dir)."""
    from wandb.proto import wandb_internal_pb2

    files = sorted(root.rglob("run-*.wandb"))
    assert len(files) == 1, files
    run = OfflineRun()
    for raw in records(files[0]):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "history":
            run.history.append({(item.key or "/".join(item.nested_key)):
                                json.loads(item.value_json) for item in record.history.item})
        elif kind == "config":
            for item in record.config.update:
                run.config[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        elif kind == "artifact":
            run.artifacts.append((record.artifact.name, record.artifact.type,
                                  [entry.path for entry in record.artifact.manifest.contents]))
    return run
