"""The matched run: the one layer every command reads a run through.

- :mod:`~commlens.analysis.matched.ops`: a run read once, every rank's ops in
  issue order on one aligned clock (``t_issue``, ``t_end``, and ``t_start``
  where a device trace recorded it);
- :mod:`~commlens.analysis.matched.match`: collectives matched across the
  members of their group, sends to receives, by one rule;
- :mod:`~commlens.analysis.matched.clocks`: the causal check of the clocks
  against that matching;
- :mod:`~commlens.analysis.matched.run`: the three together;
- :mod:`~commlens.analysis.matched.queues`: service starts on a queue (a
  rank's ops on a group, a group's instances), by one rule;
- :mod:`~commlens.analysis.matched.intervals`: unions of intervals and the one
  definition of exposed communication.

``report``, ``compare`` and ``validate`` read it through the rank pass
(:mod:`commlens.analysis.rankpass`), ``whatif`` through :func:`match_run`.
"""
