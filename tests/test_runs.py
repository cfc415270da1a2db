"""alf_lite/runs.py: what the experiment tools read from a run's files and logs."""

from alf_lite.runs import log_error_line, read_scalar_if_any


def test_error_line_is_the_exception_not_a_traceback_source_line(tmp_path):
    log = tmp_path / 'run.log'
    log.write_text('=== an earlier attempt\nValueError: old\n')
    offset = len(log.read_bytes())
    with open(log, 'a') as f:
        f.write(
            'Traceback (most recent call last):\n'
            '  File "trainer.py", line 3, in train\n'
            "    raise FloatingPointError(f'loss: {value}')\n"
            'alf_lite.algorithms.off_policy_algorithm.NonFiniteLossError: the critic loss '
            'is nan\n'
            'progress 10%\rprogress 20%\n'
        )
    assert log_error_line(str(log), offset) == (
        'alf_lite.algorithms.off_policy_algorithm.NonFiniteLossError: the critic loss is nan'
    )
    assert log_error_line(str(log)) == log_error_line(str(log), offset)


def test_error_line_of_a_usage_error_an_interrupt_or_no_error(tmp_path):
    cases = {
        'usage: train\nerror: no --root_dir\n': 'error: no --root_dir',
        'env steps 100\nKeyboardInterrupt\n': 'KeyboardInterrupt',
        'env steps 100\nenv steps 200\n': 'env steps 200',
        '': 'no output',
    }
    for i, (text, line) in enumerate(cases.items()):
        log = tmp_path / f'{i}.log'
        log.write_text(text)
        assert log_error_line(str(log)) == line


def test_scalar_of_a_run_without_it_is_empty(tmp_path):
    (tmp_path / 'progress.csv').write_text('env_steps,eval/AverageReturn\n0,-5\n1000,-3\n')
    steps, values = read_scalar_if_any(str(tmp_path), 'eval/AverageReturn')
    assert steps.tolist() == [0, 1000] and values.tolist() == [-5, -3]
    for y in ('train/replay_buffer_bytes', 'eval/AverageEpisodeLength'):
        assert [len(a) for a in read_scalar_if_any(str(tmp_path), y)] == [0, 0]
    assert [len(a) for a in read_scalar_if_any(str(tmp_path / 'missing'), 'eval/x')] == [0, 0]
