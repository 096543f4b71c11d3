"""Why a job hung or slowed, named from its evidence: hangs, desyncs, stragglers, dead ranks.

:mod:`~commlens.doctor.model` is what a diagnosis reads (every rank's ops,
done or in flight, and what is known of each rank's process), built from a
commlens run (:mod:`~commlens.doctor.from_run`) or from Flight Recorder dumps
(:mod:`~commlens.doctor.from_fr`); :mod:`~commlens.doctor.diagnose` turns it
into a :class:`~commlens.doctor.model.Diagnosis`. Nothing here prints.
"""

from commlens.doctor.diagnose import diagnose
from commlens.doctor.load import load_evidence

__all__ = ["diagnose", "load_evidence"]
