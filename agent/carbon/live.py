"""Optional live grid intensity from the Electricity Maps API, cached per zone.

Static tables give a yearly average; the grid's real intensity swings by a factor of two
or more within a day, so a running job can be charged what the grid emits now when the
user has an Electricity Maps token. This is strictly optional and never blocks a report:
each request has a timeout of at most 2 s, every failure (network, HTTP status, bad JSON,
missing field) returns None after one log line, and the caller falls back to the static
value of :mod:`joulestat.carbon.intensity`. A failed zone is not asked again for
``failure_cooldown_s``, so an outage costs one timeout, not one per tick.

API (v3): ``GET {base}/v3/carbon-intensity/latest?zone=XX`` with header ``auth-token``;
the answer carries ``carbonIntensity`` (gCO2e/kWh), ``datetime``, ``emissionFactorType``
(lifecycle by default) and ``isEstimated``. https://docs.electricitymaps.com/

Only the *latest* value is used, and only for energy measured within ``ttl_s`` of now
(see :mod:`joulestat.carbon.footprint`): applying today's intensity to last week's energy
would be wrong, so older energy keeps the static figure.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable

from joulestat.carbon.intensity import Intensity
from joulestat.carbon.regions import find_region

log = logging.getLogger(__name__)

DEFAULT_URL = "https://api.electricitymap.org"
DEFAULT_TTL_S = 15 * 60.0
MAX_TIMEOUT_S = 2.0
DEFAULT_FAILURE_COOLDOWN_S = 60.0
_CA_PROVINCE = re.compile(r"^CA-[A-Z]{2}$")


def emaps_zone_for(region: str | None) -> str | None:
    """The Electricity Maps zone of a cloud region (from cloud_regions.csv) or province."""
    if not region:
        return None
    cloud, _ = find_region(region)
    if cloud is not None:
        return cloud.emaps_zone
    upper = region.strip().upper()
    return upper if _CA_PROVINCE.match(upper) else None


class ElectricityMapsClient:
    """Latest intensity per zone, cached for ``ttl_s``; thread-safe."""

    def __init__(
        self,
        token: str,
        base_url: str = DEFAULT_URL,
        ttl_s: float = DEFAULT_TTL_S,
        timeout_s: float = MAX_TIMEOUT_S,
        failure_cooldown_s: float = DEFAULT_FAILURE_COOLDOWN_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not token:
            raise ValueError("an Electricity Maps token is required")
        if ttl_s <= 0 or timeout_s <= 0:
            raise ValueError("ttl_s and timeout_s must be positive")
        self.base_url = base_url.rstrip("/")
        self.ttl_s = float(ttl_s)
        self.timeout_s = min(float(timeout_s), MAX_TIMEOUT_S)
        self.failure_cooldown_s = float(failure_cooldown_s)
        self.requests = 0  # HTTP requests sent, for tests and diagnostics
        self._token = token
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, Intensity | None]] = {}

    def latest(self, zone: str) -> Intensity | None:
        """The zone's latest intensity, from cache when younger than ``ttl_s``; None on
        failure (logged once, then remembered for ``failure_cooldown_s``)."""
        with self._lock:
            now = self._clock()
            cached = self._cache.get(zone)
            if cached is not None:
                fetched, value = cached
                keep_s = self.ttl_s if value is not None else self.failure_cooldown_s
                if now - fetched < keep_s:
                    return value
            value = self._fetch(zone)
            self._cache[zone] = (now, value)
            return value

    def _fetch(self, zone: str) -> Intensity | None:
        # Imported here: urllib.request brings http.client, email and ssl (about 25 ms),
        # which every report and `joulestat compare` would pay at start-up for a client
        # that only a live intensity setting calls.
        import urllib.error
        import urllib.parse
        import urllib.request

        query = urllib.parse.urlencode({"zone": zone})
        url = f"{self.base_url}/v3/carbon-intensity/latest?{query}"
        request = urllib.request.Request(url, headers={"auth-token": self._token,
                                                       "Accept": "application/json"})
        self.requests += 1
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                body = json.loads(response.read(65536).decode("utf-8"))
            return _parse(zone, body)
        except urllib.error.HTTPError as exc:
            reason = f"HTTP {exc.code}"
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = str(getattr(exc, "reason", exc)) or type(exc).__name__
        except (ValueError, KeyError, TypeError) as exc:
            reason = f"unexpected answer ({exc})"
        log.warning("Electricity Maps: no live intensity for zone %s from %s (%s); using "
                    "static grid data", zone, self.base_url, reason)
        return None


def _parse(zone: str, body: object) -> Intensity:
    if not isinstance(body, dict):
        raise ValueError("not a JSON object")
    value = body["carbonIntensity"]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"carbonIntensity is {value!r}")
    g_per_kwh = float(value)
    if math.isnan(g_per_kwh) or math.isinf(g_per_kwh) or g_per_kwh < 0:
        raise ValueError(f"carbonIntensity is {value!r}")
    when = str(body.get("datetime") or "")
    year = int(when[:4]) if when[:4].isdigit() else None
    kind = body.get("emissionFactorType") or "lifecycle"
    estimated = ", estimated" if body.get("isEstimated") else ""
    return Intensity(g_per_kwh, f"electricitymaps:{zone}", year, zone,
                     f"Electricity Maps latest for {zone} at {when or '?'} ({kind}{estimated})")


_SHARED: dict[tuple[str, str, float], ElectricityMapsClient] = {}
_SHARED_LOCK = threading.Lock()


def shared_client(token: str, base_url: str = DEFAULT_URL,
                  ttl_s: float = DEFAULT_TTL_S) -> ElectricityMapsClient:
    """One client per (URL, token, TTL) per process, so the cache outlives a report."""
    key = (base_url.rstrip("/"), token, float(ttl_s))
    with _SHARED_LOCK:
        client = _SHARED.get(key)
        if client is None:
            client = _SHARED[key] = ElectricityMapsClient(token, base_url, ttl_s)
        return client
