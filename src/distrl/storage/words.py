"""Tensors as float32 words: how float64 rows and uint8 images ride in a float32 message.

Pure tensor code, used by the rollout codec beside the buffer and by the peer transport
(``distributed/transport.py``), which re-exports these names.
"""

from __future__ import annotations

import torch


def pack64(t: torch.Tensor) -> torch.Tensor:
    """float64 -> float32 words of the same bytes (exact, no conversion)."""
    return t.detach().to(torch.float64).contiguous().view(torch.float32)


def unpack64(words: torch.Tensor) -> torch.Tensor:
    return words.clone().view(torch.float64)  # a fresh, aligned copy of the words


def pack_bytes(t: torch.Tensor) -> torch.Tensor:
    """A uint8 tensor as float32 words of the same bytes (zero-padded to a multiple of 4):
    images cross the wire at one byte per pixel."""
    flat = t.detach().reshape(-1).contiguous()
    pad = -flat.numel() % 4
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    return flat.view(torch.float32)


def unpack_bytes(words: torch.Tensor, n: int) -> torch.Tensor:
    """The first ``n`` bytes of ``pack_bytes``' words, uint8."""
    return words.contiguous().view(torch.uint8)[:n]
