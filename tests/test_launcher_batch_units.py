"""Pure parts of issue 13: dependency rules, job-script directives, --export, and the store's migration."""

from __future__ import annotations

import sqlite3

import pytest

from vmsched.launcher.dependencies import creates_cycle, hold_reason, parse_dependency
from vmsched.launcher.jobscript import directives, script_command
from vmsched.launcher.requests import RequestError, export_env
from vmsched.launcher.store import _SCHEMA, SCHEMA_VERSION, Store


def test_parse_dependency():
    assert parse_dependency("afterok:3:4,afterany:5") == (("afterok", 3), ("afterok", 4), ("afterany", 5))
    for bad in ("after:3", "afterok", "afterok:", "afterok:x", "afterok:0", "afterok:3,,"):
        with pytest.raises(RequestError):
            parse_dependency(bad)


def test_hold_reason():
    deps = [("afterok", 1), ("afterany", 2)]
    assert hold_reason(deps, None, {1: "running", 2: "failed"}, 0) == "Dependency"
    assert hold_reason(deps, None, {1: "completed", 2: "failed"}, 0) is None
    assert hold_reason(deps, None, {1: "failed", 2: "running"}, 0) == "DependencyNeverSatisfied"
    assert hold_reason(deps, None, {1: "cancelled", 2: "queued"}, 0) == "DependencyNeverSatisfied"
    assert hold_reason(deps, None, {2: "completed"}, 0) == "DependencyNeverSatisfied"  # job 1 unknown
    assert hold_reason([], 100.0, {}, 50.0) == "BeginTime"
    assert hold_reason([], 100.0, {}, 100.0) is None
    assert hold_reason([("afterok", 1)], 100.0, {1: "queued"}, 50.0) == "Dependency"


def test_creates_cycle():
    graph = {1: [], 2: [("afterok", 1)], 3: [("afterany", 2)]}
    assert not creates_cycle(4, [("afterok", 3)], lambda j: graph[j])
    assert creates_cycle(4, [("afterok", 4)], lambda j: graph.get(j, []))
    graph[1] = [("afterok", 4)]  # as if job 1 waited for the new job
    assert creates_cycle(4, [("afterok", 3)], lambda j: graph[j])


def test_directives():
    text = "#!/bin/bash -l\n#VMSCHED -n 4 --time 1m\n\n# note\n#VMSCHED -J 'two words'  # comment\n"
    text += "exec prog\n#VMSCHED -n 8\n"
    assert directives(text) == [(2, ["-n", "4", "--time", "1m"]), (5, ["-J", "two words"])]
    assert script_command("/x/job.sh", text, ["a"]) == ["/bin/bash", "-l", "/x/job.sh", "a"]
    assert script_command("/x/job.sh", "exec prog\n", []) == ["/bin/sh", "/x/job.sh"]
    for bad in ("#VMSCHED-n 4\n", "#VMSCHED\n", "#VMSCHED -J 'open\n"):
        with pytest.raises(RequestError, match="line 1"):
            directives(bad)


def test_export_env():
    env = {"PATH": "/bin", "HOME": "/h", "SECRET": "s", "KEEP": "k"}
    assert export_env("ALL", env) == env
    assert export_env("NONE", env) == {"PATH": "/bin", "HOME": "/h"}
    assert export_env("KEEP,NEW=1", env) == {"PATH": "/bin", "HOME": "/h", "KEEP": "k", "NEW": "1"}
    assert export_env("ALL,NEW=1", env) == {**env, "NEW": "1"}
    for bad in ("", "1BAD=x", "MISSING"):
        with pytest.raises(RequestError):
            export_env(bad, env)


# The first version's jobs table: today's, less the columns added since (in version 2, then 3).
NEW_COLUMNS = ", dependency TEXT NOT NULL DEFAULT '[]', begin_time REAL, energy_j REAL"
V3_COLUMNS = ",\n    end_cause TEXT"
OLD_JOB = """INSERT INTO jobs (uid, gid, user, name, command, cwd, env, stdout, stderr, procs, job_class, estimate,
                  submit_time, state, end_time, cpu_seconds)
VALUES (0, 0, 'root', 'old', '["true"]', '/', '{}', '', '', '[2]', 'short', 60, 1.0, 'completed', 5.0, 8.0);"""


def test_a_database_of_the_first_version_is_migrated_and_keeps_its_jobs(tmp_path):
    path = tmp_path / "vmsched.db"
    assert NEW_COLUMNS + V3_COLUMNS in _SCHEMA
    db = sqlite3.connect(path)
    db.executescript(_SCHEMA.replace(NEW_COLUMNS + V3_COLUMNS, "") + OLD_JOB)
    assert "begin_time" not in {r[1] for r in db.execute("PRAGMA table_info(jobs)")}
    db.close()
    store = Store(path)
    job = store.job(1)
    assert job is not None and job.name == "old" and job.cpu_seconds == 8.0
    assert (job.dependency, job.begin_time, job.energy_j) == ([], None, None)
    assert store.meta("schema_version") == str(SCHEMA_VERSION)
    assert store.next_id() == 2
    store.close()
    assert Store(path).job(1) == job  # opening it again changes nothing


# Jobs as a version-2 launcher left them: the end cause only in the reason text (and one stop under way).
V2_JOBS = [  # state, reason, the end cause derived from them
    ("completed", "", "completed"),
    ("failed", "", "failed"),
    ("failed", "could not start: [Errno 2] No such file or directory: '/gone'", "start-failed"),
    ("cancelled", "cancelled by user", "cancelled"),
    ("cancelled", "cancelled: window expired", "aborted"),
    ("timeout", "time limit 10s exceeded", "killed-at-limit"),
    ("lost", "the job's shim vanished without a status", "lost"),
    ("running", "cancelled by user", "cancelled"),  # cancelled, its shim not yet gone
    ("running", "", None),
    ("queued", "never started: requeued", None),
]


def test_a_version_2_database_gets_end_causes_derived_once_from_the_reasons(tmp_path):
    path = tmp_path / "vmsched.db"
    db = sqlite3.connect(path)
    db.executescript(_SCHEMA.replace(V3_COLUMNS, ""))
    for state, reason, _ in V2_JOBS:
        db.execute(
            "INSERT INTO jobs (uid, gid, user, name, command, cwd, env, stdout, stderr, procs, job_class, estimate,"
            " submit_time, state, reason) VALUES (0, 0, 'root', 'j', '[\"true\"]', '/', '{}', '', '', '[2]',"
            " 'short', 60, 1.0, ?, ?)",
            (state, reason),
        )
    db.execute("INSERT INTO meta VALUES ('schema_version', '2')")
    db.commit()
    assert "end_cause" not in {r[1] for r in db.execute("PRAGMA table_info(jobs)")}
    db.close()
    store = Store(path)
    assert SCHEMA_VERSION == 3 and store.meta("schema_version") == "3"
    got = [(j.state, j.reason, j.end_cause) for j in (store.job(i + 1) for i in range(len(V2_JOBS)))]
    assert got == V2_JOBS
    assert {j.state for j in store.finished()} == {"completed", "failed", "cancelled", "timeout", "lost"}
    # Derived once: a later opening keeps what is stored (here a cause changed since) and adds nothing.
    store.db.execute("UPDATE jobs SET end_cause = 'failed' WHERE id = 1")
    store.close()
    assert Store(path).job(1).end_cause == "failed"


def test_a_job_that_completed_before_its_abort_is_not_requeued(tmp_path):
    """An expired window's abort decided in the moment between a job's end and its reaping: the shim's
    status says it completed first, so the launcher accounts it as completed instead of running it again
    (lifecycle.ended_before_abort, read from a real store's events)."""
    import time

    from vmsched.launcher import lifecycle
    from vmsched.launcher.lifecycle import EndCause, JobState

    store = Store(tmp_path / "jobs.db")
    jid = store.add_job(uid=0, gid=0, user="u", name="j", command=["true"], cwd="/", env={}, stdout="o",
                        stderr="e", procs=[2], max_mpl=None, job_class="short", estimate=10.0, time_limit=None,
                        deadline=None, submit_time=time.time())  # fmt: skip
    store.update(jid, "start", {}, state=JobState.RUNNING.value, start_time=time.time())
    ended_at = time.time()
    lifecycle.stopping(store, store.job(jid), EndCause.ABORTED, "window expired", "abort", requeue=True)
    events = store.events(jid)
    assert store.job(jid).state == JobState.ABORTING
    assert lifecycle.ended_before_abort(events, {"exit_code": 0, "end_time": ended_at})
    # Ended after the abort (killed by it), or failed, or no status: the abort stands.
    assert not lifecycle.ended_before_abort(events, {"exit_code": 0, "end_time": time.time() + 1})
    assert not lifecycle.ended_before_abort(events, {"exit_code": 137, "end_time": ended_at})
    assert not lifecycle.ended_before_abort(events, None)
    assert not lifecycle.ended_before_abort(events, {"exit_code": 0, "end_time": None})
    # A job never aborted is not "done before its abort".
    assert not lifecycle.ended_before_abort([e for e in events if e["kind"] != "abort"],
                                            {"exit_code": 0, "end_time": ended_at})  # fmt: skip
