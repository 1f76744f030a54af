"""Fashion-MNIST from its IDX files, and scikit-learn's bundled 8x8 digits."""

from __future__ import annotations

import gzip
import importlib.util
import os
from pathlib import Path

import numpy as np

from lsgd.data.dataset import Dataset, _normalized

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
#: The IDX files: the training images and labels, then the test images and labels.
FASHION_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                 "t10k-labels-idx1-ubyte")


def read_idx(path: Path) -> np.ndarray:
    """Read one IDX file (the MNIST format), gzipped or plain."""
    path = Path(path)
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
    if root is not None:
        candidates = [Path(root), Path(root) / "fashion-mnist"]
    elif os.environ.get("LSGD_DATA"):
        candidates = [Path(os.environ["LSGD_DATA"], "fashion-mnist"), Path(os.environ["LSGD_DATA"])]
    else:
        candidates = [DEBIAN_FASHION_MNIST]
    for folder in candidates:
        if all(_find(folder, stem) for stem in FASHION_FILES):
            return folder
    expected = ", ".join(f"{stem}[.gz]" for stem in FASHION_FILES)
    looked = ", ".join(str(c) for c in candidates)
    raise FileNotFoundError(f"Fashion-MNIST not found in {looked}: expected the files "
                            f"{expected}. Install them with 'sudo apt-get install "
                            f"dataset-fashion-mnist' (into {DEBIAN_FASHION_MNIST}), or point "
                            "--data-dir / $LSGD_DATA at a folder holding them.")


def _find(folder: Path, stem: str) -> Path | None:
    return next((folder / name for name in (stem + ".gz", stem) if (folder / name).is_file()),
                None)


def fashion_mnist(root: str | os.PathLike[str] | None = None) -> Dataset:
    """Fashion-MNIST: 60,000 training and 10,000 test images of 28x28, 10 classes."""
    folder = fashion_mnist_dir(root)
    train_x, train_y, test_x, test_y = (read_idx(_find(folder, stem))  # type: ignore[arg-type]
                                        for stem in FASHION_FILES)
    return _normalized("fashion-mnist", train_x[:, None], train_y, test_x[:, None], test_y,
                       augment="fashion", num_classes=10)


def digits(test_fraction: float = 0.25, seed: int = 0) -> Dataset:
    """scikit-learn's 1,797 8x8 digits, split at random (fixed ``seed``), read from the
    copy scikit-learn ships without importing it (a second or two in every worker)."""
    spec = importlib.util.find_spec("sklearn")
    path = Path(next(iter(spec.submodule_search_locations or ())) if spec else "",
                "datasets", "data", "digits.csv.gz")
    if spec is None or not path.is_file():
        raise ImportError("the digits come from scikit-learn's bundled copy: pip install "
                          "scikit-learn")
    table = np.loadtxt(path, delimiter=",", dtype=np.float32)
    images, labels = table[:, :-1].reshape(-1, 1, 8, 8), table[:, -1].astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(images))
    cut = int(len(images) * (1 - test_fraction))
    train, test = order[:cut], order[cut:]
    return _normalized("digits", images[train], labels[train], images[test], labels[test],
                       num_classes=10)
