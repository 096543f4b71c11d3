"""Start the ranks of a job on this host (optionally inside emulated nodes)."""

from commlens.launch.procs import LaunchResult, RankPlacement, free_port, launch_ranks

__all__ = ["LaunchResult", "RankPlacement", "free_port", "launch_ranks"]
