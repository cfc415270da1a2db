"""Promises of alf_lite.config: includes, override order, clean slate, errors, round trips."""

import os
import re
import stat
import sys
import types
from typing import Any, Protocol, Tuple

import gin
import pytest
import torch

# Registers torch.optim.Adam etc. the way gin files in this project name them.
import alf_lite.optimizers  # noqa: F401
from alf_lite import config
from alf_lite.config import ConfigError
from alf_lite.run_dir import MAX_CONFIG_BYTES
from cli_helpers import fails_after


@gin.configurable(module='test_config')
def my_fn(alpha=1, beta=2):
    return alpha, beta


@gin.configurable(module='test_config')
class MyModel:
    def __init__(self, hidden_size=8, optimizer=None, activation='relu'):
        self.hidden_size = hidden_size
        self.optimizer = optimizer
        self.activation = activation


@gin.configurable(module='test_config', denylist=['size'])
def sized(size=1, scale=2.0, **extra):
    return size, scale, extra


@gin.configurable(module='test_config', denylist=['size'])
class Sized:
    def __init__(self, size, scale=2.0):
        self.size, self.scale = size, scale


@gin.configurable(module='test_config')
def widths(layers: Tuple[int, ...] = (4,)):
    return layers


class Shaper(Protocol):
    def __call__(self, action): ...


@gin.configurable(module='test_config')
class Scale(int):
    pass


@gin.configurable(module='test_config')
def annotated(anything: Any = None, shaper: Shaper = None, scale: float = 1.0):
    return anything, shaper, scale


@pytest.fixture(autouse=True)
def _clean_gin():
    gin.clear_config()
    yield
    gin.clear_config()


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_include_resolves_relative_to_including_file(tmp_path, monkeypatch):
    _write(tmp_path / 'exp' / 'other.gin', 'my_fn.beta = 20\n')
    _write(tmp_path / 'exp' / 'common' / 'base.gin', "include '../other.gin'\nmy_fn.alpha = 10\n")
    main = _write(
        tmp_path / 'exp' / 'main.gin', "include 'common/base.gin'\nMyModel.hidden_size = 64\n"
    )
    # A decoy with the same relative path in the working directory must not win.
    elsewhere = tmp_path / 'elsewhere'
    _write(elsewhere / 'common' / 'base.gin', 'my_fn.alpha = -1\n')
    monkeypatch.chdir(elsewhere)

    config.parse_config([str(main)])

    assert my_fn() == (10, 20)
    assert MyModel().hidden_size == 64


def test_gin_files_saved_with_a_byte_order_mark_and_crlf_line_ends_parse_as_without(tmp_path):
    # As Windows editors save them (Notepad, PowerShell's Out-File): the mark is no token.
    bom = b'\xef\xbb\xbf'
    (tmp_path / 'base.gin').write_bytes(bom + b'# base\r\nmy_fn.beta = 20\r\n')
    main = tmp_path / 'main.gin'
    main.write_bytes(bom + b"include 'base.gin'\r\nmy_fn.alpha = 10\r\n")

    config.parse_config([str(main)])

    assert my_fn() == (10, 20)


def test_relative_gin_file_resolves_against_cwd(tmp_path, monkeypatch):
    _write(tmp_path / 'common' / 'base.gin', 'my_fn.alpha = 5\n')
    _write(tmp_path / 'main.gin', "include 'common/base.gin'\n")
    monkeypatch.chdir(tmp_path)

    config.parse_config(['main.gin'])

    assert my_fn() == (5, 2)


def test_later_params_override_files(tmp_path):
    first = _write(tmp_path / 'a.gin', 'my_fn.alpha = 1\nmy_fn.beta = 1\n')
    second = _write(tmp_path / 'b.gin', 'my_fn.alpha = 2\n')

    config.parse_config([str(first), str(second)], ['my_fn.beta = 3', 'my_fn.beta=4'])

    assert my_fn() == (2, 4)


def test_parse_starts_clean(tmp_path):
    config.parse_config([], ['my_fn.alpha = 7', 'MyModel.hidden_size = 3'])
    gin.finalize()  # a trainer may lock the config; the next parse must still work

    config.parse_config([], ['my_fn.beta = 9'])

    assert my_fn() == (1, 9)
    assert MyModel().hidden_size == 8


def test_binding_location_and_bound_scopes_name_where_and_in_which_scopes(tmp_path):
    base = _write(tmp_path / 'base.gin', 'my_fn.alpha = 1\n\nouter/my_fn.alpha = 2\n')
    main = _write(
        tmp_path / 'main.gin',
        f"include '{base}'\ninner/my_fn.alpha = 3\n"
        'MyModel.optimizer = @outer/my_fn\nMyModel.activation = @inner/my_fn\n',
    )

    config.parse_config([str(main)], ['outer/my_fn.alpha = 4'])

    selector = 'test_config.my_fn'
    assert sorted(config.bound_scopes(selector, 'alpha')) == ['', 'inner', 'outer']
    assert config.bound_scopes(selector, 'beta') == []
    assert config.binding_location(('', selector, 'alpha')) == (
        f'file {base}, line 1, `my_fn.alpha = 1`'
    )
    assert config.binding_location(('inner', selector, 'alpha')) == (
        f'file {main}, line 2, `inner/my_fn.alpha = 3`'
    )
    # The later --gin_param replaced the file's binding of that scope.
    assert config.binding_location(('outer', selector, 'alpha')) == (
        "--gin_param 'outer/my_fn.alpha = 4'"
    )
    assert config.binding_location(('', selector, 'beta')) is None


def test_unused_bindings_are_the_users_own_unless_only_an_included_file_wrote_them(tmp_path):
    base = _write(
        tmp_path / 'base.gin',
        'MyModel.activation = @actor/my_fn\nactor/my_fn.alpha = 5\nsized.scale = 1.5\n',
    )
    # The experiment overrides two bindings of the file it includes: they are its own now.
    main = _write(
        tmp_path / 'main.gin', f"include '{base}'\nactor/my_fn.alpha = 6\nsized.scale = 2.5\n"
    )
    config.parse_config([str(main)])
    with gin.config_scope('actor'):
        assert my_fn() == (6, 2)  # a scoped binding, used in its scope

    own, included = config.unused_bindings()

    assert own == [f'`sized.scale` (file {main}, line 3, `sized.scale = 2.5`)']
    assert included == [
        f'`MyModel.activation` (file {base}, line 1, `MyModel.activation = @actor/my_fn`)'
    ]


def test_a_binding_is_used_by_the_calls_in_its_scope_and_the_scopes_within_it(tmp_path):
    main = _write(
        tmp_path / 'main.gin',
        # Used by the call in actor/: an unscoped binding, where no scoped one overrides it.
        'my_fn.alpha = 5\n'
        # Overridden there by actor/'s own: changes nothing.
        'my_fn.beta = 7\n'
        'actor/my_fn.beta = 8\n'
        # A scope nothing calls in, and one the call's scope only ends with.
        'critic/my_fn.alpha = 3\n'
        'inner/my_fn.alpha = 4\n'
        # References opening the scopes (MyModel is not built here).
        'MyModel.activation = @actor/my_fn\n'
        'MyModel.optimizer = @critic/my_fn\n'
        'MyModel.hidden_size = @inner/my_fn\n',
    )
    config.parse_config([str(main)])
    with gin.config_scope('actor'):
        assert my_fn() == (5, 8)
        with gin.config_scope('inner'):  # actor/inner: inner/'s bindings do not apply
            assert my_fn() == (5, 8)

    own, _ = config.unused_bindings()

    assert [entry.split(' ')[0] for entry in own] == [
        '`my_fn.beta`',
        '`critic/my_fn.alpha`',
        '`inner/my_fn.alpha`',
        '`MyModel.activation`',
        '`MyModel.optimizer`',
        '`MyModel.hidden_size`',
    ]


def test_code_outside_installed_names_a_module_found_outside_the_installed_packages(
    tmp_path, monkeypatch
):
    (tmp_path / 'loose_module_4d1e.py').write_text('raise SystemExit("imported")\n')
    (tmp_path / 'loose_dir_4d1e').mkdir()  # a namespace package
    (tmp_path / 'loose_dir_4d1e' / 'inner.py').write_text('raise SystemExit("imported")\n')
    (tmp_path / 'json.py').write_text('')  # json is imported already: nothing would run
    monkeypatch.syspath_prepend(str(tmp_path))

    outside = config.code_outside_installed
    assert outside('loose_module_4d1e') == str(tmp_path / 'loose_module_4d1e.py')
    assert outside('loose_dir_4d1e.inner') == str(tmp_path / 'loose_dir_4d1e')
    for installed in ('json', 'os', 'sqlite3', 'numpy.linalg', 'gymnasium.envs.mujoco', 'sys'):
        assert outside(installed) is None, installed
    assert outside('alf_lite.environments.icub_walking') is None  # alf_lite's own
    assert outside('no_such_module_4d1e.sub') is None  # the import fails; nothing runs
    assert 'loose_module_4d1e' not in sys.modules and 'loose_dir_4d1e' not in sys.modules


def test_untrusted_files_may_not_import_from_outside_but_the_users_params_may(
    tmp_path, monkeypatch
):
    (tmp_path / 'loose_module_8b2c.py').write_text('')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, 'loose_module_8b2c', raising=False)
    gin_file = _write(
        tmp_path / 'run' / 'config.gin', 'my_fn.alpha = 2\nimport loose_module_8b2c\n'
    )

    with pytest.raises(config.UntrustedCodeError) as error:
        config.parse_config([str(gin_file)], trust_imports=False)
    assert str(error.value).startswith(
        f'`import loose_module_8b2c` (file {gin_file}, line 2) would run the code of '
        f'{tmp_path / "loose_module_8b2c.py"}, which is not an installed package'
    )
    assert '--trust_imports' in str(error.value)
    assert 'loose_module_8b2c' not in sys.modules
    assert my_fn() == (1, 2)  # the config was left empty

    config.parse_config([], ['import loose_module_8b2c'], trust_imports=False)
    assert 'loose_module_8b2c' in sys.modules
    monkeypatch.delitem(sys.modules, 'loose_module_8b2c')
    config.parse_config([str(gin_file)])  # trusted, the default
    assert 'loose_module_8b2c' in sys.modules


def test_a_directory_whose_name_only_starts_like_an_installed_one_is_outside(tmp_path, monkeypatch):
    # An editable install puts the checkout on sys.path beside its package: a file
    # alf_lite_tools.py there is not alf_lite's code.
    installed = tmp_path / 'alf_lite'
    _write(installed / 'inside_module_5f3a.py', '')
    _write(tmp_path / 'alf_lite_tools' / 'sibling_module_5f3a.py', '')
    monkeypatch.setattr(config, '_trusted_dirs', lambda: [str(installed)])
    monkeypatch.syspath_prepend(str(installed))
    monkeypatch.syspath_prepend(str(tmp_path / 'alf_lite_tools'))

    assert config.code_outside_installed('inside_module_5f3a') is None
    assert config.code_outside_installed('sibling_module_5f3a') == str(
        tmp_path / 'alf_lite_tools' / 'sibling_module_5f3a.py'
    )


def test_an_env_id_that_a_reference_returns_is_refused_in_a_file_not_in_the_users_params(
    tmp_path, monkeypatch
):
    import alf_lite.all_configurables  # noqa: F401

    (tmp_path / 'loose_env_2e6b.py').write_text('raise SystemExit("imported")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    # gin.singleton calls the macro, which returns the id: no string is bound to env_name.
    through_singleton = (
        'create_environment.env_name = @env_id/gin.singleton()\n'
        'env_id/gin.singleton.constructor = @ID/gin.macro\n'
        "ID = 'loose_env_2e6b:Walker-v0'\n"
    )
    gin_file = _write(tmp_path / 'run' / 'config.gin', through_singleton)

    with pytest.raises(config.UntrustedCodeError) as error:
        config.parse_config([str(gin_file)], trust_imports=False)
    assert str(error.value).startswith(
        f'The env id of file {gin_file}, line 1, `create_environment.env_name = '
        '@env_id/gin.singleton()` is what @env_id/gin.singleton() returns when it runs'
    )
    assert '--trust_imports' in str(error.value)
    config.parse_config([str(gin_file)])  # trusted, the default
    config.parse_config([], through_singleton.splitlines(), trust_imports=False)
    assert 'loose_env_2e6b' not in sys.modules
    # An undefined macro is the config error it always was.
    undefined = _write(tmp_path / 'undefined.gin', 'create_environment.env_name = %NO_ID\n')
    with pytest.raises(ConfigError) as error:
        config.parse_config([str(undefined)], trust_imports=False)
    assert not isinstance(error.value, config.UntrustedCodeError)
    assert 'NO_ID' in str(error.value)


# A meta path finder as the one of setuptools' development install (pip install -e) maps
# the package's name to the directory its code was written in.
_EDITABLE_FINDER = """
import importlib.util, os

MAPPING = {MAPPING!r}


class EditableFinder:
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname not in MAPPING:
            return None
        init = os.path.join(MAPPING[fullname], '__init__.py')
        return importlib.util.spec_from_file_location(
            fullname, init, submodule_search_locations=[MAPPING[fullname]]
        )
"""


# The finder's file: installed; beside the package (which is found on sys.path there too);
# elsewhere outside (the package is found only through the finder's mapping).
@pytest.mark.parametrize('finder_place', ['site-packages', 'checkout', 'elsewhere'])
def test_a_package_installed_in_development_mode_is_installed_code(
    tmp_path, monkeypatch, finder_place
):
    package = tmp_path / 'checkout' / 'dev_pkg_3a9c'
    _write(package / '__init__.py', 'raise SystemExit("imported")\n')
    _write(package / 'envs.py', 'raise SystemExit("imported")\n')
    site_packages = tmp_path / 'site-packages'
    finder_installed = finder_place == 'site-packages'
    finder_dir = tmp_path / finder_place
    _write(
        finder_dir / 'dev_finder_3a9c.py',
        _EDITABLE_FINDER.replace('{MAPPING!r}', repr({'dev_pkg_3a9c': str(package)})),
    )
    monkeypatch.setattr(config, '_trusted_dirs', lambda: [str(site_packages)])
    monkeypatch.syspath_prepend(str(finder_dir))
    monkeypatch.delitem(sys.modules, 'dev_finder_3a9c', raising=False)
    import dev_finder_3a9c

    monkeypatch.setattr(sys, 'meta_path', sys.meta_path + [dev_finder_3a9c.EditableFinder])

    if finder_installed:
        assert config.code_outside_installed('dev_pkg_3a9c') is None
        assert config.code_outside_installed('dev_pkg_3a9c.envs') is None
    else:  # a finder of code from outside: its mapping says nothing
        assert config.code_outside_installed('dev_pkg_3a9c') == str(package / '__init__.py')
        assert config.code_outside_installed('dev_pkg_3a9c.envs') == str(package / '__init__.py')
    assert 'dev_pkg_3a9c' not in sys.modules


def test_an_env_id_importing_code_from_outside_is_refused_in_a_file_not_in_the_users_params(
    tmp_path, monkeypatch
):
    import alf_lite.all_configurables  # noqa: F401

    (tmp_path / 'loose_env_7c1d.py').write_text('raise SystemExit("imported")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    binding = "create_environment.env_name = 'loose_env_7c1d:Walker-v0'"
    gin_file = _write(tmp_path / 'run' / 'config.gin', binding + '\n')

    with pytest.raises(config.UntrustedCodeError, match='imports loose_env_7c1d.*--trust_imports'):
        config.parse_config([str(gin_file)], trust_imports=False)
    # The user's own --gin_param is trusted, as an import there is.
    config.parse_config([], [binding], trust_imports=False)
    assert gin.query_parameter('create_environment.env_name') == 'loose_env_7c1d:Walker-v0'
    assert 'loose_env_7c1d' not in sys.modules


def test_an_env_id_given_through_a_macro_importing_code_from_outside_is_refused(
    tmp_path, monkeypatch
):
    import alf_lite.all_configurables  # noqa: F401

    (tmp_path / 'loose_env_5a8e.py').write_text('raise SystemExit("imported")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    gin_file = _write(
        tmp_path / 'run' / 'config.gin',
        "ID = 'loose_env_5a8e:Walker-v0'\ncreate_environment.env_name = %ID\n",
    )
    with pytest.raises(config.UntrustedCodeError, match='imports loose_env_5a8e.*--trust_imports'):
        config.parse_config([str(gin_file)], trust_imports=False)
    assert 'loose_env_5a8e' not in sys.modules


def test_a_submodule_an_imported_package_finds_outside_the_installed_packages_is_named(
    tmp_path, monkeypatch
):
    # A package imported already (a namespace package of several portions, say) looks for
    # its submodules in each directory of its __path__: one may be outside.
    _write(tmp_path / 'portion' / 'sub_6e2f.py', 'raise SystemExit("imported")\n')
    package = types.ModuleType('pkg_6e2f')
    package.__path__ = [str(tmp_path / 'portion')]
    monkeypatch.setitem(sys.modules, 'pkg_6e2f', package)
    assert config.code_outside_installed('pkg_6e2f.sub_6e2f') == str(
        tmp_path / 'portion' / 'sub_6e2f.py'
    )
    assert 'pkg_6e2f.sub_6e2f' not in sys.modules


def test_misspelt_parameter_names_closest_valid(tmp_path):
    gin_file = _write(tmp_path / 'exp.gin', 'my_fn.alpha = 1\n\nmy_fn.alpah = 3\n')

    with pytest.raises(ConfigError) as info:
        config.parse_config([str(gin_file)])

    message = str(info.value)
    assert "'alpah'" in message and "'alpha'" in message and "'my_fn'" in message
    assert str(gin_file) in message and 'line 3' in message
    assert '\n' not in message


def test_misspelt_class_parameter_in_gin_param_names_the_param():
    with pytest.raises(ConfigError) as info:
        config.parse_config([], ['MyModel.hiden_size = 3'])

    message = str(info.value)
    assert "'hiden_size'" in message and "'hidden_size'" in message
    assert "--gin_param 'MyModel.hiden_size = 3'" in message


def test_unknown_configurable_names_closest(tmp_path):
    with pytest.raises(ConfigError) as info:
        config.parse_config([], ['MyModle.hidden_size = 3'])
    assert "'MyModle'" in str(info.value) and "'MyModel'" in str(info.value)

    with pytest.raises(ConfigError) as info:
        config.parse_config([], ['MyModel.optimizer = @Adamm'])
    assert "'Adamm'" in str(info.value) and "'Adam'" in str(info.value)


def test_error_in_included_file_names_the_include_chain(tmp_path):
    inner = _write(tmp_path / 'common' / 'inner.gin', 'my_fn.gamma = 1\n')
    outer = _write(tmp_path / 'outer.gin', "include 'common/inner.gin'\n")

    with pytest.raises(ConfigError) as info:
        config.parse_config([str(outer)])

    message = str(info.value)
    assert f'file {inner}, line 1' in message
    assert f'included from {outer}' in message


@pytest.mark.parametrize(
    'encoding, problem',
    [
        # Windows PowerShell 5's `>` and Out-File write UTF-16 with its byte order mark.
        ('utf-16', 'it is UTF-16 text, not UTF-8 (it starts with a UTF-16 byte order mark)'),
        ('latin-1', 'it is not UTF-8 text (its byte 0xe9 is none of UTF-8)'),
    ],
)
def test_a_gin_file_that_is_not_utf8_is_refused_saying_so(tmp_path, encoding, problem):
    gin_file = tmp_path / 'other.gin'
    gin_file.write_bytes('# caf\u00e9\nmy_fn.alpha = 1\n'.encode(encoding))

    with pytest.raises(ConfigError) as info:
        config.parse_config([str(gin_file)])

    assert str(info.value) == (
        f'Cannot read file {gin_file}: {problem}. Gin files are read as UTF-8: save it as UTF-8.'
    )


@pytest.mark.parametrize(
    'line, hint',
    [
        (
            'my_fn.alpha = \u2018a\u2019',
            '{} holds \u2018 (U+2018 LEFT SINGLE QUOTATION MARK), as a copy from a document or '
            "a chat gives: write ' in its place.",
        ),
        (
            'my_fn.alpha = \u201ca\u201d',
            '{} holds \u201c (U+201C LEFT DOUBLE QUOTATION MARK), as a copy from a document or '
            'a chat gives: write " in its place.',
        ),
        (
            'my_fn.alpha\u00a0= 1',
            '{} holds U+00A0 NO-BREAK SPACE, as a copy from a document or a chat gives: write '
            'a plain space in its place.',
        ),
        (
            'my_fn.alpha = \u22121',
            '{} holds \u2212 (U+2212 MINUS SIGN), as a copy from a document or a chat gives: '
            'write - in its place.',
        ),
        (
            'my_fn.alpha =\u200b 1',
            '{} holds U+200B ZERO WIDTH SPACE, as a copy from a document or a chat gives: '
            'delete it.',
        ),
    ],
    ids=['single quote', 'double quote', 'no-break space', 'minus sign', 'zero width space'],
)
def test_a_typographic_character_that_stops_a_parse_is_named_with_what_to_write(
    tmp_path, line, hint
):
    gin_file = tmp_path / 'pasted.gin'
    gin_file.write_text(f'my_fn.beta = 2  # \u2018fine\u2019 in a comment\n{line}\n', 'utf-8')
    for files, params, holder in (
        ([str(gin_file)], [], 'The line'),
        ([], [line], 'The --gin_param'),
    ):
        with pytest.raises(ConfigError) as info:
            config.parse_config(files, params)
        closed = 'with brackets and quotes closed.'
        assert str(info.value).endswith(f'{closed} {hint.format(holder)}'), info.value


def test_a_typographic_character_in_a_comment_of_a_line_that_fails_otherwise_is_not_named(
    tmp_path,
):
    gin_file = _write(tmp_path / 'bad.gin', 'my_fn.beta = )  # \u2018x\u2019\n')
    with pytest.raises(ConfigError) as info:
        config.parse_config([str(gin_file)])
    assert str(info.value).endswith('with brackets and quotes closed.'), info.value


def test_syntax_error_names_file_and_line(tmp_path):
    gin_file = _write(tmp_path / 'bad.gin', 'my_fn.alpha = 1\nmy_fn.beta = )\n')

    with pytest.raises(ConfigError) as info:
        config.parse_config([str(gin_file)])

    message = str(info.value)
    assert str(gin_file) in message and 'line 2' in message and 'my_fn.beta = )' in message


@pytest.mark.parametrize(
    'value, problem',
    [
        ('Pendulum', 'Pendulum is no literal (a string is written in quotes)'),
        ('nan', 'nan is no literal (a string is written in quotes)'),
        ("f'{x}'", "f'{x}' is no literal"),
        ("b'x' 'y'", "b'x''y' is no literal (cannot mix bytes and nonbytes literals)"),
    ],
    ids=['unquoted_string', 'nan', 'f_string', 'bytes_and_string'],
)
def test_a_value_that_is_no_literal_is_named_on_one_line(value, problem):
    binding = f'my_fn.alpha = {value}'
    with pytest.raises(ConfigError) as info:
        config.parse_config([], [binding])

    message = str(info.value)
    assert message.startswith(f'Cannot parse --gin_param {binding!r}: {problem}. '), message
    assert '\n' not in message


def _error_of_the_second_line(tmp_path, line):
    """The gin file whose second line is ``line``, and the ConfigError its parse raises."""
    gin_file = _write(tmp_path / 'long.gin', f'my_fn.beta = 3\n{line}\n')
    with pytest.raises(ConfigError) as info:
        config.parse_config([str(gin_file)])
    return gin_file, str(info.value)


def _quoted(text):
    """``text`` of over MAX_QUOTED_CHARS characters as an error message quotes it."""
    left_out = len(text) - config.MAX_QUOTED_CHARS
    return f'{text[: config.MAX_QUOTED_CHARS]}... ({left_out} more characters)'


@pytest.mark.parametrize(
    'line, problem',
    [
        ("nope.y = '{}'", "Unknown configurable 'nope' in"),
        ("my_fn.alpha = '{}", 'Cannot parse'),
        ('my_fn.alpha = {}', 'Cannot parse'),
        ("widths.layers = '{}'", "(str), but 'layers' of 'widths' takes"),
    ],
    ids=['unknown_configurable', 'syntax_error', 'no_literal', 'wrong_type'],
)
def test_a_line_of_megabytes_is_quoted_by_its_start_alone(tmp_path, line, problem):
    # A file may hold up to MAX_CONFIG_BYTES: one line of it is not quoted whole.
    line = line.format('a' * 2**21)
    gin_file, message = _error_of_the_second_line(tmp_path, line)
    assert f'file {gin_file}, line 2, `{_quoted(line)}`' in message, message[:2000]
    assert problem in message and len(message) < 5 * config.MAX_QUOTED_CHARS, message[:5000]


@pytest.mark.parametrize(
    'line, problem',
    [
        ('{}.y = 1', "Unknown configurable '{}"),
        ('my_fn.{} = 1', "Configurable 'my_fn' has no configurable parameter '{}"),
        ('my_fn.alpha = %{}', 'Macro %{} used in `my_fn.alpha`'),
        ('{}/my_fn.alpha = 1', "Scope '{0}' of the bindings of `{0}/my_fn`"),
    ],
    ids=['configurable', 'parameter', 'macro', 'scope'],
)
def test_a_name_of_megabytes_is_quoted_by_its_start_alone(tmp_path, line, problem):
    name = 'a' * 2**21
    _, message = _error_of_the_second_line(tmp_path, line.format(name))
    assert problem.format(_quoted(name)) in message, message[:2000]
    assert len(message) < 5 * config.MAX_QUOTED_CHARS, message[:5000]


def test_a_binding_of_a_scope_of_megabytes_to_an_undefined_macro_is_quoted_by_its_start(
    tmp_path,
):
    binding = f'{"s" * 2**21}/my_fn.alpha'
    _, message = _error_of_the_second_line(tmp_path, f'{binding} = %m')
    assert f'Macro %m used in `{_quoted(binding)}`' in message, message[:2000]
    assert len(message) < 5 * config.MAX_QUOTED_CHARS, message[:5000]


def test_a_gin_param_of_megabytes_is_quoted_by_its_start_alone():
    param = f"my_fn.alpha = '{'a' * 2**21}"
    with pytest.raises(ConfigError) as info:
        config.parse_config([], [param])
    message = str(info.value)
    assert f'--gin_param {_quoted(repr(param))}' in message, message[:2000]
    assert len(message) < 5 * config.MAX_QUOTED_CHARS, message[:5000]


def test_an_include_of_megabytes_is_quoted_by_its_start_alone(tmp_path):
    path = 'a' * 2**21
    _, message = _error_of_the_second_line(tmp_path, f"include '{path}'")
    assert f'Gin file {_quoted(repr(path))} not found' in message, message[:2000]
    assert len(message) < 5 * config.MAX_QUOTED_CHARS, message[:5000]


def test_an_include_cycle_of_long_paths_is_named_in_full(tmp_path):
    # alf_lite's own message is not cut short: only what it quotes is.
    deep = tmp_path.joinpath(*['experiments-with-a-long-directory-name'] * 6)
    a = _write(deep / 'a.gin', "include 'b.gin'\n")
    b = _write(deep / 'b.gin', "include 'c.gin'\n")
    c = _write(deep / 'c.gin', "include 'a.gin'\n")
    with pytest.raises(ConfigError) as info:
        config.parse_config([str(a)])
    message = str(info.value)
    assert len(f'{a} -> {b} -> {c} -> {a}') > config.MAX_QUOTED_CHARS
    assert f'in a cycle: {a} -> {b} -> {c} -> {a}. Remove one of these include statements.' in (
        message
    ), message


def test_unclosed_bracket_names_file(tmp_path):
    gin_file = _write(tmp_path / 'bad.gin', 'my_fn.alpha = [1,\n')

    with pytest.raises(ConfigError) as info:
        config.parse_config([str(gin_file)])

    assert str(gin_file) in str(info.value)


def test_missing_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        config.parse_config(['nope.gin'])
    assert "'nope.gin'" in str(info.value) and str(tmp_path) in str(info.value)

    outer = _write(tmp_path / 'exp' / 'outer.gin', "include 'common/missing.gin'\n")
    with pytest.raises(ConfigError) as info:
        config.parse_config([str(outer)])
    message = str(info.value)
    assert str(tmp_path / 'exp' / 'common' / 'missing.gin') in message
    assert f'file {outer}, line 1' in message

    (tmp_path / 'exp' / 'common').mkdir()
    with pytest.raises(ConfigError, match=r"Gin file 'exp' is a directory \(.*\): give a .gin"):
        config.parse_config(['exp'])
    # A device or a pipe exists but holds no gin file.
    os.mkfifo(tmp_path / 'pipe')
    for path in ('/dev/null', str(tmp_path / 'pipe')):
        with pytest.raises(ConfigError, match=r'is not a regular file \(.* is a device, a pipe'):
            config.parse_config([path])


def test_a_single_string_for_the_files_or_the_bindings_is_refused_before_parsing(tmp_path):
    # Before, its characters were taken for the files: "Gin file '/' is a directory".
    path = _write(tmp_path / 'a.gin', 'my_fn.alpha = 5\n')
    config.parse_config([str(path)], ['my_fn.beta = 1'])
    message = re.escape(f"parse_config: gin_files must be a list of paths, got the str '{path}'")
    with pytest.raises(TypeError, match=message + re.escape(f": give ['{path}']")):
        config.parse_config(str(path))
    with pytest.raises(TypeError, match='gin_files must be a list of paths, got the PosixPath'):
        config.parse_config(path)
    with pytest.raises(TypeError, match=r"gin_params must be a list of bindings, got the str 'my"):
        config.parse_config([str(path)], 'my_fn.beta = 6')
    # Refused before gin's config was cleared: the last parse stands.
    assert gin.query_parameter('my_fn.beta') == 1


@pytest.mark.parametrize('blank', ['', '  '])
def test_an_empty_gin_file_path_or_binding_is_named(blank, tmp_path):
    path = _write(tmp_path / 'a.gin', 'my_fn.alpha = 5\n')
    with pytest.raises(ConfigError, match=re.escape(f'Gin file {blank!r} is empty: give the path')):
        config.parse_config([blank])
    outer = _write(tmp_path / 'outer.gin', f'include {blank!r}\n')
    with pytest.raises(ConfigError, match=re.escape(f'Gin file {blank!r} is empty')):
        config.parse_config([str(outer)])
    # Before, gin took it for no binding at all.
    with pytest.raises(ConfigError, match=re.escape(f'The gin binding {blank!r} is empty: give')):
        config.parse_config([str(path)], ['my_fn.beta = 1', blank])


def test_a_gin_file_larger_than_a_config_may_be_is_refused_unread(tmp_path):
    # A run's config.gin from someone else may be a crafted file of gigabytes.
    big = tmp_path / 'config.gin'
    with open(big, 'w') as f:
        f.truncate(MAX_CONFIG_BYTES + 1)
    message = re.escape(f'{big} holds {MAX_CONFIG_BYTES + 1} bytes, more than the')
    with pytest.raises(ConfigError, match=message):
        config.parse_config([str(big)], trust_imports=False)
    outer = _write(tmp_path / 'outer.gin', "include 'config.gin'\n")
    with pytest.raises(ConfigError, match=message) as info:
        config.parse_config([str(outer)])
    assert f'file {outer}, line 1' in str(info.value)


def test_a_gin_file_of_the_largest_size_a_config_may_be_is_read(tmp_path):
    binding = 'my_fn.alpha = 5\n'
    largest = _write(tmp_path / 'config.gin', binding + '#' * (MAX_CONFIG_BYTES - len(binding)))
    assert os.path.getsize(largest) == MAX_CONFIG_BYTES
    config.parse_config([str(largest)], trust_imports=False)
    assert my_fn() == (5, 2)


def test_unknown_import_names_module_and_file(tmp_path):
    gin_file = _write(tmp_path / 'exp.gin', 'import no_such_module_xyz\n')

    with pytest.raises(ConfigError) as info:
        config.parse_config([str(gin_file)])

    assert 'no_such_module_xyz' in str(info.value) and f'file {gin_file}, line 1' in str(info.value)


def test_include_cycle_is_an_error(tmp_path):
    _write(tmp_path / 'a.gin', "include 'b.gin'\n")
    _write(tmp_path / 'b.gin', "include 'a.gin'\n")

    with pytest.raises(ConfigError, match='cycle'):
        config.parse_config([str(tmp_path / 'a.gin')])


def test_a_linked_gin_file_includes_from_where_it_really_is(tmp_path):
    import alf_lite.all_configurables  # noqa: F401

    examples = os.path.join(os.path.dirname(os.path.dirname(__file__)), 'examples')
    link = tmp_path / 'mine.gin'
    link.symlink_to(os.path.join(examples, 'sac_pendulum.gin'))
    config.parse_config([str(link)])  # includes 'common/sac.gin', beside the real file
    assert 'SacAlgorithm' in gin.config_str()


def test_a_cycle_through_a_linked_directory_is_named_as_a_cycle(tmp_path):
    (tmp_path / 'self').symlink_to('.')
    _write(tmp_path / 'a.gin', "include 'self/a.gin'\n")
    with pytest.raises(ConfigError, match='include each other in a cycle'):
        config.parse_config([str(tmp_path / 'a.gin')])


def test_undefined_macro_names_closest_and_where_it_is_used(tmp_path):
    with pytest.raises(ConfigError) as info:
        config.parse_config([], ['LR = 0.1', 'my_fn.alpha = %lr_'])
    assert '%lr_' in str(info.value) and "'LR'" in str(info.value)
    assert "`my_fn.alpha` (--gin_param 'my_fn.alpha = %lr_') is never defined" in str(info.value)
    gin_file = _write(tmp_path / 'exp.gin', 'my_fn.beta = 1\nmy_fn.alpha = %steps\n')
    with pytest.raises(ConfigError) as info:
        config.parse_config([str(gin_file)])
    assert f'`my_fn.alpha` (file {gin_file}, line 2, `my_fn.alpha = %steps`)' in str(info.value)


@pytest.mark.parametrize('scope', ['actr', 'actor/actr'])
def test_binding_in_a_scope_no_reference_opens_names_the_closest_scope(scope):
    params = ['my_fn.alpha = @actor/Adam', 'actor/Adam.lr = 0.1', f'{scope}/Adam.lr = 0.5']
    with pytest.raises(ConfigError) as info:
        config.parse_config([], params)
    message = str(info.value)
    assert (
        f"Scope 'actr' of the bindings of `{scope}/Adam` (--gin_param '{scope}/Adam.lr = 0.5') "
        'is opened by no reference'
    ) in message
    assert "Closest opened scopes: 'actor'" in message
    assert gin.config_str().strip() == ''
    config.parse_config([], params[:2])  # the scope the reference opens is fine


def test_binding_in_a_scope_no_reference_opens_names_its_file_and_line(tmp_path):
    gin_file = tmp_path / 'run.gin'
    gin_file.write_text('my_fn.alpha = @actor/Adam\n\nactr/Adam.lr = 0.5\n')
    with pytest.raises(ConfigError) as info:
        config.parse_config([str(gin_file)])
    assert (
        f'`actr/Adam` (file {gin_file}, line 3, `actr/Adam.lr = 0.5`) is opened by no reference'
    ) in str(info.value)


@pytest.mark.parametrize(
    'binding, others',
    [
        ('SacAlgorithm.observation_dim = 3', 'actor_network_ctor, critic_network_ctor,'),
        ('ReplayBuffer.length = 5', 'Set TrainerConfig.replay_buffer_length instead.'),
        ('ReplayBuffer.num_envs = 2', 'Set create_environment.num_parallel_environments instead.'),
        ('ReplayBuffer.training_device = "cpu"', 'Set TrainerConfig.device instead.'),
        ('CriticNetwork.num_replicas = 3', "Set the algorithm's num_critic_replicas (e.g. Sac"),
        ('create_environment.seed = 12345', 'Set TrainerConfig.random_seed instead.'),
        ('Adam.params = []', 'lr, betas, eps, weight_decay'),
    ],
)
def test_parameter_alf_lite_sets_itself_is_refused_as_no_gin_parameter(binding, others):
    import alf_lite.all_configurables  # noqa: F401

    name, param = binding.split(' ')[0].split('.')
    with pytest.raises(ConfigError) as info:
        config.parse_config([], [binding])
    message = str(info.value)
    assert f"'{param}' of '{name}' in --gin_param '{binding}' is no gin parameter" in message
    assert 'a binding would be ignored' in message and others in message


def test_value_of_the_wrong_type_names_binding_file_line_and_the_type_taken(tmp_path):
    import alf_lite.all_configurables  # noqa: F401

    gin_file = _write(
        tmp_path / 'exp.gin', 'CriticNetwork.batch_norm = True\nCriticNetwork.hidden_layers = 256\n'
    )
    with pytest.raises(ConfigError) as info:
        config.parse_config([str(gin_file)])
    message = str(info.value)
    assert f'file {gin_file}, line 2, `CriticNetwork.hidden_layers = 256`' in message
    assert "is 256 (int), but 'hidden_layers' of 'CriticNetwork' takes Sequence[int]" in message
    assert gin.config_str().strip() == ''

    with pytest.raises(ConfigError, match=r'\(256, 2\.5\) \(tuple\).*takes Sequence\[int\]'):
        config.parse_config([], ['CriticNetwork.hidden_layers = (256, 2.5)'])
    with pytest.raises(ConfigError, match=r'takes float \| Tensor'):
        config.parse_config([], ['my_fn.alpha = @actor/Adam', "actor/Adam.lr = 'fast'"])
    with pytest.raises(ConfigError, match=r"'random_seed' of 'TrainerConfig' takes int"):
        config.parse_config([], ['TrainerConfig.random_seed = True'])
    # True is 1 to Python, but no fraction: a slip, refused for a float as for an int.
    with pytest.raises(ConfigError, match=r"is True \(bool\).*'target_update_tau'.*takes float"):
        config.parse_config([], ['SacAlgorithm.target_update_tau = True'])
    # A tuple of fixed length takes that many items, not more.
    with pytest.raises(ConfigError, match=r'\(-5, 2, 3\) \(tuple\).*takes Tuple\[float, float\]'):
        config.parse_config([], ['TanhNormalActorNetwork.log_std_bounds = (-5, 2, 3)'])
    # A Literal takes one of its values: a misspelt mode is named now, not when the env starts.
    with pytest.raises(ConfigError, match=r"is 'torq' \(str\).*'control_mode' of 'ICubWalkEnv'"):
        config.parse_config([], ["ICubWalkEnv.control_mode = 'torq'"])


@pytest.mark.parametrize(
    'binding, given, takes',
    [
        # Failed when built, on comparing the noise with 0, naming no parameter.
        (
            'Td3Algorithm.target_policy_noise = @GaussianNoise()',
            'which builds an instance of GaussianNoise',
            'float (its default is 0.2)',
        ),
        ('GaussianNoise.sigma = @OUNoise', 'the class OUNoise', 'float (its default is 0.1)'),
        (
            'TrainerConfig.device = @SacAlgorithm',
            'the class SacAlgorithm',
            "str (its default is 'auto')",
        ),
        (
            'CriticNetwork.hidden_layers = @actor/Adam',
            'the function Adam',
            'Sequence[int] (its default is (256, 256))',
        ),
        (
            'ICubWalkEnv.control_mode = @GaussianNoise()',
            'which builds an instance of GaussianNoise',
            "Literal['position_residual', 'velocity', 'torque'] (its default is "
            "'position_residual')",
        ),
        # A TrainerConfig cannot be called as a noise is.
        (
            'DdpgAlgorithm.exploration_noise = @TrainerConfig()',
            'which builds an instance of TrainerConfig',
            'Optional[Callable] (its default is None)',
        ),
    ],
)
def test_a_reference_of_the_wrong_kind_names_binding_the_type_taken_and_its_default(
    binding, given, takes
):
    import alf_lite.all_configurables  # noqa: F401

    selector, param = binding.split(' ')[0].split('.')
    with pytest.raises(ConfigError) as info:
        config.parse_config([], [binding])
    message = str(info.value)
    assert f"`{selector}.{param}` in --gin_param '{binding}' is " in message
    assert f"({given}), but '{param}' of '{selector}' takes {takes}. Fix the value." in message
    assert gin.config_str().strip() == ''


def test_a_class_gin_cannot_build_given_as_a_value_is_refused_naming_the_binding():
    # gin built it without the dimensions alf_lite passes, and its error named only those.
    import alf_lite.all_configurables  # noqa: F401

    binding = 'DdpgAlgorithm.exploration_noise = @DeterministicActorNetwork()'
    with pytest.raises(ConfigError) as info:
        config.parse_config([], [binding])
    message = str(info.value)
    assert f"`DdpgAlgorithm.exploration_noise` in --gin_param '{binding}' is " in message
    assert 'DeterministicActorNetwork takes observation_dim and action_dim' in message
    assert "'exploration_noise' of 'DdpgAlgorithm' takes Optional[Callable]" in message


def test_a_users_class_taking_an_argument_gin_does_not_give_is_left_to_its_caller():
    # Only alf_lite's classes are known to need what only alf_lite gives.
    config.parse_config([], ['annotated.anything = @Sized()'])
    assert 'annotated.anything = @Sized()' in gin.config_str()


def test_references_of_the_kinds_a_parameter_takes_still_parse():
    import alf_lite.all_configurables  # noqa: F401

    config.parse_config(
        [],
        [
            'Td3Algorithm.exploration_noise = @OUNoise()',
            'Td3Algorithm.actor_optimizer = @actor/SGD',
            'Td3Algorithm.critic_network_ctor = @CriticNetwork',
            'NOISE = @GaussianNoise()',
            'DdpgAlgorithm.exploration_noise = %NOISE',
            # What a function gives is known only when it is called.
            'TrainerConfig.random_seed = @my_fn()',
        ],
    )


def test_values_for_any_a_protocol_or_a_float_of_a_users_function_still_parse():
    # Any and a Protocol that is not runtime_checkable raised TypeError from isinstance; an
    # instance of an int subclass was refused where a float goes, which an int fits.
    import alf_lite.all_configurables  # noqa: F401

    config.parse_config(
        [],
        [
            'annotated.anything = 3',
            'annotated.shaper = @my_fn',
            "annotated.shaper = 'clip'",
            'annotated.scale = @Scale()',
            'annotated.anything = @GaussianNoise',
        ],
    )
    for value in ('@my_fn', '@GaussianNoise()', '@actor/Adam'):
        config.parse_config([], [f'annotated.anything = {value}', f'annotated.shaper = {value}'])


def test_a_macro_standing_for_a_literal_is_checked_as_that_literal(tmp_path):
    import alf_lite.all_configurables  # noqa: F401

    gin_file = _write(
        tmp_path / 'exp.gin',
        'steps = 1e6\nrun_length = %steps\nTrainerConfig.num_env_steps = %run_length\n',
    )
    with pytest.raises(ConfigError) as info:
        config.parse_config([str(gin_file)])
    message = str(info.value)
    assert f'file {gin_file}, line 3, `TrainerConfig.num_env_steps = %run_length`' in message
    assert "is 1000000.0 (float, from %run_length), but 'num_env_steps' of " in message
    assert "'TrainerConfig' takes int" in message
    with pytest.raises(ConfigError, match=r"'fast' \(str, from %lr\).*takes float \| Tensor"):
        config.parse_config([], ['my_fn.alpha = @actor/Adam', "lr = 'fast'", 'actor/Adam.lr = %lr'])
    # A macro of the right type, one of a reference and one inside a container pass.
    config.parse_config(
        [],
        [
            'steps = 1000',
            'TrainerConfig.num_env_steps = %steps',
            'net = @CriticNetwork',
            'SacAlgorithm.critic_network_ctor = %net',
            'width = 2.5',
            'CriticNetwork.hidden_layers = (%width, 3)',
        ],
    )


def test_macros_that_stand_for_each_other_are_refused_naming_the_cycle():
    # A typo that makes a cycle: gin would follow it until the stack runs out when built.
    with fails_after(5), pytest.raises(ConfigError, match=r'\(%A -> %B -> %A\)'):
        config.parse_config([], ['A = %B', 'B = [1, %A]', 'my_fn.alpha = %A'])
    with pytest.raises(ConfigError, match=r'Macro %STEPS stands for itself \(%STEPS -> %STEPS\)'):
        config.parse_config([], ['STEPS = %STEPS', 'my_fn.alpha = %STEPS'])
    assert gin.config_str().strip() == ''
    # Macros that share another, with no cycle, parse.
    config.parse_config([], ['A = (%B, %B)', 'B = %C', 'C = 1', 'my_fn.alpha = %A'])
    assert my_fn() == ((1, 1), 2)


@pytest.mark.parametrize(
    'param, written',
    [
        ('TrainerConfig.algorithm_ctor = @SacAlgorithm()', '@SacAlgorithm'),
        ('DdpgAlgorithm.critic_network_ctor = @CriticNetwork()', '@CriticNetwork'),
        ('SacAlgorithm.actor_optimizer = @actor/Adam()', '@actor/Adam'),
    ],
)
def test_a_constructor_parameter_given_a_call_is_refused_naming_the_reference_to_write(
    param, written
):
    # Gin would call it without the dimensions or parameters, failing with only the names
    # of missing arguments; without the parentheses it parses.
    import alf_lite.all_configurables  # noqa: F401

    with pytest.raises(ConfigError, match=rf'takes the constructor: write {written} \(without'):
        config.parse_config([], [param])
    assert gin.config_str().strip() == ''
    config.parse_config([], [param.replace('()', '')])
    # A factory of the user's own may return a constructor when called.
    config.parse_config([], ['SacAlgorithm.actor_network_ctor = @my_fn()'])


@pytest.mark.parametrize(
    'params, binding, value',
    [
        (['SacAlgorithm.gamma = 1'], 'SacAlgorithm.gamma', 1),  # an int is a float
        # A list is a tuple to gin.
        (
            ['TanhNormalActorNetwork.log_std_bounds = [-5, 2]'],
            'TanhNormalActorNetwork.log_std_bounds',
            [-5, 2],
        ),
        (
            ['TrainerConfig.num_env_steps = 1.5', 'TrainerConfig.num_env_steps = 2'],
            'TrainerConfig.num_env_steps',
            2,  # the later binding wins, and only it is checked
        ),
        # A macro is checked as the literal it stands for.
        (['SIZES = (256, 128)', 'CriticNetwork.hidden_layers = %SIZES'], None, None),
        (
            ['create_environment.max_episode_steps = None'],
            'create_environment.max_episode_steps',
            None,
        ),
    ],
)
def test_values_that_fit_their_annotation_or_are_references_parse(params, binding, value):
    import alf_lite.all_configurables  # noqa: F401

    config.parse_config([], params)
    if binding is not None:
        assert gin.query_parameter(binding) == value


def test_failed_parse_leaves_no_bindings(tmp_path):
    gin_file = _write(tmp_path / 'exp.gin', 'my_fn.alpha = 5\nmy_fn.nope = 1\n')

    with pytest.raises(ConfigError):
        config.parse_config([str(gin_file)])

    assert my_fn() == (1, 2)
    assert gin.config_str().strip() == ''


def test_config_str_round_trips(tmp_path):
    gin_file = _write(
        tmp_path / 'exp.gin',
        """
LR = 3e-4
HIDDEN = 32
actor/Adam.lr = 1e-3
critic/Adam.lr = %LR
MyModel.optimizer = @actor/Adam
MyModel.hidden_size = %HIDDEN
MyModel.activation = 'tanh "quoted"'
eval/MyModel.optimizer = @critic/Adam
my_fn.alpha = {'layers': (256, 256), 'scales': [0.5, -1.0, None, True]}
my_fn.beta = @eval/MyModel()
""",
    )
    config.parse_config([str(gin_file)])
    saved = gin.config_str()
    saved_path = tmp_path / 'root' / 'config.gin'
    saved_path.parent.mkdir()
    config.write_text_atomically(str(saved_path), saved)

    config.parse_config([str(saved_path)])

    assert gin.config_str() == saved
    assert gin.query_parameter('actor/Adam.lr') == 1e-3
    model = MyModel()
    assert model.hidden_size == 32 and model.activation == 'tanh "quoted"'
    with gin.config_scope('actor'):
        assert model.optimizer.__name__ == 'Adam'
    alpha, evaluated = my_fn()
    assert alpha == {'layers': (256, 256), 'scales': [0.5, -1.0, None, True]}
    assert isinstance(evaluated, MyModel)
    # The scope of a reference survives: eval/MyModel gets critic/Adam, whose lr is %LR.
    optimizer = evaluated.optimizer([torch.zeros(1, requires_grad=True)])
    assert optimizer.defaults['lr'] == 3e-4


def test_operative_config_lists_used_bindings():
    config.parse_config([], ['my_fn.alpha = 3'])
    my_fn()
    assert 'my_fn.alpha = 3' in gin.operative_config_str()
    assert 'my_fn.beta = 2' in gin.operative_config_str()


def test_write_text_atomically(tmp_path):
    path = tmp_path / 'config.gin'
    path.write_text('old')

    config.write_text_atomically(str(path), 'new text\n')
    assert path.read_text() == 'new text\n'

    # The error of the file's write itself: the temporary file was made, then removed.
    with pytest.raises(TypeError, match="a bytes-like object is required, not 'NoneType'"):
        config.write_bytes_atomically(str(path), None)
    assert path.read_text() == 'new text\n'
    assert os.listdir(tmp_path) == ['config.gin']
    with pytest.raises(AttributeError):
        config.write_text_atomically(str(path), None)
    assert path.read_text() == 'new text\n'
    assert os.listdir(tmp_path) == ['config.gin']


def test_write_text_atomically_to_a_name_near_the_limit(tmp_path):
    # 254 bytes, two a character: the temporary file's longer name keeps the start of it
    # (a character cut in two included).
    path = tmp_path / ('\u00e9' * 125 + '.gin')
    assert len(os.fsencode(path.name)) == 254
    config.write_text_atomically(str(path), 'text')
    assert path.read_text() == 'text'
    assert os.listdir(tmp_path) == [path.name]


def test_write_text_atomically_has_the_file_and_its_name_on_disk_before_it_returns(
    tmp_path, monkeypatch
):
    path = tmp_path / 'config.gin'
    path.write_text('old')
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        info = os.fstat(fd)
        events.append(('fsync', info.st_ino, None if stat.S_ISDIR(info.st_mode) else info.st_size))
        real_fsync(fd)

    def replace(src, dst):
        events.append(('replace', str(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, 'fsync', fsync)
    monkeypatch.setattr(os, 'replace', replace)
    config.write_text_atomically(str(path), 'new text\n')
    new = os.stat(path)
    # The text, then the rename, then the directory entry the rename changed.
    assert events == [
        ('fsync', new.st_ino, len('new text\n')),
        ('replace', str(path)),
        ('fsync', os.stat(tmp_path).st_ino, None),
    ]


def test_include_cycle_names_only_the_files_in_the_cycle(tmp_path):
    # main.gin is no part of the cycle a.gin -> b.gin -> a.gin: it only includes it.
    main = _write(tmp_path / 'main.gin', "include 'a.gin'\n")
    a = _write(tmp_path / 'a.gin', "include 'b.gin'\n")
    b = _write(tmp_path / 'b.gin', "include 'a.gin'\n")

    with pytest.raises(ConfigError) as info:
        config.parse_config([str(main)])

    message = str(info.value)
    assert f'in a cycle: {a} -> {b} -> {a}. Remove one' in message
    assert f'{main} ->' not in message


def test_error_three_includes_deep_names_each_includer_once(tmp_path):
    inner = _write(tmp_path / 'c' / 'inner.gin', 'my_fn.gamma = 1\n')
    middle = _write(tmp_path / 'c' / 'middle.gin', "include 'inner.gin'\n")
    outer = _write(tmp_path / 'outer.gin', "include 'c/middle.gin'\n")

    with pytest.raises(ConfigError) as info:
        config.parse_config([str(outer)])

    message = str(info.value)
    assert (
        f'in file {inner}, line 1, `my_fn.gamma = 1`, included from {middle}, '
        f'included from {outer}.'
    ) in message
    assert f'included from {inner}' not in message


def test_misspelt_trainer_config_parameter_names_the_closest_names_as_the_readme_shows():
    import alf_lite.all_configurables  # noqa: F401

    with pytest.raises(ConfigError) as info:
        config.parse_config([], ['TrainerConfig.num_env_stepz=10'])
    # The README's example message, word for word.
    assert (
        "Configurable 'TrainerConfig' has no configurable parameter 'num_env_stepz' in "
        "--gin_param 'TrainerConfig.num_env_stepz=10'. Closest valid names: 'num_env_steps', "
        "'num_eval_episodes'. Its configurable parameters are: algorithm_ctor, random_seed, "
    ) in str(info.value)


def test_denylisted_parameter_given_by_its_module_path_still_names_the_setting_to_use():
    import alf_lite.all_configurables  # noqa: F401

    for selector in (
        'suite_gym.create_environment',
        'alf_lite.environments.suite_gym.create_environment',
    ):
        binding = f'{selector}.seed = 12345'
        with pytest.raises(ConfigError) as info:
            config.parse_config([], [binding])
        message = str(info.value)
        assert f"'seed' of '{selector}' in --gin_param '{binding}' is no gin parameter" in message
        assert 'Set TrainerConfig.random_seed instead.' in message


def test_parameter_list_of_a_configurable_with_extra_keyword_arguments_leaves_them_out():
    # ``size`` is denylisted; ``**extra`` is no parameter a binding can name.
    with pytest.raises(ConfigError) as info:
        config.parse_config([], ['sized.size = 3'])
    assert str(info.value).endswith('Its configurable parameters are: scale.')
    config.parse_config([], ['sized.scale = 0.5', 'sized.anything = 1'])
    assert sized() == (1, 0.5, {'anything': 1})


def test_a_tuple_of_any_length_fits_a_variable_length_tuple_annotation():
    config.parse_config([], ['widths.layers = (64, 32, 16)'])
    assert widths() == (64, 32, 16)
    config.parse_config([], ['widths.layers = []'])
    assert widths() == []
    with pytest.raises(ConfigError, match=r"\(64, 'wide'\) \(tuple\).*takes Tuple\[int, \.\.\.\]"):
        config.parse_config([], ["widths.layers = (64, 'wide')"])


def test_missing_file_says_what_a_relative_path_resolves_against(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        config.parse_config(['exp/nope.gin'])
    assert (
        f"Gin file 'exp/nope.gin' not found: looked for {tmp_path / 'exp' / 'nope.gin'} (a "
        f'relative path resolves against the current directory, {tmp_path}).'
    ) in str(info.value)

    outer = _write(tmp_path / 'exp' / 'outer.gin', "include 'missing.gin'\n")
    with pytest.raises(ConfigError) as info:
        config.parse_config([str(outer)])
    assert (
        f"Gin file 'missing.gin' not found: looked for {tmp_path / 'exp' / 'missing.gin'} (a "
        f'relative path resolves against the directory of the including file, {tmp_path / "exp"}).'
    ) in str(info.value)


@pytest.mark.parametrize(
    'params, named',
    [
        (['my_fn.alpha = 1e999'], '`my_fn.alpha` in --gin_param'),
        (['NEVER = -1e999', 'my_fn.alpha = %NEVER'], 'is -inf (from %NEVER)'),
        (['my_fn.alpha = {"x": [1, 1e999]}'], "is {'x': [1, inf]}"),
        (['NEVER = 1e999'], 'macro NEVER is inf'),
        (['my_fn.alpha = 1e999j'], 'is infj'),
    ],
    ids=['binding', 'through_a_macro', 'in_a_dict', 'unused_macro', 'complex'],
)
def test_a_value_config_gin_cannot_hold_is_refused_at_parse_time(params, named):
    # gin writes an infinite float out as ``inf``, which it cannot read back: the run's
    # config.gin would fail its resume, or drop the binding.
    with pytest.raises(ConfigError, match=re.escape(named)):
        config.parse_config([], params)
    assert gin.config_str() == ''
    config.parse_config([], ['my_fn.alpha = 1e300', 'my_fn.beta = None'])
    assert my_fn() == (1e300, None)
