"""One finished job as users and tools see it (`vmacct`): times, sizes and its partition history.
Kept free of heavy imports: `vmsubmit`/`vmq`/`vmacct` start in a fraction of a second."""

from __future__ import annotations

from typing import Any


def acct_row(j: dict[str, Any]) -> dict[str, Any]:
    """One finished job with its derived times and its MPL history (e.g. '1 -> 2 -> 1')."""
    start, end, submit = j["start_time"], j["end_time"], j["submit_time"]
    wait = (start - submit) if start else None
    run = (end - start) if start and end else None
    response = (end - submit) if end else None
    mpls: list[int] = []
    for e in j.get("history", []):
        if e["kind"] == "partition" and (not mpls or mpls[-1] != e["mpl"]):
            mpls.append(e["mpl"])
    return {
        "id": j["id"], "user": j["user"], "name": j["name"], "state": j["state"],
        "end_cause": j.get("end_cause"), "exit_code": j["exit_code"],
        "job_class": j["job_class"], "nranks": j["nranks"], "submit_time": submit, "start_time": start,
        "end_time": end, "wait": wait, "run": run, "response": response,
        "slowdown": response / run if response and run else None, "cpu_seconds": j["cpu_seconds"],
        "energy_j": j.get("energy_j"),
        "requeues": j["requeues"], "time_limit": j["time_limit"], "estimate": j["estimate"],
        "deadline": j["deadline"], "mpl_history": " -> ".join(map(str, mpls)) or "-",
        "partitions": [{"time": e["time"], "cpus": e["cpus"], "mpl": e["mpl"], "queue": e["queue"]}
                       for e in j.get("history", []) if e["kind"] == "partition"],
    }  # fmt: skip


def energy_by_user(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per user: jobs, CPU-seconds and energy (joules, kWh) of the given accounting rows."""
    users: dict[str, dict[str, Any]] = {}
    for r in rows:
        u = users.setdefault(r["user"], {"user": r["user"], "jobs": 0, "cpu_seconds": 0.0, "energy_j": 0.0})
        u["jobs"] += 1
        u["cpu_seconds"] += r["cpu_seconds"] or 0.0
        u["energy_j"] += r.get("energy_j") or 0.0
    for u in users.values():
        u["energy_kwh"] = u["energy_j"] / 3.6e6
    return sorted(users.values(), key=lambda u: u["user"])
