"""configs/ and ``lsgd train --dry-run``.

Every file in configs/ passes a dry run (no dataset needed) and its printed TOML
round-trips to the same settings. A dry run reads no dataset, starts no worker and
creates no run folder, and stops every bad input of tests/train/test_bad_input.py with the
same exit code 2 and message, except three that only reading the dataset's files can
find (files missing from an existing --data-dir, or files that are there but broken).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import lsgd
from lsgd.cli import build_parser, main
from lsgd.train import build, runner
from lsgd.train.config import make_config
from lsgd.train.tomlfile import read_toml
from tests.train.test_bad_input import CASES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
CONFIG_FILES = sorted((REPO / "configs").rglob("*.toml"))
#: Bad inputs only a real run finds: the dataset's files, which a dry run does not read.
NEEDS_THE_FILES = ("cifar-incomplete", "cifar100-incomplete", "fashion-empty-files",
                   "text-empty", "text-binary", "text-not-utf8", "text-shorter-than-a-window")


@pytest.fixture
def nothing_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Fail the test if a worker would start or a dataset be read; run in ``tmp_path``."""
    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("a worker would start or a dataset be read")

    for module, name in ((lsgd, "launch"), (lsgd, "simulate"), (lsgd.data, "load_dataset"),
                         (build, "load_data")):
        monkeypatch.setattr(module, name, fail)
    monkeypatch.delenv("LSGD_DATA", raising=False)
    monkeypatch.chdir(tmp_path)


def _dry_run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["train", *argv, "--dry-run"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_there_are_configs_for_both_papers() -> None:
    names = {path.relative_to(REPO / "configs").as_posix() for path in CONFIG_FILES}
    for model in ("cnn7", "vgg16", "resnet20"):
        for workers in (4, 12):
            for method in ("lsgd", "easgd", "allreduce"):
                assert f"lsgd-paper/cifar10-{model}-{workers}w-{method}.toml" in names
    assert "lsgd-paper/imagenet-resnet50-4w-lsgd.toml" in names
    assert {"al-dsgd-paper/cifar10-resnet50-8w-al-dsgd-ring.toml",
            "al-dsgd-paper/cifar10-resnet50-8w-al-dsgd-dynamic.toml"} <= names


@pytest.mark.parametrize("path", CONFIG_FILES,
                         ids=[p.relative_to(REPO / "configs").as_posix() for p in CONFIG_FILES])
def test_config_passes_a_dry_run_and_round_trips(path: Path, tmp_path: Path, nothing_runs: None,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    text = path.read_text()
    assert text.startswith("# "), "a config starts with comments: paper, settings, command"
    relative = path.relative_to(REPO).as_posix()
    assert f"lsgd train --config {relative}" in text
    assert "data_dir" not in tomllib.loads(text), "the user gives --data-dir"
    out = tmp_path / "run"
    code, printed, err = _dry_run(["--config", str(path), "--out", str(out)], capsys)
    assert code == 0, err
    assert "Traceback" not in err
    assert not out.exists()
    resolved = tmp_path / "resolved.toml"
    resolved.write_text(printed)
    settings = read_toml(resolved)
    assert settings["dry_run"] is False, "the printed TOML starts a real run"
    for key, value in read_toml(path).items():  # the file's own settings, as given
        assert settings[key] == (str(out) if key == "out" else value), key
    again = make_config(settings)
    assert again.to_toml() == printed, "the printed TOML is the resolved config, exactly"
    code, printed_again, err = _dry_run(["--config", str(resolved)], capsys)
    assert (code, printed_again) == (0, printed), err


def test_dry_run_knows_the_datasets_it_can_read() -> None:
    """:data:`lsgd.data.FACTS` against the datasets that can be read here."""
    from lsgd.data import DATASETS, FACTS, TEXT_DATASETS, load_dataset, locate

    assert set(FACTS) == set(DATASETS) - set(TEXT_DATASETS)  # images: text has no shape
    for name in ("digits", "synthetic", "fashion-mnist"):
        if locate(name) is not None:
            continue  # Fashion-MNIST without Debian's package
        data = load_dataset(name)
        shape, classes, n_train = FACTS[name]
        assert (tuple(data.input_shape), data.classes, len(data.train_y)) == (shape, classes,
                                                                               n_train)


def test_dry_run_reads_no_data_and_creates_nothing(tmp_path: Path, nothing_runs: None,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "a" / "b" / "run"
    code, printed, err = _dry_run(["--dataset", "cifar10", "--model", "vgg16", "--workers", "12",
                                   "--groups", "3", "--out", str(out)], capsys)
    assert code == 0, err
    assert not (tmp_path / "a").exists() and not (tmp_path / "runs").exists()
    assert list(tmp_path.iterdir()) == [], "not even the probe is left"
    assert "note: dry run: CIFAR-10 not found" in err, "says the data was not found"
    cfg = make_config(tomllib.loads(printed))
    assert (cfg.model, cfg.workers, cfg.groups, cfg.out, cfg.output.dry_run) == (
        "vgg16", 12, 3, str(out), False)


def test_dry_run_checks_that_the_data_folder_exists(tmp_path: Path, nothing_runs: None,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A --data-dir that is no folder stops it (exit 2); an existing one without the
    dataset's files passes with a note, since the files are not read."""
    missing = tmp_path / "nowhere"
    code, _, err = _dry_run(["--dataset", "cifar10", "--data-dir", str(missing)], capsys)
    assert code == 2
    assert f"--data-dir {missing} (no such folder)" in err and "data_batch_1" in err
    (tmp_path / "empty").mkdir()
    code, printed, err = _dry_run(["--dataset", "cifar10", "--data-dir",
                                   str(tmp_path / "empty")], capsys)
    assert code == 0, err
    assert "note: dry run: CIFAR-10 not found" in err
    assert f'data_dir = "{tmp_path / "empty"}"' in printed


#: (id, arguments) a real run stops in its preflight, and so does a dry run.
STOPPED = [
    ("lr-nan", ["--lr", "nan"]),
    ("vgg16-on-8x8", ["--model", "vgg16", "--dataset", "digits"]),
    ("batch-above-shard", ["--dataset", "digits", "--workers", "16", "--batch-size", "128"]),
    ("global-period-single-leader", ["--groups", "1", "--global-period", "64"]),
    ("augment-crop-too-big", ["--dataset", "digits", "--augment", "cifar-28"]),
] + ([] if torch.cuda.is_available() else [("no-cuda", ["--device", "cuda"])])


@pytest.mark.parametrize("argv", [c[1] for c in STOPPED], ids=[c[0] for c in STOPPED])
def test_dry_run_stops_what_a_run_would_stop(argv: list[str], tmp_path: Path, nothing_runs: None,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, printed, err = _dry_run(argv, capsys)
    assert code == 2, err
    assert printed == "" and "lsgd train: error: " in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_dry_run_stops_every_bad_input_a_run_stops(case: tuple[str, list[str], list[str]],
                                                   workdir: Path, nothing_runs: None,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    name, args, expected = case
    fill = [item.replace("{tmp}", str(workdir)) for item in args]
    code, printed, err = _dry_run(["--dataset", "synthetic", "--quiet", *fill], capsys)
    if name in NEEDS_THE_FILES:
        assert code == 0, err
        return
    assert code == 2, err
    assert printed == "" and "Traceback" not in err
    for part in expected:
        part = part.replace("{tmp}", str(workdir))
        assert part in err, f"{part!r} not in {err!r}"


def test_resume_dry_run_checks_the_checkpoint_and_stays_a_dry_run(
        workdir: Path, nothing_runs: None, capsys: pytest.CaptureFixture[str]) -> None:
    run = workdir / "run"
    code, _, err = _dry_run(["--resume", str(run)], capsys)
    assert code == 2 and "no complete checkpoint" in err, err
    # a saved config that (wrongly) says dry_run = true does not make a resumed run a dry run
    text = (run / "config.toml").read_text().replace("dry_run = false", "dry_run = true")
    (run / "config.toml").write_text(text)
    args = build_parser().parse_args(["train", "--resume", str(run)])
    assert runner.resolve(args).output.dry_run is False


def test_resume_dry_run_of_a_real_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A finished run resumes in a dry run: its checkpoint is checked, nothing is written."""
    run = tmp_path / "run"
    assert main(["train", "--backend", "threads", "--dataset", "digits", "--model", "mlp",
                 "--workers", "2", "--steps", "4", "--quiet", "--out", str(run)]) == 0
    capsys.readouterr()
    saved = read_toml(run / "config.toml")
    assert saved["dry_run"] is False
    before = sorted(str(p) for p in run.rglob("*"))
    monkeypatch.setattr(lsgd, "simulate", lambda *a, **k: pytest.fail("a worker started"))
    code, printed, err = _dry_run(["--resume", str(run), "--steps", "8"], capsys)
    assert code == 0, err
    resolved = tomllib.loads(printed)
    assert (resolved["resume"], resolved["steps"], resolved["workers"]) == (str(run), 8, 2)
    assert sorted(str(p) for p in run.rglob("*")) == before
    code, _, err = _dry_run(["--resume", str(run), "--workers", "4"], capsys)
    assert code == 2 and "trained with --workers 2" in err
