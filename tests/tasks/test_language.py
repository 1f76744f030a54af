"""Language modelling: byte tokens from a text, their shards, the transformer, the task."""

from __future__ import annotations

import importlib.util
import math
import shutil
from pathlib import Path

import pytest

from lsgd.method_options import OPTIONS
import torch

from lsgd.data import text as texts
from lsgd.data.text import TextData, split_chapters, split_tail, text_shard, windows
from lsgd.models.gpt import GPT, count_parameters
from lsgd.tasks import ImageClassification, LanguageModelling, bits_per_byte, perplexity

HAVE_BIBLE = shutil.which("bible") is not None or texts.kjv_cached()
VERSE = "And God said, Let there be light: and there was light.\n"


def _corpus(n: int = 20_000, valid: int = 2_000) -> TextData:
    g = torch.Generator().manual_seed(0)
    return TextData("t", torch.randint(0, 256, (n,), generator=g, dtype=torch.uint8),
                    torch.randint(0, 256, (valid,), generator=g, dtype=torch.uint8),
                    "test", "generated")


# ---------------------------------------------------------------------------- the model
@pytest.mark.parametrize("at", [0, 5, 30])
def test_a_later_token_leaves_the_earlier_logits_unchanged(at: int) -> None:
    torch.manual_seed(0)
    model = GPT(vocab=256, context=32, layers=2, width=32, heads=4).eval()
    tokens = torch.randint(0, 256, (2, 32))
    changed = tokens.clone()
    changed[:, at + 1] = (changed[:, at + 1] + 7) % 256
    with torch.no_grad():
        before, after = model(tokens), model(changed)
    assert torch.equal(before[:, :at + 1], after[:, :at + 1])  # causal: bit for bit
    assert not torch.allclose(before[:, at + 1], after[:, at + 1])  # the changed one moved


def test_the_gpt_is_initialised_as_gpt2_and_ties_its_embedding() -> None:
    torch.manual_seed(0)
    layers, width = 8, 256
    model = GPT(vocab=256, context=64, layers=layers, width=width, heads=8)
    assert [k for k in model.state_dict() if "tokens" in k] == ["tokens.weight"]  # one matrix
    per_block = 2 * 2 * width + (3 * width * width + 3 * width) + (width * width + width) \
        + 2 * (4 * width * width) + 4 * width + width
    assert count_parameters(model) == 256 * width + 64 * width + layers * per_block + 2 * width
    std = model.blocks[0].qkv.weight.std().item()
    assert std == pytest.approx(0.02, rel=0.05)
    assert model.blocks[0].proj.weight.std().item() == pytest.approx(0.02 / math.sqrt(16),
                                                                      rel=0.05)
    assert float(model.blocks[0].qkv.bias.detach().abs().max()) == 0.0


def test_a_sequence_longer_than_the_context_is_refused() -> None:
    model = GPT(context=8, layers=1, width=16, heads=2)
    with pytest.raises(ValueError, match="more than its context of 8"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="heads=3 must divide width=16"):
        GPT(width=16, heads=3)


# ---------------------------------------------------------------------------- the data
@pytest.mark.parametrize("n,world", [(10, 3), (4_088_107, 4), (7, 7), (1000, 12)])
def test_the_text_shards_are_exclusive_and_cover_every_byte(n: int, world: int) -> None:
    bounds = [text_shard(n, r, world) for r in range(world)]
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))  # contiguous, no overlap
    sizes = [stop - start for start, stop in bounds]
    assert max(sizes) - min(sizes) <= 1


def test_a_worker_reads_windows_of_its_own_shard_only() -> None:
    data = _corpus()
    task = LanguageModelling(data, context=16, layers=1, width=16, heads=2, batch_size=64,
                             workers=3)
    g = torch.Generator().manual_seed(1)
    for rank in range(3):
        start, stop = task.shard(rank, 3)
        for index in range(20):
            x, y = task.train_batch(rank, 3, 0, index, g)
            assert x.shape == y.shape == (64, 16) and x.dtype == torch.long
            assert torch.equal(x[:, 1:], y[:, :-1])  # y is x shifted by one byte
            shard = data.train[start:stop].long()
            for row_x, row_y in zip(x, y):
                found = [s for s in range(len(shard) - 16)
                         if torch.equal(shard[s:s + 16], row_x) and shard[s + 16] == row_y[-1]]
                assert found, "every window lies inside the worker's shard"
            break  # one batch per worker is enough for the search above


def test_windows_are_the_next_bytes() -> None:
    data = torch.arange(100, dtype=torch.uint8)
    x, y = windows(data, torch.tensor([0, 50]), 4)
    assert x.tolist() == [[0, 1, 2, 3], [50, 51, 52, 53]]
    assert y.tolist() == [[1, 2, 3, 4], [51, 52, 53, 54]]


def test_the_evaluation_windows_are_spread_and_split_among_workers() -> None:
    task = LanguageModelling(_corpus(valid=5_000), context=50, layers=1, width=16, heads=2,
                             eval_tokens=1_000)
    starts = task.eval_starts
    assert len(starts) == 20 and starts[0] == 0 and starts[-1] == 5_000 - 51
    parts = [torch.cat([x for x, _ in task.eval_batches(p, 3)]) for p in range(3)]
    assert sum(len(p) for p in parts) == 20
    whole = LanguageModelling(_corpus(valid=5_000), context=50, layers=1, width=16, heads=2,
                              eval_tokens=0)
    assert len(whole.eval_starts) == (5_000 - 51) // 50 + 1  # every non-overlapping window


def test_the_bible_splits_every_twentieth_chapter() -> None:
    chapters = "".join(f"\nBook {i}\n\n  1 Verse {i}.\n" for i in range(1, 61))
    train, valid = split_chapters(chapters)
    assert valid.count("\nBook ") == 3 and "Book 20\n" in valid and "Book 40\n" in valid
    assert train.count("\nBook ") == 57 and "Book 20\n" not in train
    assert len(train) + len(valid) == len(chapters)


@pytest.mark.skipif(not HAVE_BIBLE, reason="Debian's bible-kjv is not installed")
def test_the_king_james_bible_is_read_split_and_cached(tmp_path: Path) -> None:
    data = texts.kjv(tmp_path)
    assert (tmp_path / "kjv.txt").stat().st_size > 4_000_000
    total = len(data.train) + len(data.valid)
    assert 0.04 < len(data.valid) / total < 0.06  # 59 chapters of 1,189
    assert bytes(data.valid[:12].tolist()) == b"\nGenesis 20\n"
    assert texts.kjv(tmp_path).valid.equal(data.valid)  # read back from the cache


def test_a_users_text_holds_out_its_last_lines(tmp_path: Path) -> None:
    (tmp_path / "b.txt").write_text(VERSE * 30)
    (tmp_path / "a.txt").write_text("First file.\n" * 10)
    data = texts.user_text(tmp_path)
    whole = "First file.\n" * 10 + "\n" + VERSE * 30
    joined = bytes(data.train.tolist() + data.valid.tolist()).decode()
    assert joined == whole  # files in the order of their paths, joined by newlines
    assert bytes(data.valid.tolist()).decode().startswith("And God")  # from a line's start
    train, valid = split_tail("x" * 100)  # one line: cut where the share falls
    assert len(valid) == 5 and train + valid == "x" * 100


def test_a_missing_bible_program_names_the_package(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    monkeypatch.setattr(texts.shutil, "which", lambda name: None)
    with pytest.raises(FileNotFoundError, match="apt-get install bible-kjv"):
        texts.kjv(tmp_path)


# ---------------------------------------------------------------------------- the task
def test_both_tasks_evaluate_through_the_same_sums() -> None:
    task = LanguageModelling(_corpus(), context=16, layers=1, width=16, heads=2,
                             eval_tokens=320)
    torch.manual_seed(0)
    model = task.build_model()
    sums = task.evaluate(model)
    assert sums.count == 320  # 20 windows of 16 predictions
    assert sums.loss / sums.count == pytest.approx(math.log(256), abs=0.05)  # untrained
    row = task.columns("center", 2.0, 0.5)
    assert row["center_bits_per_byte"] == pytest.approx(2 / math.log(2))
    assert row["center_perplexity"] == pytest.approx(math.exp(2))
    assert task.metric == "loss" and task.column == "center_loss" and not task.higher_is_better
    assert bits_per_byte(math.log(2)) == 1.0 and perplexity(1e6) == math.inf
    assert math.isnan(perplexity(math.nan))  # nothing evaluated: no perplexity either


def test_the_image_task_reads_the_shards_it_read_before() -> None:
    from lsgd.data import digits, shard

    data = digits()
    task = ImageClassification(data, dataset="digits", model="mlp", batch_size=32, workers=2)
    g = torch.Generator()
    x, y = task.train_batch(1, 2, 3, 4, g)
    idx = shard(len(data.train_y), 1, 2, 3, 0)[4 * 32:5 * 32]
    assert torch.equal(y, data.train_y[idx])
    assert task.metric == "accuracy" and task.higher_is_better
    assert task.steps_per_epoch == len(data.train_y) // 2 // 32


# ---------------------------------------------------------------------------- lsgd train
TINY = ["--model", "gpt", "--context", "32", "--layers", "1", "--width", "32", "--heads", "2",
        "--batch-size", "8", "--eval-tokens", "4096", "--quiet"]


def _text_file(tmp_path: Path) -> Path:
    path = tmp_path / "psalms.txt"
    path.write_text("".join(f"{i} Praise ye the LORD. Praise ye the LORD from the heavens: "
                            "praise him in the heights.\n" for i in range(600)))
    return path


def test_lsgd_train_learns_a_users_text_and_writes_the_run(tmp_path: Path) -> None:
    from lsgd.cli import main

    out = tmp_path / "run"
    code = main(["train", "--dataset", "text", "--data-dir", str(_text_file(tmp_path)), *TINY,
                 "--method", "diloco", "--period", "8", "--workers", "2", "--backend", "threads",
                 "--steps", "120", "--eval-every", "40", "--lr", "0.003", "--out", str(out)])
    assert code == 0
    import json

    summary = json.loads((out / "summary.json").read_text())
    assert summary["task"] == "language" and summary["metric"] == "loss"
    # ln 256 = 5.55 nats untrained; this repetitive text falls below 1.5 in 120 steps.
    assert summary["validation_loss"] < 1.5, summary["validation_loss"]
    assert summary["bits_per_byte"] == pytest.approx(summary["validation_loss"] / math.log(2))
    assert summary["perplexity"] == pytest.approx(math.exp(summary["validation_loss"]))
    header = (out / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"center_loss", "center_bits_per_byte", "center_perplexity"} <= set(header)
    assert (out / "validation_loss.png").exists()


def test_a_target_stops_the_run_where_the_center_reaches_it(tmp_path: Path) -> None:
    from lsgd.cli import main
    import json

    out = tmp_path / "run"
    code = main(["train", "--dataset", "text", "--data-dir", str(_text_file(tmp_path)), *TINY,
                 "--method", "allreduce", "--workers", "2", "--backend", "threads",
                 "--steps", "400", "--eval-every", "10", "--lr", "0.003", "--target", "2.5",
                 "--out", str(out)])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    reached = summary["reached_target"]
    assert reached is not None and reached["value"] <= 2.5
    assert summary["steps"] == reached["steps"] < 400  # stopped at that evaluation
    rows = (out / "metrics.csv").read_text().splitlines()[1:]
    assert len(rows) == reached["steps"] // 10


@pytest.mark.slow
@pytest.mark.timeout(420)
@pytest.mark.skipif(not HAVE_BIBLE, reason="Debian's bible-kjv is not installed")
def test_the_gpt_learns_the_bible_on_four_nodes_behind_slow_links(tmp_path: Path) -> None:
    """The command of the language-model issue, shortened (a two-block GPT of width 64,
    64 steps): DiLoCo, 4 nodes, 20 Mbit/s."""
    import json

    from lsgd.cli import main

    out = tmp_path / "run"
    code = main(["train", "--dataset", "kjv", "--model", "gpt", "--layers", "2", "--width", "64",
                 "--context", "64", "--method", "diloco", "--groups", "4", "--link", "20mbit",
                 "--backend", "auto", "--steps", "64", "--lr", "0.003", "--warmup-epochs", "0.05",
                 "--eval-every", "32", "--quiet", "--out", str(out)])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    # 64 steps (about 11 s of training here; a step budget, so that a loaded machine
    # trains as far): well below the untrained 5.55 nats per byte (3.08 here).
    assert summary["validation_loss"] < 3.3, summary["validation_loss"]
    assert summary["workers"] == 4 and summary["link"] == "20mbit"


@pytest.mark.parametrize("method,options", [
    ("lsgd", []), ("lsgd", ["--overlap", "2", "--compress", "int8"]),
    ("lsgd", ["--groups", "2", "--period", "2", "--global-period", "4"]),
    ("easgd", []), ("local-sgd", ["--compress", "bf16"]),
    ("diloco", ["--fragments", "2", "--overlap", "1", "--compress", "int8"]),
    ("allreduce", []), ("sgd", []), ("dpsgd", []), ("matcha", []), ("al-dsgd", []),
], ids=lambda v: v if isinstance(v, str) else "-".join(a.strip("-") for a in v) or "plain")
def test_every_method_trains_the_language_model(method: str, options: list[str],
                                                tmp_path: Path) -> None:
    import json

    from lsgd.cli import main

    if method == "matcha" and importlib.util.find_spec("cvxpy") is None:
        pytest.skip("MATCHA's budget needs cvxpy (pip install 'lsgd[matcha]')")
    out = tmp_path / "run"
    code = main(["train", "--dataset", "text", "--data-dir", str(_text_file(tmp_path)), *TINY,
                 "--method", method, "--workers", "4", "--backend", "threads",
                 *(["--period", "4"] if "period" in OPTIONS[method].__dataclass_fields__ else []),
                 "--steps", "24", "--eval-every", "24", "--lr", "0.003", *options,
                 "--out", str(out)])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["validation_loss"] < 4.5  # from 5.55 (ln 256) in 24 steps
    assert summary["steps"] == 24 and summary["bytes_sent_per_worker"] > 0 or method == "sgd"


def test_lsgd_train_without_the_bible_program_says_how_to_install_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from lsgd.cli import main
    from lsgd.train import build

    monkeypatch.setattr(texts.shutil, "which", lambda name: None)
    monkeypatch.setenv("LSGD_CACHE", str(tmp_path / "empty-cache"))
    build._load.cache_clear()  # the Bible may have been read in this process before
    try:
        code = main(["train", "--dataset", "kjv", "--model", "gpt", "--quiet",
                     "--out", str(tmp_path / "run")])
    finally:
        build._load.cache_clear()
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "sudo apt-get install bible-kjv" in err and "--dataset text" in err


def test_hf_gpt2_without_transformers_names_the_extra(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    from lsgd.cli import main

    monkeypatch.setitem(sys.modules, "transformers", None)  # import fails as if absent
    code = main(["train", "--dataset", "text", "--data-dir", str(_text_file(tmp_path)),
                 "--model", "hf-gpt2", "--quiet", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and "--model hf-gpt2" in err and "pip install 'lsgd[hf]'" in err
