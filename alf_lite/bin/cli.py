"""What the command-line tools share: telling the user what went wrong."""

import sys

# Exit codes of the tools.
EXIT_FAULT = 1  # something failed while running (train: training; grid_search: a run)
EXIT_BAD_INPUT = 2  # nothing was started
EXIT_SIGNAL_BASE = 128  # plus the signal number: stopped by that signal (train)


def user_message(message: str) -> str:
    """``message`` of a config error without gin's call trace, naming the configurable only."""
    message, _, called = message.partition('\n  In call to configurable ')
    name = called.split(' ')[0].strip(chr(39))
    if name and not message.startswith(name):
        message = f'{name}: {message}'
    return message


def fail(message: str, exit_code: int = EXIT_BAD_INPUT) -> None:
    """Print ``message`` for the user and exit, by default with ``EXIT_BAD_INPUT``."""
    print(f'error: {user_message(message)}', file=sys.stderr)
    sys.exit(exit_code)
