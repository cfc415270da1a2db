"""A stand-in clock for tests that time a script's windows without waiting."""


class Clock:
    """Replaces a module's ``time``: ``perf_counter`` reads ``now``, which the test advances."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now
