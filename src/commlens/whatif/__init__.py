"""What-if replay: a captured run re-timed on another network or placement.

:mod:`~commlens.whatif.source` reads the run, :mod:`~commlens.whatif.model`
turns it into per-rank marks and matched op instances,
:mod:`~commlens.whatif.replay` replays them with the op times of
:mod:`~commlens.whatif.optimes` (measured, :mod:`~commlens.whatif.durations`, or
a network's from the builders of :mod:`~commlens.whatif.builders`: the cost
model of :mod:`~commlens.whatif.costing` and the corrections fitted from the run),
:mod:`~commlens.whatif.results` sums a timeline up and
:mod:`~commlens.whatif.study` runs the whole question; its answer is data
(``commlens.report.whatif`` lays it out for the renderers).
"""
