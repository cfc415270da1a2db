"""Tests for alf_lite.replay_buffer: ring-buffer windows, memory figure, checkpointing."""

import io
import logging
import re

import gin
import psutil
import pytest
import torch

from alf_lite import device as device_module
from alf_lite import replay_buffer as rb_module
from alf_lite.data import Experience, StepType
from alf_lite.device import DeviceUnavailableError, resolve_device
from alf_lite.replay_buffer import (
    ReplayBuffer,
    ReplayBufferMismatchError,
    ReplayBufferTooLargeError,
)
from cli_helpers import python_output

_MB = 1 << 20


def _step(num_envs, t, obs_dim=2, action_dim=2, step_type=StepType.MID):
    """One batched row whose fields encode (env, global step index t).

    observation[e] = [e, t, 0...], action[e] = [t, e, 0...],
    reward[e] = 1000 * e + t, discount[e] = t % 2.
    """
    env = torch.arange(num_envs, dtype=torch.float32)
    obs = torch.zeros(num_envs, obs_dim)
    obs[:, 0] = env
    obs[:, 1] = t
    action = torch.zeros(num_envs, action_dim)
    action[:, 0] = t
    action[:, 1] = env
    return Experience(
        step_type=torch.full((num_envs,), step_type, dtype=torch.uint8),
        observation=obs,
        action=action,
        reward=1000 * env + t,
        discount=torch.full((num_envs,), float(t % 2)),
    )


def _filled(num_envs, length, num_added, **kwargs):
    rb = ReplayBuffer(num_envs, length, observation_dim=2, action_dim=2)
    for t in range(num_added):
        rb.add_batch(_step(num_envs, t, **kwargs))
    return rb


def _check_windows(batch, total_added, length):
    """Every window is consecutive, written rows of one env; all fields agree."""
    env = batch.observation[..., 0]
    t = batch.observation[..., 1]
    assert (env == env[:, :1]).all(), 'window spans more than one env'
    assert (t[:, 1:] - t[:, :-1] == 1).all(), 'rows not consecutive'
    assert (t >= max(0, total_added - length)).all(), 'overwritten row'
    assert (t < total_added).all(), 'unwritten row'
    # Every field was gathered from the same (env, row).
    assert torch.equal(batch.action[..., 0], t)
    assert torch.equal(batch.action[..., 1], env)
    assert torch.equal(batch.reward, 1000 * env + t)
    assert torch.equal(batch.discount, t % 2)
    assert (batch.step_type == StepType.MID).all()


def test_shapes_and_dtypes():
    rb = _filled(num_envs=3, length=6, num_added=4)
    batch = rb.sample(batch_size=5, batch_length=2)
    assert batch.step_type.shape == (5, 2)
    assert batch.step_type.dtype == torch.uint8
    assert batch.observation.shape == (5, 2, 2)
    assert batch.action.shape == (5, 2, 2)
    assert batch.reward.shape == (5, 2)
    assert batch.discount.shape == (5, 2)
    for field in (batch.observation, batch.action, batch.reward, batch.discount):
        assert field.dtype == torch.float32


def test_counters():
    rb = ReplayBuffer(2, 5, observation_dim=2, action_dim=2)
    assert (rb.num_envs, rb.length) == (2, 5)
    assert (rb.num_steps, rb.total_added) == (0, 0)
    for t in range(7):
        rb.add_batch(_step(2, t))
    assert (rb.num_steps, rb.total_added) == (5, 7)


def test_clear_forgets_every_row_and_the_next_row_goes_first():
    rb = _filled(num_envs=2, length=5, num_added=7)
    rb.clear()
    assert (rb.num_steps, rb.total_added, int(rb._total_added_tensor)) == (0, 0, 0)
    assert all(not tensor.any() for tensor in rb.storage.values())
    with pytest.raises(ValueError, match='only 0 rows stored'):
        rb.sample(batch_size=1, batch_length=1)
    rb.add_batch(_step(2, 3))
    assert rb.storage['observation'][:, 0, 1].tolist() == [3.0, 3.0]
    assert rb.state_dict()['total_added'] == 1


def test_sample_never_crosses_write_head():
    torch.manual_seed(0)
    num_envs, length = 3, 7
    # 20 rows per env: the head has wrapped twice and sits mid-buffer.
    rb = _filled(num_envs, length, num_added=20)
    for batch_length in (1, 2, 3, length):
        batch = rb.sample(batch_size=2000, batch_length=batch_length)
        _check_windows(batch, total_added=20, length=length)


def test_sample_before_buffer_is_full():
    torch.manual_seed(0)
    rb = _filled(num_envs=2, length=10, num_added=4)
    batch = rb.sample(batch_size=500, batch_length=3)
    _check_windows(batch, total_added=4, length=10)
    # Only starts 0 and 1 are valid with 4 rows and windows of 3.
    assert set(batch.observation[:, 0, 1].tolist()) == {0.0, 1.0}


def test_windows_stay_within_one_env():
    torch.manual_seed(1)
    num_envs = 5
    rb = _filled(num_envs, length=4, num_added=9)
    batch = rb.sample(batch_size=3000, batch_length=4)
    env = batch.observation[..., 0]
    assert (env == env[:, :1]).all()
    # Windows as long as the buffer have exactly one valid start per env:
    # the oldest surviving row, 9 - 4 = 5, up to the newest, 8.
    assert (batch.observation[..., 1] == torch.tensor([5.0, 6.0, 7.0, 8.0])).all()
    assert set(env[:, 0].tolist()) == set(range(num_envs))


def test_all_valid_windows_reachable():
    torch.manual_seed(2)
    num_envs, length, num_added, batch_length = 2, 5, 8, 2
    rb = _filled(num_envs, length, num_added)
    n = 8000
    batch = rb.sample(batch_size=n, batch_length=batch_length)
    _check_windows(batch, num_added, length)
    pairs = list(
        zip(batch.observation[:, 0, 0].long().tolist(), batch.observation[:, 0, 1].long().tolist())
    )
    # Rows 3..7 survive; windows of 2 start at 3, 4, 5 or 6 in either env.
    expected = {(e, s) for e in range(num_envs) for s in (3, 4, 5, 6)}
    assert set(pairs) == expected
    # Uniform: each of the 8 pairs expects 1000 hits (std ~30).
    for pair in expected:
        assert 850 < pairs.count(pair) < 1150, pair


def test_sample_refuses_too_few_rows():
    rb = _filled(num_envs=2, length=10, num_added=2)
    with pytest.raises(ValueError, match='only 2 rows stored'):
        rb.sample(batch_size=4, batch_length=3)
    with pytest.raises(ValueError, match='only 0 rows stored'):
        ReplayBuffer(1, 4, 2, 2).sample(batch_size=1, batch_length=1)


def test_sample_refuses_a_batch_size_or_length_below_one():
    rb = _filled(num_envs=2, length=10, num_added=5)
    for batch_size, batch_length in ((0, 2), (4, 0)):
        with pytest.raises(ValueError, match=f'positive, got {batch_size} and {batch_length}'):
            rb.sample(batch_size, batch_length)


def test_add_batch_checks_shapes():
    rb = ReplayBuffer(3, 4, observation_dim=2, action_dim=2)
    with pytest.raises(ValueError, match="'observation' has shape"):
        rb.add_batch(_step(3, 0)._replace(observation=torch.zeros(3, 5)))
    with pytest.raises(ValueError, match="'step_type' has shape"):
        rb.add_batch(_step(2, 0))
    assert rb.total_added == 0


@pytest.mark.parametrize('add', ['add_batch', 'add_batch_on_device'])
@pytest.mark.parametrize(
    'field, bad, message',
    [
        ('reward', torch.zeros(2, 1), "'reward' has shape (2, 1)"),
        ('step_type', torch.full((2,), -1), "'step_type' is torch.int64, expected torch.uint8"),
    ],
    ids=['shape of a later field', 'step type not uint8'],
)
def test_a_row_refused_leaves_a_full_buffer_as_it_was(add, field, bad, message):
    rb = ReplayBuffer(2, 3, observation_dim=2, action_dim=2)
    for t in range(4):  # full and wrapped: the write head is at the oldest row
        rb.add_batch(_step(2, t))
    before = {name: value.clone() for name, value in rb.storage.items()}
    with pytest.raises(ValueError, match=re.escape(message)):
        getattr(rb, add)(_step(2, 99)._replace(**{field: bad}))
    for name, value in rb.storage.items():
        assert torch.equal(value, before[name]), name
    assert rb.total_added == 4


def test_bytes_per_step_match_raw_field_sizes():
    # HalfCheetah-like and Humanoid-like dims, with hand-computed raw bytes:
    # obs_dim * 4 + action_dim * 4 + reward 4 + discount 4 + step_type 1.
    for obs_dim, action_dim, raw in ((17, 6, 101), (348, 17, 1469)):
        rb = ReplayBuffer(4, 100, obs_dim, action_dim)
        assert rb.raw_bytes_per_step == raw
        storage = sum(v.nbytes for v in rb.storage.values())
        assert rb.nbytes == storage == 4 * 100 * raw


def test_resident_memory_matches_nbytes():
    # The storage is committed at construction and nothing else of size is. A
    # fresh process: in this one, memory freed by earlier tests could be reused.
    script = (
        'import psutil, torch\n'
        'from alf_lite.replay_buffer import ReplayBuffer\n'
        'p = psutil.Process(); before = p.memory_info().rss\n'
        'rb = ReplayBuffer(8, 100_000, 17, 6)\n'
        'print(p.memory_info().rss - before, rb.nbytes)\n'
    )
    grown, nbytes = map(int, python_output(script).split()[-2:])
    assert nbytes == 8 * 100_000 * 101
    assert 0.9 * nbytes < grown < 1.05 * nbytes + 4 * _MB


def test_refuses_buffer_larger_than_memory():
    process = psutil.Process()
    before = process.memory_info().rss
    with pytest.raises(ReplayBufferTooLargeError) as info:
        ReplayBuffer(4, 10**12, 17, 6)
    message = str(info.value)
    needed = 4 * 10**12 * 101
    assert f'needs {needed} bytes' in message
    assert 'GiB' in message
    assert 'bytes (' in message.split('only ')[1]  # bytes available
    assert '4 envs x 1000000000000 steps' in message
    assert 'replay_buffer_length' in message
    # Refused before allocating: no memory touched.
    assert process.memory_info().rss - before < 16 * _MB
    assert isinstance(info.value, MemoryError)


def test_refuses_a_buffer_whose_size_no_float_holds():
    with pytest.raises(ReplayBufferTooLargeError, match=r'needs 1010{400} bytes \(\d+ GiB, '):
        ReplayBuffer(1, 10**400, 17, 6)


def test_memory_limit_boundary(monkeypatch):
    # 2 envs x 10 steps x (3*4 + 2*4 + 9) = 580 bytes; fraction 0.5 needs
    # 1160 bytes available.
    class FakeMemory:
        available = 1160

    monkeypatch.setattr(psutil, 'virtual_memory', FakeMemory)
    assert ReplayBuffer(2, 10, 3, 2, max_memory_fraction=0.5).nbytes == 580
    FakeMemory.available = 1159
    with pytest.raises(
        ReplayBufferTooLargeError, match='needs 580 bytes .* only 1159 bytes'
    ) as info:
        ReplayBuffer(2, 10, 3, 2, max_memory_fraction=0.5)
    # The most that fits, for a tool to name with its own remedy, does fit.
    assert info.value.max_length == 9
    assert 'at most 9 fits with 2 envs' in str(info.value)
    assert ReplayBuffer(2, 9, 3, 2, max_memory_fraction=0.5).nbytes == 522
    assert info.value.problem == str(info.value).partition(' Lower')[0]


def test_cgroup_memory_limit_refuses_a_buffer_the_host_could_hold_and_is_named(
    tmp_path, monkeypatch
):
    class FakeMemory:
        available = 10**9

    monkeypatch.setattr(psutil, 'virtual_memory', FakeMemory)
    # A container's cgroup (v1) of 30 MB, 10 MB of it in use.
    (tmp_path / 'proc' / 'self').mkdir(parents=True)
    (tmp_path / 'proc' / 'self' / 'cgroup').write_text('4:memory:/job\n')
    cgroup = tmp_path / 'sys' / 'fs' / 'cgroup' / 'memory' / 'job'
    cgroup.mkdir(parents=True)
    (cgroup / 'memory.limit_in_bytes').write_text('30000000\n')
    (cgroup / 'memory.usage_in_bytes').write_text('10000000\n')
    real = device_module.cgroup_memory_limit
    monkeypatch.setattr(device_module, 'cgroup_memory_limit', lambda root='/': real(str(tmp_path)))
    # 1 env x 1M steps x 25 bytes = 25 MB: within 0.8 of the host's 1 GB,
    # not of the 20 MB the cgroup leaves.
    with pytest.raises(ReplayBufferTooLargeError) as info:
        ReplayBuffer(1, 1_000_000, 3, 1)
    message = str(info.value)
    assert 'needs 25000000 bytes' in message
    assert 'only 20000000 bytes' in message
    assert f'memory limit of cgroup {cgroup} (30000000 bytes, 10000000 in use)' in message
    # Where the host's RAM bounds the figure, no cgroup is named.
    (cgroup / 'memory.limit_in_bytes').write_text('9223372036854771712\n')
    FakeMemory.available = 20_000_000
    with pytest.raises(ReplayBufferTooLargeError) as info:
        ReplayBuffer(1, 1_000_000, 3, 1)
    assert 'only 20000000 bytes' in str(info.value) and 'cgroup' not in str(info.value)


@pytest.mark.parametrize(
    'name, limit, usage', [('ulimit -v', 'RLIMIT_AS', 'vms'), ('ulimit -d', 'RLIMIT_DATA', 'data')]
)
def test_process_memory_limit_refuses_a_buffer_the_host_could_hold_and_one_under_it_fits(
    name, limit, usage
):
    # A fresh process: the limit stays with the process that sets it.
    script = f"""
import psutil, resource
from alf_lite.replay_buffer import ReplayBuffer, ReplayBufferTooLargeError

used = psutil.Process().memory_info().{usage}
resource.setrlimit(resource.{limit}, (used + 400_000_000, resource.RLIM_INFINITY))
try:
    ReplayBuffer(1, 20_000_000, 3, 1)  # 500 MB, more than the 400 MB left
except ReplayBufferTooLargeError as e:
    print(e)
rb = ReplayBuffer(1, 12_000_000, 3, 1)  # 300 MB
rb.storage['observation'].fill_(1.0)
print('allocated', rb.nbytes)
"""
    output = python_output(script)
    assert 'needs 500000000 bytes' in output
    assert f"this process's {name} limit" in output
    assert 'allocated 300000000' in output


def test_logs_exact_size(caplog):
    with caplog.at_level(logging.INFO):
        rb = ReplayBuffer(3, 50, 17, 6)
    assert f'allocated {rb.nbytes} bytes' in caplog.text
    assert '101 bytes per step' in caplog.text


def test_rejects_bad_arguments():
    with pytest.raises(ValueError, match='length'):
        ReplayBuffer(2, 0, 3, 1)
    with pytest.raises(ValueError, match='max_memory_fraction'):
        ReplayBuffer(2, 4, 3, 1, max_memory_fraction=0.0)


def test_max_memory_fraction_of_one_is_allowed_and_more_is_not():
    # The range is (0, 1]. 1 env x 1 step x (4 + 4 + 4 + 4 + 1) = 17 bytes.
    assert ReplayBuffer(1, 1, 1, 1, max_memory_fraction=1.0).nbytes == 17
    with pytest.raises(ValueError, match='max_memory_fraction'):
        ReplayBuffer(1, 1, 1, 1, max_memory_fraction=1.5)


def test_state_dict_round_trip():
    rb = _filled(num_envs=3, length=5, num_added=12)
    buffer = io.BytesIO()
    torch.save(rb.state_dict(), buffer)
    buffer.seek(0)

    restored = ReplayBuffer(3, 5, 2, 2)
    restored.load_state_dict(torch.load(buffer))
    assert restored.total_added == 12
    assert restored.num_steps == 5
    torch.manual_seed(3)
    expected = rb.sample(64, 3)
    torch.manual_seed(3)
    got = restored.sample(64, 3)
    for a, b in zip(expected, got):
        assert torch.equal(a, b)
    # Adding continues at the same head in both.
    rb.add_batch(_step(3, 12))
    restored.add_batch(_step(3, 12))
    for name, value in rb.storage.items():
        assert torch.equal(value, restored.storage[name]), name
    assert restored.total_added == rb.total_added == 13


def test_load_state_dict_rejects_mismatch():
    state = _filled(num_envs=3, length=5, num_added=2).state_dict()
    with pytest.raises(ValueError, match='a buffer of 5 steps per env, this one has 6'):
        ReplayBuffer(3, 6, 2, 2).load_state_dict(state)
    with pytest.raises(ValueError, match=r'length must be a positive int, got tensor\(\[5, 5\]\)'):
        ReplayBuffer(3, 5, 2, 2).load_state_dict(dict(state, length=torch.tensor([5, 5])))
    with pytest.raises(ValueError, match='a buffer of 3 envs, this one has 2; .*num_parallel_env'):
        ReplayBuffer(2, 5, 2, 2).load_state_dict(state)
    one_env_short = dict(state, observation=state['observation'][:2])
    with pytest.raises(ValueError, match="'observation' is a list of 2, expected a list of 3"):
        ReplayBuffer(3, 5, 2, 2).load_state_dict(one_env_short)
    with pytest.raises(ValueError, match=r"'observation' is \(\(2, 2\), .*expected \(\(2, 4\)"):
        ReplayBuffer(3, 5, 4, 2).load_state_dict(state)
    # The counter says 3 rows per env were written, the lists hold 2.
    with pytest.raises(ValueError, match=r"'step_type' is \(\(2,\), .*\(\(3,\).*3 written"):
        ReplayBuffer(3, 5, 2, 2).load_state_dict(dict(state, total_added=3))
    with pytest.raises(ValueError, match='keys'):
        ReplayBuffer(3, 5, 2, 2).load_state_dict(
            {k: v for k, v in state.items() if k != 'total_added'}
        )
    with pytest.raises(ValueError, match='got a list, not a state dict'):
        ReplayBuffer(3, 5, 2, 2).load_state_dict([state])
    crafted = dict(state, step_type=[rows.clone() for rows in state['step_type']])
    crafted['step_type'][1][0] = 7
    target = ReplayBuffer(3, 5, 2, 2)
    before = target.storage['observation'].clone()
    with pytest.raises(ValueError, match="'step_type' holds values other than FIRST"):
        target.load_state_dict(crafted)
    assert torch.equal(target.storage['observation'], before)  # nothing copied


def test_load_state_dict_rejects_a_step_type_one_past_last():
    state = _filled(num_envs=3, length=5, num_added=2).state_dict()
    crafted = dict(state, step_type=[rows.clone() for rows in state['step_type']])
    crafted['step_type'][0][1] = StepType.LAST + 1
    target = ReplayBuffer(3, 5, 2, 2)
    with pytest.raises(ValueError, match="'step_type' holds values other than FIRST"):
        target.load_state_dict(crafted)
    assert target.total_added == 0


def test_load_state_dict_reads_the_whole_tensors_of_older_checkpoints():
    # Before the per-env lists, a state held each field's whole storage and no length.
    saved = _filled(num_envs=3, length=5, num_added=7)
    old = dict(saved.storage, total_added=saved.total_added)
    restored = ReplayBuffer(3, 5, 2, 2)
    restored.load_state_dict(old)
    assert restored.total_added == 7
    for name, value in saved.storage.items():
        assert torch.equal(restored.storage[name], value), name
    with pytest.raises(ValueError, match="'step_type' is .*expected .*3 envs x 6 steps"):
        ReplayBuffer(3, 6, 2, 2).load_state_dict(old)


def test_an_older_checkpoint_of_a_buffer_not_yet_full_loads_its_rows():
    # The whole tensors of a buffer that wrapped no row yet: 3 of 5 rows written per env.
    saved = _filled(num_envs=3, length=5, num_added=3)
    restored = ReplayBuffer(3, 5, 2, 2)
    restored.load_state_dict(dict(saved.storage, total_added=3))
    assert (restored.total_added, restored.num_steps) == (3, 3)
    for name, value in saved.storage.items():
        assert torch.equal(restored.storage[name], value), name
    _check_windows(restored.sample(64, 2), total_added=3, length=5)


def test_state_dict_holds_the_written_rows_only_and_saves_their_bytes():
    rb = _filled(num_envs=3, length=1000, num_added=10)
    state = rb.state_dict()
    assert state['length'] == 1000 and state['total_added'] == 10
    for name, storage in rb.storage.items():
        assert len(state[name]) == 3
        for env, rows in enumerate(state[name]):
            assert torch.equal(rows, storage[env, :10]), name
            # A view: nothing copied.
            assert rows.data_ptr() == storage[env].data_ptr()
    written, whole = io.BytesIO(), io.BytesIO()
    torch.save(state, written)
    torch.save(dict(rb.storage), whole)
    # A row: 2 + 2 floats of observation and action, a reward, a discount, a step type byte.
    assert rb.raw_bytes_per_step == 25
    assert len(written.getvalue()) < 3 * 10 * 25 + 20_000 < len(whole.getvalue())
    assert len(whole.getvalue()) > 3 * 1000 * 25
    # Rows of a reloaded state that was not written are zero, whatever they held.
    target = _filled(num_envs=3, length=1000, num_added=900)
    written.seek(0)
    target.load_state_dict(torch.load(written, weights_only=True))
    for name, storage in rb.storage.items():
        assert torch.equal(target.storage[name], storage), name


def test_load_state_dict_rejects_an_extra_key_naming_it():
    state = _filled(num_envs=3, length=5, num_added=2).state_dict()
    with pytest.raises(ValueError, match=r"keys \[.*'extra'.*\] do not match expected"):
        ReplayBuffer(3, 5, 2, 2).load_state_dict(dict(state, extra=0))


def test_load_state_dict_rejects_a_field_of_the_right_shape_but_another_dtype():
    # The copy would cast float64 to float32 silently.
    state = _filled(num_envs=3, length=5, num_added=2).state_dict()
    with pytest.raises(ValueError, match=r"'observation' is .*torch.float64"):
        ReplayBuffer(3, 5, 2, 2).load_state_dict(
            dict(state, observation=[rows.double() for rows in state['observation']])
        )


@pytest.mark.parametrize('name', ['step_type', 'observation'])
def test_load_state_dict_rejects_a_field_without_values_on_the_meta_device(name):
    # Its shape and dtype fit, but there is nothing to check or copy.
    state = _filled(num_envs=3, length=5, num_added=2).state_dict()
    crafted = dict(state, **{name: [rows.to('meta') for rows in state[name]]})
    target = ReplayBuffer(3, 5, 2, 2)
    with pytest.raises(ValueError, match=f"'{name}' is .*'meta'\\), expected"):
        target.load_state_dict(crafted)
    assert target.total_added == 0


@pytest.mark.parametrize('name', ['observation', 'action', 'reward', 'discount'])
@pytest.mark.parametrize('value', [float('nan'), float('inf'), -float('inf')])
def test_load_state_dict_rejects_a_row_no_collected_step_has_naming_its_field(name, value):
    # The envs' outputs and the actions are checked finite before they are stored.
    state = _filled(num_envs=3, length=5, num_added=2).state_dict()
    crafted = dict(state, **{name: [rows.clone() for rows in state[name]]})
    crafted[name][2][1] = value
    target = _filled(num_envs=3, length=5, num_added=4)
    before = {field: stored.clone() for field, stored in target.storage.items()}
    with pytest.raises(ValueError, match=f"'{name}' of env 2 holds NaN or inf"):
        target.load_state_dict(crafted)
    for field, stored in target.storage.items():  # nothing copied
        assert torch.equal(stored, before[field]), field
    assert target.total_added == 4
    ReplayBuffer(3, 5, 2, 2).load_state_dict(state)  # as saved, it loads


def test_load_state_dict_rejects_a_negative_total_added():
    state = _filled(num_envs=3, length=5, num_added=2).state_dict()
    target = ReplayBuffer(3, 5, 2, 2)
    with pytest.raises(ValueError, match='total_added must be a non-negative int, got -1'):
        target.load_state_dict(dict(state, total_added=-1))
    assert target.total_added == 0


def test_load_state_dict_rejects_a_total_added_past_the_int64_counter_before_any_copy():
    # A full buffer's rows fit any count from its length on; 2**63 does not fit the
    # device counter, and a refusal must leave the buffer as it was.
    state = _filled(num_envs=3, length=5, num_added=7).state_dict()
    target = _filled(num_envs=3, length=5, num_added=2)
    before = {name: field.clone() for name, field in target.storage.items()}
    with pytest.raises(ValueError, match=f'total_added must be at most {2**63 - 1}, got {2**63}'):
        target.load_state_dict(dict(state, total_added=2**63))
    assert (target.total_added, int(target._total_added_tensor)) == (2, 2)
    for name, field in target.storage.items():
        assert torch.equal(field, before[name]), name


@pytest.mark.parametrize('total_added', [2.0, True])
def test_load_state_dict_rejects_a_total_added_that_is_no_int(total_added):
    # 2.0 would pass as a count of rows and then index the storage; True, as 1, a damaged
    # file as a buffer of one row, as the length is refused.
    state = _filled(num_envs=3, length=5, num_added=1).state_dict()
    target = ReplayBuffer(3, 5, 2, 2)
    with pytest.raises(
        ValueError, match=f'total_added must be a non-negative int, got {total_added}'
    ):
        target.load_state_dict(dict(state, total_added=total_added))
    assert target.total_added == 0


@pytest.mark.parametrize('length', [5.0, '5', None, True, 0])
def test_load_state_dict_rejects_a_length_that_is_no_count_as_damage(length):
    # Not a buffer of another TrainerConfig.replay_buffer_length: a damaged file, which a
    # resume goes on without.
    state = _filled(num_envs=3, length=5, num_added=2).state_dict()
    target = ReplayBuffer(3, 5, 2, 2)
    with pytest.raises(ValueError, match='length must be a positive int') as error:
        target.load_state_dict(dict(state, length=length))
    assert not isinstance(error.value, ReplayBufferMismatchError)
    assert target.total_added == 0


def test_load_state_dict_takes_rows_of_every_step_type():
    rb = ReplayBuffer(2, 4, observation_dim=2, action_dim=2)
    for t, step_type in enumerate((StepType.FIRST, StepType.MID, StepType.LAST)):
        rb.add_batch(_step(2, t, step_type=step_type))
    restored = ReplayBuffer(2, 4, observation_dim=2, action_dim=2)
    restored.load_state_dict(rb.state_dict())
    assert restored.total_added == 3
    assert restored.storage['step_type'].tolist() == [[0, 1, 2, 0], [0, 1, 2, 0]]


def test_state_of_a_buffer_before_its_first_row_loads_as_an_empty_buffer():
    empty = ReplayBuffer(3, 5, 2, 2).state_dict()
    assert [len(rows) for rows in empty['step_type']] == [0, 0, 0]
    target = _filled(num_envs=3, length=5, num_added=7)
    target.load_state_dict(empty)
    assert (target.total_added, target.num_steps) == (0, 0)
    for name, value in target.storage.items():
        assert not value.any(), name


def test_same_seed_same_samples():
    rb = _filled(num_envs=4, length=6, num_added=9)
    torch.manual_seed(7)
    first = rb.sample(32, 2)
    torch.manual_seed(7)
    second = rb.sample(32, 2)
    torch.manual_seed(8)
    other = rb.sample(32, 2)
    for a, b in zip(first, second):
        assert torch.equal(a, b)
    assert not torch.equal(first.observation, other.observation)


def test_gin_configures_what_the_trainer_does_not_pass():
    gin.clear_config()
    try:
        gin.parse_config(['ReplayBuffer.max_memory_fraction = 1e-15'])
        with pytest.raises(MemoryError):  # the binding applies: no memory is enough
            ReplayBuffer(num_envs=2, length=7, observation_dim=3, action_dim=1)
        # The trainer passes the shape: a binding of it would be ignored.
        with pytest.raises(ValueError, match="denylisted kwarg 'length'"):
            gin.parse_config(['ReplayBuffer.length = 7'])
    finally:
        gin.clear_config()


# --- devices --------------------------------------------------------------------------------


def test_cpu_buffer_keeps_its_sample_stream():
    # The windows a seed gives on the CPU are those of one randint over the
    # flat (env, start) space from torch's global generator, as they always were.
    num_envs, length, num_added, batch_length = 3, 7, 20, 3
    rb = _filled(num_envs, length, num_added)
    assert rb.device == rb.training_device == torch.device('cpu')
    torch.manual_seed(11)
    batch = rb.sample(batch_size=64, batch_length=batch_length)
    torch.manual_seed(11)
    starts = length - batch_length + 1
    flat = torch.randint(num_envs * starts, (64,))
    oldest = num_added - length
    assert torch.equal(batch.observation[:, 0, 0], (flat // starts).float())
    assert torch.equal(batch.observation[:, 0, 1], (oldest + flat % starts).float())


@pytest.mark.parametrize('num_added, batch_length', [(4, 3), (20, 1), (20, 2), (20, 7)])
def test_device_sampling_never_crosses_write_head(num_added, batch_length):
    torch.manual_seed(0)
    rb = _filled(num_envs=3, length=7, num_added=num_added)
    batch = rb.sample_on_device(batch_size=2000, batch_length=batch_length)
    _check_windows(batch, total_added=num_added, length=7)


def test_device_sampling_reaches_all_valid_windows_uniformly():
    torch.manual_seed(2)
    rb = _filled(num_envs=2, length=5, num_added=8)
    batch = rb.sample_on_device(batch_size=8000, batch_length=2)
    pairs = list(
        zip(batch.observation[:, 0, 0].long().tolist(), batch.observation[:, 0, 1].long().tolist())
    )
    expected = {(e, s) for e in range(2) for s in (3, 4, 5, 6)}
    assert set(pairs) == expected
    for pair in expected:
        assert 850 < pairs.count(pair) < 1150, pair


def test_device_sampling_draws_each_window_from_the_whole_index_range():
    # One draw from the device's generator over a range so wide that its
    # remainder modulo the 15 (env, start) pairs is uniform to within 2^-40.
    num_envs, length, num_added, batch_length = 3, 7, 20, 3
    rb = _filled(num_envs, length, num_added)
    torch.manual_seed(11)
    batch = rb.sample_on_device(batch_size=64, batch_length=batch_length)
    torch.manual_seed(11)
    starts = length - batch_length + 1
    flat = torch.randint(1 << 62, (64,)) % (num_envs * starts)
    oldest = num_added - length
    assert torch.equal(batch.observation[:, 0, 0], (flat // starts).float())
    assert torch.equal(batch.observation[:, 0, 1], (oldest + flat % starts).float())


def test_device_sampling_reads_the_write_head_from_the_device():
    # The counter it reads is a tensor that add_batch and load_state_dict
    # update: the same call (as a captured graph would replay it) sees new rows.
    torch.manual_seed(3)
    rb = _filled(num_envs=1, length=4, num_added=2)
    assert set(rb.sample_on_device(200, 2).observation[:, 1, 1].tolist()) == {1.0}
    rb.add_batch(_step(1, 2))
    assert set(rb.sample_on_device(200, 2).observation[:, 1, 1].tolist()) == {1.0, 2.0}
    other = ReplayBuffer(1, 4, observation_dim=2, action_dim=2)
    other.load_state_dict(_filled(num_envs=1, length=4, num_added=9).state_dict())
    _check_windows(other.sample_on_device(200, 3), total_added=9, length=4)


def test_storage_goes_to_the_training_device_when_it_fits_else_to_the_cpu(monkeypatch, caplog):
    free = {}
    monkeypatch.setattr(rb_module, 'free_memory_bytes', lambda d: free[d.type])
    cuda, cpu = torch.device('cuda', 0), torch.device('cpu')
    free.update(cuda=1000, cpu=1000)
    assert rb_module.storage_device(800, cuda)[0] == cuda
    free.update(cuda=999)
    with caplog.at_level(logging.INFO):
        assert rb_module.storage_device(800, cuda) == (cpu, {cuda: 999, cpu: 1000})
    assert '800 bytes do not fit in cuda:0 (999 bytes free); it goes to cpu' in caplog.text
    free.update(cpu=999)
    assert rb_module.storage_device(800, cuda)[0] is None
    # A CPU learner keeps its buffer on the CPU; an explicit device is the only candidate.
    assert rb_module.storage_device(800, cpu, max_memory_fraction=0.5) == (None, {cpu: 999})
    free.update(cpu=2000)
    assert rb_module.storage_device(800, cuda, device='cpu')[0] == cpu


def test_the_training_devices_memory_the_optimizer_state_will_take_is_not_the_buffers(
    monkeypatch,
):
    free = {}
    monkeypatch.setattr(rb_module, 'free_memory_bytes', lambda d: free[d.type])
    cuda, cpu = torch.device('cuda', 0), torch.device('cpu')
    free.update(cuda=1300, cpu=1000)
    assert rb_module.storage_device(800, cuda, reserved_bytes=300)[0] == cuda
    # Reserved on the training device only: the buffer moves to the CPU.
    assert rb_module.storage_device(800, cuda, reserved_bytes=301) == (cpu, {cuda: 999, cpu: 1000})
    assert rb_module.storage_device(800, cpu, reserved_bytes=201) == (None, {cpu: 799})
    assert rb_module.storage_device(800, cpu, reserved_bytes=2000) == (None, {cpu: 0})
    free.update(cpu=1100)
    with pytest.raises(
        ReplayBufferTooLargeError,
        match=r'only 1000 bytes \(0.00 GiB\) on cpu are available.* The cpu figure is its free '
        r'memory less the 100 bytes of gradients and optimizer state',
    ):
        ReplayBuffer(2, 100, 3, 2, max_memory_fraction=0.5, reserved_bytes=100)


def test_buffer_that_fits_nowhere_names_each_device(monkeypatch):
    free = {'cuda': 100, 'cpu': 300}
    monkeypatch.setattr(rb_module, 'free_memory_bytes', lambda d: free[d.type])
    with pytest.raises(
        ReplayBufferTooLargeError,
        match=r'needs 580 bytes .* only 100 bytes \(0.00 GiB\) on cuda:0 and '
        r'300 bytes \(0.00 GiB\) on cpu are available',
    ):
        ReplayBuffer(2, 10, 3, 2, training_device=torch.device('cuda', 0))


def test_refusal_names_the_longest_length_that_fits_on_the_roomiest_device(monkeypatch):
    free = {'cuda': 300, 'cpu': 100}
    monkeypatch.setattr(rb_module, 'free_memory_bytes', lambda d: free[d.type])
    # 2 envs x 10 steps x 29 bytes = 580 bytes fit nowhere. Half of the 300
    # bytes of the GPU is 150 bytes: 150 // (2 envs x 29 bytes) = 2 steps per
    # env (not 150 // 29 = 5 steps, which 2 envs would double; not the 0
    # steps the CPU's 50 bytes hold).
    with pytest.raises(ReplayBufferTooLargeError) as info:
        ReplayBuffer(2, 10, 3, 2, max_memory_fraction=0.5, training_device=torch.device('cuda', 0))
    message = str(info.value)
    assert 'of that (150 bytes) may be used' in message
    assert 'at most 2 fits with 2 envs' in message


def test_a_refusal_names_reserved_memory_only_of_a_device_it_considered(monkeypatch):
    # A buffer asked for on the CPU of a GPU learner: the GPU's reserved bytes
    # take nothing from the CPU figure, and the message says nothing of them.
    free = {'cuda': 10**9, 'cpu': 100}
    monkeypatch.setattr(rb_module, 'free_memory_bytes', lambda d: free[d.type])
    with pytest.raises(ReplayBufferTooLargeError) as info:
        ReplayBuffer(
            2, 10, 3, 2, device='cpu', training_device=torch.device('cuda', 0), reserved_bytes=50
        )
    message = str(info.value)
    assert 'only 100 bytes (0.00 GiB) on cpu are available' in message
    assert 'optimizer state' not in message


def test_explicit_gpu_buffer_without_a_gpu_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    with pytest.raises(DeviceUnavailableError, match="device 'cuda' was asked for"):
        ReplayBuffer(2, 10, 3, 2, device='cuda')


def test_device_side_add_writes_the_rows_add_batch_writes():
    """add_batch_on_device + count_row_added = add_batch, across the wrap of the write head."""
    length, num_envs, rows = 5, 3, 12
    host = _filled(num_envs, length, rows)
    device_side = ReplayBuffer(num_envs, length, observation_dim=2, action_dim=2)
    for t in range(rows):
        device_side.add_batch_on_device(_step(num_envs, t))
        # The device counter moves on its own; the host one only when told.
        assert device_side.total_added == t
        device_side.count_row_added()
    assert device_side.total_added == host.total_added == rows
    state, expected = device_side.state_dict(), host.state_dict()
    assert state.keys() == expected.keys()
    for name in Experience._fields:
        assert device_side.storage[name].dtype == host.storage[name].dtype
        assert torch.equal(device_side.storage[name], host.storage[name]), name
        for env in range(num_envs):
            assert torch.equal(state[name][env], expected[name][env]), name
    torch.manual_seed(0)
    a = device_side.sample_on_device(8, 2)
    torch.manual_seed(0)
    b = host.sample_on_device(8, 2)
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_device_auto_is_trainer_configs_auto():
    assert ReplayBuffer(2, 3, 1, 1, device='auto').device == resolve_device('auto')
    with pytest.raises(ValueError, match="device must be 'auto', 'cpu', 'cuda' or 'cuda:N'"):
        ReplayBuffer(2, 3, 1, 1, device='gpu')
