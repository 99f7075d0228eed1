"""Open-loop trace replay: send each request at its arrival time, never waiting for earlier ones.

A replay runs on one asyncio event loop against one started engine. Request ``i`` is sent
at ``start + arrival_s[i] / rate_multiplier``, where ``start`` is ``time.perf_counter()``
when the measured window opens. Being late is the one error an open-loop load generator
must not hide, so the scheduler sleeps until shortly before each send time, then yields
to the loop (``asyncio.sleep(0)``) until the time is reached, and every record keeps both
its scheduled and its actual send time.

Sessions (multi-turn conversations): a session's first turn is scheduled open-loop like any
request; turn k + 1 is closed-loop within its session: it is sent ``think_time_s`` after turn
k's answer finished (not scaled by the rate multiplier: think time is the user's, not the
load's), with turn k as it was sent and this replay's own answer to it before its new
message. If turn k did not finish ``ok``, the session's later turns are not sent
(``not_sent``, with the reason in ``error``).

With a concurrency cap, requests beyond the cap wait client-side in arrival order and
their wait is recorded as ``queue_s``. Warm-up requests (copies of the first requests,
sent one at a time) run before the window opens and are not in the results.

All times in results are seconds from ``start`` on the perf_counter clock; token counts
are target-model tokens. ``RequestRecord.as_row()`` gives the fields of the
``analysis.RequestResult`` model, ready for ``bulk_create``.

The package's modules: ``records`` (what goes in and comes out: specs, records, the result),
``schedule`` (checking the specs, and how a later turn follows its previous one), ``timing``
(sleeping to a send time, the thread's scheduler slice) and ``run`` (:func:`run.replay_run`).
"""
