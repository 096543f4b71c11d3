"""What-if replay: a captured run re-timed on another network or placement.

:mod:`~commlens.whatif.source` reads the run, :mod:`~commlens.whatif.model`
turns it into per-rank marks and matched op instances,
:mod:`~commlens.whatif.replay` replays them with op durations from
:mod:`~commlens.whatif.durations` (measured, or the cost model's),
:mod:`~commlens.whatif.results` sums a timeline up,
:mod:`~commlens.whatif.study` runs the whole question and
:mod:`~commlens.whatif.document` lays the answer out for the renderers.
"""
