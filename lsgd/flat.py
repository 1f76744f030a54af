"""Flat buffers that hold a whole model state for one-call collectives."""

from __future__ import annotations

from collections.abc import Sequence

import torch


class FlatBuffer:
    """Contiguous storage shaped like ``like`` (a list of tensors): one buffer per
    ``(dtype, device)`` (usually exactly one), with ``views`` shaped like the tensors, so
    math can run per tensor with ``torch._foreach_*`` while a collective moves the whole
    state in a single call."""

    def __init__(self, like: Sequence[torch.Tensor]) -> None:
        order: dict[tuple[torch.dtype, torch.device], list[int]] = {}
        for i, t in enumerate(like):
            order.setdefault((t.dtype, t.device), []).append(i)
        self.buffers: list[torch.Tensor] = []
        self._layout: list[tuple[int, int, torch.Size]] = [(0, 0, torch.Size())] * len(like)
        for (dtype, device), indices in order.items():
            offset = 0
            for i in indices:
                self._layout[i] = (len(self.buffers), offset, like[i].shape)
                offset += like[i].numel()
            self.buffers.append(torch.zeros(offset, dtype=dtype, device=device))
        self.views: list[torch.Tensor] = self.views_of(self.buffers)

    @property
    def nbytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in self.buffers)

    def views_of(self, buffers: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Views of ``buffers`` (laid out as :attr:`buffers`) shaped like :attr:`views`."""
        return [buffers[b][o : o + shape.numel()].view(shape) for b, o, shape in self._layout]

    def copy_from(self, tensors: Sequence[torch.Tensor]) -> FlatBuffer:
        """Fill the buffer from ``tensors`` (same shapes); returns self."""
        if self.views:
            torch._foreach_copy_(self.views, list(tensors))
        return self

    def copy_to(self, tensors: Sequence[torch.Tensor]) -> None:
        """Write the buffer's contents into ``tensors``."""
        if self.views:
            torch._foreach_copy_(list(tensors), self.views)

    def pieces(self, tensors: Sequence[torch.Tensor], bounds: Sequence[tuple[int, int]]
               ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The pieces of ``tensors`` (shaped like :attr:`views`) in the ranges ``bounds`` (a
        ``(begin, end)`` per buffer) and the matching slices of :attr:`buffers`; a
        non-contiguous tensor that meets a range comes whole (with its whole view)."""
        mine: list[torch.Tensor] = []
        flat: list[torch.Tensor] = []
        for i, (b, offset, shape) in enumerate(self._layout):
            begin, end = max(bounds[b][0], offset), min(bounds[b][1], offset + shape.numel())
            if begin >= end:
                continue
            if tensors[i].is_contiguous():
                mine.append(tensors[i].view(-1)[begin - offset: end - offset])
                flat.append(self.buffers[b][begin:end])
            else:
                mine.append(tensors[i])
                flat.append(self.views[i])
        return mine, flat

    def copy_range_from(self, tensors: Sequence[torch.Tensor],
                        bounds: Sequence[tuple[int, int]]) -> None:
        """:meth:`copy_from` for the ranges ``bounds`` of the buffers only (:meth:`pieces`)."""
        mine, flat = self.pieces(tensors, bounds)
        if flat:
            torch._foreach_copy_(flat, mine)

    def copy_range_to(self, tensors: Sequence[torch.Tensor],
                      bounds: Sequence[tuple[int, int]]) -> None:
        """Write the ranges ``bounds`` of the buffers into ``tensors`` (:meth:`pieces`)."""
        mine, flat = self.pieces(tensors, bounds)
        if mine:
            torch._foreach_copy_(mine, flat)
