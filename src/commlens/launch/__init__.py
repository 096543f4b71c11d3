"""Start the ranks of a job on this host (optionally inside emulated nodes)."""

from commlens.launch.foreground import JobResult, run_job
from commlens.launch.procs import LaunchResult, RankPlacement, free_port, launch_ranks

__all__ = ["JobResult", "LaunchResult", "RankPlacement", "free_port", "launch_ranks", "run_job"]
