"""Links between nodes: the simulator's modeled link and the kernel-shaped links of
network namespaces (`lsgd train --link`, `lsgd.launch(..., link=)`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

import lsgd
from lsgd import cli
from lsgd.comm.chain import chunk_count
from lsgd.links import netns, parse_link
from lsgd.train import runner
from lsgd.train.config import make_config
from lsgd.train.outputs import read_csv

RATE = 20e6  # bits per second


def _train(tmp: Path, name: str, **settings: Any) -> dict[str, Any]:
    cfg = make_config({"out": str(tmp / name), "quiet": True, "backend": "threads",
                       "dataset": "synthetic", "model": "cnn7", "workers": 4, "groups": 4,
                       "batch_size": 16, "steps": 16, "eval_every": "16", "link": "20mbit",
                       **settings})
    summary = runner.train(cfg)
    assert summary is not None
    return summary


@pytest.mark.timeout(300)
def test_modeled_link_charges_bytes_over_rate_and_lsgd_outruns_allreduce(tmp_path: Path) -> None:
    allreduce = _train(tmp_path, "allreduce", method="allreduce")
    lsgd = _train(tmp_path, "lsgd", method="lsgd", period=4)
    for summary in (allreduce, lsgd):
        assert summary["link"] == "20mbit" and summary["link_kind"] == "modeled"
        assert summary["time_axis"].startswith("simulated seconds")
        # Every byte a worker sends crosses its node's link: at least bytes / rate.
        floor = 8 * summary["bytes_sent_per_worker"] / RATE
        assert min(summary["worker_comm_seconds"]) >= 0.99 * floor, summary
        assert summary["train_seconds"] >= min(summary["worker_comm_seconds"])
    # One worker per node: period 4 is the global period, 4 rounds in 16 steps.
    assert lsgd["rounds"] == 4
    # 16 ring all-reduces (1.5 B each) against 5 broadcasts (the first at the start) as
    # the pipelined chain of the 4 nodes: c chunks over 3 hops, (c + 2) / c B each.
    state = lsgd["bytes_sent_per_worker"] / 5 * 4 / 3  # the chain sends B from 3 of 4 nodes
    c = chunk_count(round(state))
    assert allreduce["comm_seconds_per_worker"] == pytest.approx(
        (16 * 1.5) / (5 * (c + 2) / c) * lsgd["comm_seconds_per_worker"], rel=0.02)
    assert lsgd["steps_per_second"] >= 1.8 * allreduce["steps_per_second"]
    rows = read_csv(tmp_path / "allreduce" / "metrics.csv")
    assert rows[-1]["worker0_comm_seconds"] == pytest.approx(
        allreduce["worker_comm_seconds"][0], rel=1e-4)


@pytest.mark.timeout(300)
def test_step_seconds_sets_the_modeled_clocks_compute_and_straggle_multiplies_it(
        tmp_path: Path) -> None:
    plain = _train(tmp_path, "fixed", method="allreduce", step_seconds=0.5)
    assert plain["time_axis"] == "simulated seconds: 0.5 s per local step plus modeled transfers"
    # Synchronous all-reduce every step: each worker's clock is 16 steps of 0.5 s plus
    # its transfers, whatever this machine's speed.
    for comm in plain["worker_comm_seconds"]:
        assert plain["train_seconds"] == pytest.approx(16 * 0.5 + comm, rel=1e-6)
    slow = _train(tmp_path, "straggler", method="allreduce", step_seconds=0.5,
                  straggle=["3:2"])
    # The gradients are all-reduced before a step's compute is charged: worker 0 waits
    # 0.5 s for worker 3 (1 s per step) at every all-reduce but the first, and its clock
    # ends 15 of worker 3's steps and one of its own after the start, plus the transfers.
    assert slow["train_seconds"] == pytest.approx(
        15 * 1.0 + 0.5 + slow["worker_comm_seconds"][0], rel=1e-6)
    assert slow["worker_comm_seconds"][0] == pytest.approx(plain["worker_comm_seconds"][0])


def test_step_seconds_needs_the_modeled_link(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["train", "--backend", "threads", "--step-seconds", "0.1",
                     "--out", str(tmp_path / "bad")])
    assert code == 2
    assert "--step-seconds 0.1: sets the step time" in capsys.readouterr().err
    code = cli.main(["train", "--backend", "threads", "--link", "20mbit", "--step-seconds",
                     "-1", "--out", str(tmp_path / "bad")])
    assert code == 2
    assert "--step-seconds must be" in capsys.readouterr().err
    code = cli.main(["train", "--backend", "threads", "--link", "20mbit",
                     "--straggle", "1:2", "--out", str(tmp_path / "bad")])
    assert code == 2
    assert "give --step-seconds" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_link_is_checked_before_anything_runs(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["train", "--backend", "threads", "--link", "20 parsecs",
                     "--out", str(tmp_path / "bad")])
    assert code == 2
    assert "--link '20 parsecs'" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


# -- real shaped links (root and iproute2) -------------------------------------

SHAPING = netns.shaping_problem()
needs_shaping = pytest.mark.skipif(SHAPING is not None, reason=f"no shaped links here: {SHAPING}")
PAYLOAD = 1_250_000  # float32 values: 5 MB


def _broadcast_seconds(info: Any, n: int) -> tuple[int, float]:
    """Rank 0 broadcasts ``n`` floats; the seconds it took on this worker."""
    import torch
    import torch.distributed as dist

    tensor = torch.full((n,), float(info.rank == 0))
    dist.barrier()
    start = time.perf_counter()
    dist.broadcast(tensor, src=0)
    dist.barrier()
    assert bool((tensor == 1).all())
    return info.rank, time.perf_counter() - start


def _our_namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines()
            if line.startswith(f"lsgd-{os.getpid()}-")]


@pytest.mark.slow
@needs_shaping
@pytest.mark.timeout(180)
def test_a_transfer_across_a_shaped_link_takes_at_least_its_size_over_the_rate() -> None:
    rate = 100e6
    results = lsgd.launch(_broadcast_seconds, 2, 2, args=(PAYLOAD,), link="100mbit", timeout=60)
    floor = 8 * 4 * PAYLOAD / rate  # 0.4 s
    seconds = max(s for _, s in results)
    assert seconds >= floor, (seconds, floor)
    assert seconds < 3 * floor + 0.5, (seconds, floor)  # shaped, not stalled
    assert _our_namespaces() == []  # everything removed


@needs_shaping
@pytest.mark.timeout(60)
def test_the_switch_is_reached_through_each_nodes_own_link() -> None:
    """A service on the switch (the elastic lighthouse) answers node 1 while node 0's
    link is down, and node 0 alone loses it."""
    with netns.ShapedNetwork(2, "100mbit") as network:
        server = subprocess.Popen(["ip", "netns", "exec", network.switch, "python3", "-c",
                                   "import socket; s = socket.create_server(('"
                                   f"{netns.switch_address()}', 29599)); s.listen(); "
                                   "[s.accept()[0].close() for _ in range(9)]"])
        probe = ("import socket, sys\ntry:\n    socket.create_connection(('"
                 f"{netns.switch_address()}', 29599), timeout=1).close()\n"
                 "except OSError:\n    sys.exit(1)")
        try:
            def reaches(node: int) -> bool:
                return subprocess.run(network.command(node, ["python3", "-c", probe])
                                      ).returncode == 0

            deadline = time.monotonic() + 20
            while not reaches(1) and time.monotonic() < deadline:
                time.sleep(0.2)  # the server starting
            netns.set_node_link(0, up=False)
            assert reaches(1) and not reaches(0)
            netns.set_node_link(0, up=True)
        finally:
            server.kill()
            server.wait()
    assert _our_namespaces() == []


@needs_shaping
@pytest.mark.timeout(60)
def test_leftovers_of_a_killed_run_are_removed_and_errors_remove_everything() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    leftover = f"lsgd-{dead.pid}-n0"
    subprocess.run(["ip", "netns", "add", leftover], check=True)
    try:
        assert leftover in netns.remove_leftovers()
    finally:
        subprocess.run(["ip", "netns", "delete", leftover], capture_output=True)
    network = netns.ShapedNetwork(2, "100mbit")
    network._build = lambda: (_ for _ in ()).throw(RuntimeError("boom"))  # type: ignore[method-assign]
    network._make_namespace(network.switch)  # made before the failure
    with pytest.raises(RuntimeError, match="boom"):
        with network:
            pass
    assert _our_namespaces() == []


def test_shaped_links_need_root_and_say_what_to_do_instead(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(shutil, "which", lambda tool: f"/usr/sbin/{tool}")
    with pytest.raises(netns.LinkSetupError, match="need root.*--backend threads --link"):
        netns.check_tools()
    monkeypatch.setattr(shutil, "which", lambda tool: None)
    with pytest.raises(netns.LinkSetupError, match="iproute2"):
        netns.check_tools()


@pytest.mark.slow
@needs_shaping
@pytest.mark.timeout(300)
def test_lsgd_train_on_shaped_links_records_the_link(tmp_path: Path) -> None:
    summary = _train(tmp_path, "shaped", method="lsgd", period=4, backend="processes",
                     link="200mbit", workers=2, groups=2, steps=8, eval_every="8")
    assert summary["link"] == "200mbit" and summary["link_kind"] == "shaped"
    assert summary["time_axis"].startswith("wall-clock")
    assert summary["rounds"] == 2
    # At least the bytes over the rate, less one token-bucket burst per transfer (the
    # initial broadcast and one per round, each after an idle moment).
    burst = netns.burst_bytes(parse_link("200mbit"))
    sent = summary["bytes_sent_per_worker"] - (summary["rounds"] + 1) * burst
    assert sent > 0 and max(summary["worker_comm_seconds"]) >= 8 * sent / 200e6, summary
    assert _our_namespaces() == []


def test_rank_0s_progress_and_warnings_reach_the_terminal_from_node_0s_log(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Behind shaped links a node's output goes to a log file; what rank 0 prints for
    its user is relayed as it arrives, a line cut by a read included, and nothing else."""
    from lsgd.launcher.nodes import _Relay

    log = tmp_path / "node-0.log"
    relay = _Relay(log, progress=True)
    relay.poll()  # no log yet: nothing, no error
    log.write_text("torchrun chatter\nstep 10 of 100: center validation loss 3.1 nats/byte\nwar")
    relay.poll()
    with open(log, "a") as more:
        more.write("ning: restart 1: continuing from step 8\n")
    relay.poll()
    other = tmp_path / "node-2.log"  # another node's: its faults and warnings, no progress
    other.write_text("step 10 of 100: not rank 0's\nfault: worker 2 kills itself (SIGKILL) "
                     "at step 9\n")
    _Relay(other).poll()
    assert capsys.readouterr().err.splitlines() == [
        "step 10 of 100: center validation loss 3.1 nats/byte",
        "warning: restart 1: continuing from step 8",
        "fault: worker 2 kills itself (SIGKILL) at step 9"]
