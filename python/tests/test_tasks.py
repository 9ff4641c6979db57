"""test_tasks.py - asyncio tasks that wait (issue 12): programs/awaits.py run under
`python -m pprofkit run`, its files read by protoc (support.decode).

Tolerances (test_profiler.py's opening comment explains INTERVAL, the longest interval
between two ticks): a waiting task's wall time is the sum of the intervals between its
samples; its first sample counts the interval before it (when it may not exist yet) and
the interval from its last sample to its end (its last step, where awaits.py notes the
time) is not recorded, so |wall - lifetime| <= 2 INTERVAL. Visiting at most
max_tasks_per_tick tasks a tick, a task is sampled every ceil(live / max) ticks or so
(the rotation through the task set's table also meets the tasks the program creates
and ends meanwhile), its first sample counting one interval: the same bound with the
interval between two samples of one task, (live / max + 1) INTERVAL. A task created, run
and ended between two ticks is sampled only if a tick finds it not done, with at most
one interval: the ephemeral tasks' wall time is at most their lifetimes plus INTERVAL for
each of them sampled.
"""

import collections
import sys
import unittest

import test_profiler
from test_profiler import MS, load, longest_interval, samples_of

# Each long task's stack while it waits, leaf first (function names); its parent task.
EXPECTED = {
    "sleeper": (["sleep", "sleeper"], None),
    "getter": (["Queue.get", "getter"], None),
    "gatherer": (["gatherer"], None),
    "gathered-1": (["sleep", "gathered"], "gatherer"),
    "gathered-2": (["sleep", "gathered"], "gatherer"),
    "grouper": (["TaskGroup.__aexit__", "grouper"], None),
    "grouped-1": (["sleep", "grouped"], "grouper"),
    "grouped-2": (["sleep", "grouped"], "grouper"),
    "waiter": (["_wait", "wait", "waiter"], None),
    "waited-1": (["sleep", "waited"], "waiter"),
    "waited-2": (["sleep", "waited"], "waiter"),
    "awaiter": (["awaiter"], None),
    "awaited": (["sleep", "awaited"], "awaiter"),
}
BAD_NAME = "bad\ufffd\ufffd\ufffdname"  # "bad\udcffname": the surrogate's 3 bytes replaced


class TestAsyncioTasks(test_profiler.ProfilerTest):
    def run_awaits(self, *options, seconds=1.5, ephemeral=200, idle=False, thread=False,
                   busy=False, slow_switch=False, program=()):
        run = self.cli(list(options) + ["awaits.py", str(seconds), str(ephemeral)] +
                       (["idle"] if idle else []) + (["thread"] if thread else []) +
                       (["busy"] if busy else []) + (["slowswitch"] if slow_switch else []) +
                       list(program))
        lines = run.json()
        (me,) = [j for j in lines if "at_stop" not in j]
        # With "busy", the sampler's longest waits over the whole run (the first line's
        # are those until the program's end, and the sampler may wait for the GIL then),
        # and its statistics at stop (for failure messages).
        for j in lines:
            if "at_stop" in j:
                me["at_stop"] = j["at_stop"]
                me["stop_ns"] = j["now_ns"]
                for key in ("tick_gap_ns_max", "gil_wait_ns_max"):
                    me["sampler"][key] = max(me["sampler"][key], j["at_stop"][key])
        self.check_summary(run)
        return run, me, load(run.files)

    def waiting(self, profiles):
        """The samples of waiting tasks (label "task state"), by task name: [(stack
        names, labels, values)]. Their stack is the task's own chain, not a thread's: no
        event loop frame; a thread's samples have no "task state"."""
        out = collections.defaultdict(list)
        for p, stack, labels, values in samples_of(profiles):
            names = [f[0] for f in stack]
            if "task state" in labels:
                self.assertFalse(any("_run_once" in n for n in names), (names, labels))
                out[labels["task name"]].append((names, labels, dict(zip(
                    [t for t, _ in p.sample_types], values))))
        return out

    def check_tasks(self, run, me, profiles, slack):
        interval = longest_interval(me["rate"], me["sampler"], me["now_ns"])
        tol = slack * 2 * interval
        waiting = self.waiting(profiles)
        lifetimes = me["lifetimes_ns"]
        # On a failure, every task's wall time (the ephemeral ones' summed) and the
        # sampler's statistics, when the program printed them and at its stop (with
        # "busy"), say where the time went (which ticks, visits and chain reads there
        # were).
        walls = {n: round(sum(v["wall-time"] for _, _, v in smp) / MS, 1)
                 for n, smp in sorted(waiting.items()) if not n.startswith("ephemeral-")}
        eph = [v["wall-time"] for n, smp in waiting.items() if n.startswith("ephemeral-")
               for _, _, v in smp]
        context = "; lifetimes (ms): %s; walls (ms): %s; %d ephemeral samples, %.1f ms; " \
            "sampler: %s; at stop: %s" % (
                {n: round(t / MS, 1) for n, t in sorted(lifetimes.items())}, walls, len(eph),
                sum(eph) / MS, me["sampler"], me.get("at_stop"))
        for name, (chain, parent) in EXPECTED.items():
            smp = waiting.get(name)
            self.assertTrue(smp, "no sample of %s; tasks sampled: %s%s" % (
                name, sorted(waiting), context))
            wall = sum(v["wall-time"] for _, _, v in smp)
            self.assert_near(wall, lifetimes[name], tol, "%s's wall time%s" % (name, context))
            on_chain, off = 0, collections.Counter()
            for names, labels, values in smp:
                # A task that has not begun yet shows its coroutine's first line: a
                # root-aligned part of the chain.
                self.assertEqual(names, chain[len(chain) - len(names):], (name, names))
                self.assertEqual(values["cpu-time"], 0, (name, values))
                self.assertIn(labels["task state"], ("waiting", "ready"), labels)
                self.assertEqual(labels.get("thread name"), "MainThread", labels)
                self.assertIn("thread id", labels)
                self.assertIsInstance(labels.get("task id"), int)
                if (names == chain and labels.get("parent task") == parent and
                        labels["task state"] == "waiting"):
                    on_chain += values["wall-time"]
                else:
                    off[(names[0], labels.get("parent task"), labels["task state"])] += \
                        values["wall-time"] // 1000000
            # The chain and parent of the task waiting as the program made it wait: all
            # but what a first sample before its first step or a last one after its
            # cancellation (awaited by asyncio.run's main task) can show.
            self.assertGreater(on_chain, wall - 2 * tol, "%s: %.1f ms of %.1f on its chain; "
                               "elsewhere (leaf, parent, state: ms): %s%s" % (
                                   name, on_chain / MS, wall / MS, dict(off), context))
        return waiting, interval

    def test_waiting_tasks(self):
        # The loop's call_soon is the hook: after the first scan cycle (one tick: 230
        # tasks, fewer than the cap), a tick visits the tasks the loop scheduled and a
        # 64th of the cap others (16 at least).
        st = self.check_waiting_tasks()
        self.assertGreater(st["task_ticks_hooked"], st["ticks"] // 2, st)

    def test_waiting_tasks_without_hook(self):
        # Every tick visits the tasks (up to the cap), as with a loop the hook does not
        # cover.
        st = self.check_waiting_tasks("--no-asyncio-task-hook")
        self.assertEqual(st["task_ticks_hooked"], 0, st)

    def test_movers_among_many(self):
        # 2,000 tasks that wait and, once the ticks are hook passes (the sampler has
        # read them all, 16 a tick, then scanned them all), 20 that wait 0.4 s in
        # first() then 0.8 s in second(), with a cap of 50: a tick visits the tasks the
        # loop scheduled (the movers as they wake) and 16 others, so a mover's move is
        # read at the next tick. The movers' time in each: the measured sum within 3
        # intervals a mover (its first sample's interval, the tick that reads its move,
        # its end). Scanning instead (50 tasks a tick of 2,020: each task every ~40
        # ticks), a move would be read up to that late; so with hook passes that missed
        # the marks (16 others a tick: every ~126 ticks).
        self.check_movers()

    @unittest.skipIf(sys.version_info < (3, 12), "asyncio.eager_task_factory is 3.12's")
    def test_eager_movers_among_many(self):
        # The same with an eager task factory: a mover's first step, to its wait in
        # first(), runs inside create_task, not scheduled by call_soon; create_task's
        # hook notes it. (Without it, a mover waiting in first() was found only by the
        # hook passes' scan of 16 tasks a tick, ~126 ticks for the set: first() had 0 to
        # 0.29 s of 8.0 in 6 runs on 3.12 and 3.13.)
        self.check_movers("eager")

    def test_burst_while_busy(self):
        # 300 tasks woken at once (an asyncio.Event set) while the ticks are hook
        # passes: more marks than the passes hold (200 with max_tasks_per_tick 1,000),
        # the rest released and their tasks no longer trusted; the ticks stay hook
        # passes (scanning again instead cost more a tick: with the CPU budget, ticks
        # further apart, more marks a tick, no hook pass for seconds). The loop computes
        # 2 s before the tasks run, so the passes find them woken, not yet moved. Their
        # move to second() then comes without a mark: each must be visited again (the
        # marked ones as not settled, the others by the hook passes' share of the set:
        # 16 tasks a tick, the 300 within ~19 ticks of their 2 s there), not left where
        # a visit saw it woken (trusting that visit: second() 0 and 0.22 s of 600 in
        # two runs; 571 and 578 s now).
        run = self.cli(["--cpu-budget", "0", "burst.py", "300", "2", "2"])
        (me,) = run.json()
        self.check_summary(run)
        after = {k: me["at_end"][k] - me["at_burst"][k] for k in ("ticks", "task_ticks_hooked")}
        self.assertGreaterEqual(me["at_end"]["task_marks_dropped"], 100, me["at_end"])
        # (A snapshot may fall between a pass's two counts: one apart.)
        self.assertLessEqual(after["ticks"] - after["task_ticks_hooked"], 1, after)
        walls = collections.Counter()
        for names, labels, values in (x for n, smp in self.waiting(load(run.files)).items()
                                      if n.startswith("worker-") for x in smp):
            walls["second" if "second" in names else "other"] += values["wall-time"]
        self.assertGreater(walls["second"], 0.5 * me["second_ns"],
                           "the workers in second(): %s, measured %.1f ms" % (
                               walls, me["second_ns"] / MS))

    def test_latecomers_after_a_burst(self):
        # 400 short tasks, then 10 that wait 1 s, made in one step while the ticks are
        # hook passes: more marks than a pass holds (128 with max_tasks_per_tick 100).
        # The newest are kept, so the late tasks are visited at the next pass and their
        # wall time is their lifetime; were the oldest kept, the late ones would wait for
        # the share of the set (16 tasks a tick of 410) and lose the time until then (up
        # to ~0.25 s at 100 Hz).
        run = self.cli(["--cpu-budget", "0", "--max-tasks-per-tick", "100",
                        "latecomers.py", "400", "1"])
        (me,) = run.json()
        self.check_summary(run)
        self.assertGreater(me["sampler"]["task_marks_dropped"], 0, me["sampler"])
        interval = longest_interval(me["rate"], me["sampler"], me["now_ns"])
        walls = collections.Counter()
        for name, smp in self.waiting(load(run.files)).items():
            walls[name] += sum(v["wall-time"] for _, _, v in smp)
        report = {n: (round(walls[n] / MS, 1), round(t / MS, 1))
                  for n, t in sorted(me["lifetimes_ns"].items())}
        for name, lifetime in me["lifetimes_ns"].items():
            self.assert_near(walls[name], lifetime, 2 * interval, "%s (wall, lifetime ms: %r)"
                             % (name, report))

    def test_duck_future(self):
        # A task waiting on a future of its own kind, which wakes it without the loop
        # (its set_result runs the task's wakeup itself): the move to second() is not
        # marked, so the hook passes must not take the task as one that only a mark can
        # move: its time in second() (1 s) within 3 intervals. (Trusted as settled: all
        # of it in first().)
        run = self.cli(["--cpu-budget", "0", "duckfuture.py", "1"])
        (me,) = run.json()
        self.check_summary(run)
        interval = longest_interval(me["rate"], me["sampler"], me["now_ns"])
        self.assertGreater(me["sampler"]["task_ticks_hooked"], 5, me["sampler"])
        walls = collections.Counter()
        for names, labels, values in self.waiting(load(run.files))["worker"]:
            walls["second" if "second" in names else "first"] += values["wall-time"]
        self.assert_near(walls["second"], me["second_ns"], 3 * interval,
                         "the worker in second(): %s" % walls)

    def test_share_among_many_marks(self):
        # The duck future's worker among 100 tasks that wake every 10 ms: ~100 tasks
        # marked a tick, more than the hook passes read with max_tasks_per_tick 50 (32
        # a tick). The hook passes' share of the set must still move on (the marked
        # tasks leave it 16 reads a tick), reaching the worker, never marked, every ~7
        # ticks: its time in second() (1 s) within that and 3 intervals. (With every
        # read given to the marked tasks, the share stood still: 0 ms in second() in
        # 3 runs of 3.)
        run = self.cli(["--max-tasks-per-tick", "50", "--cpu-budget", "0", "duckfuture.py",
                        "1", "100"])
        (me,) = run.json()
        self.check_summary(run)
        st = me["sampler"]
        interval = longest_interval(me["rate"], st, me["now_ns"])
        self.assertGreater(st["task_ticks_hooked"], st["ticks"] // 2, st)
        walls = collections.Counter()
        for names, labels, values in self.waiting(load(run.files))["worker"]:
            walls["second" if "second" in names else "first"] += values["wall-time"]
        self.assert_near(walls["second"], me["second_ns"], (101 / 16 + 3) * interval,
                         "the worker in second(): %s" % walls)

    def test_found_not_started(self):
        # 20 tasks made before the profiler started (their first step never marked),
        # found not started by the visits of the set until the ticks are hook passes
        # (the loop computes meanwhile), then waiting 0.5 s in second(), a move the
        # loop does not mark either, among 2,000 tasks that sleep: held with the marked
        # tasks once found not started, each is read at the tick after its move: each
        # starter's time in second() within 3 intervals of its wait. (Left to the hook
        # passes' share of the set, 16 tasks a tick, ~126 ticks for the set: 16 of the
        # 20 had none there in 1 of 3 runs.)
        out_dir = self.tmpdir()
        run = self.run_python(["starters.py", out_dir, "2000", "20"], out_dir=out_dir)
        (me,) = run.json()
        st = me["sampler"]
        interval = longest_interval(me["rate"], st, me["now_ns"])
        self.assertGreater(st["task_ticks_hooked"], 5, st)
        second = collections.Counter()
        for n, smp in self.waiting(load(run.files)).items():
            if n.startswith("starter-"):
                second[n] += sum(v["wall-time"] for names, _, v in smp if "second" in names)
        self.assertEqual(len(second), 20, second)
        for n, wall in second.items():
            self.assert_near(wall, me["second_ns"] / 20, 3 * interval,
                             "%s in second(): %s" % (n, sorted(second.values())))

    def check_movers(self, *program):
        run = self.cli(["--max-tasks-per-tick", "50", "--cpu-budget", "0", "movers.py",
                        "2000", "20"] + list(program))
        (me,) = run.json()
        self.check_summary(run)
        interval = longest_interval(me["rate"], me["sampler"], me["now_ns"])
        st = me["sampler"]
        self.assertGreater(st["task_ticks_hooked"], 100, st)  # the movers' 1.2 s
        walls = collections.Counter()
        for names, labels, values in (x for n, smp in self.waiting(load(run.files)).items()
                                      if n.startswith("mover-") for x in smp):
            walls[names[-2] if len(names) > 1 else names[0]] += values["wall-time"]
        self.assert_near(walls["first"], me["first_ns"], 20 * 3 * interval,
                         "the movers in first(): %s" % walls)
        print(walls, me["second_ns"], interval, st["task_ticks_hooked"], st["ticks"]); self.assert_near(walls["second"], me["second_ns"], 20 * 3 * interval,
                         "the movers in second(): %s" % walls)

    def test_loop_not_covered(self):
        # A loop class with its own call_soon: its tasks are found by scanning.
        st = self.check_waiting_tasks(program=["ownloop"])
        self.assertEqual(st["task_ticks_hooked"], 0, st)

    @unittest.skipIf(sys.version_info < (3, 12), "asyncio.eager_task_factory is 3.12's")
    def test_eager_tasks(self):
        # Tasks whose first step runs as they are made (not scheduled by call_soon, so
        # never marked before they first wait) are found by the hook passes' part of
        # the scan.
        st = self.check_waiting_tasks(program=["eager"])
        self.assertGreater(st["task_ticks_hooked"], st["ticks"] // 2, st)

    def check_waiting_tasks(self, *options, program=()):
        """awaits.py's tasks with their stacks, names, parents and wall times; its
        sampler's statistics."""
        run, me, profiles = self.run_awaits(*options, program=program)
        waiting, interval = self.check_tasks(run, me, profiles, 1)
        # A task that waits half as long: half the wall time.
        lifetimes = me["lifetimes_ns"]
        half = sum(v["wall-time"] for _, _, v in waiting["half-sleeper"])
        self.assert_near(half, lifetimes["half-sleeper"], 2 * interval,
                         "the half-sleeper's wall time")
        # A task awaited from late_ns on (LATE, or later: two ticks after its making, for
        # a sample without a parent to exist): no parent before, "late-awaiter" after,
        # found within 72 ticks (looked for at its first 8 ticks without one, then every
        # 64th).
        late = collections.Counter()
        for names, labels, values in waiting["late-awaited"]:
            late[labels.get("parent task")] += values["wall-time"]
        self.assertEqual(set(late) - {None, "late-awaiter", "Task-1"}, set(), late)
        self.assertGreater(late["late-awaiter"],
                           lifetimes["late-awaited"] - me["late_ns"] - 72 * interval -
                           2 * interval,
                           late)
        self.assertGreater(late[None], 0, (late, me["late_ns"]))
        # The task with a lone surrogate in its name: repaired, sampled all along.
        self.assertIn(BAD_NAME, waiting, sorted(waiting))
        wall = sum(v["wall-time"] for _, _, v in waiting[BAD_NAME])
        self.assert_near(wall, lifetimes["bad\udcffname"], 2 * interval,
                         "the bad name's wall time")
        # The spinner runs or is ready to run all along: the main thread's samples while
        # it runs and its own while it waits add up to its lifetime, its CPU time only
        # on the first.
        spin = [(labels, values, p) for p, stack, labels, values in samples_of(profiles)
                if labels.get("task name") == "spinner"]
        wall = sum(v[p.index("wall-time")] for _, v, p in spin)
        self.assert_near(wall, lifetimes["spinner"], 2 * interval, "the spinner's wall time")
        self.assertTrue(any(v[p.index("cpu-time")] > 0 for _, v, p in spin))
        # Ephemeral tasks ended, but referenced (in the task set, done), for the whole
        # run: sampled only while they lived.
        eph = [(n, s) for n, s in waiting.items() if n.startswith("ephemeral-")]
        wall = sum(v["wall-time"] for _, smp in eph for _, _, v in smp)
        self.assertLessEqual(wall, me["ephemeral_ns"] + len(eph) * interval,
                             "%d ephemeral tasks sampled, %.1f ms" % (len(eph), wall / MS))
        st = me["sampler"]
        self.assertGreater(st["tasks_seen"], 0, st)
        self.assertEqual(st["tasks_skipped"], 0, st)
        return st

    def test_cap_rotates(self):
        # 5 tasks a tick out of 28 in the task set (18 live ones with asyncio.run's,
        # the 10 ephemeral ones, done): each task every ~6 ticks, its wall time the time
        # since its own previous sample.
        run, me, profiles = self.run_awaits("--max-tasks-per-tick", "5", seconds=3,
                                            ephemeral=10)
        st = me["sampler"]
        self.assertGreater(st["tasks_skipped"], 0, st)
        self.check_tasks(run, me, profiles, 28 / 5 + 1)

    def test_loop_with_another_thread(self):
        # The main thread is not alone: every tick the sampler takes the GIL, from a loop
        # that lets it go only for moments between the spinner's 2 ms steps (CPython
        # would leave the sampler waiting for seconds; the main thread hands the GIL
        # over). The tasks that end while a wait goes on would lose the time since their
        # last tick.
        run, me, profiles = self.run_awaits(thread=True)
        self.check_tasks(run, me, profiles, 1)

    def test_loop_beside_busy_thread(self):
        # A thread computing all along beside the loop: the main thread samples itself at
        # a tick (its callback) and the pass that samples the tasks comes later, once it
        # has the GIL. The spinner, running at one tick and ready at the next, has its
        # samples follow one another: those while it runs (the main thread's, at the
        # callback's time) and those while it waits add up to its lifetime, within 2
        # INTERVAL as in test_waiting_tasks. (Counted from the pass's time, each wait
        # after a run lost the time between the callback and the pass: 7-11% of the
        # spinner's lifetime on 3.11 to 3.13, past the tolerance in 6 runs of 9.)
        run, me, profiles = self.run_awaits(busy=True, seconds=5)
        waiting, interval = self.check_tasks(run, me, profiles, 1)
        spin = [(values, p) for p, stack, labels, values in samples_of(profiles)
                if labels.get("task name") == "spinner"]
        wall = sum(v[p.index("wall-time")] for v, p in spin)
        self.assert_near(wall, me["lifetimes_ns"]["spinner"], 2 * interval,
                         "the spinner's wall time; sampler: %s" % me["sampler"])

    @unittest.skipIf(sys.version_info >= (3, 12), "the main thread asks a holder to let the "
                     "GIL go on 3.11 only (ppk_py_ask_drop)")
    def test_loop_beside_busy_thread_slow_switch(self):
        # The loop and the busy thread as above, with a switch interval of 0.5 s: a
        # thread that takes the GIL keeps it that long unless asked to let it go. When
        # the main thread lets the GIL go for the sampler (yield_gil) and the busy thread
        # takes it instead, the main thread, waiting for the sampler, asks that holder to
        # let it go every ms. Without that, the handoff failed (the main thread took the
        # GIL back after 10 ms: 12-17% of the handoffs here, 16-31% with the default
        # 5 ms interval) and the sampler then waited up to a switch interval or more, in
        # a race with both threads (93-103 ticks in 5.3-6.2 s here; with the default
        # interval, tasks whose whole life fell in one such wait had no sample: the
        # failure this test was written for). With it: at most 1 failed of 115-174
        # handoffs, 210-281 ticks in 4.1-5.3 s. At most a twentieth may fail (the sampler
        # thread not scheduled within 50 ms on a loaded machine), and the ticks over the
        # whole run, at the full rate (no CPU budget), are at least a quarter of the
        # rate's. The tasks' wall times as in test_waiting_tasks. (Each task's lifetime
        # ends at its last step: the main task that cancels them and awaits them all
        # ran 0.3-52 ms after them in 35 runs here, its thread waiting for the GIL; a CI
        # run that took the main task's time as their end had every task 119 ms short,
        # past 2 INTERVAL.)
        run, me, profiles = self.run_awaits("--cpu-budget", "0", busy=True, slow_switch=True,
                                            seconds=3)
        self.check_tasks(run, me, profiles, 1)
        st = me["at_stop"]
        self.assertGreater(st["handoffs"], 0, st)
        self.assertLessEqual(st["handoffs_failed"], st["handoffs"] / 20, st)
        run_s = (me["stop_ns"] - st["started_ns"]) / 1e9
        self.assertGreaterEqual(st["ticks"], run_s * me["rate"] / 4,
                                "%.1f s of run; sampler at stop: %s" % (run_s, st))

    def test_idle_loop(self):
        # Without the spinner the loop waits all along: most ticks find that its thread
        # has not run since the last one, and read no task (the tasks the last full
        # pass sampled are sampled again as they were). At the full rate: under ASan a
        # tick costs ~2.5 ms, and the budget left 13 ticks in 1.5 s, 8 of them at
        # start-up (not quiet: asyncio not running yet, the tasks being made).
        run, me, profiles = self.run_awaits("--cpu-budget", "0", idle=True)
        st = me["sampler"]
        self.assertGreater(st["task_ticks_quiet"], st["ticks"] // 2, st)
        self.check_tasks(run, me, profiles, 1)

    def test_idle_loop_many_tasks(self):
        # 100 tasks made at once, then a loop that only waits: a tick reads at most 25
        # tasks it has not seen (a 40th of the cap), and the ticks after that find no
        # loop thread that ran (quiet). A quiet tick samples again what a pass that
        # visited every task saw, so every task is sampled all along from its first
        # read, at the latest ceil(100 / 25) ticks after it was made (the 75 tasks the
        # first pass did not reach were never sampled, when a pass that stopped at its
        # bound was repeated).
        run = self.cli(["sleepers.py", "100", "2"])
        (me,) = run.json()
        self.check_summary(run)
        interval = longest_interval(me["rate"], me["sampler"], me["now_ns"])
        waiting = self.waiting(load(run.files))
        walls = {name: sum(v["wall-time"] for _, _, v in smp) for name, smp in waiting.items()
                 if name.startswith("sleeper-")}
        self.assertEqual(len(walls), 100, sorted(walls))
        for name, wall in walls.items():
            self.assert_near(wall, me["lifetime_ns"], (100 // 25 + 2) * interval,
                             "%s's wall time; sampler: %s" % (name, me["sampler"]))

    def test_many_loops(self):
        # 80 threads, each running an event loop, each loop's task waiting for 2 s: every
        # task is sampled, under its loop's thread. (The tasks of loops past the 64th met
        # in a pass were not.) A task's first sample may come a few ticks after it began
        # to wait: 160 tasks read at most 25 a tick.
        run = self.cli(["loops.py", "80", "2"])
        (me,) = run.json()
        self.check_summary(run)
        interval = longest_interval(me["rate"], me["sampler"], me["now_ns"])
        waiting = self.waiting(load(run.files))
        walls = {}
        for name, smp in waiting.items():
            if not name.startswith("sleeper-"):
                continue
            for names, labels, values in smp:
                self.assertEqual(labels["thread name"], "loop-" + name[len("sleeper-"):],
                                 (name, labels))
            walls[name] = sum(v["wall-time"] for _, _, v in smp)
        self.assertEqual(sorted(walls), sorted("sleeper-%d" % i for i in range(80)))
        for name, wall in walls.items():
            self.assertGreater(wall, me["lifetime_ns"] - (160 // 25 + 2) * interval,
                               "%s's wall time; sampler: %s" % (name, me["sampler"]))

    def test_loop_thread_renamed(self):
        # The task awaiting the sampled one renamed, then (0.6 s later) the loop's
        # thread, while the task waits, moving every 50 ms: the task's samples name the
        # parent by its new name from the task's next move on (within 50 ms, read at the
        # next tick; an INTERVAL at each end), and the thread as its own samples do (the
        # name read again every 16 passes: test_profiler's test_thread_renamed has the
        # bounds). (Without comparing the names, the task's stack kept both old names
        # for good: every sample said "before"; with the thread's name compared, the
        # parent's new name came with the thread's, late by the time between the two.)
        run = self.cli(["renamed.py", "1.2", "1.5", "loop"])
        (me,) = run.json()
        self.check_summary(run)
        interval = longest_interval(me["rate"], me["sampler"], me["now_ns"])
        thread, parent = collections.Counter(), collections.Counter()
        for names, labels, values in self.waiting(load(run.files))["waiter"]:
            thread[labels["thread name"]] += values["wall-time"]
            parent[labels.get("parent task")] += values["wall-time"]
        self.assertEqual(set(thread), {"before", "after"}, thread)
        self.assertEqual(set(parent) - {None}, {"parent-before", "parent-after"}, parent)
        self.assertLess(parent[None], 2 * interval, parent)
        for name in ("before", "after"):
            self.assert_near(thread[name], me[name], 18 * interval, "%s: wall %r, measured %r"
                             % (name, dict(thread), (me["before"], me["after"])))
            name = "parent-" + name
            self.assert_near(parent[name], me[name], 4 * interval, "%s: wall %r, measured %r"
                             % (name, dict(parent), (me["parent-before"], me["parent-after"])))

    def test_deep_chain(self):
        # A chain of 300 awaits, each coroutine a function of its own: a task's stack
        # keeps its 256 innermost frames, leaf first (asyncio.sleep, d0, d1, ... d254).
        run = self.cli(["deepawait.py", "300", "1"])
        run.json()
        self.check_summary(run)
        # (A tick before the task's first step sees its outermost coroutine alone.)
        stacks = {tuple(names) for names, _, _ in self.waiting(load(run.files))["deep-task"]
                  if len(names) > 1}
        self.assertEqual(stacks, {tuple(["sleep"] + ["d%d" % i for i in range(255)])},
                         [s[:4] + ("...",) + s[-2:] for s in stacks])

    def test_wait_for_parent(self):
        # A task awaited through asyncio.wait_for: its parent is the task that awaits it
        # (3.11's wait_for wakes that one through a functools.partial over a future in
        # the task's done callbacks, whose own callbacks wake the awaiter; it had no
        # parent there). All of its wall time has that parent but what its first samples
        # show, before the awaiter's first step (a tick; the parent is looked for again at
        # each of the next 8) and the last after the cancellation: 4 INTERVAL at most.
        run = self.cli(["waitfor.py", "1"])
        (me,) = run.json()
        self.check_summary(run)
        interval = longest_interval(me["rate"], me["sampler"], me["now_ns"])
        waiting = self.waiting(load(run.files))
        parents = collections.Counter()
        for names, labels, values in waiting["waited-for"]:
            parents[labels.get("parent task")] += values["wall-time"]
        wall = sum(parents.values())
        self.assert_near(wall, me["lifetime_ns"], 2 * interval, "waited-for's wall time")
        self.assertGreater(parents["forer"], wall - 4 * interval, parents)
        self.assertEqual({names[0] for names, _, _ in waiting["forer"] if len(names) > 1},
                         {"wait_for"})

    def test_classes_with_getattr(self):
        # Task classes (of the C Task and of the pure-Python one) and a loop class with a
        # __getattr__: the usual lookup comes first for them, and the sampler reads their
        # attributes as it does (a __getattr__ would only be called for a name not found:
        # not called). Both tasks are sampled all along, in their sleep (none was: such
        # classes' attributes were not read at all).
        run = self.cli(["taskclasses.py", "1"])
        (me,) = run.json()
        self.check_summary(run)
        interval = longest_interval(me["rate"], me["sampler"], me["now_ns"])
        waiting = self.waiting(load(run.files))
        for name in ("c-task", "py-task"):
            smp = waiting.get(name)
            self.assertTrue(smp, "no sample of %s; tasks sampled: %s" % (name, sorted(waiting)))
            wall = sum(v["wall-time"] for _, _, v in smp)
            self.assert_near(wall, me["lifetime_ns"], 2 * interval, "%s's wall time" % name)
            self.assertEqual({tuple(names) for names, _, _ in smp if len(names) > 1},
                             {("sleep", "sleeper")}, name)

    def test_async_generators(self):
        # `async for` over async generators, 5 deep: each awaits its generator's asend()
        # object (__anext__), whose generator is the next link of the chain. The stack
        # goes on through the generators' frames to the innermost await (it ended at the
        # consumer's coroutine, the generators' frames out of reach).
        run = self.cli(["asyncgens.py", "5", "1"])
        run.json()
        self.check_summary(run)
        # (A tick before the task's first step sees its coroutine alone.)
        stacks = {tuple(names) for names, _, _ in self.waiting(load(run.files))["consumer"]
                  if len(names) > 1}
        self.assertEqual(stacks, {("sleep", "g0", "g1", "g2", "g3", "g4", "consume")})

    def test_closed_loop_releases(self):
        # A task marked as its loop stops, before its first step, the loop then closed:
        # the sampler must not keep it alive (held for a visit at every pass as a task
        # not settled in a wait, it was, for as long as the profiler ran).
        run = self.cli(["--cpu-budget", "0", "closed_loop.py"])
        (me,) = run.json()
        self.check_summary(run)
        self.assertGreater(me["sampler"]["task_ticks_hooked"], 2, me["sampler"])
        self.assertFalse(me["alive"], me["sampler"])

    def test_stopped_loop(self):
        # A task whose loop has stopped waits on nothing that can end: it is sampled
        # while the loop runs, not after (its wall time is the loop's run, not the
        # program's).
        run = self.cli(["stopped_loop.py"])
        (me,) = run.json()
        profiles = load(run.files)
        interval = longest_interval(me["rate"], me["sampler"], me["now_ns"])
        wall = sum(v["wall-time"] for _, _, v in self.waiting(profiles)["orphan"])
        self.assertGreater(wall, 0)
        self.assertLessEqual(wall, me["running_ns"] + 2 * interval,
                             "%.1f ms of an orphan's wall time" % (wall / MS))

    def test_garbage_tasks(self):
        # Unnamed tasks that are garbage while they wait, read while a collection is
        # scheduled (programs/garbage_tasks.py): CPython 3.12 and 3.13 format such a
        # task's name ("Task-N") at its first get_name, through PyObject_Str, which runs
        # the scheduled collection there and then. The sampler puts it off meanwhile (it
        # ran, and freed the tasks being read: a crash on 3.12 and 3.13 every time). Each
        # garbage task is sampled under its name, waiting in its coroutine.
        run = self.cli(["--cpu-budget", "0", "garbage_tasks.py", "2"])
        (me,) = run.json()
        self.check_summary(run)
        names = collections.Counter()
        for p, stack, labels, values in samples_of(load(run.files)):
            if "task state" not in labels:
                continue
            self.assertIn("task name", labels, (labels, stack))
            if labels["task name"] == "Task-1":  # asyncio.run's main task
                continue
            self.assertRegex(labels["task name"], r"^Task-\d+$", labels)
            self.assertEqual([f[0] for f in stack], ["waits"], labels)
            names[labels["task name"]] += 1
        self.assertGreater(len(names), 0, me["sampler"])

    def test_off(self):
        run, me, profiles = self.run_awaits("--no-asyncio-tasks")
        self.assertEqual(dict(self.waiting(profiles)), {})
        self.assertEqual(me["sampler"]["tasks_seen"], 0)


class TestCallSoonHook(unittest.TestCase):
    """BaseEventLoop.call_soon (and create_task on 3.12 and later) while a Profiler
    samples asyncio tasks: the hooks, which behave as the functions they wrap, and the
    functions again after stop()."""

    def run_loop(self, **options):
        import asyncio
        import contextvars
        import inspect
        import pprofkit

        async def child():
            return var.get("none")

        async def main():
            loop = asyncio.get_running_loop()
            # The sampler's pass installs the hook once it finds asyncio's task set.
            for _ in range(200):
                if asyncio.BaseEventLoop.call_soon is not orig:
                    break
                await asyncio.sleep(0.01)
            during = (asyncio.BaseEventLoop.call_soon, asyncio.BaseEventLoop.create_task)
            ctx = contextvars.copy_context()
            ctx.run(var.set, "in ctx")
            got = []
            handle = loop.call_soon(lambda x: got.append((x, var.get("none"))), 1, context=ctx)
            loop.call_soon(got.append, 2)
            task = loop.create_task(child(), name="child", context=ctx)
            got.append((task.get_name(), await task))
            await asyncio.sleep(0.2)  # ticks after the first scan cycle: hook passes
            sigs = (inspect.signature(loop.call_soon), inspect.signature(loop.create_task))
            return during, handle, got, sigs

        var = contextvars.ContextVar("var")
        orig = asyncio.BaseEventLoop.call_soon
        orig_create = asyncio.BaseEventLoop.create_task
        p = pprofkit.Profiler(out_dir=None, cpu_budget=0, **options)
        p.start()
        try:
            during, handle, got, sigs = asyncio.run(main())
            stats = p.sampler.stats()
        finally:
            p.stop()
        self.assertIs(asyncio.BaseEventLoop.call_soon, orig)
        self.assertIs(asyncio.BaseEventLoop.create_task, orig_create)
        self.assertIsInstance(handle, asyncio.Handle)
        self.assertEqual(got, [(1, "in ctx"), 2, ("child", "in ctx")])
        self.assertEqual(sigs, (inspect.signature(orig.__get__(object())),
                                inspect.signature(orig_create.__get__(object()))))
        return (orig, orig_create), during, stats

    def test_installed_while_sampling(self):
        (orig, orig_create), (during, during_create), stats = self.run_loop()
        self.assertIsNot(during, orig)
        self.assertIs(during.__wrapped__, orig)
        if sys.version_info >= (3, 12):  # eager task factories
            self.assertIs(during_create.__wrapped__, orig_create)
        else:
            self.assertIs(during_create, orig_create)
        self.assertGreater(stats["task_ticks_hooked"], 0, stats)

    def test_call_soon_replaced(self):
        # A loop (in a thread) whose call_soon stops reaching the hook (set on the loop,
        # calling the original past it) after hook passes began, its tasks all waiting
        # (none is read again): the passes that rely on its marks stop at the next tick.
        import asyncio
        import functools
        import threading
        import time
        import pprofkit

        loop = asyncio.new_event_loop()
        stop = []
        made = threading.Event()

        async def main():
            stop.append(asyncio.Event())
            waiters = [asyncio.create_task(asyncio.sleep(3600)) for _ in range(10)]
            made.set()
            await stop[0].wait()
            for t in waiters:
                t.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)

        th = threading.Thread(target=loop.run_until_complete, args=(main(),))
        p = pprofkit.Profiler(out_dir=None, cpu_budget=0)
        p.start()
        try:
            th.start()
            made.wait()
            # Hook passes with the loop's tasks (not those on the empty task set before).
            hooked = p.sampler.stats()["task_ticks_hooked"]
            for _ in range(200):
                if p.sampler.stats()["task_ticks_hooked"] > hooked + 5:
                    break
                time.sleep(0.01)
            loop.call_soon = functools.partial(asyncio.BaseEventLoop.call_soon.__wrapped__,
                                               loop)
            time.sleep(0.05)
            at = p.sampler.stats()
            time.sleep(0.3)
            end = p.sampler.stats()
            loop.call_soon_threadsafe(stop[0].set)
            th.join()
        finally:
            p.stop()
            loop.close()
        self.assertGreater(at["task_ticks_hooked"], hooked + 5, at)
        self.assertGreater(end["ticks"] - at["ticks"], 10, end)
        self.assertEqual(end["task_ticks_hooked"], at["task_ticks_hooked"], (at, end))

    def test_not_installed_when_off(self):
        for options in ({"asyncio_task_hook": False}, {"asyncio_tasks": False}):
            origs, during, stats = self.run_loop(**options)
            self.assertEqual(during, origs, options)
            self.assertEqual(stats["task_ticks_hooked"], 0, stats)


if __name__ == "__main__":
    unittest.main()
