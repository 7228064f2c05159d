"""How the store scales (issue 41, item 4): a synthetic campaign of ``--rounds`` nightly rounds, ``--rows``
trajectories with their verdicts, ingested round by round through the rounds' own path (stage Parquet files,
``ingest_parquet`` in a ``transaction``, which publishes the reader snapshots), 3 publishes per round (so 3,000
snapshot files per table at 1,000 rounds, before compaction). The rounds ran a day apart (their rows' ``created_at``:
``_at``), and each gate decision records its eval set and verifier version, as a real campaign's do.

Prints one JSON line:

- ``ingest_rows_per_s``: trajectories + verdicts ingested per second, publishes included;
- ``queries_100k`` / ``queries_10m``: seconds of the README's two queries (``readme_round_summary``,
  ``readme_training_set``) and of ``SELECT * FROM round_summary`` through ``ratchet sql``'s function
  (``ratchet.store.db.query``), and of ``ratchet status`` and ``ratchet report`` (the commands, in-process, after a
  warm-up call), at the first round past 100k trajectories and at the end (after the nightly compaction);
  ``write_transaction`` is an empty write transaction (open the writer, commit, publish): what each of a round's
  writes pays at that size;
- ``max_query_s_10m``: the slowest of the 10M-row read figures (target <= 2 s on 2 cores);
- ``count_s``: a trivial count through the reader catalog (``duckdb`` on ``--db``, as a user's notebook) at
  ``files_10`` (the same rows in 10 files per table), ``files_3000_before`` and ``files_3000_after``
  compaction (``ratchet.store.catalog.compact``, its covered files deleted);
- ``catalog_ratio_3000_vs_10``: ``files_3000_after`` / ``files_10`` (target <= 2).

``--rows 10000000 --rounds 1000``: the issue's sizes; the defaults are smaller. The first ``--real-rounds`` rounds are
ingested round by round as a campaign does (``ingest_rows_per_s``); the rest in bulk transactions
(``bulk_ingest_rows_per_s``), their snapshot files then written as those rounds' publishes would have written them
(one transaction per publish all the way took 13 min to reach 6M rows here, and slowed down: each transaction's inserts check
its keys against a growing primary-key index, while an empty transaction stays at ~0.07 s).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import duckdb

import ratchet.store.catalog as catalog
from ratchet.store.catalog import compact, tables_dir, writer_path
from ratchet.store.db import connect, init_db, query, transaction
from ratchet.store.ingest import ingest_parquet, insert_rows

README_QUERIES = {
    "readme_round_summary": "SELECT round_index, incumbent_pass1, candidate_pass1, decision, reason FROM round_summary",
    "readme_training_set": """SELECT p.question, t.completion FROM trajectories t JOIN prompts p USING (prompt_id)
        JOIN verdicts v USING (trajectory_id) JOIN rounds r USING (round_id)
        WHERE r.round_index = 2 AND t.purpose = 'rollout' AND p.split = 'train' AND v.correct""",
    "round_summary": "SELECT * FROM round_summary",
}
CAMPAIGN = "scale"
DAY0 = datetime(2024, 1, 1, 2, 0)  # round r ran on day r after it, at 02:00 (its rows' timestamps: _at)
CID = "c0000000000scale"
PROMPTS = 2000

# Rows ``lo <= g < hi`` of the campaign: row g is row k = g % per_round of round g // per_round + 1.
_ROWS = "(SELECT g, g // {per_round} + 1 AS r, g % {per_round} AS k FROM range({lo}, {hi}) t(g))"
_TRAJ = (
    """SELECT '{cid}-r' || r || '-' || k AS trajectory_id, '{cid}-r' || r AS round_id, 'p' || (k % {prompts}) AS prompt_id,
  'ck' || r AS checkpoint_id, CASE WHEN k % 5 = 0 THEN 'eval_greedy' ELSE 'rollout' END AS purpose,
  CASE WHEN k % 5 = 0 THEN 'es1' END AS eval_set_id, k % 8 AS sample_index,
  'Natalia sold ' || k || ' clips in April, and half as many in May. Step by step: ' || (k * 7 % 1000) ||
    ' + ' || (k % 97) || ' = ' || (k * 7 % 1000 + k % 97) || '. The answer is #### ' || (k % 101) AS completion,
  120 AS prompt_tokens, 60 + k % 40 AS completion_tokens, 'stop' AS finish_reason, 'transformers' AS backend,
  0.8 AS temperature, 1.0 AS top_p, 256 AS max_new_tokens, k AS seed, {day0} + to_days(r::INT) + INTERVAL 10 MINUTE AS created_at, 0 AS step,
  [k % 49152, (k * 3) % 49152, (k * 7) % 49152, 2] AS completion_token_ids,
  '[{{"role": "user", "content": "question ' || (k % {prompts}) || '"}}]' AS prompt_messages, 1 AS turns
FROM """
    + _ROWS
    + """ t"""
)
_VERD = (
    """SELECT '{cid}-r' || r || '-' || k AS trajectory_id, 'math' AS verifier, 'v1' AS verifier_version,
  (k % 3 = 0)::DOUBLE AS reward, k % 3 = 0 AS correct, CASE WHEN k % 3 = 0 THEN 'match' ELSE 'mismatch' END AS reason,
  (k % 101)::VARCHAR AS parsed, true AS format_ok, 0.001 AS latency_s, {day0} + to_days(r::INT) + INTERVAL 20 MINUTE AS created_at
FROM """
    + _ROWS
    + """ t"""
)


def _at(r: int, minutes: int = 0) -> str:
    """Round ``r``'s time plus ``minutes``: the rounds ran nightly, one a day from ``DAY0`` on."""
    return (DAY0 + timedelta(days=r, minutes=minutes)).strftime("%Y-%m-%d %H:%M:%S")


def _round_rows(r: int) -> dict[str, list[dict]]:
    now = _at(r, 50)  # its gate: after its trajectories (+10 min) and verdicts (+20)
    rid = f"{CID}-r{r}"
    return {
        "rounds": [
            dict(
                round_id=rid,
                campaign_id=CID,
                round_index=r,
                incumbent_checkpoint_id=f"ck{r - 1}",
                status="completed",
                started_at=_at(r),
                finished_at=_at(r, 60),
            )
        ],
        "checkpoints": [dict(checkpoint_id=f"ck{r}", parent_id=f"ck{r - 1}", model_ref="smollm2-135m", created_at=_at(r, 30))],
        "evaluations": [
            dict(
                evaluation_id=f"e{r}",
                round_id=rid,
                checkpoint_id=f"ck{r}",
                eval_set_id="es1",
                metric="heldout/pass@1",
                value=0.3 + (r % 10) / 100,
                num_prompts=400,
                created_at=now,
            )
        ],
        "gate_decisions": [
            dict(
                round_id=rid,
                campaign_id=CID,
                candidate_checkpoint_id=f"ck{r}",
                incumbent_checkpoint_id=f"ck{r - 1}",
                decision="promote" if r % 3 else "reject",
                reason="synthetic",
                candidate_pass1=0.31,
                incumbent_pass1=0.30,
                best_promoted_pass1=0.31,
                test="noninferiority",
                tolerance=0.02,
                eval_set_id="es1",  # what a real decision records: ratchet report lists its flips
                verifier_version="v1",
                created_at=now,
            )
        ],
    }


def _timed(fn, reps: int = 2, warm: bool = True) -> float:
    if warm:
        fn()  # warm-up: imports, the OS page cache
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return round(best, 4)


def _queries(db: Path, out_dir: Path, commands: bool = True) -> dict[str, float]:
    """The README's queries and ``round_summary`` (the Parquet snapshots); ``commands``: also status, report and a write."""
    from typer.testing import CliRunner

    from ratchet.flows.cli import app

    runner = CliRunner()

    def cli(*args: str):
        def go():
            r = runner.invoke(app, list(args))
            if r.exit_code != 0:
                raise RuntimeError(f"ratchet {' '.join(args)} failed: {r.output[-2000:]}")

        return go

    out = {name: _timed(lambda sql=sql: query(db, sql, timeout_s=600)) for name, sql in README_QUERIES.items()}
    if not commands:  # status, report and writes read the writer file, which compaction leaves as it is
        return out
    out["ratchet_status"] = _timed(cli("status", "--db", str(db)))
    out["write_transaction"] = _timed(lambda: _empty_write(db))  # what every write of a round pays: open, commit, publish
    # The report details the last 30 rounds (its queries bounded by their time) and tables every round.
    out["ratchet_report"] = _timed(
        cli("report", "--db", str(db), "--campaign", CAMPAIGN, "--out", str(out_dir / "report.html"), "--force")
    )
    return out


def _empty_write(db: Path) -> None:
    with transaction(db, timeout_s=600):
        pass


def _count(db: Path, rows: int) -> float:
    """A trivial count through the reader catalog, from the store's folder (the catalog's paths are relative).

    Raises:
        AssertionError: the catalog does not read exactly ``rows`` trajectories (compaction lost or doubled rows).
    """
    cwd = os.getcwd()
    os.chdir(db.parent)
    try:
        with duckdb.connect(str(db), read_only=True) as con:
            n = con.execute("SELECT count(*), count(DISTINCT trajectory_id) FROM trajectories").fetchone()
            if n != (rows, rows):
                raise AssertionError(f"{db} reads {n[0]} trajectories ({n[1]} distinct); it holds {rows}")
            return _timed(lambda: con.execute("SELECT count(*) FROM trajectories").fetchone(), reps=5)
    finally:
        os.chdir(cwd)


def _files(db: Path, table: str = "trajectories") -> int:
    return len(list((tables_dir(db) / table).glob("rows-*.parquet")))


def _stage(gen: duckdb.DuckDBPyConnection, stage: Path, lo: int, hi: int, per_round: int) -> tuple[Path, Path]:
    """Stage files of the campaign's trajectories and verdicts ``lo <= g < hi``, as a round's stages write them."""
    fmt = dict(cid=CID, prompts=PROMPTS, lo=lo, hi=hi, per_round=per_round, day0=f"TIMESTAMP '{_at(0)}'")
    traj, verd = stage / f"t-{lo}.parquet", stage / f"v-{lo}.parquet"
    gen.execute(f"COPY ({_TRAJ.format(**fmt)}) TO '{traj}' (FORMAT parquet)")
    gen.execute(f"COPY ({_VERD.format(**fmt)}) TO '{verd}' (FORMAT parquet)")
    return traj, verd


def _cuts(r: int, per_round: int) -> list[tuple[int, int]]:
    """The campaign's row ranges of round ``r``'s three publishes."""
    base = (r - 1) * per_round
    cuts = [base, base + per_round // 3, base + 2 * per_round // 3, base + per_round]
    return list(zip(cuts, cuts[1:]))


def build(db: Path, rows: int, rounds: int, real_rounds: int, stage: Path, out_dir: Path) -> dict:
    """Ingest the campaign: its first ``real_rounds`` rounds round by round (3 transactions each, each publishing
    its snapshot files), the rest in bulk transactions whose snapshot files are then written as those publishes
    would have written them (3 row ranges per round and table; evaluations one per round). Returns the ingest
    rates and the figures at 100k trajectories."""
    init_db(db)
    gen = duckdb.connect()
    with transaction(db) as con:
        insert_rows(
            con,
            "campaigns",
            [
                dict(
                    campaign_id=CID,
                    name=CAMPAIGN,
                    base_checkpoint_id="ck0",
                    config_json="{}",
                    created_at=_at(0),
                )
            ],
        )
        insert_rows(
            con,
            "checkpoints",
            [dict(checkpoint_id="ck0", model_ref="smollm2-135m", created_at=_at(0))],
        )
        prompts = (
            gen.sql(f"""SELECT 'p' || k AS prompt_id, 'gsm8k' AS source, 'gsm8k' AS task, 'question ' || k AS question,
            (k % 101)::VARCHAR AS answer, CASE WHEN k % 5 = 0 THEN 'heldout' ELSE 'train' END AS split
            FROM range({PROMPTS}) t(k)""")
            .arrow()
            .read_all()
        )
        con.register("_p", prompts)
        con.execute("INSERT INTO prompts (prompt_id, source, task, question, answer, split) SELECT * FROM _p")
        con.unregister("_p")
    per_round = rows // rounds
    ingested, ingest_s, at_100k = 0, 0.0, None
    real_rounds = min(real_rounds, rounds)
    for r in range(1, real_rounds + 1):
        for part, (lo, hi) in enumerate(_cuts(r, per_round)):
            traj, verd = _stage(gen, stage, lo, hi, per_round)
            t = time.perf_counter()
            with transaction(db, timeout_s=600) as con:
                ingested += ingest_parquet(con, "trajectories", [traj]) + ingest_parquet(con, "verdicts", [verd])
                if part == 2:
                    for table, rs in _round_rows(r).items():
                        insert_rows(con, table, rs)
            ingest_s += time.perf_counter() - t
            traj.unlink()
            verd.unlink()
        if at_100k is None and r * per_round >= min(100_000, rows):
            at_100k = {"trajectories": r * per_round, "files": _files(db), **_queries(db, out_dir)}
    out = {"ingest_rows_per_s": round(ingested / ingest_s)}
    bulk_rows, bulk_s, chunk = 0, 0.0, max(1, 500_000 // per_round)  # rounds per bulk transaction
    for r0 in range(real_rounds + 1, rounds + 1, chunk):
        r1 = min(r0 + chunk, rounds + 1)
        traj, verd = _stage(gen, stage, (r0 - 1) * per_round, (r1 - 1) * per_round, per_round)
        t = time.perf_counter()
        with connect(db, timeout_s=600) as con:
            con.execute("BEGIN TRANSACTION")
            bulk_rows += ingest_parquet(con, "trajectories", [traj]) + ingest_parquet(con, "verdicts", [verd])
            for r in range(r0, r1):
                for table, rs in _round_rows(r).items():
                    insert_rows(con, table, rs)
            con.execute("COMMIT")
        bulk_s += time.perf_counter() - t
        traj.unlink()
        verd.unlink()
        print(f"round {r1 - 1}/{rounds}: {(r1 - 1) * per_round} trajectories", file=sys.stderr, flush=True)
    if rounds > real_rounds:
        out["bulk_ingest_rows_per_s"] = round(bulk_rows / bulk_s)
        _write_round_files(db, real_rounds, rounds, per_round)
    return {**out, "queries_100k": at_100k}


def _write_round_files(db: Path, first: int, rounds: int, per_round: int) -> None:
    """The snapshot files rounds ``first+1..rounds`` would have published (their rows are in the writer file)."""
    state_path = catalog.store_dir(db) / "published.json"
    state = json.loads(state_path.read_text())
    with connect(db, timeout_s=600) as con:
        for table in ("trajectories", "verdicts", "evaluations"):
            folder = tables_dir(db) / table
            for r in range(first + 1, rounds + 1):
                # evaluations: one row per round, at rowid r - 1 (the real rounds published theirs the same way)
                ranges = [(r - 1, r)] if table == "evaluations" else _cuts(r, per_round)
                for lo, hi in ranges:
                    target = folder / f"rows-{lo:012d}-{hi:012d}.parquet"
                    catalog._write(con, f"SELECT * FROM {table} WHERE rowid >= {lo} AND rowid < {hi}", target)
                    state[catalog.FILES_KEY][table].append(target.name)
        catalog.atomic_write_text(state_path, json.dumps(state, sort_keys=True))
    with transaction(db):  # the small tables' new versions; the insert-only tables have nothing left to publish
        pass


def ten_files(src: Path, dst: Path) -> None:
    """A second store holding ``src``'s rows, published in 10 transactions (10 files per insert-only table)."""
    init_db(dst)
    n = {}
    with duckdb.connect(str(writer_path(src)), read_only=True) as con:
        for t in catalog.APPEND_ONLY | {"campaigns", "rounds", "checkpoints", "gate_decisions"}:
            n[t] = con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
    with duckdb.connect(str(writer_path(dst))) as con:
        con.execute(f"ATTACH '{writer_path(src)}' AS src (READ_ONLY)")
        for k in range(10):
            for t, rows in n.items():
                lo, hi = rows * k // 10, rows * (k + 1) // 10
                con.execute(f"INSERT INTO {t} SELECT * FROM src.{t} WHERE rowid >= {lo} AND rowid < {hi}")
            catalog.publish(con, dst)
        con.execute("DETACH src")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000, help="trajectories (and as many verdicts)")
    ap.add_argument("--rounds", type=int, default=300, help="nightly rounds (3 snapshot files per table each)")
    ap.add_argument("--real-rounds", type=int, default=20, help="rounds ingested one by one (the rest in bulk)")
    ap.add_argument("--dir", type=Path, default=None, help="where to build the stores (default: a temporary folder)")
    args = ap.parse_args()
    # Superseded versions of the small tables go at once, as they do 10 minutes after each publish in a real store.
    catalog.KEEP_VERSIONS_S = 0.0
    work = Path(tempfile.mkdtemp(prefix="store-scale-", dir=args.dir))
    try:
        db, stage = work / "scale.duckdb", work / "stage"
        stage.mkdir()
        t0 = time.perf_counter()
        result = {"rows": args.rows, "rounds": args.rounds, **build(db, args.rows, args.rounds, args.real_rounds, stage, work)}
        result["build_s"] = round(time.perf_counter() - t0)
        ten_files(db, work / "ten.duckdb")
        rows = args.rows // args.rounds * args.rounds
        count = {"files_10": _count(work / "ten.duckdb", rows)}
        files_before = _files(db)
        count["files_3000_before"] = _count(db, rows)
        queries_before = _queries(db, work, commands=False)
        t = time.perf_counter()
        with connect(db) as con:
            merged = compact(con, db, delay_s=0)
        result["compact_s"] = round(time.perf_counter() - t, 1)
        time.sleep(1.1)  # the merged files' activation second
        with transaction(db) as con:  # the first write after KEEP_VERSIONS_S deletes the covered files
            pass
        count["files_3000_after"] = _count(db, rows)
        queries = _queries(db, work)
        result.update(
            files_before=files_before,
            files_after=_files(db),
            merged={t: list(v) for t, v in merged.items()},
            queries_10m_before_compaction=queries_before,
            queries_10m=queries,
            max_query_s_10m=max(v for k, v in queries.items() if k != "write_transaction"),
            count_s=count,
            catalog_ratio_3000_vs_10=round(count["files_3000_after"] / count["files_10"], 2),
            store_bytes=sum(f.stat().st_size for f in db.parent.rglob("*") if f.is_file() and "ten.duckdb" not in str(f)),
        )
        print(json.dumps(result))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
