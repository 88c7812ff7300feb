"""What every layer may use and which uses nothing else of joulestat: errors, units and
formatting, the tick record, redaction, logging set-up, setting parsers, the version."""
