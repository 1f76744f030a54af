"""Muon on the matrices and AdamW on the rest, as one optimizer (lsgd.optim.muon)."""

from __future__ import annotations

import copy

import torch
from torch import nn

from lsgd.models.gpt import GPT
from lsgd.optim.muon import MuonAdamW, split_parameters


def _model() -> GPT:
    torch.manual_seed(0)
    return GPT(256, 16, 1, 32, 2)


def _loss(model: nn.Module, seed: int) -> torch.Tensor:
    tokens = torch.randint(0, 256, (4, 17), generator=torch.Generator().manual_seed(seed))
    logits = model(tokens[:, :-1])
    return nn.functional.cross_entropy(logits.reshape(-1, 256), tokens[:, 1:].reshape(-1))


def test_muon_takes_the_block_matrices_and_adamw_the_embeddings_and_vectors() -> None:
    model = _model()
    matrices, rest = split_parameters(model)
    embeddings = {id(model.tokens.weight), id(model.positions.weight)}
    assert all(p.ndim == 2 and id(p) not in embeddings for p in matrices)
    assert embeddings <= {id(p) for p in rest}
    assert len(matrices) == 4  # qkv, proj, up, down of the one block
    assert len(matrices) + len(rest) == len(list(model.parameters()))


def test_a_step_equals_muon_and_adamw_apart() -> None:
    model, twin = _model(), _model()
    opt = MuonAdamW(model, lr=0.01, weight_decay=0.1)
    matrices, rest = split_parameters(twin)
    muon = torch.optim.Muon(matrices, lr=0.01, weight_decay=0.1,
                            adjust_lr_fn="match_rms_adamw")
    adamw = torch.optim.AdamW(rest, lr=0.01, weight_decay=0.1)
    for seed in range(3):
        for m, optimizers in ((model, [opt]), (twin, [muon, adamw])):
            for o in optimizers:
                o.zero_grad()
            _loss(m, seed).backward()
            for o in optimizers:
                o.step()
    for a, b in zip(model.parameters(), twin.parameters()):
        assert torch.equal(a, b)


def test_a_scheduler_reaches_both_and_a_saved_state_resumes_exactly() -> None:
    model = _model()
    opt = MuonAdamW(model, lr=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.5)
    assert {g["lr"] for g in opt.muon.param_groups + opt.adamw.param_groups} == {0.005}
    for seed in range(2):
        opt.zero_grad()
        _loss(model, seed).backward()
        opt.step()
        scheduler.step()
    saved, twin = copy.deepcopy(opt.state_dict()), copy.deepcopy(model)
    resumed = MuonAdamW(twin, lr=0.01)
    resumed.load_state_dict(saved)
    assert len(resumed.param_groups) == 2 and resumed.param_groups[0] is resumed.muon.param_groups[0]
    for m, o in ((model, opt), (twin, resumed)):
        o.zero_grad()
        _loss(m, 5).backward()
        o.step()
    for a, b in zip(model.parameters(), twin.parameters()):
        assert torch.equal(a, b)
    first = next(iter(opt.state))
    assert first in opt.state and opt.state.pop(first) is not None and first not in opt.state


def test_lsgd_train_with_muon_lowers_the_loss(tmp_path) -> None:
    from lsgd.train import runner
    from lsgd.train.config import make_config

    cfg = make_config({"dataset": "kjv", "model": "gpt", "context": 32, "layers": 1,
                       "width": 32, "heads": 2, "batch_size": 8, "eval_tokens": 2048,
                       "method": "diloco", "period": 4, "optimizer": "muon", "lr": 0.003,
                       "warmup_epochs": 0.0,
                       "workers": 2, "groups": 2, "backend": "threads", "steps": 16,
                       "eval_every": "16", "out": str(tmp_path / "run"), "quiet": True})
    summary = runner.train(cfg)
    assert summary is not None
    assert summary["best"] < 4.5  # 5.5 at the start
