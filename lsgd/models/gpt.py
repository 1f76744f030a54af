"""A small decoder-only transformer (GPT-2's shape, Radford et al., 2019), and GPT-2 itself
from Hugging Face ``transformers`` built from a config (never downloaded weights)."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from lsgd.models.shared import _check_positive
from lsgd.names import LANGUAGE_MODELS  # by name, for messages and the command line


class Block(nn.Module):
    """One pre-LayerNorm transformer block: ``x + attn(ln(x))``, then ``x + mlp(ln(x))``."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln_attn = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)  # writes into the residual stream
        self.ln_mlp = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)  # writes into the residual stream

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.ln_attn(x)).split(width, dim=2)
        # [B, T, C] -> [B, heads, T, C / heads]
        q, k, v = (t.view(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, width))
        return x + self.down(F.gelu(self.up(self.ln_mlp(x))))


class GPT(nn.Module):
    """A decoder-only transformer over ``vocab`` tokens: token and learned position
    embeddings, ``layers`` :class:`Block` (causal attention, 4x-wide GELU MLP), a final
    LayerNorm, and logits from the token embedding itself (tied: one matrix in the state).
    GPT-2's initialization (weights N(0, 0.02), biases zero, the two projections into the
    residual stream scaled by ``1 / sqrt(2 * layers)``); no dropout.

    ``forward(tokens)``: int64 ``[B, T]`` with ``T <= context`` -> logits
    ``[B, T, vocab]``; the logits at position ``t`` depend on tokens ``0..t`` only."""

    def __init__(self, vocab: int = 256, context: int = 128, layers: int = 4, width: int = 128,
                 heads: int = 4) -> None:
        super().__init__()
        check_sizes(vocab=vocab, context=context, layers=layers, width=width, heads=heads)
        self.context = context
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_out = nn.LayerNorm(width)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() >= 2:  # LayerNorm weights stay 1
                residual = name.endswith(("proj.weight", "down.weight"))
                nn.init.normal_(p, std=0.02 / (math.sqrt(2 * layers) if residual else 1.0))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.shape[1]
        if length > self.context:
            raise ValueError(f"GPT: {length} tokens in a sequence, more than its context of "
                             f"{self.context}")
        x = self.tokens(tokens) + self.positions.weight[:length]
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_out(x), self.tokens.weight)  # tied output embedding


def check_sizes(**sizes: int) -> None:
    """Positive sizes, and a width that the heads divide; ``ValueError`` otherwise."""
    _check_positive(**sizes)
    if sizes["width"] % sizes["heads"]:
        raise ValueError(f"heads={sizes['heads']} must divide width={sizes['width']} "
                         "(each head takes width / heads channels)")


class HFCausalLM(nn.Module):
    """A Hugging Face causal language model as ``tokens [B, T] -> logits [B, T, vocab]``
    (the submodule ``lm``, so the state is its own)."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=tokens).logits


def hf_gpt2(vocab: int = 256, context: int = 128, layers: int = 4, width: int = 128,
            heads: int = 4) -> HFCausalLM:
    """``transformers.GPT2LMHeadModel`` built from a ``GPT2Config`` of these sizes (no
    dropout, random initialization: nothing is downloaded); ``ImportError`` with the
    install command when ``transformers`` is missing."""
    check_sizes(vocab=vocab, context=context, layers=layers, width=width, heads=heads)
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
        from transformers.utils import logging
    except ImportError as error:
        raise ImportError("--model hf-gpt2 needs Hugging Face transformers: "
                          "pip install 'lsgd[hf]'") from error
    logging.set_verbosity_error()  # its notes on token ids a byte vocabulary does not use
    config = GPT2Config(vocab_size=vocab, n_positions=context, n_embd=width, n_layer=layers,
                        n_head=heads, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        bos_token_id=None, eos_token_id=None)
    return HFCausalLM(GPT2LMHeadModel(config))


def build_language_model(name: str, vocab: int, context: int, layers: int, width: int,
                         heads: int) -> nn.Module:
    """The language model ``name`` (one of :data:`LANGUAGE_MODELS`) of these sizes."""
    if name == "gpt":
        return GPT(vocab, context, layers, width, heads)
    if name == "hf-gpt2":
        return hf_gpt2(vocab, context, layers, width, heads)
    raise ValueError(f"unknown language model {name!r}; choose one of "
                     f"{', '.join(LANGUAGE_MODELS)}")


def count_parameters(model: nn.Module) -> int:
    """The model's trainable values, each counted once (a tied matrix once)."""
    return sum(p.numel() for p in model.parameters())
