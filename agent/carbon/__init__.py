"""Energy -> carbon and money: grid intensity, PUE, instance catalog, embodied emissions.

:func:`joulestat.carbon.footprint.footprint` is the entry point; docs/carbon.md lists every
source, formula, default and fallback.
"""
