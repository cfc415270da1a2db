"""alf_lite.device: resolving TrainerConfig.device, describing it, deterministic cuBLAS."""

import os

import pytest
import torch

from alf_lite import device as device_module
from alf_lite.device import (
    DeviceUnavailableError,
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
