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
    device_type,
    free_memory_bytes,
    resolve_device,
    use_deterministic_algorithms,
    visible_gpu_ids,
)
from cli_helpers import fails_after


def test_cpu_resolves_to_cpu():
    assert resolve_device('cpu') == torch.device('cpu')


def test_auto_without_cuda_is_the_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    assert resolve_device('auto') == torch.device('cpu')


def test_auto_with_cuda_is_the_current_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(torch.cuda, 'current_device', lambda: 0)
    assert resolve_device('auto') == torch.device('cuda', 0)


@pytest.mark.parametrize(
    'value', ['gpu', 'cuda:', 'cuda:x', 'CPU', '', 'cuda:0 ', 'cpu\n', 'cuda\n', 0, None]
)
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


@pytest.mark.parametrize(
    'value, available, kind',
    [
        ('auto', False, 'cpu'),
        ('auto', True, 'cuda'),
        ('cpu', True, 'cpu'),
        ('cuda', False, 'cuda'),  # resolve_device says it is missing
        ('cuda:7', True, 'cuda'),
    ],
)
def test_device_type_never_initialises_cuda(monkeypatch, value, available, kind):
    def initialise(*args):
        raise AssertionError('CUDA initialised')

    monkeypatch.setattr(torch.cuda, 'is_available', lambda: available)
    monkeypatch.setattr(torch.cuda, 'current_device', initialise)
    monkeypatch.setattr(torch.cuda, '_lazy_init', initialise)
    assert device_type(value) == kind


@pytest.mark.parametrize('value', ['gpu', 'cuda:', 'CPU', None])
def test_device_type_of_a_bad_value_names_the_valid_ones(value):
    with pytest.raises(ValueError, match="'auto', 'cpu', 'cuda' or 'cuda:N'"):
        device_type(value)


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


def test_a_cgroup_path_above_the_mount_point_is_read_at_the_mount_point(tmp_path, host_has_plenty):
    # In a cgroup namespace, a cgroup outside it is named relative to its root: '/../..'.
    root = fake_root(
        tmp_path,
        '0::/../../escape\n',
        {
            'cgroup.controllers': 'memory\n',
            'memory.max': '1000000000\n',
            'memory.current': '100000000\n',
        },
    )
    (tmp_path / 'sys' / 'escape').mkdir()  # where the path leads, outside the mount
    with fails_after(5):  # climbing from outside the mount would never reach it
        limit = cgroup_memory_limit(root)
    assert limit == CgroupMemoryLimit(
        str(tmp_path / 'sys' / 'fs' / 'cgroup'), 1_000_000_000, 100_000_000
    )


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
    # cuDNN's autotuner picks its kernels by timing them: another run may pick others.
    monkeypatch.setattr(torch.backends.cudnn, 'benchmark', True)
    was = torch.are_deterministic_algorithms_enabled()
    try:
        use_deterministic_algorithms(torch.device('cuda', 0))
        assert os.environ['CUBLAS_WORKSPACE_CONFIG'] == ':4096:8'
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.backends.cudnn.benchmark is False
    finally:
        torch.use_deterministic_algorithms(was)


def test_deterministic_cuda_keeps_the_small_workspace_and_refuses_others(monkeypatch):
    was = torch.are_deterministic_algorithms_enabled()
    try:
        monkeypatch.setenv('CUBLAS_WORKSPACE_CONFIG', ':16:8')
        use_deterministic_algorithms(torch.device('cuda', 0))
        assert os.environ['CUBLAS_WORKSPACE_CONFIG'] == ':16:8'
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


def test_auto_and_cuda_are_the_current_gpu_not_always_the_first(monkeypatch):
    # torch.cuda.set_device(1) (or a launcher) made GPU 1 the current one.
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: 2)
    monkeypatch.setattr(torch.cuda, 'current_device', lambda: 1)
    assert resolve_device('auto') == torch.device('cuda', 1)
    assert resolve_device('cuda') == torch.device('cuda', 1)
    assert resolve_device('cuda:0') == torch.device('cuda', 0)


def test_cpu_description_counts_the_cores_this_process_may_use(monkeypatch):
    # taskset / docker --cpuset-cpus: 3 of the machine's cores.
    monkeypatch.setattr(device_module.os, 'sched_getaffinity', lambda pid: {0, 2, 5})
    monkeypatch.setattr(device_module, 'cpu_model', lambda: None)
    assert describe_device(torch.device('cpu')) == (
        f'cpu (3 usable cores, torch {torch.__version__})'
    )
    # taskset -c 0: one.
    monkeypatch.setattr(device_module.os, 'sched_getaffinity', lambda pid: {0})
    assert describe_device(torch.device('cpu')) == (
        f'cpu (1 usable core, torch {torch.__version__})'
    )


def test_cpu_description_names_the_cpu_model(monkeypatch, tmp_path):
    # Two sockets' lines, the spacing as Linux writes it.
    cpuinfo = tmp_path / 'cpuinfo'
    cpuinfo.write_text(
        'processor\t: 0\nvendor_id\t: GenuineIntel\n'
        'model name\t: Intel(R) Xeon(R)  Gold 6338 CPU @ 2.00GHz\n\n'
        'processor\t: 1\nmodel name\t: Intel(R) Xeon(R)  Gold 6338 CPU @ 2.00GHz\n'
    )
    assert device_module.cpu_model(str(cpuinfo)) == 'Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz'
    assert device_module.cpu_model(str(tmp_path / 'none')) is None
    cpuinfo.write_text('processor\t: 0\nmodel name\t:\n')  # named nothing
    assert device_module.cpu_model(str(cpuinfo)) is None
    monkeypatch.setattr(device_module.os, 'sched_getaffinity', lambda pid: {0, 1})
    monkeypatch.setattr(device_module, 'cpu_model', lambda: 'AMD EPYC')
    assert describe_device(torch.device('cpu')) == (
        f'cpu (AMD EPYC, 2 usable cores, torch {torch.__version__})'
    )


def test_gpu_description_names_the_gpu_its_memory_in_gib_and_the_cuda_version(monkeypatch):
    class H200:
        name = 'NVIDIA H200'
        total_memory = 150_110_011_392  # 139.8 GiB

    monkeypatch.setattr(torch.cuda, 'get_device_properties', lambda device: H200)
    monkeypatch.setattr(torch.version, 'cuda', '13.0')
    assert describe_device(torch.device('cuda', 0)) == (
        f'cuda:0 (NVIDIA H200, 139.8 GiB, CUDA 13.0, torch {torch.__version__})'
    )


def test_gpu_free_memory_is_the_free_not_the_total(monkeypatch):
    monkeypatch.setattr(torch.cuda, 'mem_get_info', lambda device: (5_000_000_000, 80_000_000_000))
    assert free_memory_bytes(torch.device('cuda', 0)) == 5_000_000_000


def test_a_cgroup_over_its_limit_leaves_no_room():
    # The usage can exceed the limit for a moment (or when the limit was lowered).
    assert CgroupMemoryLimit('/sys/fs/cgroup/x', 1_000_000, 1_500_000).room == 0


def test_the_tightest_of_nested_limits_bounds_the_memory(tmp_path, host_has_plenty):
    # A pod limit of 2 GB with 1.5 GB used, above a container limited to 3 GB with
    # nothing used: the pod leaves 0.5 GB, whatever the container's limit says.
    root = fake_root(
        tmp_path,
        '0::/kubepods/pod1/ctr\n',
        {
            'cgroup.controllers': 'memory\n',
            'kubepods/pod1/memory.max': '2000000000',
            'kubepods/pod1/memory.current': '1500000000',
            'kubepods/pod1/ctr/memory.max': '3000000000',
            'kubepods/pod1/ctr/memory.current': '0',
        },
    )
    assert cgroup_memory_limit(root) == CgroupMemoryLimit(
        str(tmp_path / 'sys/fs/cgroup/kubepods/pod1'), 2_000_000_000, 1_500_000_000
    )
    assert free_memory_bytes(torch.device('cpu'), root) == 500_000_000


def test_cgroup_v2_limit_on_a_host_with_both_versions_is_read_from_unified(
    tmp_path, host_has_plenty
):
    # Hybrid mode: v1 controllers under /sys/fs/cgroup, v2 under /sys/fs/cgroup/unified.
    root = fake_root(
        tmp_path,
        '4:memory:/\n0::/user.slice/job\n',
        {
            'memory/memory.limit_in_bytes': V1_NO_LIMIT,
            'memory/memory.usage_in_bytes': '9000000000',
            'unified/cgroup.controllers': 'memory\n',
            'unified/user.slice/job/memory.max': '1000000000',
            'unified/user.slice/job/memory.current': '250000000',
        },
    )
    assert free_memory_bytes(torch.device('cpu'), root) == 750_000_000


def test_visible_gpus_are_at_most_those_torch_sees(monkeypatch):
    # CUDA_VISIBLE_DEVICES may name a GPU the machine lacks; torch then sees fewer.
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: 2)
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '3,5,7')
    assert visible_gpu_ids() == ['3', '5']
