"""Graphs, matchings, spectra and MATCHA's convex programs, against hand values."""

from __future__ import annotations

import random
import sys

import numpy as np
import pytest
import torch

from lsgd import topology as T
from lsgd.plots import draw_graphs


def _assert_matchings(graph: T.Topology) -> None:
    """The matchings partition the edges; each touches every worker at most once."""
    flat = [e for m in graph.matchings for e in m]
    assert sorted(flat) == list(graph.edges), "every edge in exactly one matching"
    assert len(flat) == len(set(flat))
    for matching in graph.matchings:
        ends = [v for e in matching for v in e]
        assert len(ends) == len(set(ends)), f"a worker has two edges in {matching}"
    assert len(graph.matchings) <= graph.max_degree + 1, "Vizing's bound"


def test_constructors_give_the_expected_edges() -> None:
    assert T.ring(4).edges == ((0, 1), (0, 3), (1, 2), (2, 3))
    assert T.ring(5, stride=2).edges == ((0, 2), (0, 3), (1, 3), (1, 4), (2, 4))
    assert T.ring(2).edges == ((0, 1),)
    assert T.ring(1).edges == ()
    torus = T.torus(3, 4)
    assert torus.size == 12 and torus.degrees == [4] * 12 and len(torus.edges) == 24
    assert T.torus(2, 2).edges == ((0, 1), (0, 2), (1, 3), (2, 3)), "wrap-around edges merged"
    assert len(T.complete(6).edges) == 15
    assert T.from_edges(3, [(1, 0), (0, 1), [2, 1]]).edges == ((0, 1), (1, 2))
    assert T.make("torus", 12).name == "torus(3x4)"
    assert T.make("erdos-renyi", 8, seed=3) == T.erdos_renyi(8, edges=8, seed=3)
    assert T.union([T.ring(4), T.from_edges(4, [(0, 2)])]).edges == (
        (0, 1), (0, 2), (0, 3), (1, 2), (2, 3))


def test_erdos_renyi_is_seeded_and_connected() -> None:
    a = T.erdos_renyi(8, edges=8, seed=1)
    assert a == T.erdos_renyi(8, edges=8, seed=1)
    assert a.edges != T.erdos_renyi(8, edges=8, seed=2).edges
    assert len(a.edges) == 8 and a.is_connected  # average degree exactly 2
    dense = [T.erdos_renyi(20, 0.3, seed=s) for s in range(5)]
    assert all(g.is_connected for g in dense)
    assert 0.2 < np.mean([len(g.edges) / 190 for g in dense]) < 0.4
    assert not T.erdos_renyi(10, 0.05, seed=0, connected=False).is_connected


@pytest.mark.parametrize(
    "make,kwargs,message",
    [
        (T.from_edges, dict(size=3, edges=[(0, 0)]), r"bad edges \[\(0, 0\)\]"),
        (T.from_edges, dict(size=3, edges=[(0, 3)]), r"ranks in \[0, 3\); bad edges \[\(0, 3\)\]"),
        (T.ring, dict(size=0), "ring: size must be a positive integer, got 0"),
        (T.ring, dict(size=4, stride=4), "stride=4 must not be a multiple of size=4"),
        (T.torus, dict(rows=2, cols=0), "torus: cols must be a positive integer, got 0"),
        (T.erdos_renyi, dict(size=5, p=1.5), r"p must be a number in \[0, 1\], got 1.5"),
        (T.erdos_renyi, dict(size=5, edges=2), "needs at least 4 edges"),
        (T.erdos_renyi, dict(size=5), "exactly one of p"),
        (T.make, dict(kind="star", size=4), "topology kind must be one of"),
    ],
)
def test_bad_graphs_are_explained(make, kwargs, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make(**kwargs)


def test_connectivity_check_names_the_isolated_workers() -> None:
    graph = T.from_edges(6, [(0, 1), (1, 2), (4, 5)], name="broken")
    assert not graph.is_connected
    assert graph.components() == [[0, 1, 2], [3], [4, 5]]
    with pytest.raises(ValueError, match=r"'broken' on 6 workers is not connected: isolated "
                                         r"workers \[3\]; its 3 components are \{0, 1, 2\}"):
        graph.check_connected()
    with pytest.raises(ValueError, match=r"components are \{0, 2, 4, 6\}; \{1, 3, 5, 7\}"):
        T.ring(8, stride=2).check_connected()
    assert T.ring(8).check_connected() is not None


@pytest.mark.parametrize("graph", [
    T.ring(8), T.ring(7), T.ring(8, stride=3), T.torus(3, 4), T.torus(4, 4), T.complete(5),
    T.complete(6), T.erdos_renyi(8, edges=8, seed=1), T.erdos_renyi(12, 0.4, seed=0),
], ids=str)
def test_matchings_partition_the_edges(graph: T.Topology) -> None:
    _assert_matchings(graph)


def test_matching_counts() -> None:
    # Even cycles and even tori are 2- and 4-edge-colourable; odd cycles need 3.
    assert T.ring(8).matchings == (((0, 1), (2, 3), (4, 5), (6, 7)), ((0, 7), (1, 2), (3, 4), (5, 6)))
    assert len(T.ring(8, stride=3).matchings) == 2
    assert len(T.ring(7).matchings) == 3
    assert len(T.torus(4, 4).matchings) == 4
    assert T.ring(8).partners(0) == [1, 7] and T.ring(7).partners(6) == [None, 0, 5]


def test_random_graphs_never_need_more_than_max_degree_plus_one_matchings() -> None:
    rng = random.Random(0)
    for _ in range(300):
        n = rng.randint(2, 13)
        pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
        graph = T.from_edges(n, rng.sample(pairs, rng.randint(1, len(pairs))))
        _assert_matchings(graph)
        # Misra-Gries alone keeps the bound too (greedy may not).
        mg = T._misra_gries(n, list(graph.edges))
        assert len(mg) <= graph.max_degree + 1
        assert sorted(e for m in mg for e in m) == list(graph.edges)


def test_laplacian_and_spectrum_by_hand() -> None:
    path = T.from_edges(3, [(0, 1), (1, 2)])
    assert path.laplacian().tolist() == [[1, -1, 0], [-1, 2, -1], [0, -1, 1]]
    assert path.eigenvalues() == pytest.approx([0, 1, 3])
    assert path.algebraic_connectivity == pytest.approx(1.0)
    assert path.mixing_weight() == pytest.approx(0.5)  # 2 / (1 + 3)
    # Ring of 4: eigenvalues 0, 2, 2, 4, so a = 1/3 and W - J has norm 1/3.
    ring = T.ring(4)
    assert ring.eigenvalues() == pytest.approx([0, 2, 2, 4])
    assert ring.mixing_weight() == pytest.approx(1 / 3)
    assert ring.contraction() == pytest.approx(1 / 3)
    assert T.complete(5).contraction() == pytest.approx(0.0, abs=1e-12)  # W = J: one step
    assert sum(ring.matching_laplacians()).tolist() == ring.laplacian().tolist()
    # One matching alone: pairs average (a = 1/2), disconnected otherwise.
    pair = T.from_edges(4, [(0, 1)])
    assert pair.mixing_weight() == pytest.approx(0.5) and pair.algebraic_connectivity == 0.0


@pytest.mark.parametrize("graph", [T.ring(8), T.torus(3, 3), T.erdos_renyi(8, edges=8, seed=1)],
                         ids=str)
def test_mixing_matrix_is_doubly_stochastic_and_contracts(graph: T.Topology) -> None:
    w = graph.mixing_matrix()
    assert torch.allclose(w, w.T)
    assert torch.allclose(w.sum(0), torch.ones(graph.size, dtype=torch.float64))
    rho = graph.contraction()
    assert 0 < rho < 1
    # The weight is the best one: nudging it either way contracts less.
    a = graph.mixing_weight()
    assert rho <= graph.contraction(a * 0.9) + 1e-12 and rho <= graph.contraction(a * 1.1) + 1e-12


def test_matcha_budget_one_activates_everything_without_a_solver() -> None:
    laps = T.ring(8).matching_laplacians()
    assert T.activation_probabilities(laps, 1.0) == [1.0, 1.0]
    assert T.matcha_mixing_weight(laps, [1.0, 1.0]) == pytest.approx(T.ring(8).mixing_weight())


@pytest.mark.parametrize("graph", [T.ring(8), T.erdos_renyi(8, edges=8, seed=1), T.torus(3, 4)],
                         ids=str)
@pytest.mark.parametrize("budget", [0.5, 0.3])
def test_matcha_probabilities_satisfy_the_constraints(graph: T.Topology, budget: float) -> None:
    pytest.importorskip("cvxpy")
    laps = graph.matching_laplacians()
    p = T.activation_probabilities(laps, budget)
    m = len(laps)
    assert all(0.0 <= pj <= 1.0 for pj in p)
    # The budget binds (lambda_2 never decreases as p grows): expected active = budget * M.
    assert sum(p) <= budget * m + 1e-9
    assert sum(p) == pytest.approx(budget * m, abs=1e-4)

    def lambda2(q: list[float]) -> float:
        return float(torch.linalg.eigvalsh(sum(qj * lap for qj, lap in zip(q, laps)))[1])

    assert lambda2(p) > 0, "connected in expectation"
    assert lambda2(p) >= lambda2([budget] * m) - 1e-5, "no worse than spending evenly"
    # The mixing weight minimizes rho = ||E[W^T W] - J||, which is below 1.
    a = T.matcha_mixing_weight(laps, p)
    rho = T.expected_contraction(laps, p, a)
    assert 0 < rho < 1
    for other in (0.8 * a, 1.2 * a):
        assert rho <= T.expected_contraction(laps, p, other) + 1e-6


def test_matcha_on_an_even_ring_spends_the_budget_evenly() -> None:
    pytest.importorskip("cvxpy")
    p = T.activation_probabilities(T.ring(8).matching_laplacians(), 0.5)
    assert p == pytest.approx([0.5, 0.5], abs=1e-5)


def test_expected_contraction_by_hand() -> None:
    # One edge between two workers, active with probability p, weight a:
    # W = I - a B L with L = [[1, -1], [-1, 1]]; on the disagreement direction
    # E[(1 - 2aB)^2] = 1 - 4ap + 4a^2 p.
    lap = T.from_edges(2, [(0, 1)]).laplacian()
    p, a = 0.5, 0.3
    assert T.expected_contraction([lap], [p], a) == pytest.approx(1 - 4 * a * p + 4 * a * a * p)


def test_missing_cvxpy_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cvxpy", None)  # makes "import cvxpy" fail
    with pytest.raises(ImportError, match=r"pip install 'lsgd\[matcha\]'"):
        T.activation_probabilities(T.ring(4).matching_laplacians(), 0.5)
    assert T.activation_probabilities(T.ring(4).matching_laplacians(), 1.0) == [1.0, 1.0]


def test_draw_writes_a_png(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    one = draw_graphs(T.torus(3, 3), tmp_path / "torus.png")
    two = draw_graphs([T.ring(8), T.ring(8, stride=3)], tmp_path / "sub" / "dynamic.png", title="t")
    for path in (one, two):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="no graph"):
        draw_graphs([], tmp_path / "x.png")


def test_graphs_from_command_line_text(tmp_path) -> None:
    from lsgd.topology import from_spec

    assert from_spec("ring", 6).edges == from_spec("ring:stride=1", 6).edges
    assert from_spec("ring:stride=3", 8).name == "ring(8, stride=3)"
    assert len(from_spec("erdos-renyi:edges=10,seed=3", 8).edges) == 10
    assert from_spec("torus:rows=2", 8).name == "torus(2x4)"
    edges = tmp_path / "path.txt"
    edges.write_text("# a path\n0 1\n1 2  # middle\n2,3\n")
    assert from_spec(str(edges), 4).edges == ((0, 1), (1, 2), (2, 3))
    edges.write_text("0 1 2\n")
    with pytest.raises(ValueError, match=r"path.txt:1: expected two worker ranks"):
        from_spec(str(edges), 4)
    with pytest.raises(ValueError, match="topology kind must be one of"):
        from_spec("star", 4)


def test_an_edge_list_file_must_fit_the_number_of_workers(tmp_path) -> None:
    from lsgd.topology import from_spec

    edges = tmp_path / "star.edges"
    edges.write_text("0 1\n0 2\n0 3\n")
    assert from_spec(str(edges), 4).degrees == [3, 1, 1, 1]
    with pytest.raises(ValueError, match=r"star.edges is a graph of 4 workers \(ranks 0 to 3\), "
                                         r"but the run has 8: run 4 workers"):
        from_spec(str(edges), 8)
    with pytest.raises(ValueError, match=r"graph of 4 workers .* the run has 3: run 4 workers"):
        from_spec(str(edges), 3)
    edges.write_text("0 1\n2 3\n")  # two components: read, then refused where it is used
    with pytest.raises(ValueError, match="not connected"):
        from_spec(str(edges), 4).check_connected()


@pytest.mark.parametrize("size", [4, 8, 16])
def test_the_shipped_imbalanced_graphs_have_leaves_that_move(size: int) -> None:
    """configs/graphs/imbalanced-W.edges and its partner -Wb: the same number of edges as
    ring(W), degree-1 leaves, and every leaf of the first on another neighbour in the
    second (the dynamic graphs of the aldsgd study, studies/aldsgd.py)."""
    from pathlib import Path

    from lsgd.topology import from_spec

    root = Path(__file__).resolve().parents[2] / "configs" / "graphs"
    first = from_spec(str(root / f"imbalanced-{size}.edges"), size).check_connected()
    second = from_spec(str(root / f"imbalanced-{size}b.edges"), size).check_connected()
    leaves = [r for r in range(size) if first.degree(r) == 1]
    assert len(first.edges) == len(second.edges) == len(T.ring(size).edges) - (size == 4)
    assert len(leaves) == {4: 2, 8: 5, 16: 12}[size]
    assert max(first.degrees) >= 3 or size == 4
    for leaf in leaves:
        assert set(first.neighbours(leaf)).isdisjoint(second.neighbours(leaf)), leaf
    assert sorted(first.degrees) == sorted(second.degrees)  # the same shape, relabelled
