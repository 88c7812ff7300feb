"""Which Electricity Maps zone a region's live intensity is asked for: the region
table's, a zone given as it is, none for what the table does not place. (The live
fetch against a fake API: tests/system/test_carbon_live.py.)"""

from __future__ import annotations

from joulestat.carbon.live import emaps_zone_for


def test_zones_come_from_the_region_table() -> None:
    assert emaps_zone_for("eu-central-1") == "DE"
    assert emaps_zone_for("us-east-1") == "US-MIDA-PJM"
    assert emaps_zone_for("CA-QC") == "CA-QC"
    assert emaps_zone_for("FRA") is None
    assert emaps_zone_for(None) is None
