"""Start rules: for the job at the head of the queue, which size and max MPL, and whether to start now.

One class per rule of thesis ch. 5 §5.4.1 (plus FCFS and the percentage offers), each answering three
questions about a queued job:

- try_start: start it now (recording the decisions in the workspace) or leave it waiting;
- preferred: the shape it would get with enough CPUs free (what a backfilling reservation is made for);
- backfill_shapes: shapes it may be backfilled with, best first ([] = not eligible).

CPU arithmetic is that of the CPU manager: a shape needs its minimum partition ceil(N / max MPL), and it
fits when the minimum partitions of all running jobs and its own fit in the machine.
"""

from __future__ import annotations

import math

from vmsched.cpumanager.partition import minimum_partition

from .decisions import Reason
from .profile import FreeProfile
from .sizes import Shape, allowed_up_to, estimate_at, largest_allowed, mpl_cap, percentage_offers
from .snapshot import QueuedJob, RunningJob
from .workspace import Workspace


class StartRule:
    name = ""
    # Whether try_start may shrink running jobs to make room (it can then start a job with no CPU
    # free), and whether mold_new changes queued jobs: decide() cannot skip a full machine then.
    makes_room = False
    molds_queued = False
    # Whether `preferred` depends on more than the job, the machine size and the config (the queue, the
    # profile): a conservative plan can then not be carried over to the next pass.
    preferred_depends_on_state = False

    def mold_new(self, ws: Workspace) -> None:
        """Fix the size of newly queued jobs before anything starts (only SA at submission does)."""

    def shapes(self, job: QueuedJob, ws: Workspace) -> list[Shape]:
        """Shapes the rule accepts for the job now, best first."""
        raise NotImplementedError

    def try_start(self, job: QueuedJob, ws: Workspace) -> bool:
        free = ws.free_now()
        if job.floor_cpus > free:
            # No shape needs fewer CPUs than the job's floor (the start rules fold no further than the
            # user's cap), and every start here must fit the free CPUs: the head mostly waits this way.
            return False
        for shape in self.shapes(job, ws):
            if ws.fits(job.job_id, shape):
                ws.start(job, shape, Reason(_start_text, self.name, job, shape, ws.ncpus, free))
                return True
        return False

    def preferred(self, job: QueuedJob, ws: Workspace) -> Shape:
        # The best shape the machine can ever hold: a reservation for a shape that never fits would
        # protect nothing, and backfilled jobs could then keep the job waiting for ever.
        shapes = self.shapes(job, ws)
        for s in shapes:  # asked for the head at every pass: a plain loop is cheapest
            if s.cpus <= ws.ncpus:
                return s
        return shapes[0]

    def backfill_shapes(self, job: QueuedJob, ws: Workspace) -> list[Shape]:
        return self.shapes(job, ws)


def fold_to_fit(job: QueuedJob, shapes: list[Shape], ws: Workspace) -> list[Shape]:
    """The rule's shapes; or, when none of them fits this machine even idle, each folded just enough to
    fit (the least folding any of them needs, within the user's and the policy's MPL caps): virtual
    malleability lets a job bigger than the node run folded rather than never. Unchanged shapes when no
    allowed folding fits (the job then never starts, and submission refuses it)."""
    ncpus = ws.ncpus
    for s in shapes:  # the common case, on every pass for every job: a plain loop is cheapest
        if s.cpus <= ncpus:
            return shapes
    folded = [Shape(s.nranks, -(-s.nranks // ncpus)) for s in shapes]
    least = min(s.max_mpl for s in folded)
    fits = least <= mpl_cap(ws.cfg, job.max_mpl)
    return [s for s in folded if s.max_mpl == least] if fits else shapes


def fold_note(job: QueuedJob, shape: Shape, ncpus: int) -> str:
    """What the job's history says when it starts folded because no allowed count fits the node."""
    if shape.max_mpl > 1 and job.procs[-1] > ncpus:
        return f"; folded to fit this node's {ncpus} CPUs (no allowed count of ranks fits unfolded)"
    return ""


def _start_text(rule: str, job: QueuedJob, shape: Shape, ncpus: int, free: int) -> str:
    return f"{rule}: {_describe(job, shape, ncpus)} ({free} CPUs free)"


def _describe(job: QueuedJob, shape: Shape, ncpus: int) -> str:
    text = f"start {shape.nranks} ranks"
    if shape.nranks != job.procs[0]:
        text += f" of {job.procs[0]} requested"
    if shape.max_mpl > 1:
        text += f", max MPL {shape.max_mpl} (at least {shape.cpus} CPUs)"
    return text + fold_note(job, shape, ncpus)


class Rigid(StartRule):
    """FCFS: the job as requested (procs[0], max MPL 1) or nothing (thesis §6.5.1 d). A job with more
    ranks than the machine has CPUs is folded just enough to fit (within the MPL caps) rather than
    never run: virtual malleability lets a rigid job run on any machine."""

    name = "fcfs"

    def shapes(self, job: QueuedJob, ws: Workspace) -> list[Shape]:
        n = job.procs[0]
        return [Shape(n, 1)] if n <= ws.ncpus else fold_to_fit(job, [Shape(n, 1)], ws)

    def preferred(self, job: QueuedJob, ws: Workspace) -> Shape:
        # StartRule.preferred for the common case (asked for the head at every pass): the request fits.
        n = job.procs[0]
        return Shape(n, 1) if n <= ws.ncpus else super().preferred(job, ws)

    backfill_shapes = shapes  # StartRule.backfill_shapes without the extra call (asked at every backfill)


class PercentageOffers(StartRule):
    """FCFS that offers a job which does not fit 80/70/60/50/40 % of its request, rounded down to an
    allowed count (moldable-deadline-backfilling paper, "variação"); max MPL 1."""

    name = "moldable"

    def shapes(self, job: QueuedJob, ws: Workspace) -> list[Shape]:
        return fold_to_fit(job, [Shape(n, 1) for n in percentage_offers(job.procs, ws.cfg.moldable_percentages)], ws)


class AspMax(StartRule):
    """ASP-MAX (thesis §5.2, §5.4.1, table 5.1): work-conserving moldability. The head job gets as many
    CPUs as are free, up to MAX (60 %) of the machine, rounded down to an allowed count; max MPL 1. A
    job whose smallest allowed count is above MAX gets that count (otherwise it could never start).
    Work-conserving: as long as something fits, the next job starts with what is left."""

    name = "asp-max"

    def shapes(self, job: QueuedJob, ws: Workspace) -> list[Shape]:
        cap = max(1, math.floor(ws.cfg.asp_max * ws.ncpus + 1e-9))
        return fold_to_fit(job, [Shape(n, 1) for n in allowed_up_to(job.procs, cap) or [job.procs[-1]]], ws)


class Psa(StartRule):
    """PSA (thesis §5.2, table 5.1): non-work-conserving moldability. The head job's size is an
    equipartition of the machine over the queued jobs (ncpus // queue length, rounded down to an allowed
    count); if that many CPUs are not free it waits, leaving CPUs idle, until a finish frees enough or
    arrivals make the share smaller. Max MPL 1."""

    name = "psa"
    preferred_depends_on_state = True

    @staticmethod
    def target(job: QueuedJob, ws: Workspace) -> int:
        share = ws.ncpus // max(1, ws.queue_length)
        return largest_allowed(job.procs, share) or job.procs[-1]

    def shapes(self, job: QueuedJob, ws: Workspace) -> list[Shape]:
        return fold_to_fit(job, [Shape(self.target(job, ws), 1)], ws)

    def backfill_shapes(self, job: QueuedJob, ws: Workspace) -> list[Shape]:
        return fold_to_fit(job, [Shape(n, 1) for n in allowed_up_to(job.procs, self.target(job, ws))], ws)


class Folding(StartRule):
    """Folding with moldability (thesis §5.2 [PaDo96], §5.4.1 a): the head job is offered its request
    and the percentage offers (max MPL 1); when none fits, the partition of the latest started job is
    halved by doubling its max MPL (up to max_mpl_limit and the user's cap; the next latest when it
    cannot fold further), and again, until an offer fits. If folding everything cannot make room,
    nothing is folded and the job waits."""

    name = "folding"
    makes_room = True

    def shapes(self, job: QueuedJob, ws: Workspace) -> list[Shape]:
        return fold_to_fit(job, [Shape(n, 1) for n in percentage_offers(job.procs, ws.cfg.moldable_percentages)], ws)

    def try_start(self, job: QueuedJob, ws: Workspace) -> bool:
        folds: dict[int, int] = {}
        while True:
            for shape in self.shapes(job, ws):
                if ws.fits(job.job_id, shape, folds):
                    for jid, mpl in folds.items():
                        ws.set_max_mpl(jid, mpl, f"folding: halve the latest job's partition for job {job.job_id}")
                    after = f" after folding {sorted(folds)}" if folds else ""
                    ws.start(job, shape, f"folding: {_describe(job, shape, ws.ncpus)}{after}")
                    return True
            victim = self._latest_foldable(ws, folds)
            if victim is None:
                return False
            folds[victim.job_id] = 2 * folds.get(victim.job_id, victim.max_mpl)

    @staticmethod
    def _latest_foldable(ws: Workspace, folds: dict[int, int]) -> RunningJob | None:
        for r in reversed(ws.active()):
            mpl = folds.get(r.job_id, r.max_mpl)
            doubled = 2 * mpl
            if doubled <= mpl_cap(ws.cfg, r.max_mpl_cap) and minimum_partition(r.nranks, doubled) < minimum_partition(
                r.nranks, mpl
            ):
                return r
        return None


class Fjt(StartRule):
    """Folding by Job Type (thesis §5.3, fig. 5.5; table 5.1).

    Size: an equipartition of the machine over the queued long jobs if there are any, else over all
    queued jobs (like PSA), rounded down to an allowed count. Long jobs are the malleable ones: L =
    fjt_long_mpl (4), capped by max_mpl_limit and the user. "Shrinking" a running long job that runs
    with max MPL < L means SetMaxMpl(job, L): the CPU manager then shrinks it for the new job.

    - Short head: if idle CPUs or shrinkable long jobs leave room for an allowed count, start it
      unfolded (max MPL 1) with the largest that fits, shrinking long jobs (latest started first) only
      as far as needed; else wait.
    - Long head, no other long job queued: start it shrunk (its size, max MPL L, at least ceil(N/L)
      CPUs, expanding later) if short jobs are running (their CPUs will come to it), or CPUs are idle,
      or running long jobs can shrink. Wait if short jobs run while a running long job is shrunk: their
      CPUs are expected to go to that job. (Fig. 5.5's flattened pseudocode reads "short jobs running
      => wait"; §5.3's text says a long job starts shrunk precisely when short jobs run and their CPUs
      are not expected to go to running long jobs, and fig. 5.2 (3) and the issue's acceptance test
      need that; this follows the text.)
    - Long head with other long jobs queued: if CPUs are idle or running long jobs can shrink, start
      it expanded (max MPL 1, the largest allowed count that fits, at most its share); else wait. A
      job whose smallest count exceeds the machine can never run expanded and is started shrunk.

    With L = 1 this is the FJT(1) of ch. 6: every job moldable, nothing folded.
    """

    name = "fjt"
    makes_room = True
    preferred_depends_on_state = True

    def long_mpl(self, ws: Workspace, user_cap: int | None) -> int:
        return min(ws.cfg.fjt_long_mpl, mpl_cap(ws.cfg, user_cap))

    def target(self, job: QueuedJob, ws: Workspace) -> int:
        share = ws.ncpus // max(1, ws.long_queued or ws.queue_length)
        return largest_allowed(job.procs, share) or job.procs[-1]

    def _other_long_queued(self, job: QueuedJob, ws: Workspace) -> bool:
        return ws.long_queued > (job.job_class == "long")

    def _shrinkable(self, ws: Workspace) -> list[tuple[RunningJob, int]]:
        """Running long jobs that SetMaxMpl(L) would shrink, latest started first, with that L."""
        result = []
        for r in reversed(ws.active()):
            mpl = self.long_mpl(ws, r.max_mpl_cap)
            if r.job_class == "long" and minimum_partition(r.nranks, mpl) < minimum_partition(r.nranks, r.max_mpl):
                result.append((r, mpl))
        return result

    def preferred(self, job: QueuedJob, ws: Workspace) -> Shape:
        if job.job_class == "long" and (not self._other_long_queued(job, ws) or job.procs[-1] > ws.ncpus):
            return fold_to_fit(job, [Shape(self.target(job, ws), self.long_mpl(ws, job.max_mpl))], ws)[0]
        return fold_to_fit(job, [Shape(self.target(job, ws), 1)], ws)[0]

    def shapes(self, job: QueuedJob, ws: Workspace) -> list[Shape]:
        return fold_to_fit(job, [Shape(n, 1) for n in allowed_up_to(job.procs, self.target(job, ws))], ws)

    def backfill_shapes(self, job: QueuedJob, ws: Workspace) -> list[Shape]:
        # Thesis §6.4.2: only short jobs are eligible for backfilling.
        return self.shapes(job, ws) if job.job_class == "short" else []

    def try_start(self, job: QueuedJob, ws: Workspace) -> bool:
        shrinkable = self._shrinkable(ws)
        free_now = ws.free_now()
        free_max = ws.free_now({r.job_id: mpl for r, mpl in shrinkable})
        target = self.target(job, ws)
        if job.job_class == "short":
            if job.procs[-1] > ws.ncpus:  # could never run unfolded here: starts folded just enough to fit
                shape = fold_to_fit(job, [Shape(job.procs[-1], 1)], ws)[0]
                return shape.cpus <= free_max and self._launch(job, shape, shrinkable, ws, "short job, folded")
            n = largest_allowed(job.procs, min(target, free_max))
            return n is not None and self._launch(job, Shape(n, 1), shrinkable, ws, "short job, unfolded")
        # A long job too big to ever run expanded on this machine can only start shrunk, even with
        # other long jobs queued (else it would wait for ever).
        if not self._other_long_queued(job, ws) or job.procs[-1] > ws.ncpus:
            active = ws.active()
            short_running = any(r.job_class == "short" for r in active)
            long_shrunk = any(r.job_class == "long" and r.cpus < r.nranks for r in active)
            if short_running and long_shrunk:
                return False  # the short jobs' CPUs go to the shrunk long job first
            if not (short_running or free_now > 0 or free_max > free_now):
                return False
            mpl = self.long_mpl(ws, job.max_mpl)
            shapes = fold_to_fit(job, [Shape(p, mpl) for p in allowed_up_to(job.procs, target)], ws)
            shape = next((s for s in shapes if s.cpus <= free_max), None)
            return shape is not None and self._launch(job, shape, shrinkable, ws, "long job, starts shrunk")
        if free_max <= 0:
            return False
        n = largest_allowed(job.procs, min(target, free_max))
        return n is not None and self._launch(job, Shape(n, 1), shrinkable, ws, "long job, starts expanded")

    def _launch(
        self, job: QueuedJob, shape: Shape, shrinkable: list[tuple[RunningJob, int]], ws: Workspace, why: str
    ) -> bool:
        """Start the job, first shrinking as few long jobs as it needs (latest started first)."""
        raised: dict[int, int] = {}
        for r, mpl in [(None, 0), *shrinkable]:
            if r is not None:
                raised[r.job_id] = mpl
            if ws.fits(job.job_id, shape, raised):
                for jid, m in raised.items():
                    ws.set_max_mpl(jid, m, f"fjt: long job shrinks for job {job.job_id}")
                ws.start(job, shape, f"fjt: {why}: {_describe(job, shape, ws.ncpus)}")
                return True
        return False


class SaStart(StartRule):
    """SA request selection (Cirne & Berman's "Supercomputer AppLeS", metrics dissertation), again at
    every start or backfill opportunity: of the job's allowed sizes, the one with the smallest predicted
    response time, i.e. predicted start (the earliest slot in the conservative profile of the running
    jobs) plus its estimated run time at that size; it starts when that slot is now. Max MPL 1."""

    name = "sa-start"
    preferred_depends_on_state = True

    def best(self, job: QueuedJob, ws: Workspace, profile: FreeProfile | None = None) -> Shape:
        profile = profile or ws.profile()
        choices = []
        for shape in fold_to_fit(job, [Shape(n, 1) for n in job.procs], ws):
            if shape.cpus > ws.ncpus:
                continue
            duration = estimate_at(job, shape.nranks)
            start = profile.earliest_start(shape.cpus, duration)
            if start is not None:
                choices.append((start + duration, -shape.nranks, shape))
        return min(choices)[2] if choices else fold_to_fit(job, [Shape(job.procs[-1], 1)], ws)[0]

    def shapes(self, job: QueuedJob, ws: Workspace) -> list[Shape]:
        return [self.best(job, ws)]


class SaSubmit(SaStart):
    """SA request selection once, at submission: a job with several allowed sizes is molded (made rigid)
    to the size with the smallest predicted response time in the conservative profile of that moment
    (running jobs plus the reservations of the jobs ahead of it), and then waits for that size."""

    name = "sa-submit"
    molds_queued = True
    preferred_depends_on_state = False  # a molded job has one size

    def mold_new(self, ws: Workspace) -> None:
        """Mold the jobs that still have a choice (those submitted since the last pass), in order."""
        profile = ws.profile()
        for job in ws.ordered():
            if len(job.procs) > 1:
                best = self.best(job, ws, profile)
                start = profile.earliest_start(best.cpus, estimate_at(job, best.nranks))
                when = "never fits" if start is None else f"start t={start:g}"
                job = ws.mold(job, best.nranks, f"sa-submit: {best.nranks} ranks predicted to respond soonest ({when})")
            shape = self.shapes(job, ws)[0]
            duration = estimate_at(job, shape.nranks)
            start = profile.earliest_start(shape.cpus, duration) if shape.cpus <= ws.ncpus else None
            if start is not None:
                profile.reserve(start, start + duration, shape.cpus)

    def shapes(self, job: QueuedJob, ws: Workspace) -> list[Shape]:
        return fold_to_fit(job, [Shape(job.procs[0], 1)], ws)


RULES: dict[str, StartRule] = {
    rule.name: rule for rule in (Rigid(), PercentageOffers(), AspMax(), Psa(), Folding(), Fjt(), SaStart(), SaSubmit())
}
