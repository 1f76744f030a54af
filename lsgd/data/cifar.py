"""CIFAR-10 and CIFAR-100 from their python-pickle folders (never downloaded)."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from lsgd.data.dataset import Dataset, normalize

#: The papers' CIFAR-10 normalization, on the [0, 1] pixel scale.
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2023, 0.1994, 0.2010)

#: CIFAR-100's own: the per-channel mean and standard deviation of its training images.
CIFAR100_MEAN = (0.5071, 0.4865, 0.4409)
CIFAR100_STD = (0.2673, 0.2564, 0.2762)

#: Classes -> the (mean, std) that :func:`cifar` normalizes with.
CIFAR_NORMALIZATION = {10: (CIFAR_MEAN, CIFAR_STD), 100: (CIFAR100_MEAN, CIFAR100_STD)}

# folder name, archive name, training files, test file, meta file, label key, class-names key
_CIFAR = {
    10: ("cifar-10-batches-py", "cifar-10-python.tar.gz",
         tuple(f"data_batch_{i}" for i in range(1, 6)), "test_batch", "batches.meta",
         "labels", "label_names"),
    100: ("cifar-100-python", "cifar-100-python.tar.gz",
          ("train",), "test", "meta", "fine_labels", "fine_label_names")}


def cifar_dir(root: str | os.PathLike[str] | None = None, classes: int = 10) -> Path:
    """The CIFAR-``classes`` python folder: ``root`` (default ``$LSGD_DATA``) or its
    ``cifar-*-python`` child; else a ``FileNotFoundError`` naming the expected files."""
    if classes not in _CIFAR:
        raise ValueError(f"CIFAR has 10 or 100 classes, not {classes}")
    folder_name, archive, train_files, test_file, meta_file, _, _ = _CIFAR[classes]
    files = (*train_files, test_file, meta_file)
    base = root if root is not None else os.environ.get("LSGD_DATA")
    candidates = [] if base is None else [Path(base), Path(base) / folder_name]
    for folder in candidates:
        if all((folder / f).is_file() for f in files):
            return folder
    looked = " or ".join(str(c) for c in candidates) if candidates else (
        "nowhere (no --data-dir given and $LSGD_DATA is unset)")
    raise FileNotFoundError(f"CIFAR-{classes} not found: looked in {looked} for the files "
                            f"{', '.join(files)} (the folder {folder_name}/ of {archive}). "
                            f"CIFAR cannot be downloaded by lsgd: download {archive} from the "
                            f"CIFAR home page, extract it, and pass --data-dir pointing at "
                            f"{folder_name}/ or at the folder holding it.")


def _unpickle(path: Path) -> dict[str, Any]:
    # The CIFAR batches are python pickles (trusted files from the CIFAR archive).
    with open(path, "rb") as f:
        raw = pickle.load(f, encoding="bytes")
    return {(k.decode() if isinstance(k, bytes) else k): v for k, v in raw.items()}


def _cifar_images(folder: Path, files: Sequence[str], label_key: str,
                  classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    batches = [_unpickle(folder / name) for name in files]
    data = np.concatenate([np.asarray(b["data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
                           for b in batches])
    labels = np.concatenate([np.asarray(b[label_key], dtype=np.int64) for b in batches])
    x = normalize(torch.from_numpy(data), *CIFAR_NORMALIZATION[classes])
    return x, torch.from_numpy(labels)


def cifar(root: str | os.PathLike[str] | None = None, classes: int = 10) -> Dataset:
    """CIFAR-10 or CIFAR-100 (fine labels): 50,000 training, 10,000 test images 3x32x32,
    from :func:`cifar_dir`, normalized per channel by :data:`CIFAR_NORMALIZATION`."""
    folder = cifar_dir(root, classes)
    _, _, train_files, test_file, meta_file, label_key, names_key = _CIFAR[classes]
    meta = _unpickle(folder / meta_file)
    return Dataset(f"cifar{classes}", *_cifar_images(folder, train_files, label_key, classes),
                   *_cifar_images(folder, (test_file,), label_key, classes), augment="cifar-28",
                   num_classes=len(meta[names_key]) if names_key in meta else classes)
