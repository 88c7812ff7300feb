"""What several test modules share: stores filled through the agent's own path, checks,
fixture data, and the agent and PostgreSQL run as processes. Test modules import from
here (or tests/fakes/), never from one another (tests/unit/project/test_test_layout.py)."""
