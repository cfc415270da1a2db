"""A real TensorBoard server for tests, asked for scalars as its web page asks for them."""

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest


def has_rust_reader():
    """Whether TensorBoard's default reader, the Rust data server, is installed here."""
    try:
        from tensorboard_data_server import server_binary
    except ImportError:
        return False
    return server_binary() is not None


def readers():
    """``load_fast`` values of the readers installed here."""
    return ['false', 'true'] if has_rust_reader() else ['false']


# ``load_fast`` values of TensorBoard's two readers, as pytest parameters.
READERS = [
    pytest.param('false', id='python-reader'),
    pytest.param(
        'true',
        id='rust-reader',
        marks=pytest.mark.skipif(
            not has_rust_reader(),
            reason='no TensorBoard data server (tensorboard-data-server) for this platform',
        ),
    ),
]


class TensorBoard:
    """``tensorboard --logdir log_dir`` on a free port, reloading every second.

    Args:
        load_fast: 'true' for the Rust data server (TensorBoard's default where
            it is installed), 'false' for the Python reader.
        log_path: where its output goes.
    """

    def __init__(self, log_dir, load_fast, log_path):
        self._log_path = log_path
        with open(log_path, 'w') as log:
            self._process = subprocess.Popen(
                [sys.executable, '-m', 'tensorboard.main', '--logdir', str(log_dir)]
                + ['--port', '0', f'--load_fast={load_fast}', '--reload_interval', '1'],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self._url = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def url(self, timeout_s=60):
        deadline = time.monotonic() + timeout_s
        while self._url is None:
            found = re.search(r'at (http://[^/ ]+)/', open(self._log_path).read())
            if found:
                self._url = found.group(1)
            assert self._process.poll() is None, open(self._log_path).read()
            assert time.monotonic() < deadline, 'TensorBoard did not start'
            time.sleep(0.1)
        return self._url

    def _get(self, route, **query):
        """The JSON of a scalars plugin route; None while TensorBoard cannot answer."""
        url = f'{self.url()}/data/plugin/scalars/{route}?{urllib.parse.urlencode(query)}'
        try:
            with urllib.request.urlopen(url) as response:
                return json.load(response)
        except urllib.error.HTTPError as e:
            return [] if e.code == 404 else None  # 404: a tag without points
        except urllib.error.URLError:
            return None

    def tags(self):
        """``{run: [tag, ...]}`` of the runs with scalars; None while it cannot answer."""
        runs = self._get('tags')
        return None if runs is None else {run: sorted(tags) for run, tags in runs.items()}

    def points(self, run, tag):
        """``[(step, value), ...]`` of ``tag``; None while TensorBoard cannot answer."""
        points = self._get('scalars', run=run, tag=tag)
        return None if points is None else [(step, value) for _, step, value in points]

    def wait_for(self, run, points_by_tag, timeout_s=60):
        """Wait until TensorBoard shows ``points_by_tag``; what it shows at the end."""
        deadline = time.monotonic() + timeout_s
        while True:
            shown = {tag: self.points(run, tag) for tag in points_by_tag}
            if shown == points_by_tag or time.monotonic() > deadline:
                return shown
            time.sleep(0.2)

    def close(self):
        # SIGTERM: TensorBoard removes its info file and stops its data server.
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
