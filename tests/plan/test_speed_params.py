"""The speed-model constants file: the shipped one loads; a broken one gets one message naming file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplanner.plan.catalog import load_catalog
from gpuplanner.plan.speed_params import SpeedModelError, load_speed_model, parse_speed_model

GOOD = """
[shared]
hidden_half = 500.0
tokens_half = 500.0
attention_efficiency = 0.5
elementwise_bytes = 4.0
launch_s_per_layer = 0.0001
adapter_bytes = 40.0
bandwidth_efficiency = 0.8
overlap = 0.8

[generation.Ampere]
matmul_efficiency = 0.7

[generation.default]
matmul_efficiency = 0.6

[network.gpus]
"A100 80GB" = 200.0

[network.default]
nvlink = 150.0
pcie = 12.5

[uncertainty]
loso_pct = 25.0
calibrated_pct = 20.0
"""


def test_the_shipped_model_covers_every_catalog_gpu() -> None:
    model = load_speed_model()
    for gpu in load_catalog().gpus:
        params = model.params_for(gpu)
        assert 0 < params.matmul_efficiency <= 1 and params.network_gbs > 0


def test_generation_and_network_lookup(tmp_path: Path) -> None:
    path = tmp_path / "speed_model.toml"
    path.write_text(GOOD)
    model = parse_speed_model(path)
    catalog = load_catalog()
    a100 = catalog.gpu("A100 80GB")
    h100 = catalog.gpu("H100 SXM")
    assert model.params_for(a100).matmul_efficiency == 0.7
    assert model.params_for(h100).matmul_efficiency == 0.6  # Hopper not listed: the default
    assert model.params_for(a100).network_gbs == 200.0 and model.params_for(h100).network_gbs == 150.0
    assert model.params_for(a100, efficiency_scale=2.0).matmul_efficiency == 1.0  # never past the peak
    assert (model.loso_pct, model.calibrated_pct, model.matched_pct) == (25.0, 20.0, 5.0)


def test_an_unfitted_generation_takes_its_closest_fitted_one_and_says_why(tmp_path: Path) -> None:
    """Volta and Turing take Ampere's efficiency, data-centre Blackwell Hopper's, GeForce Blackwell Ada's; a
    generation with no close one (CDNA 3), or whose stand-in is not fitted either, takes the default."""
    path = tmp_path / "speed_model.toml"
    path.write_text(
        GOOD.replace("[generation.default]", "[generation.Hopper]\nmatmul_efficiency = 0.4\n\n[generation.default]")
    )
    model = parse_speed_model(path)
    catalog = load_catalog()
    expected = {"V100 32GB": 0.7, "T4": 0.7, "B200": 0.4, "RTX 5090": 0.6, "MI300X": 0.6, "A100 80GB": 0.7}
    assert {name: model.params_for(catalog.gpu(name)).matmul_efficiency for name in expected} == expected
    assert model.unfitted_note(catalog.gpu("A100 80GB")) == ""
    b200 = model.unfitted_note(catalog.gpu("B200"))
    assert "Blackwell generation" in b200 and "Hopper's is used" in b200 and "tcgen05" in b200
    v100 = model.unfitted_note(catalog.gpu("V100 32GB"))
    assert "Ampere's is used" in v100 and "mma" in v100
    # RTX 5090's stand-in (Ada Lovelace) is not fitted in this file: the mean, said as such
    assert "the fitted generations' mean is used" in model.unfitted_note(catalog.gpu("RTX 5090"))
    assert "the fitted generations' mean is used" in model.unfitted_note(catalog.gpu("MI300X"))
    # the shipped file fits Ada Lovelace: GeForce Blackwell takes its efficiency
    shipped = load_speed_model()
    assert shipped.params_for(catalog.gpu("RTX 5090")).matmul_efficiency == shipped.generations["Ada Lovelace"]
    assert "Ada Lovelace's is used" in shipped.unfitted_note(catalog.gpu("RTX 5090"))


@pytest.mark.parametrize(
    "broken, expected",
    [
        (GOOD.replace("overlap = 0.8\n", ""), "[shared] lacks overlap"),
        (GOOD.replace("hidden_half = 500.0", 'hidden_half = "big"'), "shared.hidden_half must be a number"),
        (GOOD.replace("[generation.default]\nmatmul_efficiency = 0.6\n", ""), "[generation.default] is required"),
        (GOOD.replace("overlap = 0.8", "overlap = 1.5"), "overlap must be between 0 and 1"),
        ("[shared\n", "not valid TOML"),
    ],
)
def test_a_broken_file_gets_one_message_naming_it(tmp_path: Path, broken: str, expected: str) -> None:
    path = tmp_path / "speed_model.toml"
    path.write_text(broken)
    with pytest.raises(SpeedModelError) as info:
        parse_speed_model(path)
    assert str(path) in str(info.value) and expected in str(info.value)
