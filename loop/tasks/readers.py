"""Reading a task file's records within bounds: ``.jsonl`` / ``.jsonl.gz`` line by line (an error names its line),
``.parquet`` (its footer and its decoded text checked before any row is built), ``.csv``/``.tsv`` with a header row
(every value a string) and a ``datasets.save_to_disk`` folder. A UTF-8 byte-order mark is skipped; a JSON array or a
pretty-printed JSON document given as JSON Lines is refused with the command that converts it.
``ratchet.loop.tasks.formats`` turns each record into a task.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import zlib
from collections.abc import Iterator
from pathlib import Path

from ratchet.loop.config import RecordFields


class TaskDataError(ValueError):
    """A task file or record is malformed; the message names the file, the line and the fix."""


# Bounds on a task file, checked before its records are built (issue 22, class 3; issue 36, class 6): a small gzip
# or a Parquet file of dictionary-encoded rows can expand without limit (97 KB of Parquet decoded to 4.4 GB). Real
# task files are far below them (HumanEval 0.2 MB, MBPP 1 MB; APPS' largest split, ~1.3 GB with its test data, needs
# the text bound raised). Both bounds are raised by environment variables, for `ratchet run` and `tasks check` alike.
MAX_TASK_RECORDS = 1_000_000  # records of one task file (Parquet: the footer's row count)
MAX_TASK_TEXT_BYTES = 256 * 1024**2  # decoded text of one task file (JSONL: decompressed bytes; Parquet: string bytes)
MAX_TASK_LINE_BYTES = 256 * 1024**2  # bytes of one line (one record)
RECORDS_ENV, TEXT_MIB_ENV = "RATCHET_MAX_TASK_RECORDS", "RATCHET_MAX_TASK_TEXT_MIB"
_RAISE = f"raise the bound with {RECORDS_ENV}=N / {TEXT_MIB_ENV}=N (or `ratchet tasks check --max-records N`), or split the file"


def task_file_bounds() -> tuple[int, int]:
    """``(records, text bytes)`` one task file may hold: the defaults, or the environment's larger values.

    Raises:
        TaskDataError: an environment value is not a positive integer.
    """
    out = []
    for env, default, unit in ((RECORDS_ENV, MAX_TASK_RECORDS, 1), (TEXT_MIB_ENV, MAX_TASK_TEXT_BYTES, 1024**2)):
        raw = os.environ.get(env)
        if raw is None:
            out.append(default)
            continue
        if not raw.isdigit() or int(raw) < 1:
            raise TaskDataError(f"{env}={raw!r} is not a positive integer; e.g. {env}={default // unit * 2}")
        out.append(int(raw) * unit)
    return out[0], out[1]


def _open_jsonl(
    path: Path, *, max_bytes: int = MAX_TASK_TEXT_BYTES, max_line_bytes: int = MAX_TASK_LINE_BYTES
) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of a ``.jsonl``/``.jsonl.gz`` file, streamed (one line in memory at a time).

    Raises:
        TaskDataError: the file decompresses past ``max_bytes``, a line is longer than ``max_line_bytes``,
            a line is not UTF-8, or the gzip stream is damaged (each in one line naming the file and line).
    """
    total = 0
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            for lineno in itertools.count(1):
                raw = f.readline(max_line_bytes + 1)
                if not raw:
                    return
                total += len(raw)
                if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
                    raise TaskDataError(
                        f"{path}:{lineno}: line longer than {max_line_bytes // 1024**2} MiB; a task record must be smaller "
                        "(split its test data or shorten it)"
                    )
                if total > max_bytes:
                    raise TaskDataError(
                        f"{path}: more than {max_bytes // 1024**2} MiB of text (decompressed) at line {lineno}; {_RAISE}"
                    )
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise TaskDataError(
                        f"{path}:{lineno}: not UTF-8 text (byte 0x{raw[e.start]:02x}); re-save the file as UTF-8, "
                        f"e.g. `iconv -f latin1 -t utf-8 {path.name} > fixed.jsonl`"
                    ) from None
                if lineno == 1:  # a byte-order mark (Excel, Notepad) is not part of the first record
                    text = text.removeprefix("\ufeff")
                yield lineno, text.rstrip("\r\n")
    except (OSError, EOFError, zlib.error) as e:
        raise TaskDataError(f"{path}: cannot read it ({type(e).__name__}: {e}); re-download or re-compress the file") from None


def _not_lines(path: Path) -> str:
    """The message for a JSON array or a multi-line JSON document given as a task file, with the command that fixes it."""
    return (
        "a JSON array or a JSON document over several lines, not JSON Lines (one task object per line); convert it: "
        f'`python -c "import json,sys; [print(json.dumps(r)) for r in json.load(open(sys.argv[1]))]" {path.name} > tasks.jsonl`'
    )


def _read_csv(path: Path, max_records: int, max_text: int) -> Iterator[tuple[str, dict]]:
    """``(file:line, row)`` of a CSV (``.tsv``: tab-separated) file with a header row, every value a string, read with
    Python's ``csv`` module (a UTF-8 byte-order mark is skipped).

    Raises:
        TaskDataError: the file is larger than ``max_text`` bytes, holds more than ``max_records`` rows, a cell is
            larger than a task line may be, it is not UTF-8, or it has no header row.
    """
    import csv

    if path.stat().st_size > max_text:
        raise TaskDataError(f"{path}: more than {max_text // 1024**2} MiB of text; {_RAISE}")
    csv.field_size_limit(MAX_TASK_LINE_BYTES)
    try:
        with path.open(encoding="utf-8-sig", newline="") as f:
            reader = csv.DictReader(f, delimiter="\t" if path.suffix.lower() == ".tsv" else ",")
            if not reader.fieldnames:
                raise TaskDataError(f"{path}: no header row; the first line must name the columns, e.g. question,answer")
            for count, row in enumerate(reader, 1):
                if count > max_records:
                    raise TaskDataError(f"{path}:{reader.line_num}: more than {max_records:,} records; {_RAISE}")
                yield f"{path}:{reader.line_num}", {k: v for k, v in row.items() if k is not None}
    except UnicodeDecodeError as e:
        raise TaskDataError(f"{path}: not UTF-8 text (byte at {e.start}); re-save the file as UTF-8") from None
    except csv.Error as e:
        raise TaskDataError(f"{path}: not a readable CSV file ({e}); quote cells that hold the delimiter or newlines") from None


def read_records(spec: RecordFields) -> Iterator[tuple[str, dict]]:
    """``(where, record)`` for every record of ``spec.path`` (``where`` is ``file:line`` or ``file[row]``).

    Raises:
        TaskDataError: the path is missing, a line is not a JSON object, the file is not UTF-8, or a
            ``save_to_disk`` folder holds several splits and ``split`` names none of them.
    """
    path = Path(spec.path)
    if path.is_dir():
        yield from _read_saved(path, spec.split)
        return
    if not path.is_file():
        raise TaskDataError(
            f"task file {path} does not exist; point path at a .jsonl, .jsonl.gz, .parquet, .csv or save_to_disk folder"
        )
    max_records, max_text = task_file_bounds()
    if path.suffix == ".parquet":
        yield from _read_parquet(path, max_records, max_text)
        return
    if path.suffix.lower() in (".csv", ".tsv"):
        yield from _read_csv(path, max_records, max_text)
        return
    count = 0
    for lineno, line in _open_jsonl(path, max_bytes=max_text):
        if not line.strip():
            continue
        count += 1
        if count > max_records:
            raise TaskDataError(f"{path}:{lineno}: more than {max_records:,} records; {_RAISE}")
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            if count == 1 and line.strip()[:1] in ("[", "{"):  # a JSON document over several lines, not JSON Lines
                raise TaskDataError(f"{path}:{lineno}: {_not_lines(path)}") from None
            raise TaskDataError(f"{path}:{lineno}: not valid JSON ({e.msg}); each line must be one JSON object") from None
        except RecursionError:  # Python's JSON reader recurses per nesting level
            raise TaskDataError(
                f"{path}:{lineno}: JSON nested too deeply to read (arrays or objects ~1000 levels deep); flatten the record"
            ) from None
        if isinstance(rec, list) and count == 1:
            raise TaskDataError(f"{path}:{lineno}: {_not_lines(path)}")
        if not isinstance(rec, dict):
            raise TaskDataError(f'{path}:{lineno}: expected a JSON object with "question" and "answer"')
        if "\\ud" in line.lower():  # a \uD800-\uDFFF escape: one half of a pair is fine, alone it is no character
            _check_unicode(rec, f"{path}:{lineno}")
        yield f"{path}:{lineno}", rec


def _check_unicode(rec: dict, where: str) -> None:
    """Raise TaskDataError when a string of ``rec`` holds a lone surrogate (not valid UTF-8 text)."""
    try:
        json.dumps(rec, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        raise TaskDataError(
            f"{where}: text that is not valid UTF-8 (a lone surrogate {e.object[e.start]!r}, from a JSON escape such as "
            '"\\ud800"); fix that escape or drop the record'
        ) from None


def _read_parquet(path: Path, max_records: int, max_text: int) -> Iterator[tuple[str, dict]]:
    """The rows of a Parquet task file, once its footer's row count and its decoded text are within the bounds.

    The text is counted before any row is built: strings are read as dictionaries (indices into each column
    chunk's dictionary), so a dictionary-encoded column's decoded size is the sum of its entries' lengths over
    the indices, never the expanded strings. Invalid UTF-8 is refused with the row it is in.

    Raises:
        TaskDataError: the file is unreadable, holds more than ``max_records`` rows or ``max_text`` bytes of text,
            or text that is not UTF-8.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        meta = pq.read_metadata(path)
        if meta.num_rows > max_records:
            raise TaskDataError(f"{path}: {meta.num_rows:,} records (its footer) > {max_records:,}; {_RAISE}")
        cols = [meta.schema.column(i) for i in range(meta.num_columns)]
        strings = [c.path for c in cols if c.physical_type == "BYTE_ARRAY"]
        total, row = 0, 0
        for batch in pq.ParquetFile(path, read_dictionary=strings).iter_batches(batch_size=8192):
            try:
                batch.validate(full=True)
            except pa.ArrowInvalid as e:
                raise TaskDataError(
                    f"{path}[{row}..{row + batch.num_rows - 1}]: text that is not valid UTF-8 ({e}); re-save it"
                ) from None
            total += sum(_text_bytes(c) for c in batch.columns)
            if total > max_text:
                raise TaskDataError(
                    f"{path}: more than {max_text // 1024**2} MiB of text once decoded (by row {row + batch.num_rows}; "
                    f"{path.stat().st_size:,} bytes on disk); {_RAISE}"
                )
            row += batch.num_rows
        rows = pq.read_table(path).to_pylist()
    except TaskDataError:
        raise
    except Exception as e:  # pyarrow raises several types for a damaged file  # noqa: BLE001
        raise TaskDataError(f"{path} is not a readable Parquet file ({type(e).__name__}: {e}); rewrite it") from None
    yield from ((f"{path}[{i}]", r) for i, r in enumerate(rows))


def _text_bytes(a) -> int:
    """Bytes an Arrow array holds once decoded: its strings' lengths (a dictionary's entries counted per index, not
    expanded), nested values recursively, fixed-width values by their buffers."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = a.type
    if pa.types.is_dictionary(t):
        lengths = pc.binary_length(a.dictionary)
        return int(pc.sum(pc.take(lengths, a.indices)).as_py() or 0)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return int(pc.sum(pc.binary_length(a)).as_py() or 0)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t) or pa.types.is_map(t):
        return _text_bytes(a.flatten())
    if pa.types.is_struct(t):
        return sum(_text_bytes(f) for f in a.flatten())
    return a.nbytes


def _read_saved(path: Path, split: str | None) -> Iterator[tuple[str, dict]]:
    import datasets

    try:
        ds = datasets.load_from_disk(str(path))
    except (FileNotFoundError, ValueError) as e:
        raise TaskDataError(f"{path} is not a folder written by datasets' save_to_disk ({e}); pass a task file") from None
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise TaskDataError(f"{path} holds splits {sorted(ds)}; set split = one of them")
        ds = ds[split]
    max_records, max_text = task_file_bounds()
    if len(ds) > max_records or ds.data.nbytes > max_text:
        raise TaskDataError(f"{path}: {len(ds):,} records, {ds.data.nbytes // 1024**2} MiB > the bounds ({max_records:,}, "
                            f"{max_text // 1024**2} MiB); {_RAISE}")  # fmt: skip
    for i, r in enumerate(ds):
        yield f"{path}[{i}]", dict(r)
