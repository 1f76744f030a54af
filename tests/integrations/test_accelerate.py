"""lsgd's methods under Hugging Face Accelerate (lsgd.integrations.accelerate).

The example trains GPT-2 on the King James Bible with two CPU processes under
``accelerate launch`` and again in lsgd's own loop (same data, seed, model, knobs); the
others run Accelerate's multi-CPU data parallelism inside ``lsgd.launch`` workers (the same
Accelerator, DDP and prepared optimizer as under ``accelerate launch``, at a fraction of the
start-up), or one process.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

import lsgd

pytest.importorskip("accelerate", reason="Accelerate is not installed: pip install "
                                         "'lsgd[accelerate]'")
from accelerate import Accelerator
from accelerate.optimizer import AcceleratedOptimizer
from accelerate.state import AcceleratorState

from lsgd.integrations.accelerate import prepare

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "accelerate_bible.py"
RUN = ["--method", "diloco", "--steps", "240", "--accumulate", "2", "--seed", "1"]
# The example's final validation loss (nats per byte; 5.56 at the start, ln 256 = 5.545) after
# 120 optimizer steps of DiLoCo (period 8), two workers, bf16, in lsgd's own loop: 2.969,
# 2.471, 2.481 for seeds 0, 1, 2 (docs/accelerate.md), a spread of 0.498. Under Accelerate
# each seed ended equal to the last bit: the same seed must land inside that spread, and
# within 0.001 (one thread per process in both: the same arithmetic).
SEED_SPREAD = 0.498
SAME_RUN = 1e-3
TRAINED_BELOW = 3.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(command: list[str], out: Path, tmp_path: Path) -> Callable[[], dict[str, Any]]:
    """Start ``command`` writing ``out``; what it returns waits for it and reads ``out``."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), ACCELERATE_USE_CPU="1",
               HF_HOME=str(tmp_path / "hf"))  # no accelerate config of the user's
    log = open(out.with_suffix(".log"), "w+")
    proc = subprocess.Popen(command + ["--out", str(out)], cwd=ROOT, env=env, text=True,
                            stdout=log, stderr=subprocess.STDOUT)

    def result() -> dict[str, Any]:
        code = proc.wait(timeout=240)
        log.seek(0)
        assert code == 0, log.read()[-4000:]
        return json.loads(out.read_text())
    return result


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_accelerate_example_trains_as_lsgds_own_loop(tmp_path: Path) -> None:
    """Two CPU processes under accelerate launch: 240 micro-batches in 120 optimizer steps,
    15 DiLoCo rounds, the same bytes and the same final loss as lsgd's loop (both run at
    once, one thread per process)."""
    pytest.importorskip("transformers", reason="the example's GPT-2: pip install transformers")
    launcher = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu",
                "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "bf16",
                "--dynamo_backend", "no", "--num_cpu_threads_per_process", "1",
                "--main_process_port", str(_free_port()),
                str(EXAMPLE)]
    started = (_start(launcher + RUN, tmp_path / "accelerate.json", tmp_path),
               _start([sys.executable, str(EXAMPLE), "--loop", "lsgd", "--mixed-precision",
                       "bf16", *RUN], tmp_path / "lsgd.json", tmp_path))
    ours, theirs = (result() for result in started)
    for result in (ours, theirs):
        assert (result["workers"], result["optimizer_steps"], result["rounds"]) == (2, 120, 15)
        assert result["validation_loss"] < TRAINED_BELOW < result["initial_validation_loss"] - 2
    assert ours["mb_sent"] == pytest.approx(theirs["mb_sent"], rel=1e-9)
    assert abs(ours["validation_loss"] - theirs["validation_loss"]) <= SEED_SPREAD
    assert abs(ours["validation_loss"] - theirs["validation_loss"]) <= SAME_RUN


def _accelerator(**options: Any) -> Accelerator:
    """A new Accelerator (its state is a process-wide singleton: forgotten first)."""
    AcceleratorState._reset_state(reset_partial_state=True)
    return Accelerator(cpu=True, **options)


def _linear(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def _spread(accelerator: Accelerator, tensors: list[torch.Tensor]) -> float:
    """The largest difference between the two processes' ``tensors``."""
    mine = torch.cat([t.detach().reshape(-1) for t in tensors])
    both = accelerator.gather(mine[None])
    return float((both[0] - both[1]).abs().max())


def accumulating(info: lsgd.WorkerInfo, method: str) -> dict[str, Any]:
    """A worker: 12 micro-batches, accumulation 3, DiLoCo period 2 (or allreduce); per
    micro-batch whether it stepped, the counters, and how far the two processes' gradients
    (before the step) and parameters (after it) are apart; DDP's all-reduces counted."""
    accelerator = _accelerator(gradient_accumulation_steps=3)
    model, optimizer = _linear()
    model, optimizer = accelerator.prepare(model, optimizer)
    calls = []

    def counted(state, bucket):  # type: ignore[no-untyped-def]  # DDP reads annotations
        calls.append(1)
        return allreduce_hook(state, bucket)

    model.register_comm_hook(None, counted)
    knobs = {"period": 2} if method == "diloco" else {}
    wrapped = prepare(accelerator, model, optimizer, method, **knobs)
    g = torch.Generator().manual_seed(10 + info.rank)  # each process its own data
    rows = []
    for _ in range(12):
        with accelerator.accumulate(model):
            x = torch.randn(16, 6, generator=g)
            loss = model(x).pow(2).mean()
            accelerator.backward(loss)
            grads = _spread(accelerator, [p.grad for p in model.parameters()])
            took = wrapped.step(loss)
            optimizer.zero_grad()
        rounds = wrapped.strategy.rounds if wrapped.strategy else 0
        rows.append((took, wrapped.steps, rounds, grads, _spread(accelerator,
                                                                  list(model.parameters()))))
    return {"rows": rows, "ddp_allreduces": len(calls), "world": accelerator.num_processes}


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_ddp_sync_is_off_and_accumulation_steps_every_third_batch() -> None:
    """DiLoCo: DDP never all-reduces, the processes' gradients differ at every step and their
    parameters between rounds, and are equal right after a round; 12 micro-batches with
    accumulation 3 are 4 steps, rounds at steps 2 and 4. allreduce keeps DDP's all-reduce."""
    diloco = lsgd.launch(accumulating, 2, args=("diloco",), timeout=60)[0]
    assert diloco["world"] == 2 and diloco["ddp_allreduces"] == 0
    rows = diloco["rows"]
    assert [r[0] for r in rows] == [False, False, True] * 4
    assert [r[1] for r in rows] == [0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4]
    assert [r[2] for r in rows] == [0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2]
    assert all(r[3] > 1e-3 for r in rows)  # every backward's gradients stay each process's own
    after = {r[1]: r[4] for r in rows if r[0]}  # optimizer step: parameter spread after it
    assert after[1] > 1e-3 and after[3] > 1e-3  # between rounds: apart
    assert after[2] == 0.0 and after[4] == 0.0  # right after a round: equal
    reference = lsgd.launch(accumulating, 2, args=("allreduce",), timeout=60)[0]
    assert reference["ddp_allreduces"] == 4  # one bucket per step, none on micro-batches
    assert [r[1] for r in reference["rows"]] == [r[1] for r in rows]
    assert all(r[4] == 0.0 for r in reference["rows"])
    assert all(r[3] == 0.0 for r in reference["rows"] if r[0])


def checkpointing(info: lsgd.WorkerInfo, folder: str, save: bool) -> dict[str, Any]:
    """A worker: DiLoCo (period 3) for 7 steps, then save_state; or a fresh run that
    load_states it and takes 2 more steps. Returns the method's state and the model's."""
    accelerator = _accelerator(mixed_precision="bf16")
    model, optimizer = _linear(seed=1 if save else 2)  # the loaded run starts elsewhere
    model, optimizer = accelerator.prepare(model, optimizer)
    wrapped = prepare(accelerator, model, optimizer, "diloco", period=3)
    g = torch.Generator().manual_seed(20 + info.rank)

    def train(steps: int) -> None:
        for _ in range(steps):
            loss = model(torch.randn(16, 6, generator=g)).pow(2).mean()
            accelerator.backward(loss)
            wrapped.step(loss)
            optimizer.zero_grad()

    if save:
        train(7)
        accelerator.save_state(folder)
    else:
        accelerator.load_state(folder)
    state = wrapped.state_dict()["strategy"]
    loaded = {"steps": wrapped.steps, "rounds": state["rounds"],
              "global": [t.clone() for t in state["global"]],
              "momentum": [s["momentum_buffer"].clone() for o in state["outer_parts"]
                           for s in o.values()],
              "optimizer": [s["momentum_buffer"].clone()
                            for s in optimizer.state_dict()["state"].values()]}
    train(2)
    return loaded | {"after": (wrapped.steps, wrapped.strategy.rounds)}


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_save_state_and_load_state_carry_the_method(tmp_path: Path) -> None:
    """save_state after 7 steps (2 rounds); a fresh run's load_state restores the step and
    round counters, DiLoCo's global parameters and outer momentum, and its next round
    falls due at step 9 as in the saved run."""
    folder = str(tmp_path / "state")
    saved = lsgd.launch(checkpointing, 2, args=(folder, True), timeout=60)
    loaded = lsgd.launch(checkpointing, 2, args=(folder, False), timeout=60)
    # Accelerate saves one copy, the main process's: every process resumes from it.
    a = saved[0]
    assert a["steps"] == saved[1]["steps"] and a["rounds"] == saved[1]["rounds"]
    for rank in range(2):
        b = loaded[rank]
        assert (b["steps"], b["rounds"]) == (a["steps"], a["rounds"]) == (7, 2)
        assert b["after"] == saved[rank]["after"] == (9, 3)
        for key in ("global", "momentum", "optimizer"):
            assert len(a[key]) == len(b[key]) > 0
            for x, y in zip(a[key], b[key]):
                assert torch.equal(x, y), key
    for x, y in zip(saved[0]["global"], saved[1]["global"]):
        assert torch.equal(x, y)  # θ_g: the same on every process
    assert float(saved[0]["momentum"][0].abs().max()) > 0  # an outer step was taken


def test_a_bad_method_or_knob_is_named() -> None:
    accelerator = _accelerator()
    model, optimizer = _linear()
    model, optimizer = accelerator.prepare(model, optimizer)
    with pytest.raises(ValueError, match="unknown method 'dilocoo'; choose one of .*diloco"):
        prepare(accelerator, model, optimizer, "dilocoo")
    with pytest.raises(ValueError, match="diloco: unknown argument.* periodd; diloco takes "
                                         "period"):
        prepare(accelerator, model, optimizer, "diloco", periodd=8)
    with pytest.raises(ValueError, match="allreduce is Accelerate's own DDP and takes no "
                                         "knobs, got period"):
        prepare(accelerator, model, optimizer, "allreduce", period=8)
    with pytest.raises(ValueError, match="that accelerator.prepare returned, got Sequential "
                                         "and SGD"):
        prepare(accelerator, model, optimizer.optimizer, "diloco")
    wrapped = prepare(accelerator, model, optimizer, "diloco", period=4)
    with pytest.raises(ValueError, match="the state of 'local-sgd', this run trains 'diloco'"):
        wrapped.load_state_dict({"method": "local-sgd", "steps": 3, "strategy": {}})
    assert wrapped.steps == 0


def test_the_step_runs_through_the_grad_scaler() -> None:
    """With a GradScaler in the prepared optimizer (fp16), the method's step unscales the
    gradients; an overflow skips the update and halves the scale; a direct optimizer.step()
    is refused."""
    accelerator = _accelerator()
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1, bias=False)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    optimizer = AcceleratedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5), scaler=scaler)
    wrapped = prepare(accelerator, model, optimizer, "local-sgd", period=4)
    before = model.weight.detach().clone()
    loss = model(torch.ones(1, 3)).sum()  # d loss / d w = 1 for every weight
    scaler.scale(loss).backward()
    assert float(model.weight.grad[0, 0]) == 1024.0
    assert wrapped.step(loss) is True
    torch.testing.assert_close(model.weight.detach(), before - 0.5, rtol=0, atol=1e-7)
    optimizer.zero_grad()
    model.weight.grad = torch.full_like(model.weight, float("inf"))
    after = model.weight.detach().clone()
    wrapped.step()
    assert torch.equal(model.weight.detach(), after)  # skipped
    assert optimizer.step_was_skipped and scaler.get_scale() == 512.0
    assert wrapped.steps == wrapped.strategy.steps == 2
    optimizer.zero_grad()
    scaler.scale(model(torch.ones(1, 3)).sum()).backward()
    with pytest.raises(RuntimeError, match="call strategy.step"):
        optimizer.step()
