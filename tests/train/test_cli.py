"""The `lsgd` command line: precedence of settings, and mistakes reported without tracebacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from lsgd.cli import build_parser, main
from lsgd.train.command import resolve


def _resolve(argv: list[str]):
    return resolve(build_parser().parse_args(["train", *argv]))


def test_command_line_wins_over_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "run.toml"
    config.write_text('method = "easgd"\nperiod = 8\nmoving-rate = 0.3\nworkers = 8\n')
    cfg = _resolve(["--config", str(config), "--period", "4"])
    assert (cfg.method, cfg.options.period, cfg.options.moving_rate, cfg.workers) == (
        "easgd", 4, 0.3, 8)
    assert cfg.optim.lr == 0.05, "untouched settings keep their defaults"


def test_flags_of_every_kind_parse() -> None:
    cfg = _resolve(["--no-nesterov", "--drops", "30", "60", "--schedule", "step",
                    "--eval-every", "30s", "--groups", "2", "--pull-global", "0.2"])
    assert cfg.optim.nesterov is False and cfg.optim.drops == [30.0, 60.0]
    assert cfg.eval_interval() == ("seconds", 30.0)
    assert (cfg.groups, cfg.options.pull_global) == (2, 0.2)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["train", "--model", "resnet18"], "unknown model 'resnet18'; choose one of cnn7, mlp"),
        (["train", "--dataset", "mnist"], "unknown dataset 'mnist'"),
        (["train", "--dataset", "cifar10", "--data-dir", "/nonexistent"], "CIFAR-10 not found"),
        (["train", "--workers", "3", "--groups", "2"], "--groups 2 must divide --workers 3"),
        (["train", "--resume", "/nonexistent/run"], "no run there"),
        (["train", "--method", "adam"], "--method 'adam': choose one of lsgd"),
        (["train", "--dataset", "digits", "--model", "mlp", "--global-period", "64"],
         "--global-period 64: with one group LSGD has a single leader, set by --period 16"),
        (["train", "--method", "allreduce", "--async"],
         "--async: an option of --method lsgd or easgd or local-sgd, not of allreduce"),
        (["plot", "/nonexistent"], "not a run folder"),
    ],
)
def test_mistakes_exit_2_with_a_message_and_no_traceback(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_cuda_request_without_cuda(capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main(["train", "--device", "cuda"]) == 2
    assert "CUDA is not available on this machine; use --device cpu" in capsys.readouterr().err
