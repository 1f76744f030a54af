"""Datasets (IDX, CIFAR, image folders, synthetic), shards and batched augmentation."""

from __future__ import annotations

import gzip
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lsgd import augment
from lsgd.data import (
    CIFAR100_MEAN,
    CIFAR100_STD,
    CIFAR_MEAN,
    CIFAR_NORMALIZATION,
    CIFAR_STD,
    DATASETS,
    IMAGENET_MEAN,
    IMAGENET_STD,
    Dataset,
    ImageFolder,
    cifar,
    digits,
    fashion_mnist,
    load_dataset,
    random_resized_crop_params,
    read_idx,
    shard,
    synthetic,
)

FASHION = Path("/usr/share/datasets/fashion-mnist")


# --------------------------------------------------------------------------- IDX


def _idx_bytes(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(d.to_bytes(4, "big") for d in array.shape)
    return header + array.astype(np.uint8).tobytes()


@pytest.mark.parametrize("gz", [False, True])
def test_read_idx_plain_and_gzipped(tmp_path: Path, gz: bool) -> None:
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4) * 7
    labels = np.array([3, 0, 9, 1, 1], dtype=np.uint8)
    for name, array in (("images", images), ("labels", labels)):
        path = tmp_path / (name + (".gz" if gz else ""))
        with (gzip.open if gz else open)(path, "wb") as f:  # type: ignore[operator]
            f.write(_idx_bytes(array))
        got = read_idx(path)
        assert got.shape == array.shape and got.dtype == np.uint8
        np.testing.assert_array_equal(got, array)
    assert read_idx(tmp_path / ("images" + (".gz" if gz else "")))[1, 2, 3] == 23 * 7


def test_read_idx_rejects_other_magic(tmp_path: Path) -> None:
    path = tmp_path / "floats"
    path.write_bytes(bytes([0, 0, 0x0D, 1, 0, 0, 0, 1]) + b"\0\0\0\0")
    with pytest.raises(ValueError, match="unsigned-byte IDX"):
        read_idx(path)


@pytest.mark.skipif(not FASHION.is_dir(), reason="Fashion-MNIST not installed")
def test_fashion_mnist_shapes_and_labels() -> None:
    data = fashion_mnist(FASHION)
    assert data.train_x.shape == (60000, 1, 28, 28) and data.test_x.shape == (10000, 1, 28, 28)
    assert data.train_x.dtype == torch.float32 and data.train_y.dtype == torch.int64
    assert data.classes == 10 and data.input_shape == (1, 28, 28)
    assert torch.bincount(data.train_y).tolist() == [6000] * 10
    assert torch.bincount(data.test_y).tolist() == [1000] * 10
    assert abs(float(data.train_x.mean())) < 1e-3 and abs(float(data.train_x.std()) - 1) < 1e-3
    assert data.augment == "fashion"


def test_dataset_keeps_its_positional_form() -> None:
    x, y = torch.zeros(4, 1, 2, 2), torch.tensor([0, 2, 1, 2])
    data = Dataset("tiny", x, y, x, y)
    assert data.classes == 3 and data.input_shape == (1, 2, 2) and data.augment == "none"
    assert Dataset("tiny", x, y, x, y, num_classes=10).classes == 10


def test_digits() -> None:
    data = digits()
    assert data.train_x.shape[1:] == (1, 8, 8) and len(data.train_y) + len(data.test_y) == 1797
    assert data.classes == 10


# --------------------------------------------------------------------------- CIFAR


def _cifar_batch(n: int, seed: int, label_keys: tuple[str, ...]) -> dict[bytes, object]:
    rng = np.random.default_rng(seed)
    batch: dict[bytes, object] = {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                                  b"batch_label": b"fake"}
    for key in label_keys:
        batch[key.encode()] = [int(v) for v in rng.integers(0, 10, n)]
    return batch


def _dump(path: Path, obj: object) -> None:
    with open(path, "wb") as f:
        pickle.dump(obj, f)


def _fake_cifar10(parent: Path) -> tuple[Path, list[dict[bytes, object]], dict[bytes, object]]:
    folder = parent / "cifar-10-batches-py"
    folder.mkdir()
    batches = [_cifar_batch(3, i, ("labels",)) for i in range(5)]
    # hand-set pixels: image 0 of batch 1, red (0, 0) = 255, green (1, 2) = 51, blue (31, 31) = 0
    data = batches[0][b"data"]
    data[0, 0] = 255  # type: ignore[index]
    data[0, 1024 + 32 * 1 + 2] = 51  # type: ignore[index]
    data[0, 2048 + 32 * 31 + 31] = 0  # type: ignore[index]
    for i, batch in enumerate(batches, 1):
        _dump(folder / f"data_batch_{i}", batch)
    test = _cifar_batch(2, 99, ("labels",))
    _dump(folder / "test_batch", test)
    _dump(folder / "batches.meta", {b"label_names": [f"c{i}".encode() for i in range(10)],
                                    b"num_cases_per_batch": 3, b"num_vis": 3072})
    return folder, batches, test


def test_cifar10_reader_and_normalization(tmp_path: Path) -> None:
    folder, batches, test = _fake_cifar10(tmp_path)
    for root in (tmp_path, folder):  # the parent or the folder itself
        data = cifar(root, 10)
        assert data.name == "cifar10" and data.classes == 10 and data.augment == "cifar-28"
        assert data.train_x.shape == (15, 3, 32, 32) and data.test_x.shape == (2, 3, 32, 32)
        assert data.train_x.dtype == torch.float32
        assert data.train_y.tolist() == [v for b in batches for v in b[b"labels"]]  # type: ignore[attr-defined]
        assert data.test_y.tolist() == test[b"labels"]
    x = data.train_x
    # by hand: (255/255 - 0.4914) / 0.2023, (51/255 - 0.4822) / 0.1994, (0 - 0.4465) / 0.2010
    assert x[0, 0, 0, 0].item() == pytest.approx(2.514088, abs=1e-5)
    assert x[0, 1, 1, 2].item() == pytest.approx(-1.415246, abs=1e-5)
    assert x[0, 2, 31, 31].item() == pytest.approx(-2.221393, abs=1e-5)
    # every pixel: channel-major rows of 1024, then rows of 32
    raw = torch.from_numpy(np.concatenate([b[b"data"] for b in batches]).reshape(15, 3, 32, 32))  # type: ignore[misc]
    mean = torch.tensor(CIFAR_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(CIFAR_STD).view(1, 3, 1, 1)
    torch.testing.assert_close(x, (raw / 255.0 - mean) / std)


def test_cifar100_reader_uses_fine_labels(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    train = _cifar_batch(4, 1, ("fine_labels", "coarse_labels"))
    train[b"fine_labels"] = [99, 0, 57, 12]
    train[b"coarse_labels"] = [19, 0, 3, 5]
    test = _cifar_batch(2, 2, ("fine_labels", "coarse_labels"))
    test[b"fine_labels"] = [42, 7]
    train[b"data"][1, :] = 128  # type: ignore[index]
    _dump(folder / "train", train)
    _dump(folder / "test", test)
    _dump(folder / "meta", {b"fine_label_names": [b"f"] * 100, b"coarse_label_names": [b"c"] * 20})
    data = load_dataset("cifar100", tmp_path)
    assert isinstance(data, Dataset) and data.name == "cifar100"
    assert data.classes == 100
    assert data.train_y.tolist() == [99, 0, 57, 12] and data.test_y.tolist() == [42, 7]
    assert data.train_x.shape == (4, 3, 32, 32) and data.test_x.shape == (2, 3, 32, 32)
    # 128/255 = 0.50196: by hand (0.50196 - mean) / std per channel, with CIFAR-100's
    # own mean (0.5071, 0.4865, 0.4409) and std (0.2673, 0.2564, 0.2762)
    expected = [-0.019226, 0.060299, 0.221075]
    for c in range(3):
        assert torch.allclose(data.train_x[1, c], torch.tensor(expected[c]), atol=1e-4)
    # every pixel, train and test, with CIFAR-100's constants (not CIFAR-10's)
    mean = torch.tensor(CIFAR100_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(CIFAR100_STD).view(1, 3, 1, 1)
    for x, raw in ((data.train_x, train), (data.test_x, test)):
        pixels = torch.from_numpy(raw[b"data"].reshape(-1, 3, 32, 32))  # type: ignore[union-attr]
        torch.testing.assert_close(x, (pixels / 255.0 - mean) / std)


def test_cifar_normalization_constants() -> None:
    # CIFAR-10 keeps the papers' values; CIFAR-100 has its own training-set statistics.
    assert CIFAR_MEAN == (0.4914, 0.4822, 0.4465) and CIFAR_STD == (0.2023, 0.1994, 0.2010)
    assert CIFAR100_MEAN == (0.5071, 0.4865, 0.4409)
    assert CIFAR100_STD == (0.2673, 0.2564, 0.2762)
    assert CIFAR_NORMALIZATION == {10: (CIFAR_MEAN, CIFAR_STD),
                                   100: (CIFAR100_MEAN, CIFAR100_STD)}


def test_missing_cifar_names_the_expected_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as info:
        cifar(tmp_path, 10)
    message = str(info.value)
    for name in ("data_batch_1", "data_batch_5", "test_batch", "batches.meta",
                 "cifar-10-batches-py", "cifar-10-python.tar.gz", "--data-dir", str(tmp_path)):
        assert name in message
    assert "cannot be downloaded" in message
    with pytest.raises(FileNotFoundError) as info:
        cifar(tmp_path, 100)
    for name in ("train", "test", "meta", "cifar-100-python.tar.gz"):
        assert name in str(info.value)
    # an incomplete folder is missing too
    folder, _, _ = _fake_cifar10(tmp_path)
    (folder / "data_batch_5").unlink()
    with pytest.raises(FileNotFoundError, match="data_batch_5"):
        cifar(folder, 10)
    with pytest.raises(ValueError):
        cifar(folder, 20)


# --------------------------------------------------------------------------- registry


def test_load_dataset_registry(tmp_path: Path) -> None:
    assert set(DATASETS) == {"fashion-mnist", "cifar10", "cifar100", "imagenet", "digits", "synthetic",
                             "kjv", "text"}
    with pytest.raises(ValueError) as info:
        load_dataset("mnist")
    for name in DATASETS:
        assert name in str(info.value)
    _fake_cifar10(tmp_path)
    assert load_dataset("cifar10", tmp_path).train_x.shape == (15, 3, 32, 32)  # type: ignore[union-attr]
    assert load_dataset("digits").classes == 10
    syn = load_dataset("synthetic")
    assert isinstance(syn, Dataset) and syn.train_x.shape == (2048, 1, 28, 28)


# --------------------------------------------------------------------------- shards


@pytest.mark.parametrize("n", [7, 100, 1000])
@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
def test_shards_are_disjoint_and_complete(n: int, world: int) -> None:
    parts = [shard(n, rank, world, epoch=0, seed=5) for rank in range(world)]
    per = n // world
    assert all(len(p) == per for p in parts)
    union = torch.cat(parts)
    assert len(set(union.tolist())) == world * per  # disjoint
    dropped = set(range(n)) - set(union.tolist())
    assert len(dropped) == n % world  # only the drop-last remainder is missing
    assert set(union.tolist()) | dropped == set(range(n))


def test_shards_reshuffle_across_epochs_and_repeat_per_seed() -> None:
    a0, a1 = shard(1000, 1, 4, epoch=0), shard(1000, 1, 4, epoch=1)
    assert not torch.equal(a0, a1)
    assert len(set(a0.tolist()) & set(a1.tolist())) < 150  # ~250/4 expected overlap
    assert torch.equal(a0, shard(1000, 1, 4, epoch=0))
    assert not torch.equal(a0, shard(1000, 1, 4, epoch=0, seed=1))


# --------------------------------------------------------------------------- augmentation


def _batch(b: int = 6, c: int = 3, h: int = 32, w: int = 32) -> torch.Tensor:
    return torch.arange(b * c * h * w, dtype=torch.float32).view(b, c, h, w)


def test_random_crop_is_exactly_the_drawn_window() -> None:
    x = _batch()
    out = augment.random_crop(x, 28, generator=torch.Generator().manual_seed(3))
    assert out.shape == (6, 3, 28, 28)
    g = torch.Generator().manual_seed(3)
    top, left = torch.randint(5, (6,), generator=g), torch.randint(5, (6,), generator=g)
    assert len(set(zip(top.tolist(), left.tolist()))) > 1
    for i in range(6):
        t, l = int(top[i]), int(left[i])
        assert torch.equal(out[i], x[i, :, t : t + 28, l : l + 28])
    # rectangular windows too
    out = augment.random_crop(x, (10, 20), generator=torch.Generator().manual_seed(4))
    g = torch.Generator().manual_seed(4)
    top, left = torch.randint(23, (6,), generator=g), torch.randint(13, (6,), generator=g)
    t, l = int(top[2]), int(left[2])
    assert torch.equal(out[2], x[2, :, t : t + 10, l : l + 20])


def test_random_crop_with_padding_matches_pad_then_slice() -> None:
    x = _batch()
    fill = (-1.0, -2.0, -3.0)
    out = augment.random_crop(x, 32, padding=4, generator=torch.Generator().manual_seed(0), fill=fill)
    assert out.shape == (6, 3, 32, 32)
    padded = augment.pad(x, 4, fill)
    assert padded.shape == (6, 3, 40, 40)
    assert padded[0, 2, 0, 0] == -3.0 and torch.equal(padded[:, :, 4:36, 4:36], x)
    g = torch.Generator().manual_seed(0)
    top, left = torch.randint(9, (6,), generator=g), torch.randint(9, (6,), generator=g)
    for i in range(6):
        t, l = int(top[i]), int(left[i])
        assert torch.equal(out[i], padded[i, :, t : t + 32, l : l + 32])
    assert torch.equal(augment.pad(x, 2, 0.5), F.pad(x, (2, 2, 2, 2), value=0.5))


def test_center_crop() -> None:
    x = _batch()
    assert torch.equal(augment.center_crop(x, 28), x[:, :, 2:30, 2:30])
    assert torch.equal(augment.center_crop(x, (3, 7)), x[:, :, 14:17, 12:19])
    with pytest.raises(ValueError):
        augment.center_crop(x, 33)


def test_flips_are_exact_mirror_images() -> None:
    x = _batch(b=64)
    assert torch.equal(augment.random_flip(x, p=1.0), x.flip(-1))
    assert torch.equal(augment.random_flip(x, p=0.0), x)
    out = augment.random_flip(x, generator=torch.Generator().manual_seed(1))
    flipped = torch.rand(64, generator=torch.Generator().manual_seed(1)) < 0.5
    assert 10 < int(flipped.sum()) < 54
    for i in range(64):
        if flipped[i]:
            for j in range(32):
                assert torch.equal(out[i, :, :, j], x[i, :, :, 31 - j])
        else:
            assert torch.equal(out[i], x[i])


def test_fused_crop_and_flip_equals_the_two_steps() -> None:
    x = torch.randn(32, 3, 32, 32)
    for padding in (0, 4):
        g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
        fused = augment.random_crop(x, 28, padding=padding, generator=g1, flip=0.5)
        two = augment.random_flip(augment.random_crop(x, 28, padding=padding, generator=g2), generator=g2)
        assert torch.equal(fused, two)


def test_same_seed_same_batch() -> None:
    x = torch.randn(16, 3, 32, 32)
    for name in ("cifar-28", "cifar-32-pad", "fashion-crop"):
        f = augment.train_transform(name)
        a = f(x, generator=torch.Generator().manual_seed(11))
        b = f(x, generator=torch.Generator().manual_seed(11))
        c = f(x, generator=torch.Generator().manual_seed(12))
        assert torch.equal(a, b) and not torch.equal(a, c)
    g = torch.Generator().manual_seed(0)  # a stream: consecutive batches differ
    f = augment.train_transform("cifar-28")
    assert not torch.equal(f(x, generator=g), f(x, generator=g))


def test_presets() -> None:
    x = torch.randn(8, 3, 32, 32)
    g = torch.Generator().manual_seed(0)
    assert augment.train_transform("cifar-28")(x, generator=g).shape == (8, 3, 28, 28)
    assert torch.equal(augment.test_transform("cifar-28")(x), x[:, :, 2:30, 2:30])
    vgg = augment.train_transform("cifar-32-pad")(x, generator=g)
    assert vgg.shape == (8, 3, 32, 32)
    black = torch.tensor(augment.CIFAR_BLACK).view(3, 1, 1)
    assert torch.allclose(black.flatten(), -torch.tensor(CIFAR_MEAN) / torch.tensor(CIFAR_STD))
    border = (vgg == black).all(dim=1)  # pixels from the padding are black in all channels
    assert border.any() and not border.all()
    assert torch.equal(augment.test_transform("cifar-32-pad")(x), x)
    # CIFAR-100's black: its own mean and std, not CIFAR-10's.
    vgg100 = augment.train_transform("cifar100-32-pad")(torch.ones(8, 3, 32, 32), generator=g)
    black100 = torch.tensor(augment.CIFAR100_BLACK).view(3, 1, 1)
    assert torch.allclose(black100.flatten(),
                          -torch.tensor(CIFAR100_MEAN) / torch.tensor(CIFAR100_STD))
    assert (vgg100 == black100).all(dim=1).any() and not torch.equal(black100, black)
    f = torch.randn(8, 1, 28, 28)
    assert torch.equal(augment.train_transform("fashion")(f, generator=g), f)
    assert augment.train_transform("fashion-crop")(f, generator=g).shape == (8, 1, 28, 28)
    assert torch.equal(augment.train_transform("none")(f), f)
    assert augment.test_transform("cifar-28")(torch.zeros(1, 3, 32, 32)).shape == (1, 3, 28, 28)
    assert augment.test_transform("cifar-32-pad")(torch.zeros(1, 3, 32, 32)).shape == (1, 3, 32, 32)
    with pytest.raises(ValueError) as info:
        augment.train_transform("autoaugment")
    assert all(name in str(info.value) for name in augment.PRESETS)
    assert augment.paper_preset("cifar10", "cnn7") == "cifar-28"
    assert augment.paper_preset("cifar100", "resnet20") == "cifar-28"
    assert augment.paper_preset("cifar10", "vgg16") == "cifar-32-pad"
    assert augment.paper_preset("cifar100", "vgg16") == "cifar100-32-pad"
    assert augment.paper_preset("fashion-mnist") == "fashion"
    assert augment.paper_preset("synthetic") == "none"


# --------------------------------------------------------------------------- synthetic


def test_synthetic_is_deterministic_balanced_and_learnable() -> None:
    data = synthetic(seed=0)
    assert data.train_x.shape == (2048, 1, 28, 28) and data.test_x.shape == (512, 1, 28, 28)
    assert data.classes == 10 and torch.bincount(data.train_y).min() >= 204
    assert torch.equal(synthetic(seed=0).train_x, data.train_x)
    assert not torch.equal(synthetic(seed=1).train_x, data.train_x)
    assert 0.9 < float(data.train_x.std()) < 1.1
    assert synthetic(100, 20, shape=(3, 32, 32), classes=5).train_x.shape == (100, 3, 32, 32)
    assert synthetic(100, 20, shape=(16,)).train_x.shape == (100, 16)
    # 50 full-batch gradient steps of a linear model: well above chance (10%); bar 80%
    torch.manual_seed(0)
    model = torch.nn.Linear(28 * 28, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(50):
        opt.zero_grad()
        F.cross_entropy(model(data.train_x.flatten(1)), data.train_y).backward()
        opt.step()
    with torch.no_grad():
        accuracy = (model(data.test_x.flatten(1)).argmax(1) == data.test_y).float().mean().item()
    assert accuracy > 0.8


# --------------------------------------------------------------------------- image folders


def _image_folder(root: Path) -> None:
    Image = pytest.importorskip("PIL.Image")
    ramp = np.tile(np.linspace(0, 255, 48).astype(np.uint8), (40, 1))  # 40 x 48, brighter to the right
    for split, count in (("train", 3), ("val", 2)):
        for c, name in enumerate(("n01_cat", "n02_dog")):
            (root / split / name).mkdir(parents=True)
            for k in range(count):
                rgb = np.stack([ramp, ramp // 2, np.full_like(ramp, 80 * c)], axis=-1)
                ext = ".JPEG" if (split, k) == ("train", 2) else ".png"
                Image.fromarray(rgb).save(root / split / name / f"img{k}{ext}")
    (root / "train" / "n01_cat" / "notes.txt").write_text("not an image")


def test_image_folder_listing_and_eval_transform(tmp_path: Path) -> None:
    _image_folder(tmp_path)
    folder = load_dataset("imagenet", tmp_path)
    assert isinstance(folder, ImageFolder)
    folder = ImageFolder(tmp_path, size=16, resize=40)
    assert len(folder) == 6 and folder.num_samples(train=False) == 4
    assert folder.classes == 2 and folder.class_names == ["n01_cat", "n02_dog"]
    assert folder.train_y.tolist() == [0, 0, 0, 1, 1, 1] and folder.test_y.tolist() == [0, 0, 1, 1]
    assert folder.input_shape == (3, 16, 16)
    x, y = folder.load([0, 3], train=False)
    assert x.shape == (2, 3, 16, 16) and x.dtype == torch.float32 and y.tolist() == [0, 1]
    # shorter side already 40: no resampling; center 16 crop of 40 x 48 is rows 12:28, cols 16:32
    ramp = np.tile(np.linspace(0, 255, 48).astype(np.uint8), (40, 1))
    window = torch.from_numpy(ramp[12:28, 16:32].astype(np.float32)) / 255.0
    mean, std = IMAGENET_MEAN, IMAGENET_STD
    torch.testing.assert_close(x[0, 0], (window - mean[0]) / std[0])
    torch.testing.assert_close(x[0, 1], (torch.floor(window * 255 / 2) / 255 - mean[1]) / std[1])
    assert x[1, 2].allclose(torch.tensor((80 / 255 - mean[2]) / std[2]))
    assert x[0, 2].allclose(torch.tensor((0 - mean[2]) / std[2]))


def test_image_folder_train_transform(tmp_path: Path) -> None:
    _image_folder(tmp_path)
    folder = ImageFolder(tmp_path, size=16, resize=20)
    idx = torch.tensor([0, 1, 2, 3, 4, 5] * 4)
    x, y = folder.load(idx, train=True, generator=torch.Generator().manual_seed(0))
    assert x.shape == (24, 3, 16, 16) and y.tolist() == [0, 0, 0, 1, 1, 1] * 4
    again, _ = folder.load(idx, train=True, generator=torch.Generator().manual_seed(0))
    assert torch.equal(x, again)
    threaded = ImageFolder(tmp_path, size=16, resize=20, threads=2)
    assert torch.equal(threaded.load(idx, True, torch.Generator().manual_seed(0))[0], x)
    other, _ = folder.load(idx, train=True, generator=torch.Generator().manual_seed(1))
    assert not torch.equal(x, other)
    # the ramp rises to the right; flipped crops fall: both directions occur
    slope = (x[:, 0, :, -1] - x[:, 0, :, 0]).mean(dim=1)
    assert (slope > 0).any() and (slope < 0).any()


def test_random_resized_crop_params() -> None:
    rng = np.random.default_rng(0)
    areas = []
    for _ in range(200):
        top, left, h, w = random_resized_crop_params(60, 80, rng.random(23).tolist())
        assert 0 <= top <= 60 - h and 0 <= left <= 80 - w and h > 0 and w > 0
        areas.append(h * w / 4800)
        assert 3 / 4 - 0.1 < w / h < 4 / 3 + 0.1 or h == 60 or w == 80
    assert min(areas) < 0.2 and max(areas) > 0.7
    # an image no try fits falls back to the central crop clamped to aspect 4/3
    assert random_resized_crop_params(1, 100, [0.5] * 23) == (0, 49, 1, 1)


def test_image_folder_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("PIL")
    with pytest.raises(FileNotFoundError, match="train/<class>"):
        ImageFolder(tmp_path)
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(ImportError, match=r"pip install 'lsgd\[imagenet\]'"):
        ImageFolder(tmp_path)
