"""Small real datasets as tensors, and exclusive per-worker shards.

* Fashion-MNIST from its IDX files (gzipped or not): the folder given, else
  ``$LSGD_DATA/fashion-mnist`` or ``$LSGD_DATA``, else Debian's
  ``dataset-fashion-mnist`` package folder ``/usr/share/datasets/fashion-mnist``.
* scikit-learn's bundled 8x8 digits (no download needed).

Images come back as float32 ``[N, 1, H, W]`` normalized by the training set's
mean and standard deviation, labels as int64 ``[N]``.
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
FASHION_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


@dataclass
class Dataset:
    """A train/test split held in memory."""

    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor

    @property
    def classes(self) -> int:
        return int(self.train_y.max()) + 1

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train_x.shape[1:])


def read_idx(path: Path) -> np.ndarray:
    """Read one IDX file (the MNIST format), gzipped or plain."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:  # type: ignore[operator]
        data = f.read()
    if data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise ValueError(f"{path} is not an unsigned-byte IDX file (magic {data[:4].hex()})")
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def fashion_mnist_dir(root: str | os.PathLike[str] | None = None) -> Path:
    """Where the Fashion-MNIST files are, or a ``FileNotFoundError`` saying how to get them."""
    candidates: list[Path] = []
    if root is not None:
        candidates.append(Path(root))
    elif os.environ.get("LSGD_DATA"):
        base = Path(os.environ["LSGD_DATA"])
        candidates += [base / "fashion-mnist", base]
    else:
        candidates.append(DEBIAN_FASHION_MNIST)
    for folder in candidates:
        if all(_find(folder, stem) for stem in FASHION_FILES.values()):
            return folder
    expected = ", ".join(f"{stem}[.gz]" for stem in FASHION_FILES.values())
    looked = ", ".join(str(c) for c in candidates)
    raise FileNotFoundError(
        f"Fashion-MNIST not found in {looked}: expected the files {expected}. "
        "Install them with 'sudo apt-get install dataset-fashion-mnist' (into "
        f"{DEBIAN_FASHION_MNIST}), or point --data-dir / $LSGD_DATA at a folder holding them."
    )


def _find(folder: Path, stem: str) -> Path | None:
    for name in (stem + ".gz", stem):
        if (folder / name).is_file():
            return folder / name
    return None


def fashion_mnist(root: str | os.PathLike[str] | None = None) -> Dataset:
    """Fashion-MNIST: 60,000 training and 10,000 test images of 28x28, 10 classes."""
    folder = fashion_mnist_dir(root)
    arrays = {key: read_idx(_find(folder, stem)) for key, stem in FASHION_FILES.items()}  # type: ignore[arg-type]
    return _normalized(
        "fashion-mnist",
        arrays["train_images"][:, None],
        arrays["train_labels"],
        arrays["test_images"][:, None],
        arrays["test_labels"],
    )


def digits(test_fraction: float = 0.25, seed: int = 0) -> Dataset:
    """scikit-learn's 1,797 8x8 digits, split at random (fixed ``seed``)."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = bunch.images.astype(np.float32)[:, None]
    order = np.random.default_rng(seed).permutation(len(images))
    cut = int(len(images) * (1 - test_fraction))
    train, test = order[:cut], order[cut:]
    return _normalized("digits", images[train], bunch.target[train], images[test], bunch.target[test])


def _normalized(name: str, train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray,
                test_y: np.ndarray) -> Dataset:
    tx = torch.from_numpy(np.asarray(train_x, dtype=np.float32))
    vx = torch.from_numpy(np.asarray(test_x, dtype=np.float32))
    mean, std = tx.mean(), tx.std()
    return Dataset(
        name,
        (tx - mean) / std,
        torch.from_numpy(np.asarray(train_y, dtype=np.int64)),
        (vx - mean) / std,
        torch.from_numpy(np.asarray(test_y, dtype=np.int64)),
    )


def shard(n: int, rank: int, world_size: int, epoch: int, seed: int = 0) -> torch.Tensor:
    """This worker's exclusive share of ``range(n)`` for ``epoch``.

    One permutation of all indices per epoch (the same on every worker, from
    ``seed`` and ``epoch``), cut into ``world_size`` equal parts (the remainder
    dropped), like ``DistributedSampler(drop_last=True)``.
    """
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    order = torch.randperm(n, generator=generator)
    per_worker = n // world_size
    return order[rank * per_worker : (rank + 1) * per_worker]
