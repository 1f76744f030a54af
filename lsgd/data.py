"""Datasets as tensors, and exclusive per-worker shards.

In memory (a :class:`Dataset`, images float32 ``[N, C, H, W]``, labels int64 ``[N]``):

* Fashion-MNIST from its IDX files (gzipped or not): the folder given, else
  ``$LSGD_DATA/fashion-mnist`` or ``$LSGD_DATA``, else Debian's
  ``dataset-fashion-mnist`` package folder ``/usr/share/datasets/fashion-mnist``.
  Normalized by the training set's mean and standard deviation.
* CIFAR-10 / CIFAR-100 from the python-pickle folders of ``cifar-10-python.tar.gz``
  / ``cifar-100-python.tar.gz`` (never downloaded by lsgd), normalized per channel
  with the papers' mean (0.4914, 0.4822, 0.4465) and std (0.2023, 0.1994, 0.2010).
* scikit-learn's bundled 8x8 digits (no download needed).
* :func:`synthetic`: a learnable Gaussian-prototype task for quick runs.

Decoded lazily (an :class:`ImageFolder`, too big for memory): ImageNet-style
``train/<class>/*.JPEG`` and ``val/<class>/*.JPEG`` folders, read with Pillow
(the optional extra ``pip install 'lsgd[imagenet]'``).

:func:`load_dataset` picks one by name; :data:`DATASETS` lists the names. Each
dataset names its paper augmentation preset in ``augment`` (see :mod:`lsgd.augment`).
"""

from __future__ import annotations

import gzip
import math
import os
import pickle
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
FASHION_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}

#: The papers' CIFAR normalization, on the [0, 1] pixel scale.
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2023, 0.1994, 0.2010)
#: The usual ImageNet normalization, on the [0, 1] pixel scale.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

# folder name, archive name, training files, test file, meta file, label key, class-names key
_CIFAR = {
    10: ("cifar-10-batches-py", "cifar-10-python.tar.gz",
         tuple(f"data_batch_{i}" for i in range(1, 6)), "test_batch", "batches.meta",
         "labels", "label_names"),
    100: ("cifar-100-python", "cifar-100-python.tar.gz",
          ("train",), "test", "meta", "fine_labels", "fine_label_names"),
}

IMAGE_EXTENSIONS = (".jpeg", ".jpg", ".png", ".ppm", ".bmp", ".webp")


@dataclass
class Dataset:
    """A train/test split held in memory.

    ``augment`` names the :mod:`lsgd.augment` preset the papers use for this
    dataset (``"none"`` when they use none); ``num_classes``, when set, is the
    number of classes (else it is inferred from the largest training label).
    """

    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    augment: str = "none"
    num_classes: int | None = None

    @property
    def classes(self) -> int:
        if self.num_classes is not None:
            return self.num_classes
        return int(self.train_y.max()) + 1

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train_x.shape[1:])


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
    candidates: list[Path] = []
    if root is not None:
        candidates += [Path(root), Path(root) / "fashion-mnist"]
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
        augment="fashion",
        num_classes=10,
    )


def digits(test_fraction: float = 0.25, seed: int = 0) -> Dataset:
    """scikit-learn's 1,797 8x8 digits, split at random (fixed ``seed``)."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = bunch.images.astype(np.float32)[:, None]
    order = np.random.default_rng(seed).permutation(len(images))
    cut = int(len(images) * (1 - test_fraction))
    train, test = order[:cut], order[cut:]
    return _normalized("digits", images[train], bunch.target[train], images[test],
                       bunch.target[test], num_classes=10)


def _normalized(name: str, train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray,
                test_y: np.ndarray, augment: str = "none",
                num_classes: int | None = None) -> Dataset:
    tx = torch.from_numpy(np.asarray(train_x, dtype=np.float32))
    vx = torch.from_numpy(np.asarray(test_x, dtype=np.float32))
    mean, std = tx.mean(), tx.std()
    return Dataset(
        name,
        (tx - mean) / std,
        torch.from_numpy(np.asarray(train_y, dtype=np.int64)),
        (vx - mean) / std,
        torch.from_numpy(np.asarray(test_y, dtype=np.int64)),
        augment=augment,
        num_classes=num_classes,
    )


# --------------------------------------------------------------------------- CIFAR


def cifar_dir(root: str | os.PathLike[str] | None = None, classes: int = 10) -> Path:
    """The CIFAR-``classes`` python folder: ``root`` itself or its ``cifar-*-python`` child.

    Without ``root``, ``$LSGD_DATA`` is searched the same way. Raises a
    ``FileNotFoundError`` naming the expected files (lsgd never downloads CIFAR).
    """
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
    raise FileNotFoundError(
        f"CIFAR-{classes} not found: looked in {looked} for the files "
        f"{', '.join(files)} (the folder {folder_name}/ of {archive}). "
        f"CIFAR cannot be downloaded by lsgd: download {archive} from the CIFAR home page, "
        f"extract it, and pass --data-dir pointing at {folder_name}/ or at the folder holding it."
    )


def _unpickle(path: Path) -> dict[str, Any]:
    # The CIFAR batches are python pickles (trusted files from the CIFAR archive).
    with open(path, "rb") as f:
        raw = pickle.load(f, encoding="bytes")
    return {(k.decode() if isinstance(k, bytes) else k): v for k, v in raw.items()}


def _cifar_images(batches: Sequence[dict[str, Any]], label_key: str) -> tuple[torch.Tensor, torch.Tensor]:
    data = np.concatenate([np.asarray(b["data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
                           for b in batches])
    labels = np.concatenate([np.asarray(b[label_key], dtype=np.int64) for b in batches])
    x = torch.from_numpy(data).to(torch.float32).div_(255.0)
    mean = torch.tensor(CIFAR_MEAN, dtype=torch.float32).view(1, 3, 1, 1)
    std = torch.tensor(CIFAR_STD, dtype=torch.float32).view(1, 3, 1, 1)
    x.sub_(mean).div_(std)
    return x, torch.from_numpy(labels)


def cifar(root: str | os.PathLike[str] | None = None, classes: int = 10) -> Dataset:
    """CIFAR-10 or CIFAR-100 (fine labels): 50,000 training, 10,000 test images 3x32x32.

    ``root`` is the extracted ``cifar-10-batches-py`` / ``cifar-100-python`` folder
    or its parent (default ``$LSGD_DATA``). Pixels are scaled to [0, 1], then
    normalized per channel by :data:`CIFAR_MEAN` and :data:`CIFAR_STD`.
    """
    folder = cifar_dir(root, classes)
    _, _, train_files, test_file, meta_file, label_key, names_key = _CIFAR[classes]
    meta = _unpickle(folder / meta_file)
    num_classes = len(meta[names_key]) if names_key in meta else classes
    train_x, train_y = _cifar_images([_unpickle(folder / f) for f in train_files], label_key)
    test_x, test_y = _cifar_images([_unpickle(folder / test_file)], label_key)
    return Dataset(f"cifar{classes}", train_x, train_y, test_x, test_y,
                   augment="cifar-28", num_classes=num_classes)


# --------------------------------------------------------------------------- synthetic


def synthetic(n_train: int = 2048, n_test: int = 512, shape: Sequence[int] = (1, 28, 28),
              classes: int = 10, seed: int = 0, separation: float = 6.0) -> Dataset:
    """A learnable synthetic classification task: class prototypes plus Gaussian noise.

    Each class has a random prototype image (for ``[C, H, W]`` shapes a smooth
    one: Gaussian noise on a 1/4-resolution grid, bilinearly upsampled, so
    convolutional nets learn it too), centred and scaled so that two prototypes
    lie about ``separation`` noise standard deviations apart; an example is its
    class prototype plus standard Gaussian noise on every pixel (so inputs have
    roughly unit variance, like the normalized real datasets). The optimal
    classifier is linear; with the default ``separation=6`` its accuracy is
    about 99%, and a logistic regression fit on the 2,048 training examples
    reaches well above 80% on the test split (chance: ``1/classes``). Labels are
    balanced (round-robin, then shuffled). Deterministic in ``seed``.
    """
    shape = tuple(int(s) for s in shape)
    g = torch.Generator().manual_seed(seed)
    numel = math.prod(shape)
    if len(shape) == 3 and shape[1] >= 4 and shape[2] >= 4:
        c, h, w = shape
        coarse = torch.randn(classes, c, h // 4, w // 4, generator=g)
        protos = torch.nn.functional.interpolate(coarse, size=(h, w), mode="bilinear",
                                                 align_corners=False)
    else:
        protos = torch.randn(classes, *shape, generator=g)
    flat = protos.reshape(classes, -1)
    flat = flat - flat.mean(dim=1, keepdim=True)
    flat = flat / flat.pow(2).mean(dim=1, keepdim=True).sqrt()  # unit RMS per pixel
    # two independent unit-RMS prototypes are ~sqrt(2 * numel) apart
    protos = (flat * (separation / math.sqrt(2 * numel))).reshape(classes, *shape)

    def split(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.arange(n) % classes
        y = y[torch.randperm(n, generator=g)]
        x = protos[y] + torch.randn(n, *shape, generator=g)
        return x, y

    train_x, train_y = split(n_train)
    test_x, test_y = split(n_test)
    return Dataset("synthetic", train_x, train_y, test_x, test_y, augment="none",
                   num_classes=classes)


# --------------------------------------------------------------------------- ImageNet


def _pil() -> Any:
    try:
        from PIL import Image
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "Image-folder datasets (ImageNet) decode images with Pillow, which is not "
            "installed: pip install 'lsgd[imagenet]' (or pip install pillow)."
        ) from err
    return Image


def _list_split(folder: Path) -> tuple[list[str], list[tuple[Path, int]]]:
    names = sorted(d.name for d in folder.iterdir() if d.is_dir())
    samples = [
        (path, label)
        for label, name in enumerate(names)
        for path in sorted((folder / name).iterdir())
        if path.suffix.lower() in IMAGE_EXTENSIONS and path.is_file()
    ]
    return names, samples


# uniforms drawn per image for the training transform: 10 tries x (area, log-aspect),
# then the crop's row and column, then the flip
_RRC_TRIES = 10
_UNIFORMS = 2 * _RRC_TRIES + 3


class ImageFolder:
    """An image-folder dataset (ImageNet layout) decoded lazily with Pillow.

    ``root`` holds ``train/<class>/*.JPEG`` and ``val/<class>/*.JPEG`` (``val``
    sorted into class folders, as the usual ``valprep.sh`` does); ``root`` may
    also be a folder holding ``imagenet/`` laid out so. Classes are the sorted
    ``train`` subfolder names; any of :data:`IMAGE_EXTENSIONS` is read.

    It is not held in memory: ``len(folder)`` is the number of training images,
    ``train_y`` / ``test_y`` are all labels (cheap), and :meth:`load` decodes a
    batch. Like :class:`Dataset` it has ``name``, ``classes``, ``input_shape``
    and ``augment`` (``"none"``: the paper's ImageNet augmentation is applied by
    :meth:`load` while decoding, as tensors of one fixed size are needed).

    The transforms are the papers' ResNet-50 ones: training takes a random-resized
    crop (8%-100% of the area, aspect ratio 3/4-4/3, torchvision's algorithm of 10
    tries then a central crop) resized to ``size`` (224) and a horizontal flip
    with probability 1/2; evaluation resizes the shorter side to ``resize`` (256)
    and takes the central ``size`` crop. Both then scale pixels to [0, 1] and
    normalize by :data:`IMAGENET_MEAN` / :data:`IMAGENET_STD`. Resizing is
    bilinear (Pillow's, with antialiasing). ``threads`` > 1 decodes in a thread
    pool (Pillow releases the GIL while decoding); results do not depend on it.
    """

    augment = "none"

    def __init__(self, root: str | os.PathLike[str], size: int = 224, resize: int = 256,
                 threads: int = 0, name: str = "imagenet") -> None:
        _pil()
        base = Path(root)
        if not (base / "train").is_dir() and (base / "imagenet" / "train").is_dir():
            base = base / "imagenet"
        missing = [s for s in ("train", "val") if not (base / s).is_dir()]
        if missing:
            raise FileNotFoundError(
                f"Image folder {base} lacks {' and '.join(s + '/' for s in missing)}: expected "
                f"{base}/train/<class>/*.JPEG and {base}/val/<class>/*.JPEG. lsgd cannot "
                "download ImageNet: get it from image-net.org, sort val/ into class "
                "folders, and pass --data-dir pointing at the folder holding train/ and val/."
            )
        self.root = base
        self.name = name
        self.size = int(size)
        self.resize = int(resize)
        self.threads = int(threads)
        self.class_names, self.train_samples = _list_split(base / "train")
        index = {n: i for i, n in enumerate(self.class_names)}
        val_names, val_samples = _list_split(base / "val")
        unknown = sorted(set(val_names) - set(index))
        if unknown:
            raise ValueError(f"{base}/val has classes not in train/: {unknown[:5]}")
        self.test_samples = [(p, index[val_names[label]]) for p, label in val_samples]
        if not self.train_samples:
            raise FileNotFoundError(f"no images under {base}/train/<class>/")
        self.train_y = torch.tensor([label for _, label in self.train_samples], dtype=torch.int64)
        self.test_y = torch.tensor([label for _, label in self.test_samples], dtype=torch.int64)

    def __len__(self) -> int:
        return len(self.train_samples)

    def __repr__(self) -> str:
        return (f"ImageFolder({str(self.root)!r}, {len(self.train_samples)} train, "
                f"{len(self.test_samples)} val, {self.classes} classes, size={self.size})")

    @property
    def classes(self) -> int:
        return len(self.class_names)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (3, self.size, self.size)

    def num_samples(self, train: bool = True) -> int:
        return len(self.train_samples if train else self.test_samples)

    def load(self, indices: Sequence[int] | torch.Tensor, train: bool = True,
             generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Decode and transform images ``indices`` of the training (``train``) or val split.

        Returns float32 ``[len(indices), 3, size, size]`` normalized images and
        their int64 labels. The training transform's randomness comes from
        ``generator`` (CPU; the default generator when ``None``), drawn up front
        so the result is the same with or without ``threads``.
        """
        idx = [int(i) for i in (indices.tolist() if isinstance(indices, torch.Tensor) else indices)]
        samples = self.train_samples if train else self.test_samples
        if train:
            uniforms = torch.rand(len(idx), _UNIFORMS, generator=generator, dtype=torch.float64)
            jobs = [(samples[i][0], uniforms[k].tolist()) for k, i in enumerate(idx)]
        else:
            jobs = [(samples[i][0], None) for i in idx]
        if self.threads > 1 and len(jobs) > 1:
            with ThreadPoolExecutor(self.threads) as pool:
                arrays = list(pool.map(self._decode, jobs))
        else:
            arrays = [self._decode(job) for job in jobs]
        x = torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).to(torch.float32).div_(255.0)
        mean = torch.tensor(IMAGENET_MEAN, dtype=torch.float32).view(1, 3, 1, 1)
        std = torch.tensor(IMAGENET_STD, dtype=torch.float32).view(1, 3, 1, 1)
        x = x.sub_(mean).div_(std).contiguous()
        y = torch.tensor([samples[i][1] for i in idx], dtype=torch.int64)
        return x, y

    def _decode(self, job: tuple[Path, list[float] | None]) -> np.ndarray:
        Image = _pil()
        bilinear = getattr(Image, "Resampling", Image).BILINEAR
        mirror = getattr(Image, "Transpose", Image).FLIP_LEFT_RIGHT
        path, u = job
        with Image.open(path) as img:
            img = img.convert("RGB")
            width, height = img.size
            if u is not None:
                top, left, h, w = random_resized_crop_params(height, width, u)
                img = img.resize((self.size, self.size), bilinear,
                                 box=(left, top, left + w, top + h))
                if u[-1] < 0.5:
                    img = img.transpose(mirror)
            else:
                if width <= height:
                    new = (self.resize, int(self.resize * height / width))
                else:
                    new = (int(self.resize * width / height), self.resize)
                img = img.resize(new, bilinear)
                top = int(round((new[1] - self.size) / 2.0))
                left = int(round((new[0] - self.size) / 2.0))
                img = img.crop((left, top, left + self.size, top + self.size))
            return np.asarray(img, dtype=np.uint8)


def random_resized_crop_params(height: int, width: int, u: Sequence[float],
                               scale: tuple[float, float] = (0.08, 1.0),
                               ratio: tuple[float, float] = (3 / 4, 4 / 3)) -> tuple[int, int, int, int]:
    """torchvision's ``RandomResizedCrop.get_params`` from given uniforms in [0, 1).

    ``u`` holds 2 uniforms per try (area fraction, log aspect ratio) for 10 tries,
    then 2 for the crop's position (the last entry, if any, is left for a flip).
    Returns ``(top, left, h, w)``; after 10 failed tries, a central crop of the
    whole image clamped to the aspect-ratio range.
    """
    area = height * width
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    for t in range(_RRC_TRIES):
        target = area * (scale[0] + (scale[1] - scale[0]) * u[2 * t])
        aspect = math.exp(log_lo + (log_hi - log_lo) * u[2 * t + 1])
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            top = min(int(u[2 * _RRC_TRIES] * (height - h + 1)), height - h)
            left = min(int(u[2 * _RRC_TRIES + 1] * (width - w + 1)), width - w)
            return top, left, h, w
    in_ratio = width / height
    if in_ratio < ratio[0]:
        w, h = width, int(round(width / ratio[0]))
    elif in_ratio > ratio[1]:
        h, w = height, int(round(height * ratio[1]))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def imagenet(root: str | os.PathLike[str] | None = None, **kwargs: Any) -> ImageFolder:
    """ImageNet as a lazily decoded :class:`ImageFolder` (``root`` default ``$LSGD_DATA``)."""
    base = root if root is not None else os.environ.get("LSGD_DATA")
    if base is None:
        raise FileNotFoundError(
            "ImageNet needs a folder holding train/<class>/*.JPEG and val/<class>/*.JPEG: "
            "lsgd cannot download it; pass --data-dir (or set $LSGD_DATA)."
        )
    return ImageFolder(base, **kwargs)


# --------------------------------------------------------------------------- registry

#: The dataset names :func:`load_dataset` knows.
DATASETS = ("fashion-mnist", "cifar10", "cifar100", "imagenet", "digits", "synthetic")


def load_dataset(name: str, data_dir: str | os.PathLike[str] | None = None) -> Dataset | ImageFolder:
    """The dataset called ``name`` (one of :data:`DATASETS`), read from ``data_dir``.

    ``data_dir`` (default ``$LSGD_DATA``) is the dataset's own folder or a folder
    holding it; digits and synthetic need none. ImageNet comes back as a lazily
    decoded :class:`ImageFolder`, the rest as an in-memory :class:`Dataset`.
    """
    key = name.lower()
    if key == "fashion-mnist":
        return fashion_mnist(data_dir)
    if key in ("cifar10", "cifar100"):
        return cifar(data_dir, int(key[len("cifar"):]))
    if key == "imagenet":
        return imagenet(data_dir)
    if key == "digits":
        return digits()
    if key == "synthetic":
        return synthetic()
    raise ValueError(f"unknown dataset {name!r}: choose one of {', '.join(DATASETS)}")


# --------------------------------------------------------------------------- sharding


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
