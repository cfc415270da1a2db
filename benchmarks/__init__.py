"""Benchmark scripts; a package so that the learning benchmark's modules import each other."""

import os

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
