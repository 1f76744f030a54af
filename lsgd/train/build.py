"""The pieces of one worker's run, built from its configuration: the device, the task
(:mod:`lsgd.tasks`), the optimizer and its schedule, and the strategy; plus the checks
that run in the launching process before any worker starts (:func:`preflight`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import pickle
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

import lsgd
from lsgd import augment, data as datasets
from lsgd.launcher.worker import PRELOAD_ENV
from lsgd.links.netns import LinkSetupError, shaped_links_possible
from lsgd.models import build_model
from lsgd.models.gpt import build_language_model
from lsgd.registry import strategy_class
from lsgd.tasks import ImageClassification, Task, image_steps_per_epoch, make_task as build_task
from lsgd.tasks.headline import is_language
from lsgd.topology import Topology, from_spec
from lsgd.train.config import TrainConfig
from lsgd.train.errors import UsageError  # also lsgd.train.build.UsageError, as before
from lsgd.train.lr_schedule import Schedule


def pick_device(cfg: TrainConfig) -> torch.device:
    """``--device``: CUDA's current device where there is one (``auto``), else the CPU."""
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: CUDA is not available on this machine; use --device cpu")
    if cfg.device == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


#: What a dataset reads as.
Data = datasets.Dataset | datasets.ImageFolder | datasets.TextData


@functools.lru_cache(maxsize=2)
def _load(name: str, data_dir: str | None) -> Data:
    return datasets.load_dataset(name, data_dir)


# In lsgd train's fork server alone (PRELOAD_ENV set): the dataset read and the plotting
# library loaded once, for every worker forked from it (rank 0 draws the run's figures).
if PRELOAD_ENV in os.environ:
    from lsgd.plots import pyplot

    pyplot()
    with contextlib.suppress(Exception):  # each worker reads it again, and says what is wrong
        _load(*json.loads(os.environ[PRELOAD_ENV]))


def load_data(cfg: TrainConfig) -> Data:
    """The dataset, read once per process (simulated workers share it, read only); its
    mistakes, and files that cannot be read (truncated, corrupt), a :class:`UsageError`
    naming ``--dataset`` (and ``--data-dir``)."""
    where = f"--dataset {cfg.dataset}"
    if cfg.data_dir is not None:
        problem = ("" if os.path.isdir(cfg.data_dir) else
                   " (not a folder)" if os.path.exists(cfg.data_dir) else " (no such folder)")
        where += f" --data-dir {cfg.data_dir}{problem}"
    try:
        return _load(cfg.dataset, cfg.data_dir)
    except (FileNotFoundError, ImportError, ValueError) as error:
        raise UsageError(f"{where}: {error}") from error
    except (OSError, EOFError, IndexError, KeyError, pickle.UnpicklingError, zlib.error) as error:
        raise UsageError(f"{where}: cannot read the dataset's files ({type(error).__name__}: "
                         f"{error}); check them, or extract the dataset again") from error


def make_task(cfg: TrainConfig, device: torch.device) -> Task:
    """The run's task on ``device``, its dataset read by :func:`load_data`; a
    :class:`UsageError` for what does not fit (a batch larger than a worker's shard, a
    text shorter than a window, an unknown augmentation)."""
    try:
        return build_task(load_data(cfg), dataset=cfg.dataset, model=cfg.model,
                          batch_size=cfg.batch_size, workers=cfg.workers, seed=cfg.seed,
                          augment=cfg.augment, device=device, **dataclasses.asdict(cfg.language))
    except ValueError as error:
        if str(error).startswith("--"):  # it names its option
            raise UsageError(str(error)) from error
        where = (f"--dataset {cfg.dataset}" if is_language(cfg.dataset)
                 else f"--augment {cfg.augment}")
        raise UsageError(f"{where}: {error}") from error


def build_model_of(cfg: TrainConfig, task: Task) -> nn.Module:
    """The task's model, the same on every worker (torch seeded with ``cfg.seed``); a
    :class:`UsageError` when it needs an extra that is not installed."""
    torch.manual_seed(cfg.seed)
    try:
        return task.build_model()
    except ImportError as error:
        raise UsageError(f"--model {cfg.model}: {error}") from error


def make_schedule(cfg: TrainConfig, optimizer: torch.optim.Optimizer,
                  steps_per_epoch: int) -> Schedule:
    """The run's learning-rate schedule; ``cosine`` decays over the budget."""
    budget, optim = cfg.budgets(), cfg.optim
    horizon = min(budget.get("epochs", math.inf), budget.get("steps", math.inf) / steps_per_epoch)
    return Schedule(optimizer, optim.schedule, optim.drops, optim.drop_factor, optim.patience,
                    optim.warmup_epochs, horizon_epochs=horizon,
                    horizon_minutes=budget.get("minutes", math.inf))


def make_optimizer(cfg: TrainConfig, model: nn.Module) -> torch.optim.Optimizer:
    """The inner optimizer ``--optimizer`` of ``model``, with the run's settings."""
    optim = cfg.optim
    lr, decay, nesterov = optim.lr, optim.weight_decay, optim.nesterov and optim.momentum > 0
    if optim.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=optim.momentum,
                               nesterov=nesterov, weight_decay=decay)
    if optim.optimizer in ("adam", "adamw"):
        adam = torch.optim.Adam if optim.optimizer == "adam" else torch.optim.AdamW
        return adam(model.parameters(), lr=lr, weight_decay=decay)
    if optim.optimizer == "muon":
        from lsgd.optim.muon import MuonAdamW

        return MuonAdamW(model, lr=lr, weight_decay=decay)
    return lsgd.LARS(lsgd.lars_param_groups(model, decay), lr=lr, momentum=optim.momentum,
                     nesterov=nesterov, eta=optim.trust_coefficient)


def knobs_from_config(cfg: TrainConfig, groups: int = 0) -> dict[str, Any]:
    """The keyword arguments of ``cfg.method``'s strategy on ``groups`` groups: its
    options (:meth:`lsgd.method_options.MethodOptions.knobs`)."""
    return cfg.options.knobs(cfg.seed, groups)


def make_strategy(cfg: TrainConfig, model: nn.Module, opt: torch.optim.Optimizer,
                  comm: lsgd.Communicator | None = None) -> lsgd.Strategy:
    """The run's strategy around ``model`` and ``opt`` (see :func:`lsgd.make_strategy`), on
    ``comm`` (by default this worker's, with ``cfg.replica``)."""
    comm = comm if comm is not None else lsgd.get_communicator(replica=cfg.replica)
    check_layout(cfg, comm.groups)
    return lsgd.make_strategy(cfg.method, model, opt, comm=comm,
                              **knobs_from_config(cfg, comm.groups))


def check_layout(cfg: TrainConfig, groups: int) -> None:
    """The method's options against the run's ``groups`` (LSGD with one group has one
    level: a different ``--*-global`` value is a mistake), as a :class:`UsageError`."""
    problems = cfg.options.layout_errors(groups)
    if problems:
        raise UsageError("\n".join(problems))


def graphs_of(cfg: TrainConfig) -> list[Topology]:
    """The communication graph(s) of a decentralized run (several: used in turn)."""
    specs = list(cfg.option("graphs")) or [cfg.option("topology")]
    try:
        graphs = [from_spec(spec, cfg.replicas) for spec in specs]
        for graph in graphs if len(graphs) == 1 else []:
            graph.check_connected()
    except ValueError as error:
        raise UsageError(f"--topology/--graphs: {error}") from error
    except TypeError as error:  # an option the graph's kind does not take
        raise UsageError(f"--topology/--graphs {' '.join(specs)}: {error}; see lsgd train "
                         "--help for each kind's options") from error
    return graphs


def preflight(cfg: TrainConfig, read_data: bool = True) -> list[str]:
    """Check, in the launching process, what would otherwise fail in every worker: the
    device, the dataset, the augmentation, the model on its input, the graphs, the links, the
    run folder. With ``read_data=False`` (``--dry-run``) nothing is read or created (an
    image's shape from :data:`lsgd.data.FACTS`); returns notes on what was not checked then."""
    pick_device(cfg)
    notes: list[str] = []
    task = make_task(cfg, torch.device("cpu")) if read_data else None
    if is_language(cfg.dataset):
        notes = [] if read_data else _text_notes(cfg)
        sizes = cfg.language
        try:
            with torch.device("meta"):
                build_language_model(cfg.model, 256, sizes.context, sizes.layers, sizes.width,
                                     sizes.heads)
        except (ImportError, ValueError) as error:
            raise UsageError(f"--model {cfg.model}: {error}") from error
    elif isinstance(task, ImageClassification):
        _check_image_model(cfg, task.input_shape, task.classes)
    else:
        notes = _image_notes(cfg)
    if strategy_class(cfg.method).uses_graph:
        graphs_of(cfg)
    if cfg.link is not None and cfg.backend != "threads":
        if "TORCHELASTIC_RUN_ID" in os.environ:
            raise UsageError(
                f"--link {cfg.link}: under torchrun the nodes and their links are the real "
                "ones; drop --link, or run lsgd train without torchrun to build shaped nodes")
        try:
            shaped_links_possible(cfg.link)
        except LinkSetupError as error:
            raise UsageError(f"--link {cfg.link}: {error}") from None
    if "TORCHELASTIC_RUN_ID" not in os.environ:  # under torchrun the groups are the nodes
        check_layout(cfg, 1 if cfg.replica == "node" else cfg.groups)
    if os.environ.get("RANK", "0") == "0":  # the process that writes the run folder
        make_run_folder(cfg.out_dir, probe=True, create=read_data)
    return notes


def _check_image_model(cfg: TrainConfig, input_shape: Callable[[], tuple[int, ...]],
                       classes: int) -> None:
    """The model built (on the meta device) for the input it sees after the test transform."""
    try:
        with torch.device("meta"):
            build_model(cfg.model, input_shape(), classes)
    except ValueError as error:
        raise UsageError(f"--model {cfg.model} on --dataset {cfg.dataset}: {error}") from error


def _text_notes(cfg: TrainConfig) -> list[str]:
    """A text dataset looked for without reading it: ``--dataset text`` must be there."""
    missing = datasets.locate(cfg.dataset, cfg.data_dir)
    if missing and cfg.dataset.lower() == "text":
        raise UsageError(f"--dataset text --data-dir {cfg.data_dir}: {missing}")
    return [f"dry run: {missing.split('; ')[0]} (a real run stops there; a dry run reads "
            "no data)"] if missing else []


def _image_notes(cfg: TrainConfig) -> list[str]:
    """An image dataset checked without reading it, from :data:`lsgd.data.FACTS`: its
    training examples against the batch, the augmentation, the model on the input it sees;
    returns notes on files not found where a run looks."""
    key = cfg.dataset.lower()
    if key not in datasets.FACTS:
        raise UsageError(f"--dataset {cfg.dataset}: unknown dataset {cfg.dataset!r}: choose "
                         f"one of {', '.join(datasets.DATASETS)}")
    missing = datasets.locate(key, cfg.data_dir)
    if cfg.data_dir is not None and not os.path.isdir(cfg.data_dir):
        problem = "not a folder" if os.path.exists(cfg.data_dir) else "no such folder"
        raise UsageError(f"--dataset {cfg.dataset} --data-dir {cfg.data_dir} ({problem}): "
                         f"{missing}")
    notes = [f"dry run: {missing.split('. ')[0]} (a real run stops there; a dry run reads "
             "no data)"] if missing else []
    shape, classes, n_train = datasets.FACTS[key]
    if n_train is not None:
        try:
            image_steps_per_epoch(n_train, cfg.workers, cfg.batch_size)
        except ValueError as error:
            raise UsageError(str(error)) from None
    preset = augment.paper_preset(cfg.dataset, cfg.model) if cfg.augment == "auto" else cfg.augment
    try:
        augment.train_transform(preset)
        test_fn = augment.test_transform(preset)
    except ValueError as error:
        raise UsageError(f"--augment {cfg.augment}: {error}") from error

    def input_shape() -> tuple[int, ...]:  # imagenet decoded at its size, others transformed
        return shape if key == "imagenet" else tuple(test_fn(torch.zeros((1, *shape))).shape[1:])

    _check_image_model(cfg, input_shape, classes)
    return notes


def make_run_folder(out: Path, probe: bool = False, create: bool = True) -> None:
    """Create the run folder ``out``; with ``probe``, or ``create=False`` (nothing left
    behind), also make and remove a folder in it or in its nearest existing parent; a
    :class:`UsageError` naming the folder and the reason if that fails."""
    try:
        if create:
            out.mkdir(parents=True, exist_ok=True)
        if probe or not create:
            where = next(path for path in (out, *out.parents) if path.exists())
            os.rmdir(tempfile.mkdtemp(prefix=".lsgd-probe-", dir=where))
    except OSError as error:
        reason = f"{error.strerror}: {error.filename}" if error.filename else str(error)
        raise UsageError(f"--out {out}: cannot create or write this folder ({reason}); "
                         "choose another --out") from None


