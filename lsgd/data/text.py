"""Text as byte tokens (its UTF-8 bytes: a vocabulary of 256, no tokenizer): ``kjv``, the
King James Version as the ``bible`` program of Debian's ``bible-kjv`` prints it (every
20th chapter held out), or ``text``, a UTF-8 file or folder (its last 5% held out).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import torch

KJV_RANGE = "Gen1:1-Rev22:21"
KJV_INSTALL = "sudo apt-get install bible-kjv"
#: Every ``VALIDATION_EVERY``-th chapter of the Bible is held out for validation.
VALIDATION_EVERY = 20
#: The share of a user's text held out for validation (its end).
VALIDATION_SHARE = 0.05
#: A chapter's heading in ``bible``'s output: a line of its own between empty lines.
_CHAPTER = re.compile(r"^\n?[1-3]? ?[A-Z][A-Za-z ]* \d+\n\n", re.M)


@dataclass
class TextData:
    """A corpus as byte tokens (uint8 tensors); ``split`` says in words how ``valid``
    was held out, ``source`` where the text came from."""

    name: str
    train: torch.Tensor
    valid: torch.Tensor
    split: str
    source: str
    vocab: int = 256


def cache_dir() -> Path:
    """Where extracted corpora are kept: ``$LSGD_CACHE``, else ``$XDG_CACHE_HOME/lsgd``,
    else ``~/.cache/lsgd``."""
    if os.environ.get("LSGD_CACHE"):
        return Path(os.environ["LSGD_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "lsgd")


def bible_program() -> str:
    """Debian's ``bible`` program's path, or ``FileNotFoundError`` with the install command."""
    found = shutil.which("bible")
    if found is None:
        raise FileNotFoundError(
            "--dataset kjv reads the King James Bible with the program 'bible' of Debian's "
            f"bible-kjv package, which is not installed: {KJV_INSTALL} (scripts/install.sh "
            "does it), or give the text yourself with --dataset text --data-dir FILE")
    return found


def kjv_cached(cache: Path | None = None) -> bool:
    """Whether the Bible was already extracted into the cache."""
    path = (cache or cache_dir()) / "kjv.txt"
    return path.is_file() and path.stat().st_size > 0


def split_chapters(text: str, every: int = VALIDATION_EVERY) -> tuple[str, str]:
    """(training, validation) text: every ``every``-th chapter is held out."""
    starts = [m.start() for m in _CHAPTER.finditer(text)]
    train = [text[:starts[0]]] if starts else [text]
    valid = []
    for index, (start, stop) in enumerate(zip(starts, starts[1:] + [len(text)]), 1):
        (valid if index % every == 0 else train).append(text[start:stop])
    return "".join(train), "".join(valid)


def kjv(cache: Path | None = None) -> TextData:
    """The King James Bible as byte tokens, every 20th chapter held out: the text as
    ``bible`` prints it, extracted once into ``cache`` (default :func:`cache_dir`)."""
    path = (cache or cache_dir()) / "kjv.txt"
    if not kjv_cached(cache):
        program = bible_program()
        done = subprocess.run([program, KJV_RANGE], capture_output=True, check=False,
                              timeout=120)
        text = done.stdout.decode("utf-8", errors="replace")
        if done.returncode != 0 or len(_CHAPTER.findall(text)) < VALIDATION_EVERY:
            raise ValueError(f"'{program} {KJV_RANGE}' did not print the Bible (exit "
                             f"{done.returncode}: {done.stderr.decode(errors='replace')[:200]}"
                             f"); reinstall it: {KJV_INSTALL}")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)  # workers extracting at once each write a whole file
    train, valid = split_chapters(path.read_text(encoding="utf-8"))
    return TextData("kjv", _bytes(train), _bytes(valid),
                    f"every {VALIDATION_EVERY}th chapter held out for validation",
                    f"Debian's bible-kjv ('bible {KJV_RANGE}')")


def text_files(path: str | os.PathLike[str] | None) -> list[Path]:
    """The files of a user's text: ``path`` itself, or every regular file under the
    folder ``path`` in the order of their paths (looked for, never read)."""
    if path is None:
        raise FileNotFoundError("--dataset text needs --data-dir FILE_OR_FOLDER: the UTF-8 "
                                "text to train on")
    root = Path(path)
    if root.is_file():
        return [root]
    if root.is_dir():
        files = sorted(p for p in root.rglob("*") if p.is_file())
        if not files:
            raise ValueError(f"{root}: the folder holds no files; give a UTF-8 text file or a "
                             "folder of them")
        return files
    raise FileNotFoundError(f"{root}: no such file or folder; give a UTF-8 text file or a "
                            "folder of them")


def read_text(path: str | os.PathLike[str] | None) -> str:
    """The UTF-8 text of a file, or of every file under a folder joined by newlines;
    ``ValueError`` naming a file that is empty or not UTF-8 text."""
    files = text_files(path)
    parts = []
    for file in files:
        raw = file.read_bytes()
        if b"\0" in raw:
            raise ValueError(f"{file} is binary (a NUL byte at offset {raw.index(0)}), not "
                             "text; give UTF-8 text files")
        try:
            parts.append(raw.decode("utf-8"))
        except UnicodeDecodeError as error:
            raise ValueError(f"{file} is not UTF-8 text (byte 0x{raw[error.start]:02x} at "
                             f"offset {error.start}); convert it, e.g. iconv -t UTF-8") from None
    text = "\n".join(parts)
    if not text.strip():
        raise ValueError(f"{path} is empty (no text in {len(files)} file(s)); give text to "
                         "train on")
    return text


def split_tail(text: str, share: float = VALIDATION_SHARE) -> tuple[str, str]:
    """(training, validation): the last ``share`` of the text, from the start of its line."""
    cut = int(len(text) * (1 - share))
    cut = text.rfind("\n", 0, cut) + 1 or cut  # the start of its line, if it has one
    return text[:cut], text[cut:]


def user_text(path: str | os.PathLike[str] | None) -> TextData:
    """A user's UTF-8 text (a file or a folder) as byte tokens, its last 5% held out."""
    train, valid = split_tail(read_text(path))
    return TextData("text", _bytes(train), _bytes(valid),
                    f"the last {VALIDATION_SHARE:.0%} of the bytes held out for validation",
                    str(path))


def _bytes(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(text.encode("utf-8")), dtype=torch.uint8)


def text_shard(n: int, rank: int, world_size: int) -> tuple[int, int]:
    """Worker ``rank``'s exclusive contiguous share ``[start, stop)`` of ``n`` bytes; the
    shards of all workers cover ``range(n)`` exactly (they differ by at most one byte)."""
    return rank * n // world_size, (rank + 1) * n // world_size


def windows(data: torch.Tensor, starts: torch.Tensor, context: int
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs ``data[s:s+context]`` and targets ``data[s+1:s+context+1]`` for every start
    ``s``, as int64 ``[len(starts), context]`` tensors."""
    index = starts[:, None] + torch.arange(context + 1)
    tokens = data[index].long()
    return tokens[:, :-1], tokens[:, 1:]
