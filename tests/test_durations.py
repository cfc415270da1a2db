"""conftest.py's order of the test files (longest first) and its record of their seconds."""

import json
import types

import conftest


def _items(*nodeids):
    return [types.SimpleNamespace(nodeid=nodeid) for nodeid in nodeids]


def test_files_run_longest_first_with_new_files_before_them_and_tests_in_order(
    tmp_path, monkeypatch
):
    durations = tmp_path / 'durations.json'
    durations.write_text(json.dumps({'tests/test_a.py': 5.0, 'tests/test_c.py': 50.0}))
    monkeypatch.setattr(conftest, 'DURATIONS_FILE', str(durations))
    items = _items(
        'tests/test_a.py::test_2',
        'tests/test_a.py::test_1',
        'tests/test_b.py::test_x[1]',
        'tests/test_c.py::test_z',
        'tests/test_c.py::Case::test_y',
        'tests/test_d.py::test_w',
        'tests/test_b.py::test_x[0]',
    )
    conftest.pytest_collection_modifyitems(None, items)
    # b and d are not in the record: first, in collection order (a file's tests stay
    # together); then c (50 s) and a (5 s), each file's tests in their order.
    assert [item.nodeid for item in items] == [
        'tests/test_b.py::test_x[1]',
        'tests/test_b.py::test_x[0]',
        'tests/test_d.py::test_w',
        'tests/test_c.py::test_z',
        'tests/test_c.py::Case::test_y',
        'tests/test_a.py::test_2',
        'tests/test_a.py::test_1',
    ]


def test_without_a_record_the_collection_order_stays(tmp_path, monkeypatch):
    monkeypatch.setattr(conftest, 'DURATIONS_FILE', str(tmp_path / 'none.json'))
    nodeids = ['tests/test_b.py::test_1', 'tests/test_a.py::test_1', 'tests/test_b.py::test_2']
    items = _items(*nodeids)
    conftest.pytest_collection_modifyitems(None, items)
    assert [item.nodeid for item in items] == nodeids


class _Terminal:
    def __init__(self):
        self.lines = []

    def write_line(self, line):
        self.lines.append(line)


def test_the_record_adds_up_each_files_phases_and_is_kept_when_tests_fail(tmp_path, monkeypatch):
    durations = tmp_path / 'durations.json'
    durations.write_text('{"tests/test_old.py": 1.0}\n')
    monkeypatch.setattr(conftest, 'DURATIONS_FILE', str(durations))
    recorder = conftest._DurationRecorder()
    for nodeid, seconds in [
        ('tests/test_a.py::test_1', (0.5, 2.0, 0.25)),
        ('tests/test_a.py::Case::test_2[x]', (0.0, 1.0, 0.0)),
        ('tests/test_b.py::test_1', (10.0, 0.04, 0.0)),
    ]:
        for when, duration in zip(('setup', 'call', 'teardown'), seconds):
            recorder.pytest_runtest_logreport(
                types.SimpleNamespace(nodeid=nodeid, when=when, duration=duration)
            )
    terminal = _Terminal()
    recorder.pytest_terminal_summary(terminal, exitstatus=1)
    assert durations.read_text() == '{"tests/test_old.py": 1.0}\n'
    assert 'left as it was' in terminal.lines[-1]
    recorder.pytest_terminal_summary(terminal, exitstatus=0)
    written = json.loads(durations.read_text())
    assert written == {'tests/test_b.py': 10.0, 'tests/test_a.py': 3.8}
    assert list(written) == ['tests/test_b.py', 'tests/test_a.py']  # longest first
