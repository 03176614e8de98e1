"""Property tests of the partition arithmetic (thesis eq. 3.1, §3.3.1.2)."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from vmsched.cpumanager import shm_layout as L
from vmsched.cpumanager.partition import (
    AdmissionError,
    JobShape,
    assign_cpus,
    home_cpu,
    minimum_partition,
    partition_sizes,
    plan_partitions,
    rank_cpus,
)


@st.composite
def scenarios(draw):
    """A previous state (jobs with partitions) and a next state (some jobs gone, some new)."""
    ncpus = draw(st.integers(1, 64))
    cpus = tuple(sorted(draw(st.sets(st.integers(0, 127), min_size=ncpus, max_size=ncpus))))
    n_jobs = draw(st.integers(1, 12))
    jobs = [
        (i + 1, draw(st.integers(1, 64)), draw(st.integers(1, 8)))  # job id, ranks, max MPL
        for i in range(n_jobs)
    ]
    old_ids = draw(st.sets(st.sampled_from([j[0] for j in jobs])))
    old_jobs = [JobShape(j, n, m) for j, n, m in jobs if j in old_ids]
    assume(sum(minimum_partition(s.nranks, s.max_mpl) for s in old_jobs) <= ncpus)
    old_waiting = draw(st.booleans())
    old = plan_partitions(old_jobs, {}, cpus, queue_empty=not old_waiting)
    keep = draw(st.sets(st.sampled_from(sorted(old_ids)))) if old_ids else set()
    new_jobs = [JobShape(s.job_id, s.nranks, s.max_mpl, len(old[s.job_id])) for s in old_jobs if s.job_id in keep]
    new_jobs += [JobShape(j, n, m, 0) for j, n, m in jobs if j not in old_ids and draw(st.booleans())]
    assume(sum(minimum_partition(s.nranks, s.max_mpl) for s in new_jobs) <= ncpus)
    waiting = draw(st.booleans())
    return cpus, old, new_jobs, waiting


@settings(max_examples=400, deadline=None)
@given(scenarios())
def test_partition_invariants(sc):
    cpus, old, jobs, waiting = sc
    current = {j: c for j, c in old.items()}
    plan = plan_partitions(jobs, current, cpus, queue_empty=not waiting)
    assert set(plan) == {j.job_id for j in jobs}
    seen: set[int] = set()
    for s in jobs:
        part = plan[s.job_id]
        assert len(set(part)) == len(part)
        assert not (seen & set(part)), "a CPU is in two partitions"
        seen |= set(part)
        assert set(part) <= set(cpus), "a partition uses an unmanaged CPU"
        assert len(part) >= minimum_partition(s.nranks, s.max_mpl), "job below its minimum"
        assert len(part) <= s.nranks, "more CPUs than ranks"
        if waiting:
            assert len(part) <= max(minimum_partition(s.nranks, s.max_mpl), s.current), "expanded while jobs wait"
        if s.job_id in old and len(old[s.job_id]) == len(part):
            assert part == old[s.job_id], "same size but CPUs moved"
        if s.job_id in old and len(part) < len(old[s.job_id]):
            assert part == old[s.job_id][: len(part)], "a shrinking job must keep a prefix of its CPUs"
        if s.job_id in old and len(part) > len(old[s.job_id]):
            assert part[: len(old[s.job_id])] == old[s.job_id], "a growing job must keep its CPUs"
    if not waiting:
        # Work-conserving with an empty queue: idle CPUs only when every job has one CPU per rank.
        idle = len(cpus) - len(seen)
        assert idle == 0 or all(len(plan[s.job_id]) == s.nranks for s in jobs)
    assert plan == plan_partitions(jobs, current, cpus, queue_empty=not waiting), "not deterministic"


def test_balanced_steps_before_equipartition():
    # 8 CPUs: A (8 ranks, MPL 4) min 2, B (6 ranks, MPL 3) min 2; left-over 4.
    # Balanced steps: A 2->4 (+2), B 2->3 (+1); then 1 CPU by equipartition to the smaller (B: 3->4).
    sizes = partition_sizes([JobShape(1, 8, 4), JobShape(2, 6, 3)], 8, queue_empty=True)
    assert sizes == {1: 4, 2: 4}
    # While jobs wait, nobody grows past its minimum (no current size yet).
    assert partition_sizes([JobShape(1, 8, 4), JobShape(2, 6, 3)], 8, queue_empty=False) == {1: 2, 2: 2}


def test_thesis_example_two_folded_jobs_on_two_cpus():
    alone = plan_partitions([JobShape(1, 4, 4)], {}, (0, 1), queue_empty=True)
    assert alone == {1: (0, 1)}
    both = plan_partitions([JobShape(1, 4, 4, 2), JobShape(2, 4, 4)], alone, (0, 1), queue_empty=True)
    assert both == {1: (0,), 2: (1,)}
    again = plan_partitions([JobShape(1, 4, 4, 1)], {1: (0,)}, (0, 1), queue_empty=True)
    assert again == {1: (0, 1)}


def test_admission_that_cannot_fit():
    with pytest.raises(AdmissionError, match="need at least 3 CPUs"):
        partition_sizes([JobShape(1, 4, 2), JobShape(2, 1, 1)], 2, queue_empty=True)


def test_assign_ignores_stale_and_duplicate_cpus():
    out = assign_cpus({1: 1, 2: 1}, {1: (5, 0), 2: (0,)}, (0, 1))
    assert out == {1: (0,), 2: (1,)}


def test_rank_mapping_round_robin():
    part = (4, 7, 9)
    assert [rank_cpus(r, part, True) for r in range(5)] == [(4,), (7,), (9,), (4,), (7,)]
    assert rank_cpus(3, part, False) == part
    # Block placement: consecutive ranks share a CPU.
    assert [rank_cpus(r, part, True, 5, L.PLACE_BLOCK) for r in range(5)] == [(4,), (4,), (7,), (7,), (9,)]
    with pytest.raises(ValueError):
        minimum_partition(0, 1)


@given(st.integers(1, 1024), st.integers(1, 256))
@settings(max_examples=300)
def test_block_placement_gives_each_cpu_a_run_of_consecutive_ranks(nranks: int, ncpus: int) -> None:
    """Every CPU of a folded job gets floor or ceil(N / P) ranks, consecutive, in CPU order; the same counts
    as r mod P (so a block placement folds no CPU deeper); a rank out of range maps as r mod P would."""
    assume(ncpus <= nranks)
    homes = [home_cpu(r, nranks, ncpus, L.PLACE_BLOCK) for r in range(nranks)]
    assert homes == sorted(homes) and set(homes) == set(range(ncpus))
    counts = sorted(homes.count(c) for c in range(ncpus))
    assert counts == sorted([home_cpu(r, nranks, ncpus) for r in range(nranks)].count(c) for c in range(ncpus))
    assert counts[-1] - counts[0] <= 1
    assert home_cpu(nranks, nranks, ncpus, L.PLACE_BLOCK) == nranks % ncpus
