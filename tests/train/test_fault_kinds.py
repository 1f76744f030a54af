"""Each fault kind of ``--fault``, injected into a child process or a shaped link, and the
log, table and chaos schedule around them (lsgd.train.faults, chaos, injector)."""

from __future__ import annotations

import math
import multiprocessing
import os
import subprocess
import time
from pathlib import Path

import pytest

from lsgd.train import chaos, faults
from lsgd.train.config import TrainConfig


def _child(specs: list[str], rank: int, node: int, run: str, step: int) -> None:
    injector = faults.Faults(specs, rank, node, Path(run), Path(run) / "checkpoints")
    injector.apply(1.0, step, 10.0)
    os._exit(0)


def _strike(tmp_path: Path, specs: list[str], rank: int = 1, node: int = 0,
            step: int = 3) -> tuple[int, float]:
    """Run worker ``rank``'s step ``step`` in a forked child: its exit code and seconds."""
    start = time.monotonic()
    child = multiprocessing.get_context("fork").Process(
        target=_child, args=(specs, rank, node, str(tmp_path), step))
    child.start()
    child.join(30)
    assert child.exitcode is not None, "the child did not end"
    return child.exitcode, time.monotonic() - start


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("spec", "code"), [("kill:1:3", -9), ("segv:1:3", -11),
                                            ("kill-node:0:3", -9)])
def test_a_fatal_fault_ends_the_process_by_its_signal_and_is_logged_first(
        tmp_path: Path, spec: str, code: int) -> None:
    exit_code, _ = _strike(tmp_path, [spec])
    assert exit_code == code
    start, event = faults.read_log(tmp_path)
    assert start["event"] == "start" and start["rank"] == 1  # the run's first step
    assert event["event"] == "fault" and event["spec"] == spec and event["step"] == 3
    assert faults.fired(tmp_path) == {spec}
    # Fired once per run: a restarted worker passes the same step untouched.
    assert _strike(tmp_path, [spec])[0] == 0


@pytest.mark.timeout(60)
def test_a_stopped_worker_is_woken_after_its_seconds() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        code, seconds = _strike(Path(folder), ["stop:1:3:1.5"])
    assert code == 0
    assert 1.4 < seconds < 6.0, seconds


@pytest.mark.timeout(60)
def test_only_the_named_worker_or_node_or_step_is_hit(tmp_path: Path) -> None:
    assert _strike(tmp_path, ["kill:2:3", "kill:1:4", "kill-node:1:3"], rank=1, node=0)[0] == 0
    assert [e["event"] for e in faults.read_log(tmp_path)] == ["start"]
    # A fault at a second of training fires at the first step after it (10 s here).
    assert _strike(tmp_path, ["kill:1:@11"], step=7)[0] == 0
    assert _strike(tmp_path, ["kill:1:@9.5"], step=7)[0] == -9


@pytest.mark.timeout(60)
def test_a_corrupt_checkpoint_fault_truncates_the_newest_complete_one(tmp_path: Path) -> None:
    for steps, complete in ((16, True), (32, True), (48, False)):
        folder = tmp_path / "checkpoints" / f"step-{steps:08d}"
        folder.mkdir(parents=True)
        (folder / "rank-0.pt").write_bytes(b"x" * 1000)
        if complete:
            (folder / "meta.json").write_text("{}")
    assert _strike(tmp_path, ["corrupt-checkpoint:3"], rank=0)[0] == -9
    sizes = {p.parent.name: p.stat().st_size
             for p in (tmp_path / "checkpoints").glob("*/rank-0.pt")}
    assert sizes == {"step-00000016": 1000, "step-00000032": 500, "step-00000048": 1000}


def test_nan_makes_the_loss_nan_once() -> None:
    injector = faults.Faults(["nan:0:2"], 0, 0, None)
    assert injector.apply(1.5, 1, 0.1) == 1.5
    assert math.isnan(injector.apply(1.5, 2, 0.2))
    assert not injector.active and injector.apply(1.5, 2, 0.2) == 1.5


def test_the_table_pairs_each_fault_with_what_the_run_did(tmp_path: Path) -> None:
    start = time.time()
    faults.append(tmp_path, event="fault", spec="kill:1:5", kind="kill", rank=1, node=1, step=5,
                  time=start + 2)
    faults.answer(tmp_path, "restart 1 from step 4", time=start + 4)
    faults.append(tmp_path, event="fault", spec="link-down:2:9:3", kind="link-down", node=2,
                  time=start + 9)
    faults.append(tmp_path, event="fault", spec="corrupt-checkpoint:8",
                  kind="corrupt-checkpoint", rank=0, node=0, step=8, time=start + 12)
    faults.answer(tmp_path, "restart 2 from step 4", time=start + 13)
    faults.answer(tmp_path, "fell back to step-00000004 (step-00000008 unusable)",
                  time=start + 13)
    counts = faults.write_table(tmp_path, start)
    lines = (tmp_path / "faults.csv").read_text().splitlines()
    assert lines[0] == ",".join(faults.COLUMNS)
    assert lines[1].endswith("kill:1:5,restart 1 from step 4,2")  # 2 s to recover
    assert lines[2].endswith("link-down:2:9:3,waited,")
    assert lines[3].endswith("restart 2 from step 4; fell back to step-00000004 "
                             "(step-00000008 unusable),1")
    assert counts == {"faults": 3, "fatal_faults": 2}


@pytest.mark.parametrize(("specs", "says"), [
    (["kil:1:3"], "unknown kind 'kil'"),
    (["stop:1:3"], "give STOP:RANK:STEP:SECONDS, e.g. stop:1:60:5"),
    (["kill:9:3"], "rank 9 is not one of the 4 workers"),
    (["kill-node:4:3"], "node 4 is not one of the 2 nodes"),
    (["link-down:1:5:3"], "add --link RATE"),
    (["slow:1:5:fast:3"], "e.g. slow:2:20:1mbit:10"),
    (["corrupt-checkpoint:8"], "give --restarts N and --checkpoint-every STEPS"),
    (["kill:1:0"], "KILL:RANK:STEP"),
])
def test_a_bad_fault_is_refused_with_its_fix(specs: list[str], says: str) -> None:
    cfg = TrainConfig.of(workers=4, groups=2, method="lsgd", fault=specs)
    with pytest.raises(ValueError, match=None) as caught:
        cfg.validate()
    assert says in str(caught.value), str(caught.value)


def test_the_simulator_takes_nan_only() -> None:
    cfg = TrainConfig.of(workers=4, backend="threads", fault=["kill:1:3"])
    with pytest.raises(ValueError, match="drop --backend threads"):
        cfg.validate()
    TrainConfig.of(workers=4, backend="threads", fault=["nan:1:3"]).validate()


def _cfg(**settings: object) -> TrainConfig:
    base = dict(method="diloco", model="mlp", workers=4, groups=4, link="100mbit",
                elastic=True, restarts=2, chaos=1, minutes=10.0, chaos_mtbf=10.0)
    base.update(settings)
    cfg = TrainConfig.of(**base)  # type: ignore[arg-type]
    cfg.validate()
    return cfg


def test_chaos_draws_the_same_schedule_from_the_same_seed_and_caps_the_fatal_ones() -> None:
    first, again, other = chaos.draw(_cfg()), chaos.draw(_cfg()), chaos.draw(_cfg(chaos=2))
    assert first == again != other
    assert 40 <= len(first) <= 80  # 600 s at one fault per 10 s on average
    parsed = [faults.parse(s) for s in first]
    assert {f.kind for f in parsed} == set(chaos.kinds_of(_cfg()))
    for node in range(4):  # at most --restarts fatal faults per node
        hits = [f for f in parsed if f.kind in faults.FATAL
                and (f.node if f.kind == "kill-node" else f.rank) == node]
        assert len(hits) <= 2, hits
    seconds = [f.at_second for f in parsed]
    assert seconds == sorted(seconds) and seconds[-1] < 600
    # Restartable runs on one machine restart every worker: the cap is for all of them.
    local = chaos.draw(_cfg(elastic=False, link=None, restarts=3, groups=1,
                            chaos_kinds="kill,segv,stop,nan"))
    assert sum(faults.parse(s).kind in faults.FATAL for s in local) == 3
    assert chaos.with_chaos(_cfg()).faults.fault == first and chaos.with_chaos(_cfg()).faults.chaos is None


def test_chaos_refuses_kinds_the_run_cannot_take() -> None:
    with pytest.raises(ValueError, match="--chaos-kinds link-down: .*add --link"):
        _cfg(link=None, elastic=False)
    with pytest.raises(ValueError, match="--chaos-kinds 'kill,boom'"):
        _cfg(chaos_kinds="kill,boom")


def _link_state(namespace: str) -> str:
    return subprocess.run(["ip", "-n", namespace, "link", "show", "eth0"], capture_output=True,
                          text=True).stdout


def _rate(namespace: str) -> str:
    out = subprocess.run(["tc", "-n", namespace, "qdisc", "show", "dev", "eth0"],
                         capture_output=True, text=True).stdout
    return out.split(" rate ")[1].split()[0]


@pytest.mark.timeout(60)
def test_the_link_injector_takes_a_link_down_and_slows_one_then_restores_them(
        tmp_path: Path) -> None:
    from lsgd.links import netns
    from lsgd.train import injector

    if netns.shaping_problem() is not None:
        pytest.skip(f"no shaped links here: {netns.shaping_problem()}")
    import threading

    with netns.ShapedNetwork(2, "100mbit") as net:
        faults.append(tmp_path, event="start", rank=0)  # the run's first step, now
        job = threading.Thread(target=injector.run, args=(
            ["link-down:1:0.5:1.5", "slow:0:0.5:2mbit:1.5"], os.getpid(), tmp_path, "100mbit"))
        job.start()
        time.sleep(1.2)
        assert "state DOWN" in _link_state(net.namespaces[1])
        assert "state UP" in _link_state(net.namespaces[0])
        assert _rate(net.namespaces[0]) == "2Mbit"
        job.join(20)
        assert not job.is_alive()
        assert "state UP" in _link_state(net.namespaces[1])
        assert _rate(net.namespaces[0]) == "100Mbit"
    assert sorted(e["kind"] for e in faults.read_log(tmp_path)
                  if e["event"] == "fault") == ["link-down", "slow"]


def test_a_worker_exit_that_no_fault_explains_is_counted_silent(tmp_path: Path) -> None:
    from lsgd.bench.chaos_bench import silent_exits

    logs = tmp_path / "logs"
    logs.mkdir()
    line = "ERROR torch.distributed.elastic.multiprocessing.api: failed (exitcode: {}) " \
           "local_rank: {} (pid: 1) of fn: process_main"
    (logs / "agent-1.log").write_text("\n".join([line.format(-9, 1), line.format(-11, 2)]))
    faults.append(tmp_path, event="fault", spec="kill:1:5", kind="kill", rank=1, node=1, step=5)
    faults.append(tmp_path, event="fault", spec="segv:2:9", kind="segv", rank=2, node=2, step=9)
    assert silent_exits(tmp_path) == (0, [])
    # An abort that no fault sent (what "Resource deadlock avoided" ends a worker with).
    (logs / "agent-2.log").write_text(line.format(-6, 0))
    assert silent_exits(tmp_path) == (1, ["exit code -6"])


def test_chaos_sets_pick_modes_and_kinds_of_round_and_none_picks_all() -> None:
    from lsgd.bench.chaos_bench import MODES, ROUNDS, _picked
    from lsgd.bench.command import _options
    from lsgd.cli import build_parser

    args = build_parser().parse_args(["bench", "chaos", "--sets", "elastic,hidden-int8"])
    sets = _options(args)["sets"]
    assert _picked(MODES, sets) == ["elastic"] and _picked(list(ROUNDS), sets) == ["hidden int8"]
    assert _picked(MODES, ["blocking"]) == ["elastic", "restart"]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_quick_chaos_bench_survives_a_dozen_faults_with_no_hang_or_silent_exit(
        tmp_path: Path) -> None:
    from lsgd.bench import runner

    result = runner("chaos")(tmp_path, True, {})
    unfailed, chaotic = result.rows
    assert unfailed[5] == 0 and unfailed[8] == "1/1" and unfailed[15] == 1.0
    assert chaotic[5] >= 10 and chaotic[7] == chaotic[5], chaotic  # injected, survived
    assert chaotic[8] == "1/1" and chaotic[9] == 0 and chaotic[10] == 0, chaotic
    assert abs(chaotic[18]) < 5, chaotic  # the MLP's accuracy against the unfailed run, points
    assert 0 < chaotic[15] <= 1.2 and 0 < chaotic[13] <= chaotic[14] < 60, chaotic  # goodput, s
    assert result.data["recovery"]["restart"]["kill"]["faults"] >= 1
    run = tmp_path / "chaos-runs" / "diloco" / "restart" / "blocking" / "seed-1"
    kinds = {line.split(",")[1] for line in (run / "faults.csv").read_text().splitlines()[1:]}
    assert {"kill", "nan", "stop"} <= kinds, kinds


def test_a_workers_answer_goes_to_its_own_fault_and_a_heal_to_the_latest(
        tmp_path: Path) -> None:
    start = time.time()
    for second, spec, rank, node in ((1, "slow:0:1:1mbit:5", None, 0), (2, "nan:1:@2", 1, 1),
                                     (3, "kill:2:@3", 2, 2), (4, "link-down:3:4:5", None, 3)):
        faults.append(tmp_path, event="fault", spec=spec, kind=spec.split(":")[0], rank=rank,
                      node=node, time=start + second)
    faults.answer(tmp_path, "reset worker 1 at step 9", rank=1, time=start + 5)
    faults.answer(tmp_path, "restart 1 of worker 2", rank=2, time=start + 6)
    faults.answer(tmp_path, "heal of worker 2", rank=2, time=start + 7)
    faults.answer(tmp_path, "heal of worker 0", rank=0, time=start + 11)
    faults.write_table(tmp_path, start)
    outcome = {line.split(",")[5]: line.split(",")[6]
               for line in (tmp_path / "faults.csv").read_text().splitlines()[1:]}
    recovered = [line.split(",")[7]
                 for line in (tmp_path / "faults.csv").read_text().splitlines()[1:]]
    assert outcome == {"slow:0:1:1mbit:5": "rode it out", "nan:1:@2": "reset worker 1 at step 9",
                       "kill:2:@3": "restart 1 of worker 2; heal of worker 2",
                       "link-down:3:4:5": "heal of worker 0"}


def test_an_elastic_workers_heal_answers_its_kill_though_another_fault_came_between(
        tmp_path: Path) -> None:
    start = time.time()
    for second, spec, rank, node in ((1, "kill:3:@1", 3, 3), (3, "slow:0:3:1mbit:2", None, 0)):
        faults.append(tmp_path, event="fault", spec=spec, kind=spec.split(":")[0], rank=rank,
                      node=node, time=start + second)
    faults.answer(tmp_path, "restart 1 of worker 3", rank=3, time=start + 2)
    faults.answer(tmp_path, "heal of worker 3", rank=3, time=start + 7)
    faults.write_table(tmp_path, start)
    rows = [line.split(",") for line in (tmp_path / "faults.csv").read_text().splitlines()[1:]]
    assert [(row[1], row[6], row[7]) for row in rows] == [
        ("kill", "restart 1 of worker 3; heal of worker 3", "6"), ("slow", "rode it out", "")]
