"""An MDM's exact L2R score, batched (models.likelihood.masked_prefix_logits): equal to the
unbatched computation (one forward per span position, the head over every position) to float32
rounding, whatever the chunking of its rows."""
from __future__ import annotations

import pytest
import torch

from models import build_model
from models import likelihood as lk

V, L = 61, 12


def unbatched_span_logits(model, tokens: torch.Tensor, a: int, b: int) -> torch.Tensor:
    """The former implementation: for each sequence and span position i, one forward of the
    sequence with x_i..x_{b-1} masked, the full [L, V] logits, row i kept."""
    out = torch.empty(tokens.shape[0], b - a, V)
    pos = torch.arange(tokens.shape[1])
    for n in range(tokens.shape[0]):
        for i in range(a, b):
            mask = ((pos >= i) & (pos < b))[None]
            x_t = lk.mask_tokens(model, tokens[n:n + 1], mask)
            out[n, i - a] = model(x_t, lk.mdm_level(model, mask.float().mean(1)))[0, i]
    return out


@pytest.mark.parametrize("options", [{"loss": "mdlm"}, {"loss": "sedd"}, {"loss": "kdce", "pos": "rope"}])
@pytest.mark.parametrize("span", [(0, L), (3, 9)])
def test_batched_masked_prefixes_equal_one_forward_per_position(options, span, monkeypatch):
    torch.manual_seed(0)
    model = build_model("mdm", "0.1M", vocab_size=V, seq_len=L, **options).eval()
    tokens = torch.randint(0, V, (3, L))
    a, b = span
    with torch.no_grad():
        expected = unbatched_span_logits(model, tokens, a, b)
        got = lk.span_logits(model, tokens, a, b)
        # rows of several sequences per forward, and chunks that cut a sequence's rows in two
        monkeypatch.setattr(lk, "MAX_LOGIT_ELEMENTS", 5 * L * model.shape.d_model * lk.ROW_ACTIVATIONS)
        chunked = lk.span_logits(model, tokens, a, b)
    assert got.shape == (3, b - a, V)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(chunked, expected, rtol=0, atol=1e-6)
    nll = lk.l2r_nll(model, tokens) if span == (0, L) else None
    if nll is not None:
        ref = torch.nn.functional.cross_entropy(expected.flatten(0, 1), tokens.flatten(), reduction="none")
        torch.testing.assert_close(nll, ref.view(3, L), rtol=0, atol=1e-6)
