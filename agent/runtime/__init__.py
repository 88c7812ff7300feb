"""Simulated stores: data written through the agent's own path, without hardware.

:mod:`agent.sim.sample` (``python -m agent.sim.sample URL``) fills a store with a few
hours of simulated nodes and jobs for the dashboard, its tests and its benchmark. It lives
with the agent, not in ``dashboard/``, because it writes (``StoreWriter``) and the
dashboard only reads.
"""
