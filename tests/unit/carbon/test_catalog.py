"""Instance catalog, prices (EC2 and SageMaker), embodied emissions and PUE defaults."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from joulestat.carbon.catalog import default_catalog, load_catalog, lookup, price_per_hour
from joulestat.carbon.embodied import embodied_g
from joulestat.carbon.pue import infer_provider, pue_for

# Published specs (provider instance pages), independent of the catalog file.
KNOWN_SPECS = [
    # type, vCPUs, memory GiB, accelerators
    ("p4d.24xlarge", 96, 1152, 8),
    ("p5.48xlarge", 192, 2048, 8),
    ("p3.2xlarge", 8, 61, 1),
    ("g5.12xlarge", 48, 192, 4),
    ("inf2.48xlarge", 192, 768, 12),
    ("trn1.32xlarge", 128, 512, 16),
    ("m5.large", 2, 8, 0),
    ("a2-highgpu-8g", 96, 680, 8),
    ("Standard_NC24ads_A100_v4", 24, 220, 1),
]

REQUIRED_TYPES = (
    [f"inf1.{s}" for s in ("xlarge", "2xlarge", "6xlarge", "24xlarge")]
    + [f"inf2.{s}" for s in ("xlarge", "8xlarge", "24xlarge", "48xlarge")]
    + ["trn1.2xlarge", "trn1.32xlarge", "p3.2xlarge", "p3.8xlarge", "p3.16xlarge",
       "p4d.24xlarge", "p5.48xlarge"]
    + [f"g4dn.{s}" for s in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge")]
    + [f"g5.{s}" for s in ("xlarge", "2xlarge", "4xlarge", "12xlarge", "48xlarge")]
    + ["c5.xlarge", "c6i.xlarge", "c7g.xlarge", "m5.large", "m5.24xlarge"]
    + [f"a2-highgpu-{n}g" for n in (1, 2, 4, 8)]
    + ["g2-standard-4", "g2-standard-96", "n2-standard-2", "n2-standard-80"]
    + ["Standard_NC24ads_A100_v4", "Standard_NC4as_T4_v3", "Standard_ND96asr_v4",
       "Standard_ND96isr_H100_v5"]
)


@pytest.mark.parametrize("instance_type, vcpus, memory_gib, accelerators", KNOWN_SPECS)
def test_lookup_matches_published_specs(instance_type: str, vcpus: int, memory_gib: float,
                                        accelerators: int) -> None:
    spec = lookup(instance_type)
    assert spec is not None
    assert (spec.vcpus, spec.memory_gib, spec.accelerator_count) == (
        vcpus, memory_gib, accelerators)
    assert spec.source.startswith("https://") and spec.date


def test_catalog_covers_the_required_types() -> None:
    missing = [t for t in REQUIRED_TYPES if lookup(t) is None]
    assert missing == []


def test_lookup_is_case_insensitive_and_keeps_the_asked_name() -> None:
    spec = lookup("standard_nc24ads_a100_v4")
    assert spec is not None and spec.provider == "azure"


def test_family_max_vcpus_is_at_least_every_listed_size() -> None:
    families: dict[str, int] = {}
    for spec in default_catalog().values():
        family = re.split(r"[.]|-\d|-standard|-highgpu", spec.instance_type)[0]
        families[family] = max(families.get(family, 0), spec.vcpus)
        assert spec.vcpus <= spec.family_max_vcpus
        assert spec.lifetime_years == 4
    for spec in default_catalog().values():
        family = re.split(r"[.]|-\d|-standard|-highgpu", spec.instance_type)[0]
        assert spec.family_max_vcpus >= families[family], spec.instance_type


def test_sagemaker_type_uses_the_ec2_spec_and_its_own_price() -> None:
    ec2 = lookup("g5.xlarge")
    ml = lookup("ml.g5.xlarge")
    assert ec2 is not None and ml is not None
    assert ml.sagemaker and not ec2.sagemaker
    assert ml.instance_type == "ml.g5.xlarge"
    assert (ml.vcpus, ml.accelerator_count, ml.embodied_kgco2e) == (
        ec2.vcpus, ec2.accelerator_count, ec2.embodied_kgco2e)
    price = price_per_hour("ml.g5.xlarge")
    assert price.usd_per_hour == ec2.sagemaker_usd_per_hour
    assert price.usd_per_hour is not None and price.usd_per_hour > ec2.usd_per_hour
    assert "SageMaker" in price.note


def test_sagemaker_type_without_a_sagemaker_price_is_unknown_not_the_ec2_price() -> None:
    assert lookup("ml.c6i.large") is not None
    price = price_per_hour("ml.c6i.large")
    assert price.usd_per_hour is None
    assert "no SageMaker price for ml.c6i.large" in price.note
    assert "--prices FILE" in price.note  # says what to type


def test_sagemaker_prices_of_the_types_the_issue_names() -> None:
    """The ml.* prices docs/carbon.md sources (issue 9), each above the EC2 price; more
    in test_sagemaker_sources.py."""
    sourced = {"ml.p4d.24xlarge": 37.688, "ml.p5.48xlarge": 113.068,
               "ml.trn1.32xlarge": 28.497, "ml.inf2.xlarge": 0.99, "ml.inf2.8xlarge": 2.36,
               "ml.inf2.24xlarge": 7.79, "ml.inf2.48xlarge": 15.58}
    for name, usd in sourced.items():
        price = price_per_hour(name)
        ec2 = lookup(name.removeprefix("ml."))
        assert price.usd_per_hour == usd, name
        assert ec2 is not None and ec2.usd_per_hour is not None and usd > ec2.usd_per_hour
        assert price.source.startswith(
            "catalog:aws-samples/foundation-model-benchmarking-tool@"), name
        assert "FMBench" in price.note, name
        assert "SageMaker" not in price_per_hour(ec2.instance_type).note  # EC2 note is EC2's
    for spec in default_catalog().values():  # every AWS row says what it knows of SageMaker
        if spec.provider == "aws" and spec.sagemaker_usd_per_hour is None:
            assert "no sourced price" in spec.price_note, spec.instance_type


def test_unknown_types_have_unknown_price_never_zero() -> None:
    for name in ("zz9.large", "ml.zz9.large", "local", "", None):
        assert lookup(name) is None
        price = price_per_hour(name)
        assert price.usd_per_hour is None
        assert "cost unknown" in price.note


def test_ec2_price_and_override() -> None:
    spec = lookup("m5.large")
    assert spec is not None
    price = price_per_hour("m5.large")
    assert price.usd_per_hour == spec.usd_per_hour
    assert price.source == "catalog:https://aws.amazon.com/ec2/pricing/on-demand/"
    assert "us-east-1" in price.note
    assert price_per_hour("m5.large", override_usd=0.5).usd_per_hour == 0.5
    assert price_per_hour("zz9.large", override_usd=0.5).source == "override"
    with pytest.raises(ValueError):
        price_per_hour("m5.large", override_usd=-1)


def test_n2_prices_follow_googles_per_resource_rates() -> None:
    for vcpus in (2, 8, 80):
        spec = lookup(f"n2-standard-{vcpus}")
        assert spec is not None
        assert spec.usd_per_hour == pytest.approx(vcpus * 0.031611 + 4 * vcpus * 0.004237,
                                                  abs=1e-4)


_FORMULA = re.compile(r"1000 \+ \((\d+)-16\) GiB x 533/384 \+ \((\d+)-1\) CPU x 100 \+ "
                      r"(\d+) SSD x 100 \+ (\d+) GPU x 150 kg")


def test_embodied_figures_computed_by_formula_match_ccfs_formula() -> None:
    checked = 0
    for spec in default_catalog().values():
        match = _FORMULA.search(spec.embodied_source)
        if match is None:
            assert spec.embodied_source.startswith("CCF cloud-carbon-coefficients"), spec
            continue
        memory, sockets, ssds, gpus = (int(g) for g in match.groups())
        expected = 1000 + (memory - 16) * 533 / 384 + (sockets - 1) * 100 + ssds * 100 + gpus * 150
        assert spec.embodied_kgco2e == pytest.approx(expected, abs=0.01), spec.instance_type
        checked += 1
    assert checked >= 20


def test_ccfs_published_p4d_coefficient_follows_the_same_formula() -> None:
    # p4d.24xlarge: 1152 GiB, 2 sockets, 8 NVMe SSDs, 8 A100 (AWS instance page).
    spec = lookup("p4d.24xlarge")
    assert spec is not None
    assert spec.embodied_kgco2e == pytest.approx(
        1000 + (1152 - 16) * 533 / 384 + 100 + 8 * 100 + 8 * 150, abs=0.01)


def test_embodied_share_by_time_and_vcpus() -> None:
    spec = lookup("g5.12xlarge")
    assert spec is not None
    four_years_s = 4 * 365.25 * 86400
    result = embodied_g(spec, 3600.0)
    expected_g = spec.embodied_kgco2e * 1000 * (3600 / four_years_s) * (48 / 192)
    assert result.g == pytest.approx(expected_g)
    assert result.method == "sci-m:ccf-vcpu-share"
    assert "48 / 192 vCPUs" in result.note and "not by accelerator" in result.note
    # Doubling the time doubles it; the whole-family instance gets the whole server share.
    assert embodied_g(spec, 7200.0).g == pytest.approx(2 * expected_g)
    largest = lookup("g5.48xlarge")
    assert largest is not None
    assert embodied_g(largest, four_years_s).g == pytest.approx(largest.embodied_kgco2e * 1000)


def test_embodied_unknown_and_invalid() -> None:
    unknown = embodied_g(None, 3600.0)
    assert unknown.g is None and "not in the catalog" in unknown.note
    spec = lookup("m5.large")
    assert spec is not None
    assert embodied_g(spec, 0.0).g == 0.0
    with pytest.raises(ValueError):
        embodied_g(spec, -1.0)


@pytest.mark.parametrize("instance_type, region, provider, value", [
    ("p4d.24xlarge", None, "aws", 1.135),
    ("ml.p4d.24xlarge", None, "aws", 1.135),
    ("m7i.large", None, "aws", 1.135),  # not in the catalog: EC2 naming scheme
    ("a2-highgpu-1g", None, "gcp", 1.1),
    ("c3-standard-8", None, "gcp", 1.1),
    ("Standard_NC24ads_A100_v4", None, "azure", 1.185),
    ("Standard_E8s_v5", None, "azure", 1.185),
    (None, "westeurope", "azure", 1.185),
    ("local", "us-central1", "gcp", 1.1),
    ("local", None, None, 1.0),
    (None, "FRA", None, 1.0),
])
def test_pue_defaults_by_provider(instance_type: str | None, region: str | None,
                                  provider: str | None, value: float) -> None:
    assert infer_provider(instance_type, region) == provider
    pue = pue_for(instance_type, region, None)
    assert (pue.value, pue.provider) == (value, provider)
    assert pue.source.startswith("ccf:" if provider else "default:")


def test_pue_override_wins_and_is_checked() -> None:
    assert pue_for("p4d.24xlarge", "us-east-1", 1.4).value == 1.4
    assert pue_for("p4d.24xlarge", "us-east-1", 1.4).source == "override"
    with pytest.raises(ValueError):
        pue_for(None, None, 0.9)


def _write_catalog(path: Path, row: str) -> Path:
    header = ("provider,instance_type,vcpus,memory_gib,accelerator_model,accelerator_count,"
              "usd_per_hour,sagemaker_usd_per_hour,sagemaker_source,accelerator_max_power_w,"
              "embodied_kgco2e,"
              "embodied_source,lifetime_years,family_max_vcpus,source,date,price_note,note\n")
    path.write_text("# test catalog\n" + header + row + "\n")
    return path


@pytest.mark.parametrize("row, message", [
    ("aws,x.large,2,8,,0,0.1,,,,1000,src,4,2,,2025,,", "source and a date"),
    ("aws,x.large,4,8,,0,0.1,,,,1000,src,4,2,u,2025,,", "vcpus <= family_max_vcpus"),
    ("aws,x.large,2,8,,0,-0.1,,,,1000,src,4,2,u,2025,,", "usd_per_hour must be >= 0"),
    ("aws,x.large,2,8,,0,0.1,,,,1000,,4,2,u,2025,,", "needs an embodied_source"),
    ("ibm,x.large,2,8,,0,0.1,,,,1000,src,4,2,u,2025,,", "provider"),
    ("aws,x.large,2,8,,0,0.1,0.2,,,1000,src,4,2,u,2025,,", "needs a sagemaker_source"),
    ("aws,x.large,2,8,,0,0.1,,o/r@c:p,,1000,src,4,2,u,2025,,", "without sagemaker_usd"),
    ("gcp,x-1,2,8,,0,0.1,0.2,o/r@c:p,,1000,src,4,2,u,2025,,", "aws rows only"),
])
def test_catalog_rejects_bad_rows(tmp_path: Path, row: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_catalog(_write_catalog(tmp_path / "c.csv", row))


def test_catalog_reads_a_valid_row(tmp_path: Path) -> None:
    catalog = load_catalog(_write_catalog(
        tmp_path / "c.csv", "aws,x.large,2,8,,0,0.1,0.2,o/r@c:p,,1000,src,4,2,u,2025,,"))
    spec = catalog["x.large"]
    assert (spec.usd_per_hour, spec.sagemaker_usd_per_hour, spec.embodied_kgco2e) == (
        0.1, 0.2, 1000.0)
    assert spec.sagemaker_source == "o/r@c:p"


def test_accelerator_instance_types_name_their_devices() -> None:
    """Issue 14: each accelerator family the catalog lists says what it carries."""
    from joulestat.carbon.catalog import accelerators_of

    expected = {"inf1.xlarge": "1 x AWS Inferentia", "inf2.xlarge": "1 x AWS Inferentia2",
                "trn1.32xlarge": "16 x AWS Trainium", "trn2.48xlarge": "16 x AWS Trainium2",
                "dl1.24xlarge": "8 x Intel Gaudi HL-205", "g4dn.xlarge": "1 x NVIDIA T4",
                "g5.xlarge": "1 x NVIDIA A10G", "g6.xlarge": "1 x NVIDIA L4",
                "p3.2xlarge": "1 x NVIDIA V100 SXM2 16GB",
                "p4d.24xlarge": "8 x NVIDIA A100 SXM4 40GB",
                "p5.48xlarge": "8 x NVIDIA H100 SXM5 80GB",
                "p5e.48xlarge": "8 x NVIDIA H200 SXM 141GB",
                "Standard_ND96isr_MI300X_v5": "8 x AMD Instinct MI300X",
                "ml.inf2.xlarge": "1 x AWS Inferentia2", "c5.large": "none",
                "zz9.large": "unknown"}
    for name, devices in expected.items():
        assert accelerators_of(name) == devices, name
    for name in expected:
        spec = lookup(name)
        if spec is not None:
            assert spec.source and spec.date, name
