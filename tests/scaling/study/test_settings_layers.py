"""scaling.study.settings as a unit: each layer checked key by key, then base < preset < TOML < flags,
the tables ([run], [resources]) merged field by field."""
from __future__ import annotations

import pytest

from cli import InputError
from scaling.study.settings import check_layer, load_settings


def test_a_layer_skips_unset_keys_checks_each_and_refuses_unknown_ones():
    assert check_layer({"seeds": 3, "lr": None, "sizes": "0.1M, 0.3M"}, "flags") == {"seeds": 3,
                                                                                  "sizes": ("0.1M", "0.3M")}
    with pytest.raises(InputError, match=r"^spec: unknown key 'seed'; valid: name, preset,"):
        check_layer({"seed": 1}, "spec")
    with pytest.raises(InputError, match=r"^seeds: 0 must be a positive integer$"):
        check_layer({"seeds": 0}, "spec")
    with pytest.raises(InputError, match=r"^ema: 1\.0 must be a number in \[0, 1\)$"):
        check_layer({"ema": 1.0}, "flags")


def test_flags_win_over_the_study_file_and_tables_merge_field_by_field():
    toml = {"families": "ar", "sizes": "0.1M", "seeds": 2, "run": {"beta2": 0.95, "grad_clip": 0.5}}
    settings = load_settings({"seeds": 3, "run": {"grad_clip": 2.0}}, toml)
    assert settings.seeds == 3 and settings.sizes == ("0.1M",) and settings.preset is None
    assert dict(settings.run) == {"beta2": 0.95, "grad_clip": 2.0}
    assert [arm.family for arm in settings.arms] == ["ar"]
    assert settings.name == "study" and settings.renamed  # a changed study without a name of its own


def test_no_sizes_families_or_arms_means_the_quickstart_preset():
    settings = load_settings({})
    assert settings.preset == "quickstart" and settings.name == "quickstart" and not settings.renamed
    assert load_settings({"name": "mine"}).name == "mine"
