"""One call to run a job on an emulated cluster: nodes up, NIC sampler on, ranks, teardown."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from commlens.launch import LaunchResult, launch_ranks
from commlens.netem.cluster import EmulatedCluster
from commlens.netem.nic import NIC_FILE, NicSampler


@dataclass
class EmulatedLaunchResult(LaunchResult):
    """A :class:`LaunchResult` plus the topology (``EmulatedCluster.describe()``)
    for the run manifest; ``topology["nic_file"]`` names the counters file."""

    topology: dict[str, Any] = field(default_factory=dict)


def launch_emulated(
    argv: Sequence[str],
    nproc: int,
    nodes: int,
    link: str | None,
    *,
    env: dict[str, str] | None = None,
    run_dir: str | os.PathLike[str] | None = None,
    nic_hz: float = 20.0,
    grace_s: float = 5.0,
    on_started: Callable[[list[subprocess.Popen[bytes]]], None] | None = None,
) -> EmulatedLaunchResult:
    """Run ``argv`` as ``nproc`` ranks on ``nodes`` emulated nodes joined by ``link``.

    ``link`` is a rate like ``"1gbit"`` (``None``: unshaped veths). With
    ``run_dir``, NIC counters go to ``run_dir/nic.parquet`` (see
    :mod:`commlens.netem.nic`). Raises :class:`~commlens.errors.UsageError`
    without root or namespace support. Everything is removed before returning.
    """
    if nodes < 1 or nproc % nodes:
        from commlens.errors import UsageError

        raise UsageError(f"--nproc {nproc} must be a multiple of --nodes {nodes}")
    with EmulatedCluster(nodes, link) as cluster:
        topology = cluster.describe()
        sampler = None
        if run_dir is not None:
            nic_path = os.path.join(os.fspath(run_dir), NIC_FILE)
            sampler = NicSampler(cluster.host_ifaces(), nic_path, hz=nic_hz)
            sampler.start()
            topology["nic_file"] = NIC_FILE
        try:
            result = launch_ranks(
                argv,
                nproc,
                nodes=nodes,
                env=env,
                master_addr=cluster.master_addr,
                placement=cluster.placement,
                grace_s=grace_s,
                on_started=on_started,
            )
        finally:
            if sampler is not None:
                sampler.stop()
    return EmulatedLaunchResult(
        result.exit_codes,
        result.interrupted,
        first_failed=result.first_failed,
        stop_signal=result.stop_signal,
        topology=topology,
    )
