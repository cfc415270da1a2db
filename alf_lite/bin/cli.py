"""What the command-line tools share: telling the user what went wrong."""
import sys


def user_message(message: str) -> str:
    """``message`` of a config error without gin's call trace, naming the configurable only."""
    message, _, called = message.partition('\n  In call to configurable ')
    name = called.split(' ')[0].strip(chr(39))
    if name and not message.startswith(name):
        message = f'{name}: {message}'
    return message


def fail(message: str, exit_code: int = 2) -> None:
    """Print ``message`` for the user and exit (2: bad input)."""
    print(f'error: {user_message(message)}', file=sys.stderr)
    sys.exit(exit_code)
