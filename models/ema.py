"""Exponential moving average of weights with the AO-GPT warm-up min(rate, (1+n)/(10+n))."""
from __future__ import annotations

import torch
from torch import nn

EMA_RATES = (0.0, 0.99, 0.999, 0.9999)


def ema_decay(rate: float, n_updates: int) -> float:
    """Decay at update n (0-based): short memory early so the average tracks training."""
    return min(rate, (1 + n_updates) / (10 + n_updates))


class EMA:
    """Shadow copy of a model's floating-point parameters; rate 0 means off (a no-op)."""

    def __init__(self, model: nn.Module, rate: float):
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"ema: rate {rate} must be in [0, 1); common: {EMA_RATES}")
        self.rate = float(rate)
        self.n_updates = 0
        self.model = model
        self.shadow = {n: p.detach().clone().float() for n, p in model.named_parameters()} if rate else {}

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    @torch.no_grad()
    def update(self) -> None:
        """Fold the model's current weights into the average."""
        if not self.enabled:
            return
        decay = ema_decay(self.rate, self.n_updates)
        for name, p in self.model.named_parameters():
            self.shadow[name].lerp_(p.detach().float(), 1.0 - decay)
        self.n_updates += 1

    def state_dict(self) -> dict:
        return {"rate": self.rate, "n_updates": self.n_updates, "shadow": dict(self.shadow)}

    def load_state_dict(self, state: dict) -> None:
        self.rate, self.n_updates = float(state["rate"]), int(state["n_updates"])
        self.shadow = {k: v.clone() for k, v in state["shadow"].items()}

    @torch.no_grad()
    def apply_to(self, model: nn.Module) -> None:
        """Copy the averaged weights into `model` (same architecture)."""
        for name, p in model.named_parameters():
            p.copy_(self.shadow[name].to(p.dtype))
