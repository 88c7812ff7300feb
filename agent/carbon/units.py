"""The unit conversions of the carbon package, each in one place.

Energy travels through joulestat as joules (ARCHITECTURE.md); grid intensities are quoted
per kWh, eGRID rates per MWh in pounds, embodied emissions in kilograms and instance
lifetimes in years. Every conversion between those lives here so that no module carries
its own copy of a factor.
"""

from __future__ import annotations

J_PER_KWH = 3_600_000.0  # 1 kWh = 1000 W x 3600 s
S_PER_HOUR = 3600.0
G_PER_KG = 1000.0
# The avoirdupois pound is defined as exactly 0.45359237 kg (International Yard and
# Pound Agreement, 1959), so 1 lb/MWh = 453.59237 g / 1000 kWh.
G_PER_LB = 453.59237
KWH_PER_MWH = 1000.0
# A Julian year (365.25 days): the SCI specification leaves the year length open; CCF's
# own hourly factor uses 12 x 30-day months (360 days), which overstates embodied
# emissions per hour by 1.46 % against this.
S_PER_YEAR = 365.25 * 86400.0


def j_to_kwh(energy_j: float) -> float:
    """Joules to kilowatt-hours."""
    return energy_j / J_PER_KWH


def lbs_per_mwh_to_g_per_kwh(rate_lbs_per_mwh: float) -> float:
    """eGRID's output emission rates (lb/MWh) to grams per kWh."""
    return rate_lbs_per_mwh * G_PER_LB / KWH_PER_MWH


def kg_to_g(mass_kg: float) -> float:
    """Kilograms to grams."""
    return mass_kg * G_PER_KG


def s_to_hours(duration_s: float) -> float:
    """Seconds to hours (prices are per hour)."""
    return duration_s / S_PER_HOUR


def years_to_s(years: float) -> float:
    """Julian years to seconds."""
    return years * S_PER_YEAR
