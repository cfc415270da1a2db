"""Benchmark scripts; a package so that the learning benchmark's modules import each other."""

import argparse
import os

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def at_least(minimum: float, kind=int):
    """An argparse ``type`` that takes a ``kind`` number >= ``minimum``, naming the bound
    otherwise (argparse prints it as the flag's error, exit code 2)."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f'{text!r} is not a {kind.__name__}') from None
        if not value >= minimum:  # also refuses NaN
            raise argparse.ArgumentTypeError(f'must be at least {minimum}, got {text}')
        return value

    return parse
