"""Load Balancing Detector (thesis §4.3.3, §4.4.3-4.4.5), as pure functions.

A job starts on a global queue. Every quantum the CPU manager feeds the per-rank context-switch
counts; the coefficient of variation (CVCS) is chaotic while the job initializes and then settles.

Stabilization (ours; the thesis only says "as soon as it becomes constant"): the mean count per rank
must have reached `min_switches`, and the relative change of CVCS from one quantum to the next must
stay below `stable_change` for `stable_quanta` consecutive quanta - or only `fast_quanta` once the
mean count reaches `busy_switches`: a CVCS of hundreds of switches per rank no longer moves by chance.

Settling (ours): a job that is busy that early is past its start-up, but its CVCS need not settle: on
the global queue the count of switches of each rank depends on the order of the hand-offs, and a ring
of 4 ranks folded 2 per CPU moved its CVCS by more than 5 % per quantum for 0.47 s, measuring at a
quarter of the speed of local queues (bench/patterns.py --shapes 4x2: default 0.92 s, local 0.45 s).
So a busy job goes on to its window after `settle_quanta` quanta at most: the window's own errors are
what the trials and re-checks below correct.

Quick window (ours, 2026-12-07, sixty-second session): that settling and the window after it kept a busy job
on the global queue for 8-9 quanta, where a fine-grained job makes a third of the calls it makes on local queues
(IMB Exchange 4x2, the Intel MPI Benchmarks: 14-23 thousand MPI calls per quantum there, 52-58 in block; about
0.04 s lost of a 1.2-s run). So a busy job's first window opens at its first busy quantum, and closes as any window
does (on `window_calls` calls per rank, below), its CVCS read on meanwhile. Only a balanced reading of it is
taken: local queues, then their trial against this window, as for any first window that reads balanced. An
imbalanced reading, or none (too few calls by the time its window was due, or no counts), is not taken: the
job's window opens when it would have without one (its CVCS steady `fast_quanta`, or busy `settle_quanta`),
from that read if that is now. An imbalanced job is therefore read no earlier than before: a window opened
earlier read master-worker while its master still handed out the first tasks, and the reverse trial that
followed failed (`settle_quanta` 2: 6 of 12 runs against 2 of 12; docs/vmruntime-journal.md, 2026-11-27 and
the fourteenth, thirty-first and thirty-seventh sessions), while a balanced reading only brings forward the
local trial any balanced window leads to, which fails local queues that make 20 % fewer calls per CPU second.
Measuring then cost IMB Exchange 4x2 0.013 s instead of 0.040 s (against its own pace after the trials, 16 runs
each). Default / best way, paired, without and with it (16 rounds of both in one manager): IMB Exchange 4x2 1.141
-> 1.130, ring 4x2 1.115 -> 1.087, groups 4x2 1.109 -> 1.089, random pairs 8x2 1.054 -> 1.030, halo-persist 4x2
1.133 -> 1.131; 12 rounds: tree 4x2 1.12 -> 1.088, tree 8x2 1.065 -> 1.061. ring-rev 4x2 lost a little: with
against without, paired, 1.009-1.030 in three sets (faster in 14 of 48 rounds), though it decided alike and its
measuring cost less; its pace after the trials varied more from run to run (not explained). master-worker 4x2
and 8x2 read imbalanced in every quick window (12 runs each) and decided as before (1.034 -> 1.043, 1.048 ->
1.039). Figures: docs/vmruntime-journal.md, sixty-second session. `lbd_quick_window = false` turns it off.

Idleness window: then the CPU time of every rank is sampled every `sample_quanta` quanta, and the
window closes when the ranks' mean CPU time in it reaches `window_cpu_s` (or after `ip_quanta` quanta
at most). The idleness percentage IP over the window decides: IP < threshold -> balanced -> local
queues; otherwise the job stays on the global queue. The window is counted in the ranks' own CPU time,
not in quanta, because its error is one compute phase per rank at each end (a rank caught just before
or just after its phase): a balanced send.S (8.5 ms phases) on a loaded machine got 0.08 s of CPU per
rank in the thesis's 50 quanta and read IP 3-14 % across the 10 % cut-off. Over 0.1 s of CPU per rank
it read at most 8.7 % in one trace (send.50x6 at least 23 %; /proc/<pid>/schedstat every 20 ms, load
3-5), but at load 11 a 0.12 s window still put 2 balanced runs in 5 at IP 10.8-11.5 %; over 0.2 s the
trace read at most 7.1 %, hence 0.2 s. Unloaded that is 0.4 s of wall time for 4 ranks on 2 CPUs
(the old rule: 10 steady quanta, then 50 quanta); under load the window grows with the load instead
of losing its accuracy. A first decision that was wrong is corrected by the re-checks below.

Short windows for short phases (ours): that error is one phase per rank at each end, so what a window
needs is phases, not seconds, and every compute phase ends at an MPI call. A ring of 4 ranks folded 2
per CPU makes some 150,000 MPI calls per CPU second of its ranks; its 0.2 s window took 0.75 s of wall
time, and the 1.4 s ring spent 80 % of its run measuring on the global queue, which runs it at half the
speed of local queues. The first window therefore also closes once the ranks have made, on average,
`window_calls` (200) MPI calls each in it and used `window_min_cpu_s` (0.005 s) of CPU each: the ring
then decides after some 0.1 s; with the CPU times read every quantum (`sample_quanta` 1, was 5: a few
reads of /proc per quantum and measuring job) and 0.015 s rather than 0.03 s, the window of a ring
folded 2 per CPU closes after 7 quanta instead of 16 (each spent at a sixth of the speed of local
queues); 200 calls in it still bound its phases to 1 % of it. 0.005 s since 2026-12-01: a reduction tree
of 8 ranks on 2 CPUs made 1,750 calls per rank in its 10-quantum window at a third of the pace of local
queues, which ran it 1.15x as fast as the default did; with 0.005 s the default ran 0.929-0.962x as long
as with 0.015 s (medians of 12-16 paired rounds, three A/Bs), a reverse ring 4x2 0.977x, random pairs
4x2 and halo-persist 4x2 1.00x and 0.985x (the CPU times are /proc/<pid>/schedstat's nanoseconds: 5 ms
reads as exactly as 15 ms; what bounds the error is the calls). A job of 8.5 ms phases (send.S: some 210
calls per CPU second) needs its 0.2 s as before. Counted in calls, not in the ranks' `ctx_switches`: a
balanced send.S gives up its CPU some 5,500 times per CPU second on the global queue (each wait hands
the token round), and a window of 100 of those read IP 15 %. Calls bound phases only from above (several
calls may end one phase), hence 200 rather than the 100 phases that would make the error 2 %; a wrong
first decision is corrected as below. The re-check windows of a job decided global close by the same
rule: the ring, which reads IP 9-13 % in its first window in one run in three (its ranks' share of the
CPU on the global queue depends on the token's hand-offs as much as on the program) and 0-5 % in the
next, then reaches local queues after two short windows instead of two of 0.2 s.

Too few calls (ours): a window holds at least `window_min_calls` (4) MPI calls per rank on average, or
it stays open (to `ip_quanta` quanta at most). A rank that computes between calls keeps its token, so
over a window shorter than its phases the ranks' CPU times say who held a token, or who was still
starting up, not whether the job is balanced. ep (one Allreduce at its end), 4 ranks on 2 CPUs, made
3.7 calls per CPU second in its windows, under one per rank: they read IP 8-12 % in most runs and 23 %
and 38 % in two of ten, whose reverse trials failed; those two were the slowest runs (0.67 and 0.76 s
against 0.47-0.59 s, ep.S with default options, 2026-11-28). A window still short of calls at
`ip_quanta` reads nothing: the job keeps its queue (after a first window the global queue, after a
periodic re-measure local queues), without a trial, and a re-check window that short starts afresh.
Jobs that call MPI at all often are not concerned: send.50x6, 50-ms phases, has 9-14 calls per rank in
its windows.

Too sparse for a trial (ours, 2026-12-05): a window may hold calls enough to read IP and still far too few
for any trial of the job to judge. The trials below read a pace only over `window_calls` (200) calls per
rank and last `ip_quanta` (300) quanta at most; a rank that makes c MPI calls per CPU second, with its share
of the partition (P CPUs among N ranks: min(1, P / N) of one), makes at most c * min(1, P / N) * ip_quanta
* quantum calls in one, under 200 where c is under 133 at MPL 2 (267 at MPL 4) with 10-ms quanta
(`too_sparse`). Such a window does not move the job to local queues: their trial could only keep
the window's decision unread, and the placement and global trials, which follow a trial that held its
calls, would never run. The job stays on the global queue (`why=sparse_calls`), its re-check windows count
for nothing however balanced they read, and a local job re-measured that sparse goes there too. Global,
because every program this sparse that was measured ran there as fast as on local queues in r mod P, or
faster: NPB FT, 4 ranks on 2 CPUs (8-12 calls per CPU second in its windows), ran in r mod P some 10 % slower
than on the global queue or in a block placement (its Alltoall waits out the queue-mate's computation on
the rank's own CPU), and the patterns with long compute phases (bench/patterns.py --work 5000: 54-237 calls
per CPU second in their windows; 24 cases) ran on the global queue within 2 % of local queues or faster (up
to 10 %, master-worker). Counted per CPU second of the ranks, not per second: outside load slows a trial, not the
program's grain, and a balanced send.S (some 210 per CPU second) stays a local job on a loaded node. Figures:
docs/vmruntime-journal.md, fifty-second session. `lbd_sparse_global = false` turns it off.

Yields in the window (the runtime's, 2026-11-28): while a job measures (LBD_MEASURING, LBD_STABLE: its
first window, and a decided-local job's re-measure windows), its ranks on the global queue yield their
CPU for up to the first 100 us of each MPI call that waits for a receive or a send before they sleep, as
on local queues (collectives sleep at once). That CPU time reads as work here. It is nothing beside
waits of milliseconds (send.50x6 read IP 39-40 % with and without it, a balanced send.S 3.1-3.5 %
against 3.2-4.2 %); fine-grained jobs read less idleness, towards the local queues they run faster on (a
ring of 4 on 2 CPUs 1.1-6.1 % against 1.3-9.1 %), and their local trial judges them as before. Asleep at
once, such a job measured at a fraction of its speed: the ring's ranks on the global queue waited 35-80
us per call, 11 us yielding.

Local trial (ours): the thesis's premise, balanced -> local queues are faster, does not hold for every
pattern now that the global queue hands the token to a rank that can make progress: folded onto one CPU
(where the local queue is plain round robin) a pipeline ran 3.1x slower on local queues
(bench/patterns.py --quick, 4 ranks: 1.77 s vs 0.56 s with `progress`). So a job decided local runs a
trial as long as the global window that led to it and compares the ranks' MPI calls (the manager's
counters; for an iterative program a measure of progress) per CPU second of the ranks: if local made
more than `trial_margin` less progress per CPU second, the job goes back to the global queue and stays
there until its next periodic re-measure (after its second failed trial: "Two strikes" below). Per CPU
second, not per quantum: a round robin that wakes ranks that cannot go on burns the CPU in hand-offs and
polls, which this sees, while outside load, which changes from one window to the next, cancels out (per
quantum, the trial sent balanced jobs back to the global queue at load 11). The margin is 20 %: a
balanced send.S read 182-216 calls per CPU second on the global queue and 182-209 on local queues from
one window to the next (load 11). A trial fails a job only over `window_calls` (200) calls per rank, the
bound that makes a short window's phases 1 % of it: a balanced send.S's trial holds some 40 calls per
rank, a phase more or less moves its rate by 20 %, and it failed so in 1 of 6 runs of
tests/test_runtime_lbd.py (held on the global queue for the 10 s to its re-measure). A trial that is
behind over fewer calls goes on until it holds them, or for `ip_quanta` quanta (the first window's
bound), and the window's decision stands if it never does: a trial as long as its window would never
hold them when local queues are slower, since a window that closed on its count of calls holds just over
200 per rank, and fewer calls in as many quanta is what "slower" means.

Clearly behind (ours, 2026-12-06): a trial that is far behind need not wait for 200 calls per rank. A
send.50x6 whose periodic re-measure read it in its balanced phase (local by idleness) and whose trial ran
in its imbalanced one made 173-226 calls per CPU second on local queues against 800-900 in the window: at
that pace 200 calls per rank took 1.2-2.6 s of local queues, where the global queue would have run the job
4x as fast. So once the trial has run as long as its window, local queues that made under `behind_share`
(half) of the window's calls per CPU second, over `behind_calls` (50) calls per rank, have failed. A phase
more or less (some 10 calls per rank in send.50x6) moves a pace read over 50 calls per rank by at most 20 %,
so a job within `trial_margin` of its window reads no less than 0.64 of it there; and a balanced send.S's
trials read 0.96-1.28 of their windows in 29 runs, 0.8 or less in 4 of 110 ("Two strikes" below). The job
that re-measured so, 6 paired runs each way (`lbd_behind_share` 0.5 and 0, the trial's end after the
re-measure): 0.41-0.47 s against 1.21-2.47 s (docs/vmruntime-journal.md, fifty-sixth session).
`lbd_behind_share = 0` turns the rule off. A reverse trial is not concerned: it fails unless ahead.

Failed at a call (ours, 2026-12-07, sixty-third session): a trial's pace is read every quantum from its length on,
and a job that makes its calls in bursts reads lower with every quantum between them. MG's V-cycle makes most of
its calls on its coarse grids: mg.W 4x2 (vmsched.apps.mg) made some 60 of its 75 calls per rank and cycle in 3 of
70 quanta, so a trial read between its bursts fell under half its window's pace the first quantum it could, and
failed clearly behind at 0.497-0.500 of its window in 3 of 10 runs (its pace over whole cycles as on the global
queue; each then went back there at 2.7 s). A window closes on a call (its count of calls, or CPU time with calls
in it); so a local trial fails only at a quantum in which its calls per rank passed a multiple of `behind_calls`
(50): at a burst, whose pace a job behind over whole cycles still reads behind. It is kept at any quantum, as
before, and at `ip_quanta` it is read in any case. A job that makes 50 calls per rank in a quantum or more (the
patterns, IMB) passes one every quantum, so nothing changes for it; a steady job with fewer fails up to 50 calls
per rank later. In the same mg.W 4x2 rounds with it, no trial failed so (0 of 10 runs; the trials that began near
2 s had not ended when the runs did), and the runs' times did not move beyond the node's noise (with / without
paired 1.018, 10 rounds; NPB MG class A and B 4x2 and B 8x2 1.006, 0.989 and 1.004: their calls come 40 and more
per rank and quantum). Synthetic bursts (a sweep over tests/test_lbd.py's synthetic job: one quantum in 20-60 with
80-95 % of the calls, local queues as fast): 39 of 459 cases failed a trial without it and kept local queues with
it, none the other way. `lbd_read_at_calls = false` turns it off. Not for a reverse trial,
whose early look reads its first `trial_min_quanta` (module docstring: "Reverse trial").

The CPU seconds of a trial and of its window are the job's: its ranks' CPU time and the time the CPUs
of its partition stood idle (the manager reads /proc/stat's idle time at the instants it reads the
ranks'). A CPU that no rank uses is progress the job forgoes, but its ranks' CPU time does not show it:
a job whose ranks sleep through their waits on local queues (the runtime's short-wait rule puts a rank
whose calls wait over 30 us to sleep at once) while a CPU stands idle would read as making more progress
per CPU second there even when it makes less per second of wall time. Other processes' time on those
CPUs is still left out, so outside load still cancels out. On this 2-CPU node the windows and trials of
send.50x6, master-worker and the reduction tree (4 and 8 ranks) saw 0-0.08 s of idle time against
0.13-0.8 s of the ranks' CPU time, so their decisions did not change.

Global trial (ours): the window's global queue is not the one a job decided global runs on. While a
job measures, its ranks yield before they sleep ("Yields in the window" above); decided global, they
sleep at once. A program that hands its CPU over often can run faster on the decided global queue than
on local queues even when it is balanced: halo-persist (a stencil that exchanges its halo by persistent
requests, bench/patterns.py), 4 ranks on 2 CPUs, reads IP 0.6-10 % and its local trial keeps local
queues, yet it ran 1.60 s on the decided global queue against 1.88 s on local queues (2026-11-29); per
quantum its ranks made 2,800-3,200 MPI calls there and 2,200-2,800 on local queues. So a local trial
that keeps local queues over `window_calls` calls per rank, with the time of its reads, is followed (after
its placement trial, below) by a global trial as long as it, on the decided global queue. The job keeps
that queue only if it made `global_margin` (15 %) more calls per second of wall time there than in the
local trial (or the placement trial, where that one won), and at least `wall_floor` of its calls per CPU
second (load that left during the trial does not pass for progress);
it is then held there until its next periodic re-measure, as a job whose local trial failed twice is
(`global_faster`), since its re-check windows would read it balanced and take it straight back. Per
second of wall time, not per CPU second with `trial_margin`: on a full partition the two read alike, and
the gap is smaller than that margin. From `glance_quanta` (2) on, a global trial `trial_margin` behind
the local trial per second ends at once: a ring of 4 ranks on 2 CPUs made 74,000-95,000 calls per
second there against 960,000-1,090,000 on local queues, random pairs 220,000-280,000 against
390,000-480,000, halo-persist of 8 ranks 218,000-222,000 against 288,000-296,000, so the trial costs
them two quanta at that pace (the ring some 18 ms of its 1.2 s). Not at the first quantum: it holds the
switch of queues (halo-persist's made 1,900-2,500 calls, the next ones 2,800-3,200).

The margin is 15 % since 2026-12-02 (was `wall_margin`, 5 %): two trials of a few tenths of a second
each on this 2-CPU node differ by more than 5 % by chance. A balanced send.S (4 ranks on 2 CPUs, 0.3-s
trials), which runs as fast on either queue (whole runs, 8 paired rounds: global / local 1.02), read
global / local 0.64-1.12 in its 24 global trials, and 4 of 30 runs kept the decided global queue
(tests/test_runtime_lbd.py failed so in CI); over 15 %, none of 54 trials. The gains the trial found at
5 % were small: pipeline 4x2, whose trials read 1.08-1.16, ran 3-5 % faster where one kept the global
queue; with 15 % the default ran it 1.025x and halo-persist 4x2 1.02x as long as with 5 % (medians of 14
paired rounds).

Placement trial (ours, 2026-12-04): local queues give rank r of N the CPU r mod P (thesis fig. 3.9), so on 2
CPUs both neighbours of every rank of a 1-D stencil are on the other CPU. A block placement (rank r on CPU r *
P / N: ranks next in order share a CPU) ran halo-persist 4x2 in 0.77-0.90 of the time of r mod P, but rings up
to 1.3x as long (bench/patterns.py, way `local-block`; docs/vmruntime-journal.md, thirty-ninth session). So a
local trial that keeps local queues over `window_calls` calls per rank, with the time of its reads, is
followed by a placement trial, before the global trial. It runs in segments, in rounds of four: block, r mod
P, r mod P, block. A segment is a quantum to switch, which counts for neither placement, and then
`look_quanta` (3) quanta read; one that moves ranks to other CPUs (the first, and each that changes the
placement) leaves `move_settle_s` (0.08 s) unread instead (below, "Settling after a move"). Each placement's
MPI calls, seconds and CPU seconds are summed over its own segments; the trial runs as many rounds as give
each placement as many quanta read as the local trial had. Block `trial_margin` behind per second after one
segment each way, or after any round, ends it in r mod P (a ring, 1.5-1.9x slower in block), and so does a
round that block did not lead: block can no longer be kept, and every round more costs the job its segments in
block (11 of 18 default runs of rings, block at 0.77-1.04 of r mod P's pace over their trials, went on to a
second round; 2026-12-04). At the end, the block placement is kept if it made `block_margin` (5 %) more MPI
calls per second of wall time than r mod P over the trial's segments, and more in each round of its own, with
`window_calls` calls per rank in each placement and `wall_floor` of r mod P's calls per CPU second.

Why segments, not one look each way (2026-12-04, forty-first session): this node's speed moves by
stretches. A fixed loop on both CPUs ran 1.6-3.4 s in 10 consecutive runs; in 4-ms steps, stretches of
40-160 ms ran each step 1.5x as long. Two looks of 0.1-0.3 s one after the other compare two stretches as
much as two placements. The old rule ran one look in block against the local trial, at 5 %, then a second
look in r mod P. IMB Exchange 4x2 ran 1.11-1.15x as fast in block (whole runs), yet it kept block in only
about half of its runs; six of its eleven losses in one set were looks ended at their glance, at 0.68-0.79.
Read every quantum, a block look's pace against the local trial's started anywhere from 0.65 to 1.11 at
its second quantum and ended at 0.85-1.20 (8 looks). Over segments, each placement sees the same
stretches, and the ABBA order means a pace that drifts steadily favours neither. Leaving out the quantum
of each switch matters for rings. With it counted, a ring's block segments still carried some of r mod
P's pace: rings 4x2 read 0.59-0.97 over segments, and one ring-rev 4x2 read 1.13 and kept block, running
1.4x as long. Without it they read 0.52-0.91 (23 trials). Each round must be led as well: a ring 4x2
read 1.35 over one round and ran 1.3x as long in block. Figures: docs/vmruntime-journal.md, forty-first
session. The pace kept, the placement's over its segments, is then the global trial's and the watch's
measure. Every decision starts again in r mod P, so a periodic re-measure's trials try the block
placement again. `lbd_placement_trial = false` in the configuration turns it off. The same call counts
measure both placements: a program makes the same calls per iteration wherever its ranks run.

Settling after a move (2026-12-06, sixtieth session): ranks that each lead a session of their own (hydra
starts them so, and the runtime makes them so: vmruntime's `leave_session`) are each an autogroup of the
kernel, and ranks moved to other CPUs hand those CPUs on to each other slowly at first (probably their groups'
weights there, which follow load averages that take tens of milliseconds to move; not traced in the kernel).
Read quantum by quantum over segments of 20 (a scratch trace, `look_quanta` 20), IMB Exchange 4x2 (IMB-MPI1 of
the Intel MPI Benchmarks) ran at r mod P's pace for the first 2-8 quanta of each block segment and then
1.3-1.5x as fast, as whole runs in block are (its ranks' time per exchange 3.6 us against 4.7 us in r mod P);
r mod P's segments reached their pace in 1-3 quanta. With autogroups switched off
(kernel.sched_autogroup_enabled 0, for the test only) block made its pace from its first quantum. So a trial
that read each segment from the quantum after the switch read block at 0.81-1.43 of r mod P's pace and kept it
in 3 of 10 runs. Leaving 80 ms unread after a move, it read 1.12-1.41 and kept block in 20 of 20 (50 ms: 8 of
10, 60 ms: 9 of 10). Rings 4x2, ring-rev 4x2 and rings 8x2 read 0.64-1.05 so and kept r mod P in every run
(ring 8x2 kept block in 2 of 12 with one quantum), groups 4x2 (2x slower in block) kept it in 2 of 10 runs
with one quantum and in 2 of 14 with 80 ms (the stalled-CPU rule moved each back), and halo-persist 4x2 kept
block in 6 of 6 either way (docs/vmruntime-journal.md, sixtieth session). The segments that do not move ranks
(the second of each placement's pair) still leave one quantum. Not on one CPU, where the queue trial moves no
rank. The settling made a ring's trial longer, and its block segments cost it (ring 4x2 and ring-rev 4x2, 1.4x
slower in block, ran 1.12x and 1.15x as long as on local queues in r mod P, paired medians of 8 rounds). So
the trial looks once after its first two segments, block and r mod P, each read once settled: block
`trial_margin` behind there ends it, in r mod P, where the job already is. The old first look compared block
with the local trial, read before it, and lost IMB Exchange on its transient (above, "Why segments"); this one
compares two settled reads side by side.

Clearly ahead (2026-12-05, forty-ninth session): a program that calls MPI seldom has a long local trial,
since a trial holds `window_calls` calls per rank, and its placement trial as many rounds. PRK Sparse (the
Parallel Research Kernels' sparse matrix-vector product, 8 ranks on 2 CPUs) made 400-1,400 calls per rank
per second: a 44-quantum local trial, then 8 rounds (1.28 s), while r mod P ran at 0.54 of block's pace
in every one of them (the node slowed; in its fast stretches the two ran alike). So from the second round
on, block `trial_margin` (20 %) ahead over the segments, every round led, ends the trial in block, over
`window_calls * block_margin / trial_margin` (50) calls per rank each way: a phase more or less at each end
moves a placement's pace by up to 2 parts in its calls per rank, and 50 bound that to 4 %, a fifth of the
20 %, as 200 bound it to 1 %, a fifth of the 5 %. Not in a queue trial on one CPU (below), which is two rounds
anyway and keeps local queues over fewer than `window_calls` calls per rank.

After the first round too (2026-12-06, sixty-first session), where block is also `block_margin` ahead of the
local trial's pace in r mod P. A round more costs a program that block suits its segments in r mod P and its
block segments' settling: IMB Exchange 4x2 (block 1.1-1.4x ahead over its rounds) ran 1.177x as long as
`local-block` with the rule from the second round and 1.148x with it from the first (ended there in 10 of 16
runs), halo-persist 4x2 1.18x and 1.14x (16 of 16), medians of 16 paired rounds in one manager. One round
alone does not decide: a ring 4x2 once read 1.35 over one (before the settling, above), and a stretch of the
node over r mod P's two segments of a round makes such a reading. The local trial's pace is read before the
trial, and a stretch that slowed it and those segments alike slowed block's first segment too, which lies
between them. That read runs high if anything (r mod P, right after the global queue, ran near block's pace
for some quanta in IMB's trace): block read 1.05-1.43 of it in IMB's trials, 1.29-1.67 in halo-persist 4x2's,
and 0.61-0.93 in those of rings 4x2 (which read 0.58-0.90 of r mod P over their first round or first look, 47
trials).

Far ahead (ours, 2026-12-07, sixty-fourth session): that read of the local trial need not run high by a little.
groups 5x2 (bench/patterns.py: ranks 0-1 reduce on one communicator, 2-4 on another for 4 times the rounds; 2.75x
slower in r mod P than in block over whole runs) ran r mod P in its local trial, right after the global queue, at
1-2x block's pace in the placement trial, and r mod P in that trial at 0.22-0.34 of block's: its first round read
block at 2.99-4.49x r mod P, yet at 0.49-0.97 of the local trial's pace, so the trial went on to its second round,
0.67 s in all, and the default ran 1.19-1.21x as long as `local-block`. So after the first round, r mod P under
`behind_share` (half) of block's pace over it, per second and per CPU second of the job, also ends the trial in
block (block clearly ahead as above, over as many calls), whatever the local trial read. A stretch of the node does
not read so: steps ran 1.5x as long in its slow stretches, and a ring's round read 1.35 at most. Per CPU second as
well, because outside load that takes a CPU from r mod P's segments stalls a ring per second more than per CPU
second of its own (its other CPU stands idle, its preempted rank uses none); groups 5x2 read the same both ways
(its ranks used 1.9-2.0 of the 2 CPUs in either placement). With it (`behind_share` 0 turns it off with "Clearly
behind"), in three sets of 8 paired rounds in one manager, groups 5x2 ran 0.92x, 0.95x and 0.96x as long as without
(faster in 23 of 24), 1.10x, 1.14x and 1.16x as long as `local-block` against 1.21x, 1.19x and 1.20x, its placement
trial one round (0.37 s) instead of two (0.67 s). Ending it at the first look instead (block and r mod P one
segment each) gained nothing measurable (8 rounds: 0.92x, 1.11x `local-block`). groups 4x2 and 8x2, halo-persist
4x2, ring-rev 5x2 and tree 6x2 (8 rounds each) read r mod P over half of block's pace in every round and decided as
without it. Outside load could still fool a placement trial of one round, with this rule or the older one: rings 4x2
beside a program that took CPU 0 for 0.1 s of every 0.3 s (nice -10) kept block after one round in 3 of 32 runs,
each also ahead of a local trial read under the same load (docs/vmruntime-journal.md, sixty-fourth session; below).

Uneven load (ours, 2026-12-07, sixty-fifth session): what the job's CPU seconds do not hold of its partition's
(its ranks' time and its idle CPUs', per second of a placement's segments), other processes took. In those rings'
trials, and in a fourth such run of 24 in this session, r mod P's segments had 1.56-1.78 of the 2 CPUs over the
round that kept block and block's 1.77-1.98 (0.20-0.28 of a CPU apart), while block read 1.32-2.17x r mod P's pace
per second over it: a ring stalls whole while one of its ranks waits for a CPU, so its pace falls several times as
far as its share, and per CPU second does not make up for it (its other CPU stands idle, and counts). So a round
that block led, with r mod P's share over `uneven_load` (0.075) of the partition's CPUs under block's, is left out:
its calls, seconds and CPU seconds are taken out of both sums, and another round runs, up to as many as the trial
has; one more such round after those ends the trial in r mod P, the placement every decision starts from. A round
that block did not lead, or was behind over, ends the trial in r mod P as before (block's segments short of CPU
make block read slower, which keeps the placement the job is in), and the first look, which only ends in r mod P,
is not concerned. Unloaded, the placements' shares over 59 traced first rounds (groups 5x2, halo-persist 4x2,
ring-rev 4x2) were at most 0.07 apart (r mod P under block by 0.06 at most), and in 32 unloaded runs of groups 5x2 and
halo-persist 4x2 with it no round was left out (their decisions as without it). In one set of groups 5x2 runs in
which both placements read 1.45-1.89 (something else ran on the node), 2 of 17 first rounds were 0.16 and 0.29
apart and would have been left out: a round more each. With the load on CPU 0 for 0.1 s of every 0.4 s, rings 4x2
kept block in 11 of 24 runs without it and in none with it, and ran 0.935x as long with it (paired, 24 ABBA rounds
in one manager; 1.076x and 1.126x `local`); of every 0.3 s, 1.023x (block kept in none either way). It costs the
programs that block suits a little under such load: halo-persist 4x2 ran 1.025x and 1.003x as long with it (12
rounds each), block kept in 8 and 1 of 12 runs with it against 10 and 2 without (a round left out because r mod P
was short, then one whose block segments were short, which block did not lead); groups 5x2 0.981x (block kept in
11 of 12, the twelfth's local trial failed, against 12). Figures: docs/vmruntime-journal.md, sixty-fifth session.
On one CPU the same holds for the queue trial, local queues on r mod P's side (a round the global queue led while
local queues' segments were short of the CPU). Needs the partition's idle time (none without it). `lbd_uneven_load =
0` turns it off.

Reverse trial (ours): the idleness that the global queue shows is partly its own making, and an
imbalanced job is not always faster there. A ring of 4 ranks folded 2 per CPU reads IP 9-19 % there in
one run in three (which ranks get the CPU depends on the token's hand-offs as much as on the program),
and then stayed on the global queue, at half the speed of local queues; a reduction tree of 8 ranks on
2 CPUs reads IP 42 % there and runs 2x faster on local queues (bench/patterns.py --shapes 8x2: its
ranks wait for their children one at a time, and the global queue hands the CPU to a rank whose
children have not sent yet as often as to one that can go on). So a window that decides global - the
first, or the periodic re-measure of a job on local queues - is tried on local queues as a window that
decides local is (`reverse_band` 1.0: at any IP; a lower band limits it to near the threshold), and the
job keeps them only if they made more than `trial_margin` (20 %) *more* progress per CPU second than
the global window: the ring made 30 % more (188,735 and 212,648 calls per CPU second locally against
144,063 and 162,981). send.50x6, whose light ranks burn their waits in hand-offs and polls on local
queues, makes less there and goes back: the trial costs it one window at local speed. A reverse trial also
keeps local queues that made more than `wall_margin` (5 %) more MPI calls per second of wall time than
the global window and at least `wall_floor` (0.9) of its calls per CPU second: master-worker (4 ranks on
2 CPUs, IP 40 %) ran 14 % faster on local queues, yet its ranks made only 0.96-1.10 times the calls per
CPU second there, because part of the gain is CPU time the global queue's hand-offs cost outside the
ranks (the ranks had 0.92 of the two CPUs there, 0.96 on local queues); per second of wall time its
trials read 1.06-1.13 times the window (8 ranks). The floor keeps outside load that left during the
trial from passing for progress (calls per CPU second do not move with it). Per second is judged
only where the trial holds `window_calls` (200) MPI calls per rank, as a short window is: a 5 % margin
needs phases of about 1 % of the trial, and send.50x6 (45-72 calls per CPU second in its windows,
50-ms phases) was kept on local queues, where it runs 1.4x slower, in 1 of 10 runs of
tests/test_runtime_lbd.py (and 1 of 20 of the same job) by a 9-11 % gain per second that was one phase
more or less in its trial. The trial's early look (after `trial_min_quanta`, when the window was longer)
fails local queues that have made neither more calls per CPU second than the window nor, where the
trial's end will judge per second (its calls at this pace), `wall_margin` more per second: judged per
CPU second alone, it failed a job that its end would have kept (tests/test_lbd.py: 3 % fewer calls per
CPU second, 15 % more CPU). Per CPU second, too, a trial keeps local queues only over `window_calls`
calls per rank: one that is ahead over fewer goes on until it holds them, or for `ip_quanta` quanta,
and fails if it never does (send.50x6's trial holds some 10 calls per rank, and one was kept by a
phase more or less in 1 of about 20 runs of tests/test_runtime_lbd.py). A job that fails it goes on as one
decided global - its re-check windows move it to local queues when it becomes balanced - not held there
like a job whose local trial failed (those re-checks would take that one straight back to the queue its
trial refused).

Deciding again (ours): the pattern of a job may change. On the global queue CPU time is a fair measure
of work (a rank without a token sleeps), so a decided-global job keeps measuring windows of
`recheck_cpu_s` and moves to local queues when IP < threshold - `hysteresis` in `confirm` windows with
none at or above the threshold between them (windows in the band count neither way). A job whose
windows stay in the band - below the threshold, never clearly - is tried on local queues after
`band_windows` of them in a row, like a job decided local (kept unless they make `trial_margin` less
progress per CPU second; a second failed trial holds it on the global queue until its re-measure):
after 30 imbalanced iterations, a balanced send.S read 7.2-8.4 % in every re-check window in 1 run of
6-8 and stayed global to its end, whatever the runtime's waiting (tests/test_runtime_lbd.py). Without the
ranks' call counts there is no trial, and such a job stays where it is. On local queues it
is not: a rank whose queue-mate also waits hands the token back and forth and polls, so waiting shows as
CPU time (the imbalanced send.50x6 reads IP 6-25 % there). A decided-local job therefore goes back to
the global queue for one window every `remeasure_quanta` quanta, and leaves it again unless IP >=
threshold + `hysteresis`. The hysteresis keeps a job near the cut-off from flapping; every move costs a
token rebuild and a re-pin.

Two strikes (ours, 2026-12-02): a local trial that fails once sends the job back to the global queue
as a job decided global, re-checking there, not held; only a second failed trial before the next
periodic re-measure (`struck`) holds it there. One trial misread: a balanced send.S's local trial read
20 % fewer calls per CPU second than its window in 4 of about 110 runs on this 2-CPU node (its trials
read 0.96-1.28 of the window in 29 other runs: load on one CPU leaves the other idle, and idle time
counts as the job's), and the job stayed on the global queue to its re-measure. A job that is slower on local
queues pays one more trial: its re-check windows decide local again after some 2 windows, and that
trial holds it. A reverse trial's failure is not a strike: the window found the job imbalanced.

Watching a local job (ours, 2026-12-02): a decided-local job's MPI calls per second of wall time are
read every `watch_quanta` (10) quanta, and a job that made fewer than `watch_drop` (half) of its local
trial's, at two reads in a row, goes back to the global queue to measure at once, as at its periodic
re-measure (`fell`; logged `lbd_remeasure why=progress_fell` with the rates read and the trial's). A trial
judges the first few tenths of a second, and a program can change after them: one whose ranks reduce on
two communicators (one per half of the ranks, the second half computing twice as long, a program not
written here) read IP 3-8 % on the global queue, ran faster on local queues in its trial, and then, its
two halves drifting apart, 4x slower there than on the global queue (3.0-4.5 s against 0.84-1.2 s) until
its end: the periodic re-measure comes after 10 s. A read compares only over a stretch in which the
trial's pace would have given `window_calls` calls per rank, as a window must hold (a phase more or less
is then 1 % of it); half is far outside what two reads of one pace differ by here (the A/A of whole runs:
0.8-1.2).

Outside load is no fall (2026-12-03). Where the partition's idle time is known, a read is low only if the
job also made fewer than half its trial's calls per CPU second of its own (its ranks' and its idle CPUs'
time, as the trials count it): another program on its CPUs slows it per second, less so per CPU second
(less, not at all: a ring stalls as a whole while one of its CPUs is taken, and the other CPU's idle time
is the job's). And one low read is not enough, two in a row are: a stretch of load passes within a read's
0.1 s; a lasting fall costs one read more. The measurements (bench-style scripts kept out of the
repository, 4 ranks on 2 CPUs):
- a ring, steady from start to end, read 0.62-1.63 of its trial's pace per second in quiet minutes (6
  runs, 22-36 reads each); in one noisy minute of this VM 5 runs of 20 read under half once and were
  re-measured, and CI failed a test on it (the suite's ring-rev 4x2 default run of 9.5 s, five
  re-measures, was the same: vmsched/vmruntime/README.md).
- the ring with another program taking CPU 0 for 0.12 s in every 0.6 s (nice -10): one low read per
  second re-measured 14 of 16 rings, 48 times (every 0.5 s in some), and decided them local again each
  time; with the two rules 1 of 16, once. Interleaved, 10 rounds of 2 jobs each way: new / old time
  0.88-1.18, median 0.935; without that program, 8 rounds: median 0.989.
- a program of two halves reducing on communicators of their own (the odd half computing twice as long,
  a broadcast on MPI_COMM_WORLD every 8 rounds: the fall this watch is for) is still re-measured 110-130
  quanta after its local decision, its reads at 0.04-0.05 of its trial's pace per second and per CPU
  second.
A job without a trial (too few calls, or no call counts) is not watched, and neither is one whose kept
local trial held fewer than `window_calls` calls per rank (`paced`, 2026-12-03): such a pace is a phase or
two of the program, not its pace. mg.W (4 ranks on 2 CPUs, bench/patterns.py) kept local queues by
0.42-0.44-s trials of 61-66 calls per rank, at 560-623 calls per second; its reverse trials, which go on
until they hold 200, read 272-385 over 2.1-3.0 s. The watch then read 215-236, under half, twice in a
row, and 7 of 34 runs were re-measured so, 2.8-2.9 s after the trial: three were decided local again by
idleness, two by a reverse trial, two went to the global queue by a failed one (one back 1.3 s later).
Its periodic re-measure still comes.

A stalled CPU moves the placement (ours, 2026-12-04): a placement trial judges the first second, and the
placement it keeps can go wrong after it. groups 4x2 (bench/patterns.py: each half of the ranks reduces on a
communicator of its own, the second for 4 times the rounds) kept block in 3 of 10 default runs, its trial
reading block 1.07-1.25x as fast while both halves ran, and those runs took 3.1-3.9 s against 1.4-2.0 s: once
the first half is done, its two ranks on CPU 0 wait in the final MPI_Allreduce and hand that CPU to each other
(10,000-11,300 context switches each per 0.1 s, half a CPU each, no MPI call), while the second half shares
CPU 1. The watch never saw it: the job's calls per second did not fall (the second half's pace is its own),
nor did the partition stand idle. So at each watch read of a decided-local job the detector also reads each
rank's MPI calls and context switches (the manager's counters): a CPU whose every rank made no call since the
last read and gave up its CPU at MPI waits, while ranks of another CPU made calls, is stalled
(`stalled_cpus`). Where the other placement would leave no CPU stalled so (its waiting ranks spread over CPUs
with working ones), two reads in a row that find one move the job to it (logged `lbd_placement
why=stalled_cpu`), watched on from there. Once per decision (no flapping; the next decision starts again in r
mod P), and towards block only where a placement trial read block's pace. A rank that computes through a read
makes no call and no switch: its CPU is working, not stalled. r mod P stalls the same way where the ranks that
finish early are every P-th one: a ring whose odd ranks go on alone (patterns.c's ring-odd, 4 ranks on 2 CPUs)
leaves ranks 0 and 2 waiting on CPU 0; without the rule 5 of 6 such runs (4x2) were re-measured by a fall and
went to the global queue (2.28-2.48 s), with it 10 of 10 moved to block (1.71-2.28 s). A read that finds a CPU
stalled is not a low one: the fall it explains would otherwise re-measure the job before the second stalled
read. With the rule, 4 of 10 groups 4x2 runs kept block and each went back to r mod P 0.58 s later (1.77-1.82
s, the others 1.58-1.71 s). In two default runs of each of the 12 patterns and 5 apps at 4x2 and 8x2 (68 runs,
14 of them kept block) the rule moved one job, groups 4x2 in block, and nothing else.
tests/test_runtime_placement.py runs `halves` (patterns.c: halo-persist, then its second half alone), which
keeps block in most runs and stalls CPU 0 after it, and ring-odd.

The pace after a move (2026-12-05): the watch compares a job with its pace over the placement trial, but a
stall is a change of phase (ranks done), so that pace is the phase's before it. 2 of 10 ring-odd runs that
moved to block were re-measured by a fall soon after (their stencil's pace read against the ring's) and
took 2.19 and 2.28 s against 1.71-2.07 s. So the first watch read after a move is not judged, and the job
is watched on at the lower of the moved-to placement's pace over the trial and that read's, per second and
per CPU second (`_rebased`; logged `lbd_watch_pace`): the watch is never made keener by it. A read over
fewer than `window_calls` calls per rank is no pace (a phase or two): it is judged as before, and the next
read is the first. In 10 more ring-odd runs the first reads after the move came at 0.50-0.84 of block's pace
over the trial (a read under 0.5 is low); in 8 halves runs every first read was faster than r mod P's pace
over the trial, which stayed.

A move that reads slower is undone (2026-12-05): the rule above assumes that spreading a stalled CPU's
waiting ranks over CPUs with working ones helps, and where the working ranks mostly communicate it does not.
groups 8x2 kept block in 4 of 4 default runs of the whole suite, its first half's 4 ranks stalled CPU 0 once
done, and the move to r mod P left the second half's 4 ranks 2 a CPU, waiting on each other across CPUs, where
in block they handed one CPU's token to each other: 80,000-82,000 calls per second after the move against
114,000-116,000 stalled, and runs of 2.2 s against 1.74 s in block throughout (local-block 1.28x as fast,
paired [1.10-1.32]). The read that moved the job is of the new phase (none of the stalled CPU's ranks made a
call in it) and in the placement it left, so it is a pace to judge the move by: where it held `window_calls`
calls per rank (`stall_pace`), a first read after the move at which it made over 1 + `move_margin` (1.15)
times as many calls per second moves the job back (logged `lbd_placement why=moved_slower`), watched on at
the lower of that placement's pace over its trial and over the stalled read; once, the move counting as the
decision's one.
Measured (2026-12-05): ring-odd 4x2 read 1.4-2.0x as fast after its move to block as stalled (5 of 5 kept),
halves 4x2 at least 1.13x after its move to r mod P (5 of 5 kept), groups 4x2 at least 1.56x (3 of 3 kept),
groups 8x2 0.70-0.72 (2 of 2 undone, 1.75 and 1.77 s; the 4 runs that kept r mod P 1.67-1.80 s).

One CPU (ours): a partition of one CPU has nothing to balance - one token, every rank in its one
queue - so the detector decides local queues at once, without measuring (`one_cpu`), and measures
afresh, on the global queue, when the partition grows. On one CPU the two queues differ only in whom
the token goes to and in how a rank waits (two-phase waiting on local queues only), and the measuring
phase cost short jobs up to 18 % there (bench/patterns.py before this rule, 2 ranks on one CPU,
medians of 3: ring-rev default 1.30 s against 1.10 s on local queues, random pairs 1.12 against 0.99).

Queue trial on one CPU (ours, 2026-12-05): whom the token goes to still matters there. Collectives of 4
ranks folded onto one CPU ran faster on the global queue, which hands the token to a rank that can make
progress, than on local queues, whose round robin wakes ranks that cannot: IMB-MPI1 (built with -DCHECK)
Gather 1.13x [1.12-1.20], Allgatherv 1.14x, Reduce_scatter 1.12x, Alltoall 1.08x as fast with `progress`
(bench/patterns.py --shapes 4x1, paired medians of 8 rounds, A/A 0.96-1.03; docs/vmruntime-journal.md,
forty-eighth session), while rings run slower there. So a job decided local on one CPU is tried as the
placement trial tries a block placement on two CPUs, by the same segments and rules with the queues in
the places of the placements: local, global, global, local and again, each a quantum to switch and
`look_quanta` read, as many rounds as give each queue `trial_min_quanta` quanta read; a round the global
queue did not lead, or one that leaves it `trial_margin` behind per second, ends it on local queues, and
it keeps the global queue only with `block_margin` more MPI calls per second over its segments and
`window_calls` calls per rank each way. That is 0.16-0.32 s, half of it on the queue that loses; a
program that calls MPI seldom never holds the calls and stays local. The queue kept (on the global queue
ranks sleep at once, as after any decision) is held to the next trial, `remeasure_quanta` after this one
began, which may decide otherwise. Between trials a watch reads the job's pace every `watch_quanta`, as a
local job's on two CPUs (below, "Watching a local job"), against the kept queue's pace over its segments
(where the trial read `window_calls` calls per rank each way): under `watch_drop` of it, per second and
per CPU second, at two reads in a row, the queues are tried again at once. IMB's Reduce_scatter had its
first trial fall in the benchmark's start-up, at some 310,000 calls per second on either queue (lost),
and then ran at 130,000-150,000 to its end, 1.12x as fast on the global queue; with the watch it was tried
again some 0.4 s on and kept the global queue. `lbd_queue_trial = false` in the configuration turns the
trial and its watch off.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from math import ceil, inf, isfinite, sqrt

from vmsched.cpumanager.partition import home_cpu
from vmsched.cpumanager.shm_layout import LBD_DECIDED, LBD_MEASURING, LBD_STABLE, PLACE_BLOCK, PLACE_CYCLIC


@dataclass(frozen=True)
class LbdParams:
    threshold: float = 0.10
    stable_change: float = 0.05
    stable_quanta: int = 10
    ip_quanta: int = 300  # the first window closes after this many quanta even if short of CPU time
    window_cpu_s: float = 0.2
    window_calls: float = 200.0  # ... or as soon as the ranks made this many MPI calls each in it
    window_min_cpu_s: float = 0.005  # ... and this much CPU time each
    window_min_calls: float = 4.0  # no window reads IP over fewer MPI calls per rank than this (phases)
    remeasure_quanta: int = 1000
    min_switches: float = 4.0
    busy_switches: float = 50.0
    fast_quanta: int = 3
    settle_quanta: int = 5  # a busy job whose CVCS has not settled after this many quanta is measured anyway
    quick_window: bool = True  # ... and opens a quick window at its first busy quantum ("Quick window")
    sample_quanta: int = 1
    recheck_cpu_s: float = 0.2
    recheck_sample_quanta: int = 20
    hysteresis: float = 0.03
    confirm: int = 2
    trial_margin: float = 0.20
    behind_share: float = 0.5  # a local trial under this share of its window's calls per CPU second ...
    behind_calls: float = 50.0  # ... over this many calls per rank has failed already ("Clearly behind")
    # (behind_share also: r mod P under that share of block's pace ends a placement trial after one round, "Far ahead")
    read_at_calls: bool = True  # a local trial fails only where its calls per rank pass a multiple of behind_calls
    wall_margin: float = 0.05  # a reverse trial also keeps local queues with this much more progress per second
    wall_floor: float = 0.90  # ... if they made at least this share of the global window's progress per CPU second
    reverse_band: float = 1.0  # a window deciding global with IP below threshold + this is tried on local queues
    trial_min_quanta: int = 10
    band_windows: int = 4  # re-check windows in a row below the threshold, inside the band, before a local trial
    global_trial: bool = True  # a kept local trial is followed by one on the decided global queue
    glance_quanta: int = 2  # from this quantum on, a global trial clearly behind the local one per second is over
    global_margin: float = 0.15  # a global trial keeps the decided global queue with this much more progress per second
    watch_quanta: int = 10  # a decided-local job's MPI calls per second are read this often ...
    watch_drop: float = 0.5  # ... and it is re-measured at once when they fall under this share of its trial's
    block_trial: bool = True  # a job kept on local queues by its trials is tried with a block placement too
    block_margin: float = 0.05  # ... and keeps it with this much more progress per second
    look_quanta: int = 3  # ... read over segments this long (after a quantum to switch), block and r mod P in turn
    move_settle_s: float = 0.08  # ... after this long where a segment moves ranks (else after one quantum)
    uneven_load: float = 0.075  # ... a round block led with r mod P's share of the CPUs this much under is left out
    queue_trial: bool = True  # on one CPU, local queues are tried against the global queue by such segments
    move_margin: float = 0.15  # a move by a stalled CPU is undone where the stalled read was this much faster
    sparse_global: bool = True  # a job too sparse in MPI calls for any trial to read stays on the global queue
    quantum_s: float = 0.01  # the manager's quantum: how much CPU a rank has in the longest trial (ip_quanta)


@dataclass(frozen=True)
class LbdState:
    phase: int = LBD_MEASURING
    cvcs: float | None = None
    stable_count: int = 0
    busy_quanta: int = 0  # quanta measured since the ranks' mean count of switches reached busy_switches
    quick: bool = False  # the open window is a busy job's quick one (module docstring: "Quick window")
    quick_read: bool = False  # ... which read it imbalanced, or could not read it: it measures on as before
    base_user: tuple[float, ...] = ()  # CPU times at the start of the open window
    short_phases: bool = False  # the last window closed on its count of calls: sample as often as at first
    reverse: bool = False  # the running local trial is of a job the first window found imbalanced
    band: bool = False  # the running local trial is of a global job whose re-check windows stayed in the band
    quanta_stable: int = 0  # quanta since the window opened
    ip: float | None = None  # IP of the last closed window
    local: bool | None = None  # the decision, once phase is LBD_DECIDED (while re-measuring: the last one)
    against: int = 0  # windows in a row whose IP argues for the other queue
    below: int = 0  # re-check windows in a row below the threshold (clearly or inside the band)
    decisions: int = 0  # windows that decided (the first decision and every re-decision)
    since_decision: int = 0  # quanta since the last decision (drives the periodic re-measure)
    base_calls: float | None = None  # the ranks' MPI calls at the start of the open window
    base_idle: float | None = None  # the partition's idle CPU seconds then (the start of a trial, too)
    base_wall: float | None = None  # the time then, in seconds (the start of a trial, too)
    rate_global: float | None = None  # MPI calls per CPU second over the last global window
    rate_local: float | None = None  # ... over the last local trial
    wall_global: float | None = None  # MPI calls per second of wall time over the last global window
    wall_local: float | None = None  # ... over the last reverse trial
    trial_quanta: int = 0  # quanta into the local trial; 0: none running
    trial_base: float = 0.0  # MPI calls when the trial began
    trial_len: int = 0  # quanta the trial lasts: as long as the global window it is compared with
    trial_mark: int = 0  # multiples of behind_calls calls per rank the local trial held: it fails as it passes one
    hold_global: bool = False  # local was measured slower: global until the next periodic re-measure
    one_cpu: bool = False  # decided local because the partition has one CPU (measured afresh when it grows)
    unread: bool = False  # the last decision kept the queue: its window held too few calls to read
    sparse: bool = False  # the last decision: global, its calls too sparse for a trial to read (module docstring)
    global_quanta: int = 0  # quanta into a global trial (the decided global queue after a kept local trial)
    wall_decided: float | None = None  # MPI calls per second of wall time over the last global trial
    rate_decided: float | None = None  # ... per CPU second of the job (its ranks' and its idle CPUs')
    global_faster: bool = False  # the last decision: a global trial beat the local trial per second
    struck: bool = False  # a local trial failed since the last periodic re-measure: the next failure holds the job
    # MPI calls, time, ranks and the job's CPU seconds (None: no idle times) at a decided-local job's last watch read
    watch: tuple[float, float, int, float | None] | None = None
    watch_low: bool = False  # that read found the job's progress fallen: the next one low too re-measures it
    # Each rank's MPI calls and context switches at that read (where the manager gave them) ...
    watch_ranks: tuple[tuple[float, float], ...] = ()
    watch_stall: bool = False  # ... and whether it found a CPU stalled that the other placement would not leave so
    fell: bool = False  # the running re-measure began because the job's progress fell (not the periodic one)
    paced: bool = False  # the kept local trial held `window_calls` calls per rank: its pace is the watch's measure
    block: bool = False  # local queues in a block placement (rank r of N on CPU r * P / N), not r mod P
    # A trial by segments: of the placements (block, r mod P, r mod P, block, ...) or, on one CPU, of the queues
    # (local, global, global, local, ...; module docstring: "Queue trial on one CPU")
    block_quanta: int = 0  # quanta into its running segment (0: none running)
    block_segs: int = 0  # its segments so far
    # Its MPI calls, seconds and CPU seconds of the job so far, each as (r mod P, block) - on one CPU (local,
    # global): summed over the segments
    look: tuple[tuple[float, float], ...] = ((0.0, 0.0), (0.0, 0.0), (0.0, 0.0))
    round_base: tuple[tuple[float, float], ...] = look  # ... as they were when the running round began
    rounds_lost: int = 0  # its rounds in which block (one CPU: the global queue) made no more calls per second
    rounds_void: int = 0  # ... and those left out: block led, outside load having taken r mod P's CPUs ("Uneven load")
    wall_block: float | None = None  # MPI calls per second of wall time in block over the last placement trial
    wall_cyclic: float | None = None  # ... in r mod P over it
    moved: bool = False  # the watch changed the placement since the last decision (a CPU stalled): once only
    rebase: bool = False  # ... and has not read its pace since: the next read is the new phase's measure
    # MPI calls per second of wall time and per CPU second (None: no idle times) over the read that moved it, in
    # the placement it left (None: that read held too few calls to be a pace)
    stall_pace: tuple[float, float | None] | None = None

    @property
    def queue_local(self) -> bool:
        """The queue the job should be on now: global while it measures or re-measures."""
        return self.phase == LBD_DECIDED and bool(self.local)

    def wants_user_times(self, params: LbdParams) -> bool:
        """Whether the next step needs CPU times (read from /proc only then: it is not free)."""
        if self.phase == LBD_MEASURING:
            return False
        if self.one_cpu and not self.block_quanta:  # decided on one CPU, no queue trial running: its watch reads
            return _watching_one_cpu(self, params, self.since_decision + 1)
        if not self.base_user:
            return True
        if self.phase == LBD_DECIDED and self.local and self.trial_quanta:
            return _trial_due(self, params) or _trial_glance(self, params)  # the end of a trial, or its early look
        if self.phase == LBD_DECIDED and self.global_quanta:  # every quantum: it ends once clearly behind
            return self.global_quanta >= params.glance_quanta
        if self.phase == LBD_DECIDED and self.block_quanta:  # a segment's start, after its switch, and its end
            settle = _settle(self, params)
            return self.block_quanta == settle or self.block_quanta >= settle + params.look_quanta
        if self.phase == LBD_DECIDED and (self.local or self.hold_global):
            # Local queues: CPU time is no measure of idleness (see the module docstring); read only for the
            # time of the watch reads (module docstring: "Watching a local job").
            return _watching(self, params, self.since_decision + 1)
        every = params.sample_quanta if self.phase == LBD_STABLE or self.short_phases else params.recheck_sample_quanta
        nxt = self.quanta_stable + 1
        return nxt % every == 0 or (self.phase == LBD_STABLE and nxt >= params.ip_quanta)


def cvcs(counts: Sequence[float]) -> float | None:
    """Coefficient of variation of context switches: stddev / mean (eq. 4.1); None if mean is 0."""
    # Plain float arithmetic: statistics.pstdev is exact but ~50x slower, and this runs every quantum.
    n = len(counts)
    if not n:
        return None
    mean = sum(counts) / n
    if mean <= 0:
        return None
    return sqrt(sum((c - mean) ** 2 for c in counts) / n) / mean


def idleness(user_times: Sequence[float]) -> float:
    """Idleness percentage as a fraction: sum_i(max_u - u_i) / (max_u * n) (fig. 4.3)."""
    if not user_times:
        return 0.0
    top = max(user_times)
    if top <= 0:
        return 0.0
    return sum(top - u for u in user_times) / (top * len(user_times))


def _settling(state: LbdState, switches: Sequence[float], params: LbdParams) -> LbdState:
    """This quantum's CVCS, and the quanta it has been steady and the job busy (module docstring:
    "Stabilization", "Settling")."""
    value = cvcs(switches)
    mean = sum(switches) / len(switches) if switches else 0.0
    if value is None or mean < params.min_switches:
        return replace(state, cvcs=value, stable_count=0)
    prev = state.cvcs
    steady = prev is not None and abs(value - prev) <= params.stable_change * max(prev, 1e-9)
    count = state.stable_count + 1 if steady else 0
    busy = mean >= params.busy_switches
    return replace(state, cvcs=value, stable_count=count, busy_quanta=state.busy_quanta + 1 if busy else 0)


def _due(state: LbdState, params: LbdParams) -> bool:
    """Whether the job's window opens now: its CVCS steady long enough, or the job busy for settle_quanta."""
    needed = params.fast_quanta if state.busy_quanta else params.stable_quanta
    return state.stable_count >= needed or state.busy_quanta >= params.settle_quanta


def _measuring(state: LbdState, switches: Sequence[float], params: LbdParams) -> LbdState:
    new = _settling(state, switches, params)
    due = _due(new, params)
    # A quick window opens at the first busy quantum, where the window is not due; only a balanced reading of it
    # is taken (module docstring: "Quick window").
    quick = bool(new.busy_quanta) and params.quick_window and not state.quick_read and not due
    if quick or due:
        return replace(new, phase=LBD_STABLE, base_user=(), quanta_stable=0, quick=quick)
    return new


def _quick_unread(state: LbdState, times: tuple[float, ...], calls: float | None, idle: float | None,
                  now: float | None, since: int, ip: float | None, params: LbdParams) -> LbdState:  # fmt: skip
    """A quick window that read the job imbalanced (`ip`), or held too few calls to read (None): the job's window
    opens when it would have without one - its CVCS, read on meanwhile, steady or the job busy long enough: from
    this read if that is now, else after more measuring (module docstring: "Quick window")."""
    if _due(state, params):
        return _next_window(state, times, calls, idle, now, since, quick=False, quick_read=True, ip=ip)
    return replace(state, phase=LBD_MEASURING, quick=False, quick_read=True, base_user=(), quanta_stable=0,
                   since_decision=since, ip=ip)  # fmt: skip


def _idle_since(base: float | None, idle: float | None) -> float:
    """Idle CPU seconds of the partition since `base` (0 where either reading is missing)."""
    return max(0.0, idle - base) if idle is not None and base is not None else 0.0


def _job_cpu(state: LbdState, times: Sequence[float], idle: float | None) -> float:
    """The job's CPU seconds since the trial began: its ranks' CPU time and its partition's idle time."""
    used = sum(max(0.0, u - b) for u, b in zip(times, state.base_user, strict=True))
    return used + _idle_since(state.base_idle, idle)


def _held_global(state: LbdState, **fields: object) -> LbdState:
    """Decided global after a trial, keeping the window's rates (the trial's own are in `fields`)."""
    back = _decide(state, state.ip, False, (), None, 0.0, 1)
    return replace(back, rate_global=state.rate_global, wall_global=state.wall_global, **fields)  # type: ignore[arg-type]


def _per_second(calls: float | None, base: float | None, now: float | None, then: float | None) -> float | None:
    """MPI calls per second of wall time between two reads (None where a reading is missing)."""
    if calls is None or base is None or now is None or then is None or now <= then:
        return None
    return (calls - base) / (now - then)


def _decide(state: LbdState, ip: float | None, local: bool, times: tuple[float, ...], calls: float | None,
            cpu: float, quanta: int, idle: float | None = None, now: float | None = None) -> LbdState:  # fmt: skip
    """Decide; a local decision is tried against the global window that led to it (MPI calls per
    CPU second the job had over the window: its ranks' `cpu` seconds in all and its partition's idle
    time, `quanta` long)."""
    cpu += _idle_since(state.base_idle, idle)
    rate = (calls - state.base_calls) / cpu if calls is not None and state.base_calls is not None and cpu > 0 else None
    trial = local and rate is not None and rate > 0
    wall = _per_second(calls, state.base_calls, now, state.base_wall)
    return replace(state, phase=LBD_DECIDED, ip=ip, local=local, base_user=times, base_calls=calls, quanta_stable=0,
                   base_idle=idle if times else None, base_wall=now if times else None, wall_global=wall,
                   against=0, below=0, decisions=state.decisions + 1, since_decision=0, rate_global=rate,
                   rate_local=None, wall_local=None, trial_quanta=1 if trial else 0, trial_base=calls or 0.0,
                   trial_len=quanta, trial_mark=0, hold_global=False, band=False, unread=False, sparse=False,
                   global_quanta=0, global_faster=False, watch=None, watch_low=False, watch_ranks=(), watch_stall=False,
                   block=False, block_quanta=0, moved=False, rebase=False, stall_pace=None, quick=False)  # fmt: skip


def too_sparse(per_rank: float | None, mean_cpu: float, nranks: int, ncpus: int | None, params: LbdParams) -> bool:
    """Whether a window whose `nranks` ranks made `per_rank` MPI calls each in `mean_cpu` CPU seconds each calls
    MPI too seldom for any trial of it to hold `window_calls` calls per rank: at that many calls per CPU second, in
    the CPU a rank has in the longest trial (`ip_quanta` quanta, its share of the partition's `ncpus` CPUs and
    no outside load; module docstring: "Too sparse for a trial")."""
    if not params.sparse_global or per_rank is None or mean_cpu <= 0 or not ncpus or not nranks:
        return False
    if not isfinite(params.window_calls):  # windows and trials that close on CPU time alone
        return False
    cpu = params.ip_quanta * params.quantum_s * min(1.0, ncpus / nranks)
    return per_rank / mean_cpu * cpu < params.window_calls


def _trial_due(state: LbdState, params: LbdParams) -> bool:
    return state.trial_quanta >= max(params.trial_min_quanta, state.trial_len)


def _trial_glance(state: LbdState, params: LbdParams) -> bool:
    """Whether this quantum of a reverse trial is its early look: after trial_min_quanta, local queues
    that make less progress per CPU second than the global window did, and not `wall_margin` more per
    second either, have failed already (to be kept they must make trial_margin more per CPU second, or
    that much more per second), which spares an imbalanced job most of a trial at local speed."""
    return state.reverse and state.trial_quanta == params.trial_min_quanta and not _trial_due(state, params)


def _faster_per_second(state: LbdState, rate: float, wall: float | None, enough: bool, params: LbdParams) -> bool:
    """Whether a reverse trial's local queues made `wall_margin` more progress per second of wall time
    than the global window, and at least `wall_floor` of its progress per CPU second (outside load that
    left during the trial does not pass for progress) - judged only if its ranks made `window_calls`
    calls each in it (`enough`): a 5 % margin needs phases of 1 % of the trial."""
    if wall is None or not state.wall_global or not state.rate_global or not enough:
        return False
    return wall > state.wall_global * (1 + params.wall_margin) and rate >= state.rate_global * params.wall_floor


def _trial(state: LbdState, calls: float, times: Sequence[float] | None, since: int, params: LbdParams,
           idle: float | None, now: float | None) -> LbdState:  # fmt: skip
    """One quantum of a local trial: at its end keep local queues unless they made measurably less
    progress per CPU second (a round robin that wakes ranks that cannot go on burns CPU in hand-offs
    and polls; counting per CPU second, not per quantum, keeps outside load out of the comparison)."""
    glance = _trial_glance(state, params)
    # A local trial fails only at a quantum in which its calls passed a multiple of behind_calls per rank (module
    # docstring: "Failed at a call"); at ip_quanta in any case.
    gate = params.read_at_calls and not state.reverse and params.behind_calls > 0 and bool(state.base_user)
    mark = int((calls - state.trial_base) / len(state.base_user) // params.behind_calls) if gate else 0
    at_call = not gate or mark > state.trial_mark or state.trial_quanta >= params.ip_quanta
    state = replace(state, trial_mark=mark)
    if not (glance or _trial_due(state, params)) or times is None or len(times) != len(state.base_user):
        return replace(state, trial_quanta=state.trial_quanta + 1, since_decision=since)
    cpu = _job_cpu(state, times, idle)
    if cpu <= 0:
        return replace(state, trial_quanta=state.trial_quanta + 1, since_decision=since)
    rate = (calls - state.trial_base) / cpu
    wall = _per_second(calls, state.trial_base, now, state.base_wall)
    # Rates over fewer than window_calls calls per rank are a few phases, whose count moves them: such a
    # trial overturns no decision. At the early look: the calls its end will hold at this pace.
    per_rank = (calls - state.trial_base) / len(times)
    scale = state.trial_len / max(1, state.trial_quanta) if glance else 1.0
    enough = per_rank * scale >= params.window_calls
    if glance:  # no more progress than on the global queue so far (by either measure): failed
        slower = state.rate_global is None or rate < state.rate_global
        if not slower or _faster_per_second(state, rate, wall, enough, params):
            return replace(state, trial_quanta=state.trial_quanta + 1, since_decision=since)
    else:
        # The reading that would overturn the window's decision: local queues clearly ahead (a reverse
        # trial's job was found imbalanced) or clearly behind (a local trial's). Over too few calls it is
        # a phase more or less (send.50x6: some 10 per rank), and a slower job makes fewer calls in as
        # many quanta as its window: go on until the trial holds enough, or is clearly behind (below); if
        # neither ever comes, the window's decision stands.
        margin = params.trial_margin if state.reverse else -params.trial_margin
        target = None if state.rate_global is None else state.rate_global * (1 + margin)
        overturns = target is not None and (rate >= target if state.reverse else rate < target)
        # Clearly behind: no phase more or less makes under half the pace of a job within trial_margin of its
        # window (module docstring: "Clearly behind"). (A reverse trial's overturning reading is one ahead.)
        behind = (overturns and rate < state.rate_global * params.behind_share
                  and per_rank >= params.behind_calls)  # fmt: skip
        if overturns and not enough and not behind and state.trial_quanta < params.ip_quanta:
            return replace(state, trial_quanta=state.trial_quanta + 1, since_decision=since)
        if state.reverse:  # local queues must earn the move: clearly more progress per CPU second, or per second
            slower = not (overturns and enough) and not _faster_per_second(state, rate, wall, enough, params)
        else:
            slower = overturns and (enough or behind)
            if slower and not at_call:  # between bursts of calls a pace reads low: on to the next multiple
                return replace(state, trial_quanta=state.trial_quanta + 1, since_decision=since)
    if slower:
        # A reverse trial's job goes on re-checking on the global queue, as its window decided, and so does
        # one whose local decision failed its first trial (one misread trial would keep a balanced job off
        # local queues to its re-measure); a second failure holds it there (module docstring: "Two strikes").
        held = not state.reverse and state.struck
        return _held_global(state, rate_local=rate, wall_local=wall, hold_global=held, reverse=False,
                            struck=state.struck or not state.reverse)  # fmt: skip
    kept = replace(state, trial_quanta=0, rate_local=rate, wall_local=wall, since_decision=since, reverse=False,
                   band=False, struck=False, paced=enough)  # fmt: skip
    if enough and wall is not None:  # (an early look never keeps a trial)
        # Try the block placement as long, from this read, then the decided global queue (module docstring:
        # "Placement trial", "Global trial").
        if params.block_trial:
            return _block_start(kept, times, calls, idle, now)
        return _global_start(kept, times, calls, idle, now, params)
    return kept


def _global_start(state: LbdState, times: Sequence[float], calls: float, idle: float | None, now: float | None,
                  params: LbdParams) -> LbdState:  # fmt: skip
    """Local queues kept by their trials: the window's global queue is not the decided one (its ranks yield
    before they sleep: module docstring, "Global trial"), so try the decided global queue as long, from
    this read."""
    if not params.global_trial:
        return state
    return _trial_from(state, times, calls, idle, now, local=False, global_quanta=1)


def _trial_from(state: LbdState, times: Sequence[float], calls: float, idle: float | None, now: float | None,
                **more: object) -> LbdState:  # fmt: skip
    """A trial that follows another starts at this read (the global trial, the placement trial, its second
    look): its bases are the ranks' CPU times, their calls, the partition's idle time and the time now."""
    return replace(state, base_user=tuple(times), base_calls=calls, base_idle=idle, base_wall=now, **more)  # type: ignore[arg-type]


def _global_len(state: LbdState, params: LbdParams) -> int:
    return max(params.trial_min_quanta, state.trial_len)


Reading = tuple[bool, float | None, float]  # a trial's end: won, its calls per second and per CPU second


def _global_read(state: LbdState, calls: float, times: Sequence[float] | None, params: LbdParams,
                 idle: float | None, now: float | None) -> Reading | None:  # fmt: skip
    """This quantum of a global trial, which follows the local trial (and its placement trial), against the
    pace kept: None while it goes on - before `glance_quanta`, or short of its length and not
    `trial_margin` behind the local trial per second; else whether it won (`global_margin` more MPI calls
    per second of wall time than the local trial, over `window_calls` calls per rank, with `wall_floor` of
    its calls per CPU second), its calls per second and per CPU second of the job."""
    n = state.global_quanta
    if n < params.glance_quanta or times is None or len(times) != len(state.base_user) or now is None:
        return None
    wall = _per_second(calls, state.base_calls, now, state.base_wall)
    local = state.wall_local or 0.0
    if n < _global_len(state, params) and wall is not None and wall >= local * (1 - params.trial_margin):
        return None
    cpu = _job_cpu(state, times, idle)
    rate = (calls - (state.base_calls or 0.0)) / cpu if cpu > 0 else 0.0
    per_rank = (calls - (state.base_calls or 0.0)) / len(times)
    won = (wall is not None and wall > local * (1 + params.global_margin) and per_rank >= params.window_calls
           and rate >= (state.rate_local or 0.0) * params.wall_floor)  # fmt: skip
    return won, wall, rate


def _global_trial(state: LbdState, calls: float, times: Sequence[float] | None, since: int, params: LbdParams,
                  idle: float | None, now: float | None) -> LbdState:  # fmt: skip
    """One quantum of a global trial: keep the decided global queue only if it made `global_margin` more MPI
    calls per second of wall time than the local trial before it; from `glance_quanta` on, one
    `trial_margin` behind it per second is over at once (a ring runs 11x slower there: every quantum of it
    costs)."""
    read = _global_read(state, calls, times, params, idle, now)
    if read is None:
        return replace(state, global_quanta=state.global_quanta + 1, since_decision=since)
    won, wall, rate = read
    if won:
        return _held_global(state, rate_local=state.rate_local, wall_local=state.wall_local, wall_decided=wall,
                            rate_decided=rate, hold_global=True, global_faster=True)  # fmt: skip
    return replace(state, local=True, global_quanta=0, wall_decided=wall, rate_decided=rate, since_decision=since)


def _block_start(state: LbdState, times: Sequence[float], calls: float, idle: float | None,
                 now: float | None) -> LbdState:  # fmt: skip
    """Local queues kept by their trial in r mod P: try both placements in turn, block first, from this read
    (module docstring: "Placement trial")."""
    return _trial_from(state, times, calls, idle, now, block=True, block_quanta=1, block_segs=0,
                       look=LbdState.look, round_base=LbdState.look, rounds_lost=0,
                       rounds_void=0)  # fmt: skip


def _uneven(wall: tuple[float, float], cpu: tuple[float, float], ncpus: int | None, idle: bool,
            params: LbdParams) -> bool:  # fmt: skip
    """Whether, over a round's seconds and the job's CPU seconds in it (each as (r mod P, block)), r mod P's side
    had a share of the partition (the job's CPU seconds, its ranks' and its idle CPUs', per second of its own) over
    `uneven_load` of its `ncpus` CPUs under block's side: what the job did not have, outside load took (module
    docstring: "Uneven load"). Never without the partition's idle time, which the job's share needs (ranks that
    sleep leave their CPUs idle)."""
    if not params.uneven_load or not ncpus or not idle or min(wall) <= 0:
        return False
    return cpu[1] / wall[1] - cpu[0] / wall[0] > params.uneven_load * ncpus


def _block_trial(state: LbdState, calls: float, times: Sequence[float] | None, since: int, params: LbdParams,
                 idle: float | None, now: float | None, ncpus: int | None) -> LbdState:  # fmt: skip
    """One quantum of a placement trial: rounds of four segments, in the order block, r mod P, r mod P, block,
    each a quantum to switch (`move_settle_s` where it moves ranks) and `look_quanta` quanta read, each
    placement's MPI calls, seconds and CPU seconds summed over its segments (module docstring: "Placement
    trial"). After a round, block `trial_margin` behind per second, or a round that block did not lead, ends
    it in r mod P; once each placement has been read as long as the local trial ran, block is kept with
    `block_margin` more calls per second, if it led in every round, and only over `window_calls` calls per
    rank in each placement and with `wall_floor` of r mod P's calls per CPU second; from the first round on,
    block clearly ahead (`trial_margin`, over a quarter of those calls; after one round only if `block_margin`
    ahead of the local trial's pace too, or r mod P under `behind_share` of block's per second and per CPU second)
    ends it in block (not on one CPU).
    Then the global trial, from this read, against the pace kept. On one CPU the same segments compare local
    queues (r mod P's side, first in each round) with the global queue (block's), and the trial ends there
    (module docstring: "Queue trial on one CPU"). A round that block led, in which outside load took
    `uneven_load` more of the partition's `ncpus` CPUs from r mod P's side than from block's, is left out: the
    trial runs a round more, up to as many as it has, and after the last one ends on r mod P's side (module
    docstring: "Uneven load")."""
    q, settle = state.block_quanta, _settle(state, params)
    read = times is not None and now is not None
    # The quanta of the switch are left out: the segment is read from here. (So is a segment read across a
    # rank's exit or over no bases yet - a queue trial's first: it is read from here on.)
    if read and (q == settle or (q > settle and len(times) != len(state.base_user))):  # type: ignore[arg-type]
        return _trial_from(state, times, calls, idle, now, block_quanta=settle + 1, since_decision=since)  # type: ignore[arg-type]
    if q < settle + params.look_quanta or not read:
        return replace(state, block_quanta=q + 1, since_decision=since)
    i, segs = _challenger(state), state.block_segs + 1
    wall = now - state.base_wall if state.base_wall is not None else 0.0
    seg = (calls - (state.base_calls or 0.0), wall, _job_cpu(state, times, idle))
    look = tuple(tuple(v + seg[k] if j == i else v for j, v in enumerate(state.look[k])) for k in range(3))
    more: dict[str, object] = {"look": look, "block_segs": segs, "since_decision": since}
    (c_calls, b_calls), (c_wall, b_wall), (c_cpu, b_cpu) = look
    cyclic, block = c_calls / c_wall if c_wall > 0 else 0.0, b_calls / b_wall if b_wall > 0 else 0.0
    least = min(c_calls, b_calls) / len(times)  # calls per rank in the placement that made fewer
    # Each placement's calls per CPU second of the job (r mod P, block), once both have CPU seconds.
    per_cpu = (c_calls / c_cpu, b_calls / b_cpu) if c_cpu > 0 and b_cpu > 0 else None
    floor = per_cpu is not None and per_cpu[1] >= per_cpu[0] * params.wall_floor
    behind, lost, void = block < cyclic * (1 - params.trial_margin), state.rounds_lost, state.rounds_void
    # As many quanta each way as the local trial had, in whole rounds of four segments (ABBA: a pace that
    # drifts steadily through the trial favours neither placement), judged at the end of each round.
    rounds = -(-_global_len(state, params) // (2 * params.look_quanta))
    spent = False  # as many rounds left out as the trial has: it ends in r mod P
    if segs % 4 == 0:  # a round's end: did block lead in this round of its own? (none may be lost to keep it)
        (c0, b0), (cw0, bw0), (cc0, bc0) = state.round_base
        walls = (c_wall - cw0, b_wall - bw0)  # the round's seconds in each placement
        led = (b_calls - b0) * walls[0] > (c_calls - c0) * walls[1]
        # A round that block led where outside load took more of the partition from r mod P's segments than from
        # block's is left out, and one more runs: a ring's pace falls several times as far as its share (module
        # docstring: "Uneven load"). One that block did not lead, or was behind over, ends the trial as before.
        if led and not behind and _uneven(walls, (c_cpu - cc0, b_cpu - bc0), ncpus, idle is not None, params):
            if void < rounds:
                more.update(_segment(state, _opens(segs)), look=state.round_base, rounds_void=void + 1)
                return _trial_from(state, times, calls, idle, now, block_quanta=1, **more)
            spent = True
        lost += not led
        more.update(round_base=look, rounds_lost=lost)
    # Clearly ahead: from the first round on, `trial_margin` ahead over calls enough for that margin (a phase more
    # or less at each end moves the pace by up to 2 / calls: window_calls bound it to block_margin / 5, these to
    # trial_margin / 5) ends the trial in block (module docstring: "Clearly ahead"). After one round only if
    # block is also `block_margin` ahead of the local trial's pace in r mod P, read before the trial: a stretch of
    # the node that slowed r mod P's two segments of the round and that read slowed block's first segment too,
    # which lies between them. Or if r mod P made under `behind_share` of block's pace over the round, per second
    # and per CPU second of the job: no stretch of this node reads so (a ring's round read at most 1.35), outside
    # load that stalls r mod P's segments slows them less per CPU second than per second, and r mod P right after
    # the global queue read 4.7-6.8x its pace in the trial (groups 5x2; module docstring: "Far ahead").
    # Not on one CPU: a queue trial is two rounds anyway, and one over fewer than `window_calls` calls per rank
    # keeps local queues.
    far = (params.behind_share > 0 and cyclic < block * params.behind_share and per_cpu is not None
           and per_cpu[0] < per_cpu[1] * params.behind_share)  # fmt: skip
    done = segs // 4 - void  # rounds read (at a round's end)
    early = done >= 2 or (done >= 1 and (far or block > (state.wall_local or inf) * (1 + params.block_margin)))
    clear = (not state.one_cpu and early and not lost and floor and block > cyclic * (1 + params.trial_margin)
             and least >= params.window_calls * params.block_margin / params.trial_margin)  # fmt: skip
    # A first look: block `trial_margin` behind after one segment each way, both read once settled, ends it too
    # (a ring; module docstring: "Settling after a move"). Not on one CPU, whose trial is two rounds anyway.
    first = segs == 2 and behind and not state.one_cpu
    # (After a lost round block can no longer be kept.)
    if (segs % 4 and not first) or not (spent or behind or lost or clear or done >= rounds):
        more.update(_segment(state, _opens(segs)))
        return _trial_from(state, times, calls, idle, now, block_quanta=1, **more)
    fair = clear or (least >= params.window_calls and floor)
    kept = not spent and not behind and not lost and fair and block > cyclic * (1 + params.block_margin)
    if state.one_cpu:
        return _queue_end(state, kept, (c_calls, c_wall, c_cpu), (b_calls, b_wall, b_cpu), more, params)
    rate = per_cpu[kept] if per_cpu is not None else state.rate_local
    end = replace(state, block=kept, block_quanta=0, wall_block=block, wall_cyclic=cyclic,  # type: ignore[arg-type]
                  wall_local=block if kept else cyclic, rate_local=rate, **more)  # fmt: skip
    return _global_start(end, times, calls, idle, now, params)


def _watching(state: LbdState, params: LbdParams, since: int) -> bool:
    """Whether quantum `since` of a decided-local job is a watch read: its local trial gave a rate of calls
    per second to compare with, over `window_calls` calls per rank (`paced`)."""
    return (state.phase == LBD_DECIDED and bool(state.local) and not state.hold_global and bool(state.wall_local)
            and state.paced and params.watch_quanta > 0 and since % params.watch_quanta == 0)  # fmt: skip


def _watch_read_low(state: LbdState, calls: float, now: float, cpu: float | None, nranks: int,
                    params: LbdParams) -> bool | None:  # fmt: skip
    """Whether this watch read is low (two in a row are a fall): a decided-local job made fewer than
    `watch_drop` of its local trial's MPI calls per second of wall time since its last watch read, and per
    CPU second of the job as well where both reads have it (outside load slows the job per second, not
    per CPU second); None: too soon to tell, since at the trial's pace its ranks would have made fewer
    than `window_calls` calls each (a phase more or less would move the rate)."""
    if state.watch is None or not state.wall_local or now <= state.watch[1] or nranks != state.watch[2]:
        return None  # (a rank that exited takes its calls out of the sum: no reading across that)
    if state.wall_local * (now - state.watch[1]) < params.window_calls * max(1, nranks):
        return None
    wall, per_cpu = watched_rates(state, calls, now, cpu)  # type: ignore[misc]
    if per_cpu is not None and state.rate_local and per_cpu >= state.rate_local * params.watch_drop:
        return False
    return wall < state.wall_local * params.watch_drop


def job_cpu_now(user_times: Sequence[float], idle: float | None) -> float | None:
    """The job's CPU seconds so far as the watch reads count them: its ranks' and its partition's idle
    time (None without the idle time: the watch then judges per second alone)."""
    return None if idle is None else sum(user_times) + idle


def watched_rates(state: LbdState, calls: float, now: float, cpu: float | None) -> tuple[float, float | None] | None:
    """A decided-local job's MPI calls per second of wall time and per CPU second of the job since its last
    watch read (None: no read; the second None: no CPU seconds to divide by)."""
    if state.watch is None or now <= state.watch[1]:
        return None
    base = state.watch[3]
    used = None if cpu is None or base is None else cpu - base
    return (calls - state.watch[0]) / (now - state.watch[1]), (calls - state.watch[0]) / used if used else None


def stalled_cpus(before: Sequence[tuple[float, float]], after: Sequence[tuple[float, float]], ncpus: int,
                 block: bool) -> tuple[int, ...]:  # fmt: skip
    """The CPUs (indices in the partition) of a job in a block placement (`block`) or in r mod P on which,
    between two reads of its ranks' (MPI calls, context switches), every rank made no MPI call and gave up
    its CPU at MPI waits: its ranks wait, in calls begun before, for ranks of other CPUs, and hand the CPU to
    each other in vain. Empty unless ranks of another CPU made calls meanwhile (the job went on there: a CPU
    of its partition did nothing for it), or where the reads do not match."""
    n = len(after)
    if len(before) != n or ncpus < 2 or n <= ncpus:
        return ()
    homes = [home_cpu(r, n, ncpus, PLACE_BLOCK if block else PLACE_CYCLIC) for r in range(n)]
    made = [a[0] - b[0] for a, b in zip(after, before, strict=True)]
    gave = [a[1] - b[1] for a, b in zip(after, before, strict=True)]
    still = tuple(c for c in range(ncpus) if all(made[r] <= 0 and gave[r] > 0 for r in range(n) if homes[r] == c))
    return still if any(made[r] > 0 for r in range(n) if homes[r] not in still) else ()


def _stall_moves(state: LbdState, ranks: tuple[tuple[float, float], ...], ncpus: int | None,
                 params: LbdParams) -> bool:  # fmt: skip
    """Whether this watch read finds a CPU stalled in the job's placement that the other one would not
    leave so (its waiting ranks spread over CPUs with working ones): once per decision, and towards block
    only where a placement trial read block's pace (module docstring: "A stalled CPU moves the placement")."""
    if state.moved or not ncpus or (not state.block and not (params.block_trial and state.wall_block)):
        return False
    now, other = (stalled_cpus(state.watch_ranks, ranks, ncpus, block) for block in (state.block, not state.block))
    return bool(now) and not other


def _trial_pace(state: LbdState, block: bool) -> tuple[float | None, float | None]:
    """A placement's MPI calls per second of wall time and per CPU second over the placement trial."""
    calls, cpu = state.look[0][block], state.look[2][block]  # (r mod P, block)
    return state.wall_block if block else state.wall_cyclic, calls / cpu if cpu > 0 else None


def _a_pace(state: LbdState, calls: float, ranks: int, params: LbdParams) -> bool:
    """Whether the calls since the last watch read are enough to read a pace from: `window_calls` a rank."""
    return state.watch is not None and calls - state.watch[0] >= params.window_calls * max(1, ranks)


def _moved(state: LbdState, since: int, watch: tuple[float, float, int, float | None],
           ranks: tuple[tuple[float, float], ...], params: LbdParams) -> LbdState:  # fmt: skip
    """The other placement, at its pace over the placement trial, watched from this read (module docstring:
    "A stalled CPU moves the placement"); this read's pace, where it is one, judges the move ("A move that
    reads slower is undone")."""
    block = not state.block
    wall, rate = _trial_pace(state, block)
    stalled = watched_rates(state, watch[0], watch[1], watch[3]) if _a_pace(state, watch[0], watch[2], params) else None
    return replace(state, since_decision=since, watch=watch, watch_low=False, watch_ranks=ranks, watch_stall=False,
                   block=block, moved=True, rebase=True, wall_local=wall or state.wall_local,
                   rate_local=rate if rate is not None else state.rate_local, stall_pace=stalled)  # fmt: skip


def _rebased(state: LbdState, since: int, watch: tuple[float, float, int, float | None],
             ranks: tuple[tuple[float, float], ...], params: LbdParams) -> LbdState:  # fmt: skip
    """The first watch read after a move: the job is watched on at the lower of the moved-to placement's pace
    over the placement trial and its pace since the move (module docstring: "A stalled CPU moves the
    placement"); the read itself is not judged."""
    wall, per_cpu = watched_rates(state, watch[0], watch[1], watch[3])  # type: ignore[misc]
    read = replace(state, stall_pace=None, rebase=False, since_decision=since, watch=watch, watch_low=False,
                   watch_ranks=ranks, watch_stall=False)  # fmt: skip
    stalled = state.stall_pace
    if stalled is not None and wall * (1 + params.move_margin) < stalled[0]:
        # Slower than it was stalled: undone, watched on at the lower of the left placement's pace over its
        # trial and over the read that moved it (module docstring: "A move that reads slower is undone").
        trial_wall, trial_rate = _trial_pace(state, not state.block)
        rates = [r for r in (trial_rate, stalled[1]) if r]
        return replace(read, block=not state.block, wall_local=min(trial_wall or stalled[0], stalled[0]),
                       rate_local=min(rates) if rates else state.rate_local)  # fmt: skip
    rate = state.rate_local if per_cpu is None or not state.rate_local else min(state.rate_local, per_cpu)
    return replace(read, wall_local=min(state.wall_local or wall, wall), rate_local=rate)


def _next_window(state: LbdState, times: tuple[float, ...], calls: float | None, idle: float | None,
                 now: float | None, since: int, **more: object) -> LbdState:  # fmt: skip
    """A window opens at this read: its bases are the ranks' CPU times, their calls, the partition's idle
    time and the time now."""
    return replace(state, base_user=times, base_calls=calls, base_idle=idle, base_wall=now, quanta_stable=0,
                   since_decision=since, **more)  # fmt: skip


def _settle(state: LbdState, params: LbdParams) -> int:
    """The quanta of the running segment left unread: `move_settle_s` where it moved ranks to other CPUs (the
    first segment, and each that changed sides: block, r mod P, r mod P, block), else the one quantum (module
    docstring: "Placement trial")."""
    k = state.block_segs
    moved = not state.one_cpu and _opens(k) != (k > 0 and _opens(k - 1))  # before the first: r mod P
    return max(1, ceil(params.move_settle_s / params.quantum_s - 1e-9)) if moved else 1


def _challenger(state: LbdState) -> int:
    """Which side of a trial by segments the running segment is: 1 for the challenger (a block placement; on
    one CPU, the global queue), 0 for what the job runs on otherwise (r mod P; local queues)."""
    return int(not state.local) if state.one_cpu else int(state.block)


def _opens(k: int) -> bool:
    """Whether segment k (from 0) of a trial by segments is on the side that opens and closes each round of
    four (block, r mod P, r mod P, block: ABBA)."""
    return k % 4 in (0, 3)


def _segment(state: LbdState, first: bool) -> dict[str, bool]:
    """The fields that put the job, for its next segment, on the side that opens and closes each round (block;
    on one CPU, local queues, which the job runs on before and after) or on the other."""
    return {"local": first} if state.one_cpu else {"block": first}


def _queue_start(state: LbdState, fell: bool = False) -> LbdState:
    """On one CPU: try local queues against the global queue by segments, local, global, global, local
    (module docstring: "Queue trial on one CPU"); the first quantum of each segment switches and reads the
    bases. `fell`: tried again because the job's progress fell."""
    return replace(state, local=True, block_quanta=1, block_segs=0, look=LbdState.look, round_base=LbdState.look,
                   rounds_lost=0, rounds_void=0, since_decision=0, base_user=(), watch=None, watch_low=False,
                   fell=fell)  # fmt: skip


def _kept_pace(state: LbdState) -> LbdState:
    """The state as the watch reads it on one CPU: the pace of the queue its last queue trial kept."""
    if state.global_faster:
        return replace(state, wall_local=state.wall_decided, rate_local=state.rate_decided)
    return state


def _watching_one_cpu(state: LbdState, params: LbdParams, since: int) -> bool:
    """Whether quantum `since` of a job on one CPU is a watch read: its queue trial read `window_calls` calls per
    rank each way (`paced`), and it is not yet due to be tried again."""
    return (params.queue_trial and state.paced and params.watch_quanta > 0 and since % params.watch_quanta == 0
            and since < params.remeasure_quanta)  # fmt: skip


def _one_cpu_watch(state: LbdState, calls: float, times: Sequence[float] | None, idle: float | None,
                   now: float | None, since: int, params: LbdParams) -> LbdState:  # fmt: skip
    """One quantum of a job decided on one CPU, between queue trials: as a local job's watch on two CPUs does
    (module docstring: "Watching a local job"), a pace under `watch_drop` of the queue kept, per second and
    per CPU second, at two reads in a row, tries the queues again at once; else the next trial comes
    `remeasure_quanta` after the last."""
    if since >= params.remeasure_quanta:
        return _queue_start(state)
    if not _watching_one_cpu(state, params, since) or times is None or now is None:
        return replace(state, since_decision=since)
    n, cpu = len(times), job_cpu_now(times, idle)
    low = _watch_read_low(_kept_pace(state), calls, now, cpu, n, params)
    if low and state.watch_low:
        return _queue_start(state, fell=True)
    if low is not None or state.watch is None or state.watch[2] != n:  # the next read compares with this one
        return replace(state, since_decision=since, watch=(calls, now, n, cpu), watch_low=bool(low))
    return replace(state, since_decision=since)


def _queue_end(state: LbdState, kept: bool, local: tuple[float, float, float], glob: tuple[float, float, float],
               more: dict[str, object], params: LbdParams) -> LbdState:  # fmt: skip
    """The end of a queue trial on one CPU: the global queue kept (held there to the next trial), or local
    queues; a decision where the queue is not the one the last decision chose. Either way each queue's calls
    per second and per CPU second over its segments."""
    paces = {"wall_local": local[0] / local[1] if local[1] > 0 else None,
             "rate_local": local[0] / local[2] if local[2] > 0 else None,
             "wall_decided": glob[0] / glob[1] if glob[1] > 0 else None,
             "rate_decided": glob[0] / glob[2] if glob[2] > 0 else None}  # fmt: skip
    n = len(state.base_user) or 1
    paced = min(local[0], glob[0]) / n >= params.window_calls  # a pace the watch may read against
    end = replace(state, local=not kept, global_faster=kept, block_quanta=0, paced=paced, **more, **paces)  # type: ignore[arg-type]
    return replace(end, decisions=state.decisions + 1) if kept != state.global_faster else end


def lbd_step(
    state: LbdState,
    switches: Sequence[float],
    user_times: Sequence[float] | None,
    params: LbdParams,
    calls: float | None = None,
    ncpus: int | None = None,
    idle: float | None = None,
    now: float | None = None,
    rank_calls: Sequence[float] | None = None,
) -> LbdState:
    """Advance the detector by one quantum. `switches`: the ranks' context-switch counts (needed while
    measuring only). `user_times`: the ranks' CPU times in seconds, given when
    `state.wants_user_times(params)` said so (None otherwise, or if a rank could not be read).
    `calls`: the MPI calls the job's ranks have made so far (None: no local trials). `ncpus`: the
    size of the job's partition (None: not known; 0: none now, nothing to measure). `idle`: the idle CPU
    seconds of the job's partition so far, read with `user_times` (None: not known; the trials then
    count the ranks' CPU time alone). `now`: the time of that read, in seconds (None: the reverse trials
    compare progress per CPU second alone). `rank_calls`: each rank's MPI calls so far, in rank order, with
    `switches` (a decided-local job, every rank of it read: the watch's stalled CPUs)."""
    if ncpus is not None:
        if ncpus == 0:
            return state
        if ncpus == 1:
            if state.phase == LBD_DECIDED and state.one_cpu:
                since = state.since_decision + 1
                if state.block_quanta:  # a queue trial: no counts to judge it by ends it on the queue it had
                    if calls is None:
                        return replace(state, local=not state.global_faster, block_quanta=0, since_decision=since)
                    return _block_trial(state, calls, user_times, since, params, idle, now, ncpus)
                if params.queue_trial and calls is not None:  # tried again periodically, or when its pace falls
                    return _one_cpu_watch(state, calls, user_times, idle, now, since, params)
                return state
            decided = LbdState(LBD_DECIDED, state.cvcs, ip=state.ip, local=True, decisions=state.decisions + 1,
                               one_cpu=True)  # fmt: skip
            return _queue_start(decided) if params.queue_trial else decided
        if state.one_cpu:  # grown past one CPU: measure (on the global queue) as a new job does
            return LbdState(decisions=state.decisions)
    if state.phase == LBD_MEASURING:
        return _measuring(state, switches, params)
    if state.quick and switches:  # the CVCS is read on through a quick window (module docstring: "Quick window")
        state = _settling(state, switches, params)
    since = state.since_decision + 1
    if state.phase == LBD_DECIDED and state.local and state.trial_quanta and calls is not None:
        return _trial(state, calls, user_times, since, params, idle, now)
    if state.phase == LBD_DECIDED and state.global_quanta:
        if calls is None:  # no counts to judge it by: the local queues its trial kept
            return replace(state, local=True, global_quanta=0, since_decision=since)
        return _global_trial(state, calls, user_times, since, params, idle, now)
    if state.phase == LBD_DECIDED and state.block_quanta:
        if calls is None:  # no counts to judge it by: r mod P
            return replace(state, block=False, block_quanta=0, since_decision=since)
        return _block_trial(state, calls, user_times, since, params, idle, now, ncpus)
    if state.phase == LBD_DECIDED and (state.local or state.hold_global):
        watched = _watching(state, params, since) and user_times is not None and calls is not None and now is not None
        cpu = job_cpu_now(user_times, idle) if watched else None  # type: ignore[arg-type]
        low = _watch_read_low(state, calls, now, cpu, len(user_times), params) if watched else None  # type: ignore[arg-type]
        read = rank_calls is not None and len(switches) == len(rank_calls)
        ranks = tuple(zip(rank_calls, switches, strict=True)) if read else ()  # type: ignore[arg-type]
        stall = low is not None and _stall_moves(state, ranks, ncpus, params)
        n = len(user_times) if user_times is not None else 0
        if stall and state.watch_stall and since < params.remeasure_quanta:  # two reads in a row
            return _moved(state, since, (calls, now, n, cpu), ranks, params)  # type: ignore[arg-type]
        # The first read after a move, over enough calls to be a pace: that of the phase that stalled.
        if state.rebase and low is not None and _a_pace(state, calls, n, params):  # type: ignore[arg-type]
            return _rebased(state, since, (calls, now, n, cpu), ranks, params)  # type: ignore[arg-type]
        # Two reads in a row: one is a stretch of outside load. A read that finds a CPU stalled is not low: the
        # next one moves the placement if the stall lasts (a fall it explains would re-measure the job first).
        low = low and not stall
        fell = bool(low and state.watch_low)
        if since >= params.remeasure_quanta or fell:  # back to the global queue for one window
            return replace(state, phase=LBD_STABLE, base_user=(), quanta_stable=0, since_decision=since,
                           trial_quanta=0, hold_global=False, struck=False, watch=None, watch_low=False,
                           watch_ranks=(), watch_stall=False, fell=fell)  # fmt: skip
        if watched and (low is not None or state.watch is None or state.watch[2] != n):  # the next compares with it
            return replace(state, since_decision=since, watch=(calls, now, n, cpu), watch_low=bool(low),  # type: ignore[arg-type]
                           watch_ranks=ranks, watch_stall=stall)  # fmt: skip
        return replace(state, since_decision=since)
    if user_times is None:
        return replace(state, quanta_stable=state.quanta_stable + 1, since_decision=since)
    times = tuple(user_times)
    if not state.base_user or len(state.base_user) != len(times):
        return _next_window(state, times, calls, idle, now, since)
    quanta = state.quanta_stable + 1
    used = [max(0.0, u - b) for u, b in zip(times, state.base_user, strict=True)]
    mean = sum(used) / len(used)
    per_rank = None if calls is None or state.base_calls is None else (calls - state.base_calls) / len(times)
    enough_calls = per_rank is not None and per_rank >= params.window_calls and mean >= params.window_min_cpu_s
    # Fewer calls than phases enough to read: ranks computing between calls hold their tokens, and who
    # holds one is not balance (module docstring: "Too few calls").
    few_calls = per_rank is not None and per_rank < params.window_min_calls
    if state.phase == LBD_STABLE and state.quick:  # (module docstring: "Quick window")
        if not enough_calls:
            # Open until the job's window would have opened without it; without counts there is nothing to read.
            if per_rank is not None and not _due(state, params):
                return replace(state, quanta_stable=quanta, since_decision=since)
            return _quick_unread(state, times, calls, idle, now, since, None, params)
        if (ip := idleness(used)) >= params.threshold:
            return _quick_unread(state, times, calls, idle, now, since, ip, params)
    if state.phase == LBD_STABLE:
        if (mean < params.window_cpu_s or few_calls) and quanta < params.ip_quanta and not enough_calls:
            return replace(state, quanta_stable=quanta, since_decision=since)
        ip = idleness(used)
        if few_calls:  # ip_quanta and still too few: no reading; the job keeps its queue, untried
            keep = bool(state.local) and state.decisions > 0
            # No calls given to _decide: no rate, so no trial; the next window's bases are this read's.
            decided = _decide(state, ip, keep, times, None, 0.0, quanta, idle, now)
            return replace(decided, base_calls=calls, unread=True)
        if too_sparse(per_rank, mean, len(times), ncpus, params):  # no trial could read it: global, untried
            return replace(_decide(state, ip, False, times, calls, sum(used), quanta, idle, now), sparse=True)
        # The first decision: the plain threshold; a periodic re-measure of a local job: it stays local
        # unless clearly imbalanced now.
        cut = params.threshold if state.decisions == 0 or not state.local else params.threshold + params.hysteresis
        local = ip < cut
        # Found imbalanced (within reverse_band of the threshold): try local queues (reverse trial).
        reverse = not local and ip < params.threshold + params.reverse_band
        decided = _decide(state, ip, local or reverse, times, calls, sum(used), quanta, idle, now)
        if reverse and decided.trial_quanta:
            decided = replace(decided, reverse=True)
        elif reverse:  # no trial without a rate of calls to compare with: global, as the window said
            decided = _decide(state, ip, False, times, calls, sum(used), quanta, idle, now)
        return replace(decided, short_phases=enough_calls and mean < params.window_cpu_s)
    # Decided, global queue: keep measuring; move to local queues only on clear, repeated evidence.
    if (mean < params.recheck_cpu_s or few_calls) and not enough_calls:
        if few_calls and quanta >= params.ip_quanta:  # no reading in this long: start the next window
            return _next_window(state, times, calls, idle, now, since)
        return replace(state, quanta_stable=quanta, since_decision=since)
    ip = idleness(used)
    if too_sparse(per_rank, mean, len(times), ncpus, params):  # no trial could read it: no case for local queues
        return _next_window(state, times, calls, idle, now, since, ip=ip, against=0, below=0)
    # Windows inside the band (threshold - hysteresis <= IP < threshold) neither count nor reset: a
    # balanced send.S on the global queue reads 4-10 % per window, and resetting on every in-band
    # window kept a job that had become balanced off local queues for 4 windows in a row (1 run in 3).
    if ip < params.threshold - params.hysteresis:
        against = state.against + 1
    else:
        against = state.against if ip < params.threshold else 0
    below = state.below + 1 if ip < params.threshold else 0
    if against >= params.confirm:
        return _decide(state, ip, True, times, calls, sum(used), quanta, idle, now)  # short_phases as it was
    if below >= params.band_windows:  # never clearly balanced, never imbalanced: let a trial settle it
        decided = _decide(state, ip, True, times, calls, sum(used), quanta, idle, now)
        if decided.trial_quanta:
            return replace(decided, band=True)
    return _next_window(state, times, calls, idle, now, since, ip=ip, against=against, below=below)
