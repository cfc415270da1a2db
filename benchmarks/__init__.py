"""Benchmark scripts; a package so that the learning benchmark's modules import each other."""

import argparse
import math
import os
from typing import Optional

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def at_least(minimum: float, kind=int):
    """An argparse ``type`` that takes a finite ``kind`` number >= ``minimum``, naming the
    bound otherwise (argparse prints it as the flag's error, exit code 2)."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            what = 'an integer' if kind is int else 'a number'
            raise argparse.ArgumentTypeError(f'{text!r} is not {what}') from None
        if not minimum <= value < math.inf:  # also refuses NaN
            bound = f'at least {minimum}' if kind is int else f'a finite number >= {minimum}'
            raise argparse.ArgumentTypeError(f'must be {bound}, got {text}')
        return value

    return parse


def finite_number(text: str) -> float:
    """An argparse ``type`` that takes a finite float, naming the problem otherwise."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'{text!r} is not a number') from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f'must be a finite number, got {text}')
    return value


def int_list_at_least(minimum: int):
    """An argparse ``type`` for comma-separated integers, each >= ``minimum``."""
    one = at_least(minimum)

    def parse(text: str):
        return [one(part.strip()) for part in text.split(',')]

    return parse


def resources_kind(threads: int, sb3_threads: int) -> str:
    """'equal' where alf_lite and SB3 ran with the same torch thread count, else 'unequal'."""
    return 'equal' if threads == sb3_threads else 'unequal'


def resources(threads: int, sb3_threads: int, device: str) -> str:
    """What a ratio of alf_lite against SB3 was measured at: whether both had the same
    resources, each one's torch threads, and the device they shared."""
    kind = resources_kind(threads, sb3_threads)
    return f'at {kind} resources (torch threads: alf_lite {threads}, SB3 {sb3_threads}; {device})'


def unusable_env(env_name: str) -> Optional[str]:
    """Why alf_lite cannot train on ``env_name`` (an unknown id, actions that are not a bounded
    continuous box, no time limit), or None; its one env is built in process and closed."""
    from alf_lite.environments import create_environment

    try:
        with create_environment(env_name, 1, use_subprocesses=False):
            return None
    except ValueError as e:
        return str(e).partition('\n  In call to configurable ')[0]
