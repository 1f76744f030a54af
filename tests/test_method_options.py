"""Each method's options are declared once (lsgd.method_options) and agree with its
strategy: every option reaches a keyword the strategy takes, at the default the
strategy itself would use, and lsgd train names no method outside the registry."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest
import torch
from torch import nn

import lsgd
from lsgd.method_options import OPTIONS
from lsgd.registry import accepted_knobs, strategy_class
from lsgd.train.config import make_config
from lsgd.train.errors import UsageError

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("method", list(OPTIONS))
def test_every_option_is_a_keyword_of_the_strategy_at_its_default(method: str) -> None:
    takes = set(accepted_knobs(method))
    signature = inspect.signature(strategy_class(method).__init__).parameters
    knobs = OPTIONS[method]().knobs(seed=0, groups=2)
    assert set(knobs) <= takes, (method, sorted(set(knobs) - takes))
    for f in dataclasses.fields(OPTIONS[method]):
        keyword = f.metadata["keyword"] or f.name
        assert keyword in takes or keyword == "graphs", (method, keyword)
        default = signature[keyword].default if keyword in signature else inspect.Parameter.empty
        if default not in (inspect.Parameter.empty, None) and f.default is not None \
                and f.default != f.metadata["auto"]:
            assert f.default == default, (method, f.name, f.default, default)


@pytest.mark.parametrize("method", [m for m in OPTIONS if m != "matcha"])
def test_the_default_options_build_the_strategy(method: str) -> None:
    """lsgd train's knobs of every method, all defaults given, build its strategy."""
    cfg = make_config({"method": method, "model": "mlp", "dataset": "digits"})

    def build(info: lsgd.WorkerInfo) -> str:
        model = nn.Linear(4, 2)
        optimizer = (lsgd.MuonAdamW(model, lr=0.01) if method == "muloco"
                     else torch.optim.SGD(model.parameters(), lr=0.1))
        return type(lsgd.make_strategy(method, model, optimizer,
                                       **cfg.options.knobs(cfg.seed, info.groups))).__name__

    assert lsgd.simulate(build, 4, 2, seed=0) == [strategy_class(method).__name__] * 4


def test_an_option_is_checked_against_its_declaration() -> None:
    """The range and the choices come from the declaration, for the method at hand."""
    with pytest.raises(ValueError, match=r"--density must be in \(0, 1\], got 0.0"):
        make_config({"method": "sparseloco", "density": 0.0})
    with pytest.raises(ValueError, match="--method lsgd takes one of none, bf16, int8"):
        make_config({"method": "lsgd", "compress": "topk"})
    assert make_config({"method": "muloco"}).options.compress == "2bit"
    assert 'compress = "2bit"' in make_config({"method": "muloco"}).to_toml()


def test_lsgd_train_names_no_method_outside_the_registry() -> None:
    lines = [line for path in sorted((REPO / "lsgd" / "train").glob("*.py"))
             for line in path.read_text().splitlines()
             if re.search(r'"(lsgd|diloco|local-sgd|easgd|allreduce)"', line)]
    assert len(lines) <= 3, lines


def test_an_older_config_toml_is_read_as_it_was_meant(tmp_path: Path) -> None:
    """Before each method declared its options a run's config.toml held every method's,
    and compress = "none" meant the method's own codec (MuLoCo's 2-bit)."""
    from lsgd.cli import build_parser
    from lsgd.train.runner import resolve

    old = tmp_path / "old.toml"
    old.write_text('method = "muloco"\nmodel = "mlp"\ndataset = "digits"\ncompress = "none"\n'
                   'error_feedback = false\npull = 0.1\nmoving_rate = 0.43\nperiod = 8\n')
    cfg = resolve(build_parser().parse_args(["train", "--config", str(old)]))
    assert (cfg.options.compress, cfg.options.error_feedback, cfg.options.period) == (
        "2bit", True, 8)
    new = tmp_path / "new.toml"
    new.write_text('method = "muloco"\nmodel = "mlp"\ndataset = "digits"\ncompress = "none"\n')
    with pytest.raises(UsageError, match=r"--error-feedback \(muloco's default\) with "
                                         "--compress none"):  # a new file: meant as written
        resolve(build_parser().parse_args(["train", "--config", str(new)]))
