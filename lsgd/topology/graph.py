"""The graph itself: :class:`Topology`, its Laplacian, spectrum and matchings."""

from __future__ import annotations

import functools
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from lsgd import _validate
from lsgd.topology.colouring import Edge, edge_colouring, neighbour_lists


@dataclass(frozen=True)
class Topology:
    """An undirected simple graph on ``size`` workers; construction validates ``edges`` and
    stores them as ``(i, j)`` pairs with ``i < j``, without duplicates, in increasing order."""

    size: int
    edges: tuple[Edge, ...]
    name: str = "graph"

    def __post_init__(self) -> None:
        if not _validate.is_int(self.size) or self.size < 1:
            raise ValueError(f"Topology: size must be a positive integer, got {self.size!r}")
        object.__setattr__(self, "edges", _normalize_edges(self.size, self.edges))

    def __str__(self) -> str:
        return self.name

    @functools.cached_property
    def _adjacency(self) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(sorted(a)) for a in neighbour_lists(self.size, self.edges))

    def neighbours(self, rank: int) -> tuple[int, ...]:
        """The neighbours of ``rank``, in increasing order."""
        return self._adjacency[rank]

    def degree(self, rank: int) -> int:
        return len(self._adjacency[rank])

    @property
    def degrees(self) -> list[int]:
        return [len(a) for a in self._adjacency]

    @property
    def max_degree(self) -> int:
        return max(self.degrees)

    @functools.cached_property
    def fingerprint(self) -> int:
        """A 32-bit checksum of size and edges (to check all workers agree)."""
        return zlib.crc32(repr((self.size, self.edges)).encode())

    def components(self) -> list[list[int]]:
        """Connected components, each sorted, ordered by their smallest worker."""
        seen = [False] * self.size
        out: list[list[int]] = []
        for start in range(self.size):
            if seen[start]:
                continue
            seen[start] = True
            stack, part = [start], []
            while stack:
                v = stack.pop()
                part.append(v)
                for w in self._adjacency[v]:
                    if not seen[w]:
                        seen[w] = True
                        stack.append(w)
            out.append(sorted(part))
        return out

    @property
    def is_connected(self) -> bool:
        return len(self.components()) == 1

    def check_connected(self) -> Topology:
        """Return ``self`` if connected, else raise ``ValueError`` naming the isolated workers."""
        parts = self.components()
        if len(parts) == 1:
            return self
        isolated = [p[0] for p in parts if len(p) == 1]
        shown = "; ".join(_short(p) for p in parts[:6]) + ("; ..." if len(parts) > 6 else "")
        raise ValueError(f"graph {self.name!r} on {self.size} workers is not connected"
                         + (f": isolated workers {isolated}" if isolated else "")
                         + f"; its {len(parts)} components are {shown}. Decentralized training "
                         "needs a connected graph (or, for dynamic graphs, a connected union)")

    @functools.cached_property
    def matchings(self) -> tuple[tuple[Edge, ...], ...]:
        """The edges split into matchings (a proper edge colouring), deterministically."""
        return tuple(tuple(m) for m in edge_colouring(self.size, self.edges))

    def partners(self, rank: int) -> list[int | None]:
        """For each matching, the partner of ``rank`` in it (``None`` if it has none)."""
        return [next((j if i == rank else i for i, j in matching if rank in (i, j)), None)
                for matching in self.matchings]

    def matching_laplacians(self) -> list[torch.Tensor]:
        """The Laplacian of each matching (they sum to :meth:`laplacian`)."""
        return [laplacian(self.size, m) for m in self.matchings]

    def laplacian(self) -> torch.Tensor:
        """``L = Deg - Adj`` as a float64 ``[size, size]`` tensor."""
        return laplacian(self.size, self.edges)

    @functools.cached_property
    def _eigenvalues(self) -> tuple[float, ...]:
        values = torch.linalg.eigvalsh(self.laplacian()).tolist()
        return tuple(0.0 if abs(v) < 1e-9 else v for v in values)

    def eigenvalues(self) -> list[float]:
        """The Laplacian spectrum, ascending (the first is always 0)."""
        return list(self._eigenvalues)

    @property
    def algebraic_connectivity(self) -> float:
        """``lambda_2(L)``, positive exactly when the graph is connected."""
        return self._eigenvalues[1] if self.size > 1 else 0.0

    def mixing_weight(self) -> float:
        """D-PSGD's weight ``a = 2 / (lambda_2 + lambda_max)`` (0 without edges).

        It minimizes ``max |1 - a lambda|`` over the non-zero Laplacian
        eigenvalues, the contraction factor of ``W = I - a L`` on the
        disagreement. For a disconnected graph (one of several dynamic graphs)
        the smallest non-zero eigenvalue stands in for ``lambda_2``.
        """
        nonzero = [v for v in self._eigenvalues if v > 0]
        return 2.0 / (nonzero[0] + nonzero[-1]) if nonzero else 0.0

    def mixing_matrix(self, weight: float | None = None) -> torch.Tensor:
        """``W = I - a L`` (symmetric, rows sum to 1), default ``a`` = :meth:`mixing_weight`."""
        a = self.mixing_weight() if weight is None else weight
        return torch.eye(self.size, dtype=torch.float64) - a * self.laplacian()

    def contraction(self, weight: float | None = None) -> float:
        """``||W - J||_2`` with ``J = 11^T / size``: how much one mixing shrinks disagreement."""
        w = self.mixing_matrix(weight) - 1.0 / self.size
        return float(torch.linalg.matrix_norm(w, ord=2))


def laplacian(size: int, edges: Iterable[Edge]) -> torch.Tensor:
    """The Laplacian ``Deg - Adj`` of the graph with ``edges``, float64."""
    lap = torch.zeros(size, size, dtype=torch.float64)
    for i, j in edges:
        lap[i, i] += 1
        lap[j, j] += 1
        lap[i, j] -= 1
        lap[j, i] -= 1
    return lap


def _normalize_edges(size: int, edges: Iterable[Sequence[int]]) -> tuple[Edge, ...]:
    out: set[Edge] = set()
    bad = []
    for edge in edges:
        try:
            i, j = edge
        except (TypeError, ValueError):
            i = j = None  # not a pair
        if _is_rank(i, size) and _is_rank(j, size) and i != j:
            out.add((min(int(i), int(j)), max(int(i), int(j))))
        else:
            bad.append(edge)
    if bad:
        raise ValueError(f"Topology: edges must be pairs of distinct worker ranks in [0, {size}); "
                         f"bad edges {bad[:10]}" + (" ..." if len(bad) > 10 else ""))
    return tuple(sorted(out))


def _is_rank(value: object, size: int) -> bool:
    return (_validate.is_int(value) or isinstance(value, np.integer)) and 0 <= value < size


def _short(part: list[int]) -> str:
    return "{" + ", ".join(map(str, part[:8])) + (", ..." if len(part) > 8 else "") + "}"
