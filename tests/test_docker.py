"""docker/Dockerfile read as text (no engine here): what it copies exists, what it installs fits."""

import ast
import fnmatch
import importlib.metadata
import re
import shlex
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO_ROOT / 'docker' / 'Dockerfile'
# BuildKit reads <Dockerfile>.dockerignore beside the Dockerfile; the context is the repo root.
DOCKERIGNORE = REPO_ROOT / 'docker' / 'Dockerfile.dockerignore'


def instructions():
    """``[(INSTRUCTION, argument text)]`` with continuation lines joined and comments dropped."""
    text = re.sub(r'\\\n', ' ', DOCKERFILE.read_text())
    result = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith('#'):
            keyword, _, rest = line.partition(' ')
            result.append((keyword.upper(), rest.strip()))
    return result


def arguments(name):
    return [rest for keyword, rest in instructions() if keyword == name]


def setup_requirements():
    """``(install_requires, extras_require)`` of setup.py, read without running it."""
    tree = ast.parse((REPO_ROOT / 'setup.py').read_text())
    call = next(
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, 'id', '') == 'setup'
    )
    kwargs = {k.arg: k.value for k in call.keywords}
    return (
        ast.literal_eval(kwargs['install_requires']),
        ast.literal_eval(kwargs['extras_require']),
    )


def requirement_name(requirement):
    return re.match(r'[A-Za-z0-9_.-]+', requirement).group(0).lower().replace('_', '-')


def makefile_pins():
    """``{name: version}`` of the ``pip install name==version`` lines of the Makefile."""
    text = (REPO_ROOT / 'Makefile').read_text()
    return {
        name.lower(): version
        for name, version in re.findall(r'pip install\s+([\w.-]+)==([\w.+-]+)', text)
    }


def pip_installs():
    """Every package argument of the ``pip install`` commands in RUN instructions."""
    packages = []
    for run in arguments('RUN'):
        for command in run.split('&&'):
            words = shlex.split(command)
            if words[:2] != ['pip', 'install']:
                continue
            skip_next = False
            for word in words[2:]:
                if skip_next:
                    skip_next = False
                elif word in ('--index-url', '--extra-index-url', '-i', '-r', '-c'):
                    skip_next = True
                elif not word.startswith('-'):
                    packages.append(word)
    return packages


def test_every_copied_path_exists_and_is_not_ignored():
    ignored = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith('#')
    ]
    sources = []
    for copy in arguments('COPY'):
        words = [w for w in shlex.split(copy) if not w.startswith('--')]
        sources += words[:-1]
    assert sources, 'the Dockerfile copies nothing'
    for source in sources:
        assert (REPO_ROOT / source).exists(), f'COPY {source}: no such file in the repository'
        assert not any(fnmatch.fnmatch(source, pattern) for pattern in ignored), source
    # setup.py reads README.md: it must be in the image before `pip install .`.
    assert 'README.md' in sources and 'setup.py' in sources and 'alf_lite' in sources


def test_installed_packages_match_setup_py_and_the_makefile_pins():
    install_requires, extras_require = setup_requirements()
    known = {requirement_name(r) for r in install_requires}
    known |= {requirement_name(r) for extra in extras_require.values() for r in extra}
    pins = makefile_pins()
    assert pins.get('torch'), 'the Makefile no longer pins torch'
    packages = pip_installs()
    local = [p for p in packages if p.startswith('.')]
    assert len(local) == 1, f'the package itself should be installed once: {packages}'
    extras = re.fullmatch(r'\.(?:\[([\w,-]+)\])?', local[0])
    assert extras, local[0]
    for extra in (extras.group(1) or '').split(','):
        if extra:
            assert extra in extras_require, f'setup.py has no extra {extra!r}'
    named = [p for p in packages if not p.startswith('.')]
    assert any(requirement_name(p) == 'torch' for p in named), 'torch is not pinned first'
    for requirement in named:
        name = requirement_name(requirement)
        assert name in known, f'{requirement} is not a requirement in setup.py'
        if name in pins:
            assert requirement == f'{name}=={pins[name]}', (requirement, pins[name])


def test_setup_py_admits_no_gymnasium_older_than_the_api_alf_lite_imports():
    # suite_gym imports gymnasium.vector.AutoresetMode, which gymnasium 1.1.0 brought:
    # with 1.0, which pip would keep when it is installed, `import alf_lite.trainer` fails.
    from gymnasium.vector import AutoresetMode  # noqa: F401
    from packaging.requirements import Requirement
    from packaging.version import Version

    install_requires, _ = setup_requirements()
    (gymnasium,) = [Requirement(r) for r in install_requires if requirement_name(r) == 'gymnasium']
    lower = [Version(s.version) for s in gymnasium.specifier if s.operator in ('>=', '>', '~=')]
    assert lower and min(lower) >= Version('1.1'), str(gymnasium)
    assert not gymnasium.specifier.contains('1.0.0'), str(gymnasium)


def test_setup_py_admits_no_torch_without_a_fused_adam_on_the_cpu_and_meta_devices():
    # alf_lite.optimizers makes Adam and AdamW fused by default, and model_memory builds the
    # algorithm on the meta device first: torch refuses fused=True for CPU parameters before
    # 2.4 (every run fails) and for meta ones before 2.5 (the memory goes uncounted).
    import torch
    from packaging.requirements import Requirement
    from packaging.version import Version

    for device in ('cpu', 'meta'):
        torch.optim.Adam([torch.nn.Parameter(torch.zeros(1, device=device))], fused=True)
    install_requires, _ = setup_requirements()
    (torch_requirement,) = [
        Requirement(r) for r in install_requires if requirement_name(r) == 'torch'
    ]
    lower = [Version(s.version) for s in torch_requirement.specifier if s.operator in ('>=', '>')]
    assert lower and min(lower) >= Version('2.5'), str(torch_requirement)
    assert not torch_requirement.specifier.contains('2.4.1'), str(torch_requirement)
    assert torch_requirement.specifier.contains(makefile_pins()['torch']), str(torch_requirement)


def test_python_version_entrypoint_and_headless_rendering():
    (base,) = arguments('FROM')
    assert re.match(r'python:3\.11(\.\d+)?-', base), base
    _, extras = setup_requirements()
    assert 'ray' in extras
    env = ' '.join(arguments('ENV'))
    assert re.search(r'\bMUJOCO_GL=egl\b', env), env
    assert 'libegl1' in ' '.join(arguments('RUN'))
    (entrypoint,) = arguments('ENTRYPOINT')
    command = ast.literal_eval(entrypoint)
    assert command[:3] == ['python', '-m', 'alf_lite.bin.train'], command
    assert (REPO_ROOT / 'alf_lite' / 'bin' / 'train.py').is_file()


@pytest.mark.parametrize('path', ['.venv', 'runs', '.git'])
def test_build_context_leaves_out_local_state(path):
    ignored = DOCKERIGNORE.read_text().split()
    assert path in ignored


def _imported_top_level_modules(package: Path) -> set:
    """The top-level names of every absolute import in the ``.py`` files under ``package``."""
    names = set()
    for path in package.rglob('*.py'):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name.split('.')[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names.add(node.module.split('.')[0])
    return names


def test_every_third_party_module_alf_lite_imports_is_declared_in_setup_py():
    # One that only a dependency brings in today goes missing when that dependency drops it.
    install_requires, extras = setup_requirements()
    declared = set()
    for requirement in install_requires + [r for rs in extras.values() for r in rs]:
        declared.add(requirement_name(requirement))
        bracket = re.search(r'\[([^\]]*)\]', requirement)  # gymnasium[mujoco,...]: mujoco
        if bracket:
            declared.update(extra.strip() for extra in bracket.group(1).split(','))
    distributions = importlib.metadata.packages_distributions()
    third_party = sorted(
        name
        for name in _imported_top_level_modules(REPO_ROOT / 'alf_lite')
        if name not in sys.stdlib_module_names and name != 'alf_lite'
    )
    assert 'cloudpickle' in third_party and 'torch' in third_party
    undeclared = [
        name
        for name in third_party
        if not {requirement_name(d) for d in distributions.get(name, [name])} & declared
    ]
    assert undeclared == []
