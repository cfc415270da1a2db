"""alf_lite.device: resolving TrainerConfig.device, describing it, deterministic cuBLAS."""

import os

import pytest
import torch

from alf_lite import device as device_module
from alf_lite.device import (
    CgroupMemoryLimit,
    DeviceUnavailableError,
    available_cpu_memory,
    cgroup_memory_limit,
    describe_device,
    free_memory_bytes,
    resolve_device,
    use_deterministic_algorithms,
    visible_gpu_ids,
)


def test_cpu_resolves_to_cpu():
    assert resolve_device('cpu') == torch.device('cpu')


def test_auto_without_cuda_is_the_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    assert resolve_device('auto') == torch.device('cpu')


def test_auto_with_cuda_is_the_current_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(torch.cuda, 'current_device', lambda: 0)
    assert resolve_device('auto') == torch.device('cuda', 0)


@pytest.mark.parametrize('value', ['gpu', 'cuda:', 'cuda:x', 'CPU', '', 'cuda:0 ', 0, None])
def test_bad_value_names_the_valid_ones(value):
    with pytest.raises(ValueError, match="'auto', 'cpu', 'cuda' or 'cuda:N'"):
        resolve_device(value)


@pytest.mark.parametrize('value', ['cuda', 'cuda:0', 'cuda:3'])
def test_cuda_without_a_gpu_is_a_clear_error(monkeypatch, value):
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    with pytest.raises(DeviceUnavailableError, match=f"device '{value}' was asked for.*'auto'"):
        resolve_device(value)


def test_missing_gpu_index_names_the_visible_ones(monkeypatch):
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: 2)
    assert resolve_device('cuda:1') == torch.device('cuda', 1)
    with pytest.raises(DeviceUnavailableError, match=r'only 2 CUDA device\(s\).*cuda:1'):
        resolve_device('cuda:2')


def test_cpu_description_names_cores_and_torch():
    text = describe_device(torch.device('cpu'))
    assert text.startswith('cpu (') and torch.__version__ in text and 'cores' in text


def test_cpu_free_memory_is_available_ram(monkeypatch):
    class FakeMemory:
        available = 12345

    monkeypatch.setattr(device_module.psutil, 'virtual_memory', FakeMemory)
    assert free_memory_bytes(torch.device('cpu')) == 12345


HOST_AVAILABLE = 24_500_000_000
V1_NO_LIMIT = '9223372036854771712'


@pytest.fixture
def host_has_plenty(monkeypatch):
    """The host's available RAM, as psutil reports it, is 24.5 GB."""

    class FakeMemory:
        available = HOST_AVAILABLE

    monkeypatch.setattr(device_module.psutil, 'virtual_memory', FakeMemory)


def fake_root(tmp_path, proc_self_cgroup, files):
    """A file tree holding ``proc/self/cgroup`` and, under ``sys/fs/cgroup``, ``files``."""
    (tmp_path / 'proc' / 'self').mkdir(parents=True)
    (tmp_path / 'proc' / 'self' / 'cgroup').write_text(proc_self_cgroup)
    for name, text in files.items():
        path = tmp_path / 'sys' / 'fs' / 'cgroup' / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(tmp_path)


def test_cgroup_v2_limit_bounds_cpu_memory_below_the_hosts(tmp_path, host_has_plenty):
    scope = 'system.slice/docker-abc.scope'
    root = fake_root(
        tmp_path,
        f'0::/{scope}\n',
        {
            'cgroup.controllers': 'cpu memory pids\n',
            f'{scope}/memory.max': '1500000000\n',
            f'{scope}/memory.current': '400000000\n',
            f'{scope}/memory.stat': 'anon 250000000\ninactive_file 100000000\n',
        },
    )
    # 1.5 GB limit - (400 MB charged - 100 MB reclaimable cache) = 1.2 GB room.
    limit = CgroupMemoryLimit(str(tmp_path / 'sys/fs/cgroup' / scope), 1_500_000_000, 300_000_000)
    assert cgroup_memory_limit(root) == limit
    assert available_cpu_memory(root) == (1_200_000_000, limit)
    assert free_memory_bytes(torch.device('cpu'), root) == 1_200_000_000


def test_cgroup_v1_limit_bounds_cpu_memory_below_the_hosts(tmp_path, host_has_plenty):
    root = fake_root(
        tmp_path,
        '5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n0::/\n',
        {
            'memory/docker/abc/memory.limit_in_bytes': '1572864000\n',
            'memory/docker/abc/memory.usage_in_bytes': '72864000\n',
            'memory/docker/abc/memory.stat': 'inactive_file 5\ntotal_inactive_file 0\n',
            'memory/memory.limit_in_bytes': V1_NO_LIMIT,
            'memory/memory.usage_in_bytes': '9000000000',
            'unified/cgroup.procs': '',
        },
    )
    assert free_memory_bytes(torch.device('cpu'), root) == 1_500_000_000
    assert available_cpu_memory(root)[1].path == str(tmp_path / 'sys/fs/cgroup/memory/docker/abc')


def test_cgroups_without_a_memory_limit_leave_the_hosts_figure(tmp_path, host_has_plenty):
    v2 = fake_root(
        tmp_path / 'v2',
        '0::/user.slice\n',
        {
            'cgroup.controllers': 'memory\n',
            'user.slice/memory.max': 'max\n',
            'user.slice/memory.current': '400000000\n',
        },
    )
    v1 = fake_root(
        tmp_path / 'v1',
        '4:memory:/user.slice\n',
        {
            'memory/user.slice/memory.limit_in_bytes': V1_NO_LIMIT,
            'memory/user.slice/memory.usage_in_bytes': '400000000',
        },
    )
    for root in (v2, v1, str(tmp_path / 'no cgroup files at all')):
        assert cgroup_memory_limit(root) is None
        assert available_cpu_memory(root) == (HOST_AVAILABLE, None)


def test_a_limit_on_a_parent_cgroup_bounds_its_children(tmp_path, host_has_plenty):
    # A Slurm job's limit, on the job's cgroup, above the step the process is in.
    root = fake_root(
        tmp_path,
        '0::/slurm/job_7/step_0\n',
        {
            'cgroup.controllers': 'memory\n',
            'slurm/job_7/memory.max': '2000000000',
            'slurm/job_7/memory.current': '600000000',
            'slurm/job_7/step_0/memory.max': 'max',
            'slurm/job_7/step_0/memory.current': '500000000',
        },
    )
    assert free_memory_bytes(torch.device('cpu'), root) == 1_400_000_000


def test_a_container_sees_its_own_cgroup_at_the_mount_point(tmp_path, host_has_plenty):
    # Without a cgroup namespace, /proc/self/cgroup names the host's path.
    root = fake_root(
        tmp_path,
        '4:memory:/kubepods/pod1/abc\n',
        {
            'memory/memory.limit_in_bytes': '1000000000',
            'memory/memory.usage_in_bytes': '100000000',
        },
    )
    assert free_memory_bytes(torch.device('cpu'), root) == 900_000_000


def test_a_cgroup_with_room_to_spare_leaves_the_hosts_figure(tmp_path, host_has_plenty):
    root = fake_root(
        tmp_path,
        '0::/big\n',
        {
            'cgroup.controllers': 'memory\n',
            'big/memory.max': str(64 * 10**9),
            'big/memory.current': '1000',
        },
    )
    assert cgroup_memory_limit(root).room == 64 * 10**9 - 1000
    assert available_cpu_memory(root) == (HOST_AVAILABLE, None)


def test_deterministic_cuda_sets_the_cublas_workspace(monkeypatch):
    monkeypatch.delenv('CUBLAS_WORKSPACE_CONFIG', raising=False)
    was = torch.are_deterministic_algorithms_enabled()
    try:
        use_deterministic_algorithms(torch.device('cuda', 0))
        assert os.environ['CUBLAS_WORKSPACE_CONFIG'] == ':4096:8'
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(was)


def test_deterministic_cuda_keeps_the_small_workspace_and_refuses_others(monkeypatch):
    was = torch.are_deterministic_algorithms_enabled()
    try:
        monkeypatch.setenv('CUBLAS_WORKSPACE_CONFIG', ':16:8')
        use_deterministic_algorithms(torch.device('cuda', 0))
        monkeypatch.setenv('CUBLAS_WORKSPACE_CONFIG', ':0:0')
        with pytest.raises(ValueError, match="CUBLAS_WORKSPACE_CONFIG=':0:0'"):
            use_deterministic_algorithms(torch.device('cuda', 0))
    finally:
        torch.use_deterministic_algorithms(was)


def test_deterministic_cpu_leaves_cublas_alone(monkeypatch):
    monkeypatch.delenv('CUBLAS_WORKSPACE_CONFIG', raising=False)
    was = torch.are_deterministic_algorithms_enabled()
    try:
        use_deterministic_algorithms(torch.device('cpu'))
    finally:
        torch.use_deterministic_algorithms(was)
    assert 'CUBLAS_WORKSPACE_CONFIG' not in os.environ


def test_visible_gpus_are_those_cuda_visible_devices_names(monkeypatch):
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: 2)
    monkeypatch.delenv('CUDA_VISIBLE_DEVICES', raising=False)
    assert visible_gpu_ids() == ['0', '1']
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '3, 5')
    assert visible_gpu_ids() == ['3', '5']
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: 0)
    assert visible_gpu_ids() == []
