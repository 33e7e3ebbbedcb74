"""Every family learns on the embedded corpus, and `aogpt` with order `l2r` tracks `ar`."""
import pytest
import torch

from jobs.data.corpus import Batches, get_encoding, token_array
from models import build_model

SEQ_LEN, BATCH, STEPS = 64, 16, 100


@pytest.fixture(scope="module")
def shakespeare(tmp_path_factory):
    import os

    os.environ["AOSCALE_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    return token_array("shakespeare", "bytes", "train")


def _train(family, tokens, steps=STEPS, **options):
    torch.manual_seed(0)
    model = build_model(family, "0.1M", vocab_size=get_encoding("bytes").n_vocab, seq_len=SEQ_LEN, **options)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.0)
    batches, gen = Batches(tokens, BATCH, SEQ_LEN, seed=0), torch.Generator().manual_seed(0)
    losses = []
    for step in range(steps):
        loss = model.loss(batches.get(step), gen)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("family,options", [
    ("ar", {}), ("aogpt", {}), ("sigma_gpt", {}), ("mdm", {"loss": "mdlm"}), ("mdm", {"loss": "kdce"}),
    ("mdm", {"loss": "sedd"}),
])
def test_loss_falls_within_100_steps(shakespeare, family, options):
    losses = _train(family, shakespeare, **options)
    first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    assert last < 0.8 * first, (family, first, last)


def test_aogpt_l2r_tracks_ar(shakespeare):
    ar = _train("ar", shakespeare)
    ao = _train("aogpt", shakespeare, order="l2r")
    ar_end, ao_end = sum(ar[-10:]) / 10, sum(ao[-10:]) / 10
    uniform = _train("aogpt", shakespeare, order="uniform")
    assert abs(ao_end - ar_end) / ar_end < 0.05, (ar_end, ao_end)
    assert sum(uniform[-10:]) / 10 > ar_end  # any order is harder than left-to-right
