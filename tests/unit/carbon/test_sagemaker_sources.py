"""Issue 9: every SageMaker price in the catalog names its own source on its own row.

The figures below were read by hand from the cited files (docs/carbon.md, "SageMaker price
sources"); the test holds the catalog to them, so a figure changed without its source
changing fails here.
"""

from __future__ import annotations

import re

import pytest

from joulestat.carbon.catalog import (
    SAGEMAKER_PREFIX,
    default_catalog,
    lookup,
    price_per_hour,
    sagemaker_note_of,
)
from joulestat.cli.instances import as_record, render_text, select

FMB = "aws-samples/foundation-model-benchmarking-tool"
PRICING = f"{FMB}@00ef155d0f9c6b999d796f915159d3d622f8233d:src/fmbench/configs/pricing.yml"
FALLBACK = (f"{FMB}@08bcad81ad63c5dce75e71c60ba167b9fe942ce6:"
            "src/fmbench/configs/pricing_fallback.yml")
GOERLITZ = ("goerlitz/nlp-classification@06c56842b96cbe97afe7856d059165a7bddd7e52:"
            "notebooks/10kGNAD/sagemaker/README.md")
JHUAPL = ("JHUAPL-DTC-TA2/wiki@2b48144868afcfec7b2f51b3e7621a0a1d981073:"
          "docs/sagemaker_instances.md")

# ml.<type>: (USD/h as the source file lists it, the file)
HAND_CHECKED = {
    "ml.g6.2xlarge": (1.222, PRICING), "ml.g6.12xlarge": (5.752, PRICING),
    "ml.g6.16xlarge": (4.246, PRICING), "ml.g6.24xlarge": (8.344, PRICING),
    "ml.g6.48xlarge": (16.688, PRICING), "ml.g5.xlarge": (1.4084, PRICING),
    "ml.m5.xlarge": (0.23, PRICING), "ml.p3.2xlarge": (3.825, PRICING),
    "ml.g4dn.12xlarge": (4.89, PRICING), "ml.trn1.32xlarge": (28.497, PRICING),
    "ml.c5.xlarge": (0.204, FALLBACK), "ml.c5.4xlarge": (0.816, FALLBACK),
    "ml.g4dn.xlarge": (0.7364, FALLBACK), "ml.g4dn.16xlarge": (5.44, FALLBACK),
    "ml.g5.8xlarge": (3.06, FALLBACK),
    "ml.p3.8xlarge": (14.688, GOERLITZ), "ml.p3.16xlarge": (28.152, GOERLITZ),
    "ml.m5.large": (0.115, JHUAPL), "ml.c5.9xlarge": (1.836, JHUAPL),
}
# A public file at a commit (OWNER/REPO@40-hex:PATH), or a page.
_SOURCE = re.compile(r"^([\w.-]+/[\w.-]+@[0-9a-f]{40}:\S+|https://\S+)$")


def _aws_rows() -> list:
    return [s for s in default_catalog().values() if s.provider == "aws"]


def test_every_priced_ml_row_names_its_own_source() -> None:
    priced = [s for s in _aws_rows() if s.sagemaker_usd_per_hour is not None]
    assert len(priced) >= 35
    for spec in priced:
        assert spec.sagemaker_source, spec.instance_type
        assert _SOURCE.match(spec.sagemaker_source), spec.sagemaker_source
        assert sagemaker_note_of(spec).startswith("SageMaker"), spec.instance_type
        price = price_per_hour(SAGEMAKER_PREFIX + spec.instance_type)
        assert price.source == f"catalog:{spec.sagemaker_source}"
        assert price.source != "catalog:https://aws.amazon.com/ec2/pricing/on-demand/"


def test_no_source_without_a_price_and_no_sagemaker_price_off_aws() -> None:
    for spec in default_catalog().values():
        if spec.sagemaker_usd_per_hour is None:
            assert spec.sagemaker_source == "", spec.instance_type
        if spec.provider != "aws":
            assert spec.sagemaker_usd_per_hour is None, spec.instance_type


@pytest.mark.parametrize("name", sorted(HAND_CHECKED))
def test_prices_match_the_cited_files(name: str) -> None:
    usd, source = HAND_CHECKED[name]
    spec = lookup(name)
    assert spec is not None and spec.sagemaker
    assert (spec.sagemaker_usd_per_hour, spec.sagemaker_source) == (usd, source)
    assert price_per_hour(name).usd_per_hour == usd


def test_the_use_each_source_prices_is_stated() -> None:
    for spec in _aws_rows():
        note = sagemaker_note_of(spec)
        if spec.sagemaker_source.startswith(FMB):
            assert "real-time inference (endpoint) price" in note, spec.instance_type
        elif spec.sagemaker_source == JHUAPL:
            assert "Studio app" in note, spec.instance_type
        elif spec.sagemaker_source == GOERLITZ:
            assert "names neither the region nor the use" in note, spec.instance_type


def test_unpriced_types_say_where_sagemaker_sells_them_and_stay_unknown() -> None:
    unpriced = [s for s in _aws_rows() if s.sagemaker_usd_per_hour is None]
    for spec in unpriced:
        note = sagemaker_note_of(spec)
        assert "no sourced price" in note, spec.instance_type
        assert f"ml.{spec.instance_type}" in note, spec.instance_type
        price = price_per_hour(f"ml.{spec.instance_type}")
        assert price.usd_per_hour is None and price.source == "unknown"
        assert note in price.note  # the reason travels with the unknown price
    notes = {s.instance_type: sagemaker_note_of(s) for s in unpriced}
    assert "not training" in notes["c7g.xlarge"]
    assert "HyperPod cluster node" in notes["c7g.medium"]
    assert "Studio apps and HyperPod clusters only" in notes["m5.8xlarge"]
    assert "real-time inference, not training" in notes["inf1.xlarge"]
    assert "for real-time inference" in notes["dl1.24xlarge"]  # ProductionVariant lists it


def test_instances_json_and_table_show_the_sagemaker_source() -> None:
    [record] = [as_record(s) for s in select("ml.c5.xlarge")]
    assert record["sagemaker_source"] == FALLBACK
    assert record["sagemaker_note"].startswith("SageMaker: real-time inference")
    assert record["source"] == "https://aws.amazon.com/ec2/pricing/on-demand/"
    [unpriced] = [as_record(s) for s in select("ml.c6i.large")]
    assert unpriced["sagemaker_source"] is None and "no sourced price" in (
        unpriced["sagemaker_note"])
    text = render_text([as_record(s) for s in select("p3.")])
    assert f"[1] {PRICING}" in text and f"[2] {GOERLITZ}" in text
    [row] = [line for line in text.splitlines() if line.startswith("p3.8xlarge ")]
    assert "14.688" in row and "[2]" in row
