"""The launcher's durable state in SQLite: the queue, running jobs, accounting and each job's history.

Every state change is one transaction, so a launcher killed at any point finds a consistent queue
when it starts again. The states, end causes and transitions are `vmsched.launcher.lifecycle`'s.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from vmsched.launcher.lifecycle import FINISHED, legacy_end_cause

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    uid INTEGER NOT NULL, gid INTEGER NOT NULL, user TEXT NOT NULL,
    name TEXT NOT NULL, command TEXT NOT NULL, cwd TEXT NOT NULL, env TEXT NOT NULL,
    stdout TEXT NOT NULL, stderr TEXT NOT NULL,
    procs TEXT NOT NULL, max_mpl INTEGER, job_class TEXT NOT NULL, estimate REAL NOT NULL,
    time_limit REAL, deadline REAL, submit_time REAL NOT NULL,
    state TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '',
    start_time REAL, end_time REAL, nranks INTEGER, cur_max_mpl INTEGER, run_estimate REAL,
    backfilled INTEGER NOT NULL DEFAULT 0, window_end REAL, suspended INTEGER NOT NULL DEFAULT 0,
    shim_pid INTEGER, shim_start REAL, exit_code INTEGER, requeues INTEGER NOT NULL DEFAULT 0,
    cpu_seconds REAL, dependency TEXT NOT NULL DEFAULT '[]', begin_time REAL, energy_j REAL,
    end_cause TEXT
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state, id);
CREATE TABLE IF NOT EXISTS events (
    job_id INTEGER NOT NULL, time REAL NOT NULL, kind TEXT NOT NULL, data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_job ON events(job_id, time);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

# Schema versions: 1 = the first release; 2 = jobs.dependency, begin_time, energy_j (issue 13); 3 =
# jobs.end_cause (issue 12). A database of an older version gets the missing columns, with their defaults,
# when the launcher opens it; end_cause is derived once from the old reason text.
SCHEMA_VERSION = 3
_ADDED_COLUMNS = {
    "dependency": "TEXT NOT NULL DEFAULT '[]'",  # JSON list of [type, job id], e.g. [["afterok", 3]]
    "begin_time": "REAL",  # not eligible to start before this time
    "energy_j": "REAL",  # the job's share of the node's energy (vmsched.launcher.energy)
    "end_cause": "TEXT",  # lifecycle.EndCause: why it ended (an active job: why it is being stopped)
}


@dataclass(frozen=True)
class JobRecord:
    id: int
    uid: int
    gid: int
    user: str
    name: str
    command: list[str]
    cwd: str
    env: dict[str, str]
    stdout: str
    stderr: str
    procs: tuple[int, ...]
    max_mpl: int | None
    job_class: str
    estimate: float
    time_limit: float | None
    deadline: float | None
    submit_time: float
    state: str
    reason: str
    start_time: float | None
    end_time: float | None
    nranks: int | None
    cur_max_mpl: int | None
    run_estimate: float | None
    backfilled: bool
    window_end: float | None
    suspended: bool
    shim_pid: int | None
    shim_start: float | None
    exit_code: int | None
    requeues: int
    cpu_seconds: float | None
    dependency: list[list[Any]]
    begin_time: float | None
    energy_j: float | None
    end_cause: str | None

    def public(self, full: bool) -> dict[str, Any]:
        """The job as shown to users; without `full` (someone else's job) no details."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("env", "shim_start")}
        d["procs"] = list(self.procs)
        if not full:
            for k in ("name", "command", "cwd", "stdout", "stderr", "reason", "exit_code", "deadline", "dependency"):
                d[k] = None
        return d


_JSON_FIELDS = {"command", "env", "procs", "dependency"}


def _record(row: sqlite3.Row) -> JobRecord:
    d = dict(row)
    for k in _JSON_FIELDS:
        d[k] = json.loads(d[k])
    d["procs"] = tuple(d["procs"])
    d["backfilled"] = bool(d["backfilled"])
    d["suspended"] = bool(d["suspended"])
    return JobRecord(**d)


class Store:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = sqlite3.connect(path, isolation_level=None, timeout=10)
        self.db.row_factory = sqlite3.Row
        # WAL: readers (vmq through the daemon, tools reading the file) never block the writer;
        # synchronous=NORMAL keeps commits durable across a process crash, which is what we need.
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(_SCHEMA)
        self._migrate()

    def close(self) -> None:
        self.db.close()

    def _migrate(self) -> None:
        """Bring a database written by an older version up to SCHEMA_VERSION (columns only ever added)."""
        with self.tx() as db:
            have = {r["name"] for r in db.execute("PRAGMA table_info(jobs)")}
            for name, decl in _ADDED_COLUMNS.items():
                if name not in have:
                    db.execute(f"ALTER TABLE jobs ADD COLUMN {name} {decl}")
            if "end_cause" not in have:
                for row in db.execute("SELECT id, state, reason FROM jobs").fetchall():
                    cause = legacy_end_cause(row["state"], row["reason"])
                    if cause is not None:
                        db.execute("UPDATE jobs SET end_cause = ? WHERE id = ?", (cause.value, row["id"]))
            db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))

    def next_id(self) -> int:
        """The id the next job will get (AUTOINCREMENT never reuses one)."""
        row = self.db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'jobs'").fetchone()
        return (int(row[0]) if row else 0) + 1

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    # -- writes ----------------------------------------------------------------------------------
    def add_job(self, **values: Any) -> int:
        for k in _JSON_FIELDS & values.keys():  # the others take their column's default
            values[k] = json.dumps(values[k])
        cols = ", ".join(values)
        marks = ", ".join("?" for _ in values)
        with self.tx() as db:
            cur = db.execute(f"INSERT INTO jobs ({cols}, state) VALUES ({marks}, 'queued')", tuple(values.values()))
            job_id = int(cur.lastrowid)
            db.execute("INSERT INTO events VALUES (?, ?, 'submit', ?)", (job_id, values["submit_time"], json.dumps({})))
        return job_id

    def update(self, job_id: int, event: str | None = None, data: dict[str, Any] | None = None, **values: Any) -> None:
        """Change a job's columns and log an event, in one transaction."""
        self.update_logged(job_id, [(event, data or {})] if event else [], **values)

    def update_logged(self, job_id: int, events: list[tuple[str, dict[str, Any]]], **values: Any) -> None:
        """Change a job's columns and log events, in one transaction."""
        with self.tx() as db:
            if values:
                sets = ", ".join(f"{k} = ?" for k in values)
                db.execute(f"UPDATE jobs SET {sets} WHERE id = ?", (*values.values(), job_id))
            now = time.time()
            for kind, data in events:
                db.execute("INSERT INTO events VALUES (?, ?, ?, ?)", (job_id, now, kind, json.dumps(data)))

    def log(self, job_id: int, event: str, data: dict[str, Any], when: float | None = None) -> None:
        self.db.execute(
            "INSERT INTO events VALUES (?, ?, ?, ?)", (job_id, when or time.time(), event, json.dumps(data))
        )

    def add_energy(self, shares: dict[int, float], node_j: float, unattributed_j: float) -> None:
        """Add one interval's energy: each job's share, and the node's total and unattributed part."""
        with self.tx() as db:
            for job_id, joules in shares.items():
                db.execute("UPDATE jobs SET energy_j = COALESCE(energy_j, 0) + ? WHERE id = ?", (joules, job_id))
            for key, add in (("energy_node_j", node_j), ("energy_unattributed_j", unattributed_j)):
                row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
                db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, repr(float(row[0] if row else 0) + add)))

    def set_meta(self, key: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    # -- reads -----------------------------------------------------------------------------------
    def job(self, job_id: int) -> JobRecord | None:
        row = self.db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return _record(row) if row else None

    def jobs(self, states: tuple[str, ...], limit: int | None = None) -> list[JobRecord]:
        marks = ", ".join("?" for _ in states)
        sql = f"SELECT * FROM jobs WHERE state IN ({marks}) ORDER BY id"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return [_record(r) for r in self.db.execute(sql, states)]

    def finished(self, uid: int | None = None, since: float | None = None, limit: int = 1000,
                 until: float | None = None) -> list[JobRecord]:  # fmt: skip
        """Finished jobs, oldest first; `since`/`until`: those that ended at or after `since` and were
        submitted at or before `until` (in the node's hands during [since, until])."""
        sql = f"SELECT * FROM jobs WHERE state IN ({', '.join('?' * len(FINISHED))})"
        args: list[Any] = list(FINISHED)
        if uid is not None:
            sql += " AND uid = ?"
            args.append(uid)
        if since is not None:
            sql += " AND end_time >= ?"
            args.append(since)
        if until is not None:
            sql += " AND submit_time <= ?"
            args.append(until)
        sql += " ORDER BY id DESC LIMIT ?"
        args.append(limit)
        return [_record(r) for r in self.db.execute(sql, args)][::-1]

    def events(self, job_id: int) -> list[dict[str, Any]]:
        return [
            {"time": r["time"], "kind": r["kind"], **json.loads(r["data"])}
            for r in self.db.execute("SELECT * FROM events WHERE job_id = ? ORDER BY time, rowid", (job_id,))
        ]

    def count(self, states: tuple[str, ...]) -> int:
        marks = ", ".join("?" for _ in states)
        return int(self.db.execute(f"SELECT COUNT(*) FROM jobs WHERE state IN ({marks})", states).fetchone()[0])

    def meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None


# -- reads for the metrics endpoint: their own read-only connection, in prometheus_client's thread ---------
def open_reader(path: Path) -> sqlite3.Connection:
    """A read-only connection (WAL: it never blocks the launcher's writes)."""
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)


def state_counts(db: sqlite3.Connection) -> dict[tuple[str, bool], int]:
    """(state, suspended) -> number of jobs (answered from the jobs_state index for the states)."""
    rows = db.execute("SELECT state, suspended, COUNT(*) FROM jobs GROUP BY state, suspended")
    return {(state, bool(suspended)): n for state, suspended, n in rows}


def events_after(db: sqlite3.Connection, rowid: int, kinds: tuple[str, ...]) -> list[tuple[int, str, float]]:
    """Events of `kinds` logged after event `rowid`: (rowid, kind, seconds since the job's submission).
    Events are only ever appended, so their rowids grow and a reader can resume where it stopped."""
    marks = ", ".join("?" for _ in kinds)
    sql = (f"SELECT e.rowid, e.kind, e.time - j.submit_time FROM events e JOIN jobs j ON j.id = e.job_id "
           f"WHERE e.rowid > ? AND e.kind IN ({marks}) ORDER BY e.rowid")  # fmt: skip
    return [(int(r), k, float(t)) for r, k, t in db.execute(sql, (rowid, *kinds))]
