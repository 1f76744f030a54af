"""lsgd's methods as a PyTorch Lightning strategy (lsgd.integrations.lightning): the example
(examples/lightning_bible.py, GPT-2 on the King James Bible) trained by Lightning on two CPU
processes against lsgd's own loop on the same data and seed; no gradient all-reduce per
step; the checkpoint carries every worker's state and a resumed run takes it back; gradient
accumulation and an LR scheduler; what the strategy refuses."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

pl = pytest.importorskip("pytorch_lightning",
                         reason="pytorch_lightning is not installed: pip install 'lsgd[lightning]'")
pytest.importorskip("transformers", reason="transformers is not installed: pip install 'lsgd[lightning]'")

from lsgd.data.text import kjv_cached  # noqa: E402
from lsgd.functional import ring_allreduce_bytes  # noqa: E402
from lsgd.integrations.lightning import LSGDStrategy, check_fit  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
STEPS, PERIOD, SAVE_AT = 32, 16, 20  # the example's DiLoCo knobs: period 16
SEEDS = (0, 1, 2)  # lsgd's loop; the Lightning run takes the first
#: Float rounding allowed between the runners (other thread counts sum in other orders).
ROUNDING = 1e-3
needs_bible = pytest.mark.skipif(shutil.which("bible") is None and not kjv_cached(),
                                 reason="the King James Bible needs Debian's bible-kjv package")



def _example() -> Any:
    """examples/lightning_bible.py as a module its worker processes can import too."""
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    import lightning_bible

    return lightning_bible


class Probe(pl.Callback):
    """Saves each worker's model, optimizer and method state as training starts."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def on_train_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        state = {"model": module.state_dict(), "optimizer": trainer.optimizers[0].state_dict(),
                 "method": trainer.strategy.method.state_dict()}
        torch.save(state, self.folder / f"probe-rank-{trainer.global_rank}.pt")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """lsgd's loop over SEEDS; Lightning (seed 0) with a checkpoint at step SAVE_AT; a second
    Lightning run resumed from that checkpoint. Every run is two CPU processes."""
    example, tmp = _example(), tmp_path_factory.mktemp("lightning")
    loops = example.fit_loop("diloco", STEPS, SEEDS)
    example.fit_lightning("diloco", STEPS, SEEDS[0], tmp / "a", start_method="fork",
                          checkpoint_every=SAVE_AT, checkpoints=tmp / "checkpoints")
    ckpt = tmp / "checkpoints" / f"epoch=0-step={SAVE_AT}.ckpt"
    example.fit_lightning("diloco", STEPS, SEEDS[0], tmp / "b", start_method="fork",
                          ckpt_path=str(ckpt), callbacks=[Probe(tmp)])

    def ranks(folder: str) -> list[dict[str, Any]]:
        return [json.loads((tmp / folder / f"lightning-rank-{r}.json").read_text())
                for r in range(2)]

    return {"loops": loops, "a": ranks("a"), "b": ranks("b"),
            "checkpoint": torch.load(ckpt, weights_only=False),
            "probes": [torch.load(tmp / f"probe-rank-{r}.pt") for r in range(2)],
            "params": sum(p.numel() for p in example.gpt2().parameters())}


@needs_bible
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_lightning_trains_like_lsgds_own_loop(runs: dict[str, Any]) -> None:
    """Same data, seed, model and knobs: Lightning's final validation loss is inside the
    spread of lsgd's loop over three seeds and within ROUNDING of the loop's for its seed
    (measured: equal to the bit, the seeds 0.256 apart), far below the start (ln 256)."""
    loops, mine = runs["loops"], runs["a"][0]
    spread = [run["validation_loss"] for run in loops]
    assert min(spread) - ROUNDING <= mine["validation_loss"] <= max(spread) + ROUNDING, spread
    assert abs(mine["validation_loss"] - loops[0]["validation_loss"]) < ROUNDING, (mine, spread)
    assert max(spread) - min(spread) > 50 * ROUNDING  # the seeds differ: no accidental match
    assert mine["start_loss"] == pytest.approx(loops[0]["start_loss"], abs=1e-6)
    assert mine["validation_loss"] < mine["start_loss"] - 2.0


@needs_bible
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_rounds_only_no_gradient_allreduce(runs: dict[str, Any]) -> None:
    """Rounds = steps / period and the traffic is the rounds' all-reduces alone (as in
    lsgd's loop); between rounds the workers' models differ, right after one they agree."""
    one_round = ring_allreduce_bytes(4 * runs["params"], 2)
    for rank in runs["a"]:
        report = rank["report"]
        assert (report["steps"], report["rounds"]) == (STEPS, STEPS // PERIOD)
        assert report["bytes_sent"] == STEPS // PERIOD * one_round
        assert report["bytes_sent"] == runs["loops"][0]["report"]["bytes_sent"]
    assert runs["a"][0]["params"] == runs["a"][1]["params"]  # the last step: right after a round
    saved = runs["checkpoint"]["lsgd"]["ranks"]  # step 20: four steps after the round at 16
    gaps = [float((saved[0]["model"][k] - saved[1]["model"][k]).abs().max())
            for k in saved[0]["model"]]
    assert max(gaps) > 1e-3, max(gaps)
    for a, b in zip(saved[0]["method"]["global"], saved[1]["method"]["global"]):
        assert torch.equal(a, b)  # θ_g: the same on both since the round


@needs_bible
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_checkpoint_carries_the_method_and_resume_restores_it(runs: dict[str, Any]) -> None:
    """The checkpoint holds each worker's state (steps 20, 1 round, θ_g, outer momentum); the
    resumed run starts from exactly that on each worker and ends with both rounds."""
    saved = runs["checkpoint"]["lsgd"]
    assert saved["method"] == "diloco" and len(saved["ranks"]) == 2
    for rank, probe in enumerate(runs["probes"]):
        mine = saved["ranks"][rank]
        assert (mine["method"]["steps"], mine["method"]["rounds"]) == (SAVE_AT, 1)
        assert (probe["method"]["steps"], probe["method"]["rounds"]) == (SAVE_AT, 1)
        for a, b in zip(probe["method"]["global"], mine["method"]["global"]):
            assert torch.equal(a, b)
        momentum = [s["momentum_buffer"] for part in mine["method"]["outer_parts"]
                    for s in part.values()]
        assert momentum and all(float(m.abs().sum()) > 0 for m in momentum)
        for part, again in zip(mine["method"]["outer_parts"], probe["method"]["outer_parts"]):
            for key in part:
                assert torch.equal(part[key]["momentum_buffer"], again[key]["momentum_buffer"])
        for key, value in mine["model"].items():
            assert torch.equal(probe["model"][key], value), key
        assert probe["method"]["traffic"] == mine["method"]["traffic"]
    for rank in runs["b"]:
        assert (rank["report"]["steps"], rank["report"]["rounds"]) == (STEPS, STEPS // PERIOD)


class _Tiny(pl.LightningModule):
    """A linear model, each worker its own data; SGD with a StepLR per optimizer step."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net, self.folder, self.batches = torch.nn.Linear(4, 1), folder, 0

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        x = torch.randn(64, 4, generator=torch.Generator().manual_seed(self.global_rank))
        data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
        return torch.utils.data.DataLoader(data, batch_size=4)

    def training_step(self, batch: Any, index: int) -> torch.Tensor:
        self.batches += 1
        return torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.05)
        decay = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": decay, "interval": "step"}}

    def on_train_end(self) -> None:
        method = self.trainer.strategy.method
        result = {"steps": method.steps, "rounds": method.rounds, "batches": self.batches,
                  "global_step": self.trainer.global_step,
                  "bytes_sent": method.report().bytes_sent,
                  "lr": self.trainer.optimizers[0].param_groups[0]["lr"]}
        (self.folder / f"rank-{self.global_rank}.json").write_text(json.dumps(result))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_accumulation_counts_optimizer_steps(tmp_path: Path) -> None:
    """accumulate_grad_batches=2: 16 batches make 8 optimizer steps, a round every 4 of them;
    the LR scheduler steps with the optimizer (the method drives its step)."""
    trainer = pl.Trainer(accelerator="cpu", devices=2, max_steps=8, accumulate_grad_batches=2,
                         strategy=LSGDStrategy("diloco", period=4, start_method="fork"),
                         use_distributed_sampler=False, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(_Tiny(tmp_path))
    for rank in range(2):
        result = json.loads((tmp_path / f"rank-{rank}.json").read_text())
        assert result == {"steps": 8, "rounds": 2, "batches": 16, "global_step": 8,
                          "bytes_sent": 2 * ring_allreduce_bytes(4 * 5, 2),
                          "lr": pytest.approx(0.05 * 0.5 ** 8)}


def test_refusals_name_the_fix() -> None:
    """allreduce, an unknown knob, comm and asynchronous; manual optimization, several
    optimizers and a gradient scaler: each a ValueError saying what works instead."""
    with pytest.raises(ValueError, match="strategy='ddp'"):
        LSGDStrategy("allreduce")
    with pytest.raises(ValueError, match="unknown method 'dilco'"):
        LSGDStrategy("dilco")
    with pytest.raises(ValueError, match="peroid.*diloco takes.*period"):
        LSGDStrategy("diloco", peroid=8)
    for knob in ("comm", "asynchronous"):
        with pytest.raises(ValueError, match=knob):
            LSGDStrategy("lsgd", **{knob: None})
    assert LSGDStrategy("diloco", period=8).knobs == {"period": 8}
    auto, plain = SimpleNamespace(automatic_optimization=True), SimpleNamespace(scaler=None)
    with pytest.raises(ValueError, match="automatic_optimization=False"):
        check_fit(SimpleNamespace(automatic_optimization=False), [object()], plain)
    with pytest.raises(ValueError, match="one optimizer.*returned 2"):
        check_fit(auto, [object(), object()], plain)
    with pytest.raises(ValueError, match="16-mixed.*bf16-mixed"):
        check_fit(auto, [object()], SimpleNamespace(scaler=object()))
    check_fit(auto, [object()], plain)
