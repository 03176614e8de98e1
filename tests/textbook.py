"""Textbook EASY and conservative backfilling for rigid jobs with exact run times, written for the tests.

Deliberately shares no code with vmsched: it is the yardstick that `vmsim` is checked against (start
times job by job) and the baseline of bench/vmsim_speed.py. Jobs are (job_id, submit, runtime, procs);
the queue is FCFS by (submit, job_id); at an instant, every finish and arrival is taken in before
anything is scheduled; reservations are rebuilt from scratch at every instant.
"""

from __future__ import annotations

import bisect
import heapq

Job = tuple[int, float, float, int]  # job_id, submit, runtime (= estimate), procs


def easy(jobs: list[Job], ncpus: int) -> dict[int, float]:
    """EASY [Lifka 95]: start in order while the head fits; then backfill any job that fits now and
    either ends by the head's shadow time or uses only the CPUs the head leaves spare then."""
    arrivals = sorted(jobs, key=lambda j: (j[1], j[0]))
    ends: list[tuple[float, int]] = []  # heap of (end, procs) of running jobs
    queue: list[Job] = []
    start: dict[int, float] = {}
    free, i = ncpus, 0
    while i < len(arrivals) or queue:
        now = min(arrivals[i][1] if i < len(arrivals) else float("inf"), ends[0][0] if ends else float("inf"))
        while ends and ends[0][0] <= now:
            free += heapq.heappop(ends)[1]
        while i < len(arrivals) and arrivals[i][1] <= now:
            queue.append(arrivals[i])
            i += 1
        while queue and queue[0][3] <= free:
            jid, _, run, procs = queue.pop(0)
            start[jid] = now
            free -= procs
            heapq.heappush(ends, (now + run, procs))
        if not queue or free == 0:
            continue
        head_procs, avail = queue[0][3], free
        for end, procs in sorted(ends):
            avail += procs
            if avail >= head_procs:
                shadow, extra = end, avail - head_procs
                break
        kept = [queue[0]]
        for job in queue[1:]:
            jid, _, run, procs = job
            if procs <= free and (now + run <= shadow or procs <= extra):
                start[jid] = now
                free -= procs
                if now + run > shadow:
                    extra -= procs
                heapq.heappush(ends, (now + run, procs))
            else:
                kept.append(job)
        queue = kept
    return start


def conservative(jobs: list[Job], ncpus: int) -> dict[int, float]:
    """Conservative backfilling [Mu'alem & Feitelson 01] with exact run times: each job, in FCFS order,
    gets at its arrival the earliest slot in the profile of all earlier jobs' slots, and starts then.
    (Reservations are never compressed: with exact run times no job ends before its slot says.)"""
    times, free = [0.0], [ncpus]  # free[k] CPUs from times[k] to times[k + 1]; the last step lasts forever
    start: dict[int, float] = {}
    for jid, submit, run, procs in sorted(jobs, key=lambda j: (j[1], j[0])):
        # The past no longer matters: the profile starts at this arrival.
        k = bisect.bisect_right(times, submit) - 1
        times, free = [submit, *times[k + 1 :]], free[k:]
        k = 0
        while True:  # first step k from which procs stay free for run seconds
            j = k
            while j < len(times) and (j == k or times[j] < times[k] + run) and free[j] >= procs:
                j += 1
            if j == len(times) or times[j] >= times[k] + run:
                break
            k = j + 1
        t0, t1 = times[k], times[k] + run
        pos = bisect.bisect_left(times, t1)
        if pos == len(times) or times[pos] != t1:
            times.insert(pos, t1)
            free.insert(pos, free[pos - 1])
        for i in range(k, pos):
            free[i] -= procs
        start[jid] = t0
    return start
