"""The CLI's contract: formats of `ratchet sql`, one-line errors for bad input."""

import json

import pytest
from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.store.db import init_db, transaction
from ratchet.store.ingest import insert_rows

runner = CliRunner()


@pytest.fixture(autouse=True, scope="module")
def _prefect_logs_to_the_real_stderr():
    """Prefect's console log handler keeps the ``sys.stderr`` of the moment ``prefect.main`` is first imported (it
    sets up Prefect's logging): import it here, not inside a ``runner.invoke`` whose captured stream is closed after the call (a later warning through
    that handler then prints a 'Logging error' traceback into another test's output)."""
    from ratchet.flows.settings import configure_prefect

    configure_prefect()
    import prefect.main  # noqa: F401


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "c.duckdb"
    init_db(path)
    with transaction(path) as con:
        insert_rows(
            con,
            "prompts",
            [
                dict(prompt_id="p1", source="s", task="sum", question="1+1?", answer="2", split="train"),
                dict(prompt_id="p2", source="s", task="sum", question="2+2?", answer="4", split="heldout"),
            ],
        )
    return path


def test_sql_formats(db):
    q = "SELECT split, count(*) AS n FROM prompts GROUP BY split ORDER BY split"
    r = runner.invoke(app, ["sql", "--db", str(db), "--format", "json", q])
    assert r.exit_code == 0 and json.loads(r.stdout) == [{"split": "heldout", "n": 1}, {"split": "train", "n": 1}]
    r = runner.invoke(app, ["sql", "--db", str(db), "--format", "csv", q])
    assert r.stdout == "split,n\nheldout,1\ntrain,1\n"  # LF line ends: `id=$(ratchet sql ...)` must not keep a \r
    r = runner.invoke(app, ["sql", "--db", str(db), q])
    assert "heldout" in r.stdout and "2 row(s)" in r.stdout and "--format line" not in r.stdout
    wide = "SELECT " + ", ".join(f"question AS question_{k}" for k in range(12)) + " FROM prompts"
    r = runner.invoke(app, ["sql", "--db", str(db), wide])  # issue 42, finding 12: cut cells point at the line mode
    assert r.exit_code == 0 and "12 columns do not fit" in r.stdout and "--format line shows every value whole" in r.stdout


def test_sql_keeps_duckdbs_whole_message(db):
    """DuckDB's hint and caret are what make a typo fixable; the error keeps them (issue 24, finding 10)."""
    r = runner.invoke(app, ["sql", "--db", str(db), "SELECT * FROM prompt"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "CatalogException" in r.stderr and 'Did you mean "prompts"' in r.stderr and "^^^" in r.stderr, r.stderr
    r = runner.invoke(app, ["sql", "--db", str(db), "SELEC nonsense"])
    assert r.exit_code == 2 and "ParserException" in r.stderr and "SELEC" in r.stderr


def test_sql_csv_writes_nested_values_as_json(db):
    q = "SELECT map(['a', 'b'], [1, 2]) AS m, [1, 2] AS l, {'x': 'y'} AS s, 3 AS n"
    r = runner.invoke(app, ["sql", "--db", str(db), "--format", "csv", q])
    assert r.exit_code == 0, r.output
    import csv as _csv

    row = list(_csv.reader(r.stdout.splitlines()))[1]
    assert [json.loads(v) for v in row] == [{"a": 1, "b": 2}, [1, 2], {"x": "y"}, 3]


def test_sql_line_mode_for_wide_results(db):
    """Issue 24, finding 10: a wide row is unreadable squeezed into columns; line mode is DuckDB's `.mode line`."""
    q = "SELECT prompt_id, question AS the_question, NULL AS nothing, [1, 2] AS l, 'a' || chr(27) AS esc FROM prompts ORDER BY 1"
    r = runner.invoke(app, ["sql", "--db", str(db), "--format", "line", q])
    assert r.exit_code == 0, r.output
    assert r.stdout == (
        "   prompt_id = p1\nthe_question = 1+1?\n     nothing = NULL\n           l = [1, 2]\n         esc = a\\x1b\n\n"
        "   prompt_id = p2\nthe_question = 2+2?\n     nothing = NULL\n           l = [1, 2]\n         esc = a\\x1b\n\n"
        "2 row(s)\n"
    )
    r = runner.invoke(app, ["sql", "--db", str(db), "--format", "line", "SELECT * FROM prompts WHERE false"])
    assert r.exit_code == 0 and r.stdout == "0 row(s)\n"
    r = runner.invoke(app, ["sql", "--db", str(db), "--format", "wide", q])
    assert r.exit_code == 2 and "not one of table, csv, json, line" in r.stderr


def test_sql_is_read_only(db):
    r = runner.invoke(app, ["sql", "--db", str(db), "DELETE FROM prompts"])
    assert r.exit_code == 2 and "read-only" in r.stderr.lower()


@pytest.mark.parametrize(
    "args,msg",
    [
        (["sql", "--db", "/nonexistent/x.duckdb", "SELECT 1"], "no store at"),
        (["status", "--db", "/nonexistent/x.duckdb"], "no store at"),
        (["run", "--config", "/nonexistent/ratchet.toml"], "does not exist"),
        (["run", "--config", "{bad_toml}"], "not valid TOML"),
        (["run", "--config", "{bad_value}"], "group_size"),
        (["audit", "{bad_cases}"], "cases.jsonl:1:"),
    ],
)
def test_bad_input_gets_one_line_error(tmp_path, db, args, msg):
    (tmp_path / "bad.toml").write_text("campaign = [unclosed")
    (tmp_path / "bad_value.toml").write_text("[generation]\ngroup_size = 0\n")
    (tmp_path / "cases.jsonl").write_text("{oops\n")
    args = [
        a.format(db=db, bad_toml=tmp_path / "bad.toml", bad_value=tmp_path / "bad_value.toml", bad_cases=tmp_path / "cases.jsonl")
        for a in args
    ]
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    assert msg in r.stderr and r.stderr.strip().count("\n") <= 1 and "Traceback" not in r.output


def test_status_json_shape(db):
    r = runner.invoke(app, ["status", "--db", str(db), "--format", "json"])
    assert r.exit_code == 0 and json.loads(r.stdout) == {"campaigns": []}


@pytest.mark.parametrize(
    "toml,task_line,msg",
    [
        ('[model]\nname_or_path = "no-such-org/no-such-model"\n', None, "unknown model 'no-such-org/no-such-model'"),
        ("", "{broken", "tasks.jsonl:2: not valid JSON"),
        ("", '{"question": "What is 2 + 2?"}', "tasks.jsonl:2: missing gold answer"),
    ],
)
def test_run_bad_model_or_task_file_fails_before_work(tmp_path, tiny_model_dir, toml, task_line, msg):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        '{"question": "What is 1 + 1?", "answer": "2"}\n' + (task_line or '{"question": "3+3?", "answer": "6"}') + "\n"
    )
    head = f'db = "{tmp_path / "x.duckdb"}"\n[tasks]\nsource = "jsonl"\npath = "{tasks}"\n'
    model = toml or f'[model]\nname_or_path = "{tiny_model_dir}"\n'
    (tmp_path / "r.toml").write_text(head + model)
    r = runner.invoke(app, ["run", "--config", str(tmp_path / "r.toml")])
    assert r.exit_code == 2, r.output
    assert msg in r.stderr and "Traceback" not in r.output
    assert not (tmp_path / "x.runs").exists()  # nothing started


def test_demo_unwritable_db_fails_fast():
    r = runner.invoke(app, ["demo", "--db", "/proc/ratchet/demo.duckdb"])
    assert r.exit_code == 2 and ("not writable" in r.stderr or "cannot create" in r.stderr)


@pytest.mark.parametrize(
    "sql,msg",
    [
        ("COPY prompts TO '{out}'", "COPY statements are refused"),
        ("COPY (SELECT 1) TO '{out}' (FORMAT csv);", "COPY statements are refused"),
        ("ATTACH '{other}' AS o (READ_WRITE)", "ATTACH statements are refused"),
        ("INSTALL httpfs", "LOAD statements are refused"),
        ("LOAD httpfs", "LOAD statements are refused"),
        ("SET threads = 1", "SET statements are refused"),
        ("SELECT 1; DELETE FROM prompts", "2 statements given"),
        ("EXPORT DATABASE '{out}'", "EXPORT statements are refused"),
        ("SELECT * FROM read_csv('{other}')", "PermissionException"),  # a query, but of a file outside the store
        ("SELECT * FROM prompts WHERE question = ''; -- one statement", None),
        (" /* nothing */ ; ", "the query is empty"),
    ],
)
def test_sql_is_strictly_read_only(tmp_path, db, sql, msg):
    import duckdb

    other = tmp_path / "other.duckdb"
    with duckdb.connect(str(other)) as con:
        con.execute("CREATE TABLE keep (x INT); INSERT INTO keep VALUES (1)")
    out = tmp_path / "out.csv"
    r = runner.invoke(app, ["sql", "--db", str(db), sql.format(out=out, other=other)])
    if msg is None:
        assert r.exit_code == 0, r.output
        return
    assert r.exit_code == 2, r.output
    assert msg in r.stderr.splitlines()[0] and "Traceback" not in r.output
    # Ratchet's refusals are one line; DuckDB's own errors keep its caret lines (``LINE 1: ...``)
    assert r.stderr.strip().count("\n") == 0 or msg.endswith("Exception")
    assert not out.exists()
    with duckdb.connect(str(other), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM keep").fetchone() == (1,)


def test_sql_query_ends_at_its_timeout(db):
    import time

    t = time.monotonic()
    q = "SELECT count(*) FROM range(100000) a, range(100000) b WHERE a.range + b.range = -1"
    r = runner.invoke(app, ["sql", "--db", str(db), "--timeout-s", "0.5", q])
    assert time.monotonic() - t < 10
    assert r.exit_code == 2 and "ran past its 0.5 s timeout" in r.stderr
    r = runner.invoke(app, ["sql", "--db", str(db), "DELETE FROM prompts"])  # the store is free again at once
    assert "read-only" in r.stderr


def test_sql_tables_show_text_literally(db):
    q = "SELECT '[/INST]' AS a, 'a[i] + b[j]' AS b, 'x' || chr(27) || '[31mred' || chr(27) || ']0;t' || chr(7) AS c"
    r = runner.invoke(app, ["sql", "--db", str(db), q])
    assert r.exit_code == 0, r.output
    assert "[/INST]" in r.stdout and "a[i] + b[j]" in r.stdout
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout and "\\x1b[31mred\\x1b]0;t\\x07" in r.stdout
    r = runner.invoke(app, ["sql", "--db", str(db), "--format", "json", q])
    assert json.loads(r.stdout)[0]["c"] == "x\x1b[31mred\x1b]0;t\x07"  # JSON stays exact
    r = runner.invoke(app, ["sql", "--db", str(db), "--format", "csv", q])
    assert r.stdout.splitlines()[1] == "[/INST],a[i] + b[j],x\x1b[31mred\x1b]0;t\x07"


def test_audit_misses_show_text_literally(tmp_path):
    cases = tmp_path / "cases.jsonl"
    case = {"id": "[/x] \x1b[2J", "kind": "math", "gold": "2", "prediction": "Answer: 3 [/INST]", "expected": True}
    cases.write_text(json.dumps(case) + "\n")
    r = runner.invoke(app, ["audit", str(cases)])
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    assert "[/x] \\x1b[2J" in r.stdout and "\x1b" not in r.stdout


@pytest.mark.parametrize("cmd", ["demo", "run"])
def test_help_keeps_toml_brackets(cmd):
    r = runner.invoke(app, [cmd, "--help"])
    assert r.exit_code == 0
    assert ("[grpo]" if cmd == "demo" else "[[campaigns]]") in r.output


@pytest.mark.parametrize(
    "make,msg",
    [
        (lambda p: p / "missing.jsonl", "no cases file at"),
        (lambda p: p, "is a directory"),
        (lambda p: (p / "latin1.jsonl").write_bytes(b'{"id": "caf\xe9"}\n') and p / "latin1.jsonl", "is not UTF-8 text"),
    ],
)
def test_audit_bad_path_gets_one_line(tmp_path, make, msg):
    r = runner.invoke(app, ["audit", str(make(tmp_path))])
    assert r.exit_code == 2 and msg in r.stderr and r.stderr.strip().count("\n") == 0, r.output


@pytest.mark.parametrize(
    "toml,msg",
    [
        ("[generation]\nseed = 10000000000000\n", "generation.seed"),
        ('algorithm = "grpo"\n[generation]\ntemperature = 0.0\ngroup_size = 4\n', "set generation.temperature > 0"),
        ('[schedule]\ncron = "61 2 * * *"\n', "schedule.cron '61 2 * * *' is not valid"),
    ],
)
def test_run_rejects_bad_values_before_work(tmp_path, toml, msg):
    (tmp_path / "r.toml").write_text(f'db = "{tmp_path / "x.duckdb"}"\n' + toml)
    r = runner.invoke(app, ["run", "--config", str(tmp_path / "r.toml")])
    assert r.exit_code == 2 and msg in r.stderr and r.stderr.strip().count("\n") == 0, r.output
    assert not (tmp_path / "x.duckdb").exists()


def test_init_force_replaces_the_file_atomically(tmp_path):
    path = tmp_path / "ratchet.toml"
    path.write_text("old")
    with path.open() as reader:  # a reader of the old file never sees it truncated or half written
        r = runner.invoke(app, ["init", "--path", str(path), "--force"])
        assert reader.read() == "old"
    assert r.exit_code == 0 and "campaign" in path.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ratchet.toml"]  # no temporary file left behind
    r = runner.invoke(app, ["init", "--path", str(tmp_path), "--force"])
    assert r.exit_code == 2 and "is a directory" in r.stderr


@pytest.mark.parametrize(
    "fmt,out,want",
    [
        (None, "x.jsonl", "jsonl"),
        (None, "x.parquet", "parquet"),
        (None, "x", "parquet"),
        ("hf", "folder", "hf"),
        ("jsonl", "x.jsonl", "jsonl"),
        ("parquet", "x.jsonl", "has a jsonl extension but --format is parquet"),
        ("csv", "x.csv", "is not one of parquet, jsonl, hf"),
    ],
)
def test_export_format_follows_the_extension_or_refuses_a_mismatch(fmt, out, want):
    """`export --out x.jsonl` writes JSONL, never Parquet under a .jsonl name (issue 24, finding 10)."""
    from pathlib import Path

    from ratchet.flows.cli.reading.export_command import output_format

    if " " in want:
        with pytest.raises(ValueError, match=want):
            output_format(fmt, Path(out))
    else:
        assert output_format(fmt, Path(out)) == want


def test_export_refuses_a_mismatched_extension_in_one_line(db, tmp_path):
    r = runner.invoke(
        app,
        [
            "export",
            "--db",
            str(db),
            "--campaign",
            "c",
            "--what",
            "rollouts",
            "--format",
            "parquet",
            "--out",
            str(tmp_path / "x.jsonl"),
        ],
    )
    assert r.exit_code == 2 and "jsonl extension" in r.stderr and r.stderr.strip().count("\n") == 0
    assert not (tmp_path / "x.jsonl").exists()


def test_help_lists_every_command_whole_and_shows_no_rst_markup():
    """Issue 42, finding 12: `ratchet --help` cut each command's line at the terminal width, and ``messages`` showed its
    RST markup. Every command's summary fits an 80-column terminal; no help text holds a double backtick."""
    import typer.main

    from ratchet.flows.cli.commands import SHORT_HELP

    r = runner.invoke(app, ["--help"], terminal_width=80)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("  ") and not ln.startswith("  --")]
    assert lines and not [ln for ln in lines if ln.rstrip().endswith("...")], r.stdout
    assert all(len(v) <= 60 for v in SHORT_HELP.values())

    def texts(cmd):
        yield cmd.help or ""
        yield from (getattr(p, "help", None) or "" for p in cmd.params)
        for sub in getattr(cmd, "commands", {}).values():
            yield from texts(sub)

    assert [t for t in texts(typer.main.get_command(app)) if "``" in t] == []


def test_sql_table_and_line_show_timestamps_to_the_second_csv_and_json_keep_them(db):
    """Issue 42, finding 12: timestamps with microseconds in the table; csv and json keep every digit."""
    q = "SELECT TIMESTAMP '2026-12-06 05:01:02.123456' AS t"
    for fmt in ("table", "line"):
        r = runner.invoke(app, ["sql", "--db", str(db), "--format", fmt, q])
        assert "2026-12-06 05:01:02" in r.stdout and ".123456" not in r.stdout, r.stdout
    r = runner.invoke(app, ["sql", "--db", str(db), "--format", "csv", q])
    assert "2026-12-06 05:01:02.123456" in r.stdout


def test_a_missing_config_names_the_fix_whether_or_not_config_was_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["check"])
    assert r.exit_code == 2 and "ratchet.toml does not exist; create it with `ratchet init --path ratchet.toml`" in r.stderr
    assert "drop --config" not in r.stderr
