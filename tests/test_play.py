"""``python -m alf_lite.bin.play`` on a run trained for 2 steps: videos and errors read back."""

import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import dropped_signal
from alf_lite.runs import EVAL_RETURN, final_value, read_scalar
from cli_helpers import (
    EXAMPLES,
    PENDULUM,
    REPO_ROOT,
    RUN_TIMEOUT_S,
    TINY,
    assert_ok,
    python_output,
    run_python,
    run_train,
    run_with_file_size_limit,
    run_with_output_reader_gone,
    send_as_user,
    signal_on_import,
    start_in_own_session,
    train_command,
    train_env,
    with_prelude,
)
from test_checkpoint import WritesAFile

EPISODE_STEPS = 5
# Long enough for bfloat16's rounding of the actions to show in the return.
LONG_EPISODE_STEPS = 200


def tiny_pendulum_run(tmp_path_factory, name, params):
    """A Pendulum run of 2 env steps (1 random), with ``params`` added."""
    root_dir = tmp_path_factory.mktemp(name) / 'run'
    base = ['TrainerConfig.initial_collect_steps=1', 'TrainerConfig.num_env_steps=2']
    assert_ok(run_train(train_command(root_dir, [PENDULUM], TINY + base + params)))
    return root_dir


@pytest.fixture(scope='module')
def trained_run(tmp_path_factory):
    """A Pendulum run of 2 env steps with checkpoints and evaluations at 1 and 2.

    Its actor's one update takes a large step: ckpt-1 and ckpt-2 play apart.
    """
    return tiny_pendulum_run(
        tmp_path_factory,
        'play',
        [
            'TrainerConfig.checkpoint_interval=1',
            'TrainerConfig.eval_interval=1',
            'actor/Adam.lr=0.1',
            'TrainerConfig.num_eval_episodes=1',
            f'create_environment.max_episode_steps={EPISODE_STEPS}',
        ],
    )


@pytest.fixture(scope='module')
def bfloat16_run(tmp_path_factory):
    """A Pendulum run of seed 2 in bfloat16, 2 env steps, evaluated once at the end."""
    return tiny_pendulum_run(
        tmp_path_factory,
        'play_bfloat16',
        [
            'TrainerConfig.num_eval_episodes=1',
            "TrainerConfig.precision='bfloat16'",
            'TrainerConfig.random_seed=2',
            f'create_environment.max_episode_steps={LONG_EPISODE_STEPS}',
        ],
    )


@pytest.fixture(scope='module')
def ddpg_halfcheetah_run(tmp_path_factory):
    """DDPG of the paper (batch norm) on HalfCheetah-v5, a MuJoCo env: 2 env steps, evaluated."""
    root_dir = tmp_path_factory.mktemp('play_halfcheetah') / 'run'
    params = [
        'DeterministicActorNetwork.hidden_layers=(16, 16)',
        'CriticNetwork.hidden_layers=(16, 16)',
        'TrainerConfig.replay_buffer_length=100',
        'TrainerConfig.num_env_steps=2',
        'TrainerConfig.num_eval_episodes=1',
        f'create_environment.max_episode_steps={EPISODE_STEPS}',
    ]
    assert_ok(run_train(train_command(root_dir, [EXAMPLES / 'ddpg_halfcheetah.gin'], params)))
    return root_dir


def gif_frames(path, fps):
    """Frames written to the GIF at ``path``, ``fps`` a second.

    Pillow stores identical consecutive frames (a pendulum at rest, say) as one
    that is shown for their delays together.
    """
    from PIL import Image, ImageSequence

    with Image.open(path) as image:
        delays = [frame.info['duration'] for frame in ImageSequence.Iterator(image)]
    return sum(round(delay * fps / 1000) for delay in delays)


def run_play(root_dir, *args):
    return run_train(
        [sys.executable, '-m', 'alf_lite.bin.play', '--root_dir', str(root_dir), *args]
    )


def episodes(stdout):
    """``[(return, length)]`` of the per-episode lines."""
    return [
        (float(r), int(n))
        for r, n in re.findall(r'^episode \d+: return (-?[\d.]+), length (\d+)$', stdout, re.M)
    ]


def test_play_records_gif_without_reading_the_replay_buffer(trained_run, tmp_path):
    import imageio.v3 as iio

    # play must not touch the replay buffer: a corrupt one changes nothing.
    (trained_run / 'checkpoints' / 'ckpt-2' / 'replay_buffer.pt').write_bytes(b'corrupt')
    gif = tmp_path / 'out.gif'
    # An odd size: a GIF, unlike an .mp4, keeps it.
    result = run_play(
        trained_run, '--num_episodes', '3', '--record_file', str(gif), '--render_size', '65,49'
    )
    assert_ok(result)
    assert 'ckpt-2' in result.stdout
    played = episodes(result.stdout)
    assert [n for _, n in played] == [EPISODE_STEPS] * 3
    mean = re.search(
        r'^mean over 3 episode\(s\): return (-?[\d.]+), length ([\d.]+)$', result.stdout, re.M
    )
    assert mean, result.stdout
    returns = [r for r, _ in played]
    # The mean of 3 episodes, not their median.
    assert np.mean(returns) != pytest.approx(np.median(returns), abs=0.01)
    assert float(mean[1]) == pytest.approx(np.mean(returns), abs=0.01)
    assert float(mean[2]) == EPISODE_STEPS

    # One frame per step plus each episode's reset frame; W,H = 65,49.
    frames = iio.imread(gif, index=None)
    assert frames.shape[1:] == (49, 65, 3), frames.shape
    assert gif_frames(gif, fps=30) == 3 * (EPISODE_STEPS + 1)
    assert frames.std() > 0, 'blank frames'
    # In real time by default: Pendulum-v1 renders at 30 frames per second.
    from PIL import Image

    with Image.open(gif) as image:
        assert image.info['duration'] == pytest.approx(1000 / 30, abs=5)


def test_a_video_whose_name_is_near_the_limit_is_written(trained_run, tmp_path):
    # 252 bytes (two a character): the temporary file beside it, whose name adds to
    # it, must fit too.
    gif = tmp_path / ('\u00e9' * 123 + 'ab.gif')
    assert len(os.fsencode(gif.name)) == 252
    result = run_play(trained_run, '--record_file', str(gif), '--render_size', '8')
    assert_ok(result)
    assert gif_frames(gif, fps=30) == EPISODE_STEPS + 1
    assert os.listdir(tmp_path) == [gif.name]


def test_a_record_file_under_home_is_written_there_as_root_dir_is_read(
    trained_run, tmp_path, monkeypatch
):
    # '--record_file=~/...' is one word: the shell leaves its ~ to play.
    home, cwd = tmp_path / 'home', tmp_path / 'cwd'
    home.mkdir()
    cwd.mkdir()
    monkeypatch.setenv('HOME', str(home))
    command = [sys.executable, '-m', 'alf_lite.bin.play', f'--root_dir={trained_run}']
    result = run_train(
        command + ['--record_file=~/x.gif', '--render_size=8'], cwd=cwd, fresh_interpreter=True
    )
    assert_ok(result)
    assert f'written to {home / "x.gif"}' in result.stdout
    assert gif_frames(home / 'x.gif', fps=30) == EPISODE_STEPS + 1
    assert os.listdir(cwd) == []


# 0.01: the slowest a GIF can show, each frame 100 s.
@pytest.mark.parametrize('fps, kept', [(100, 6), (40, 12), (0.01, 12)])
def test_a_gif_faster_than_players_show_keeps_every_kth_frame(trained_run, tmp_path, fps, kept):
    from PIL import Image

    gif = tmp_path / 'fast.gif'
    result = run_play(
        trained_run, '--num_episodes', '2', '--record_file', str(gif), '--fps', str(fps)
    )
    assert_ok(result)
    # 12 frames; at 100 fps every 2nd is kept, each shown 20 ms: still real time.
    assert f'{kept} frames written' in result.stdout
    assert gif_frames(gif, fps=fps / (12 // kept)) == kept
    with Image.open(gif) as image:
        assert image.info['duration'] == pytest.approx(1000 * (12 // kept) / fps, abs=5)


def test_a_fast_gif_keeps_frames_0_k_2k_the_reset_frame_included(tmp_path):
    import imageio.v3 as iio

    gif = tmp_path / 'fast.gif'
    # In a process of its own: play's flags would clash with those of another tool
    # imported by an earlier test.
    script = (
        'import numpy as np\n'
        'from alf_lite.bin.play import VideoWriter\n'
        f'video = VideoWriter({str(gif)!r}, fps=100)\n'
        'for i in range(5):  # frame i is all 10 * i\n'
        '    video.append(np.full((8, 8, 3), 10 * i, np.uint8))\n'
        'video.close()\n'
        'print(video.num_frames)\n'
    )
    result = run_train([sys.executable, '-c', script])
    assert_ok(result)
    # At 100 fps every 2nd frame is kept: 0, 2, 4 (frame 0, an episode's reset, first).
    assert result.stdout.split() == ['3']
    frames = iio.imread(gif, index=None)
    assert [int(frame.max()) for frame in frames] == [0, 20, 40]
    assert all(frame.min() == frame.max() for frame in frames)


def test_a_gif_holds_its_frames_compressed_until_it_is_written(tmp_path):
    import imageio.v3 as iio

    gif = tmp_path / 'long.gif'
    # 100 rendered frames of 120 KB each, a new array each as an env renders them:
    # kept as they came, they would hold 12 MB until close.
    script = (
        'import tracemalloc\n'
        'import numpy as np\n'
        'from alf_lite.bin.play import VideoWriter\n'
        f'video = VideoWriter({str(gif)!r}, fps=10)\n'
        'tracemalloc.start()\n'
        'for i in range(100):  # frame i: row i white\n'
        '    frame = np.zeros((200, 200, 3), np.uint8)\n'
        '    frame[i] = 255\n'
        '    video.append(frame)\n'
        'held = tracemalloc.get_traced_memory()[0]\n'
        'video.close()\n'
        'print(held, video.frames_in_file)\n'
    )
    result = run_train([sys.executable, '-c', script])
    assert_ok(result)
    held, frames_in_file = map(int, result.stdout.split())
    assert held < 2_000_000
    assert frames_in_file == 100
    frames = iio.imread(gif, index=None)[..., :3]
    white = [
        [int(row) for row in np.flatnonzero(frame.min(axis=(1, 2)) == 255)] for frame in frames
    ]
    assert white == [[i] for i in range(100)]
    # And nothing else lit.
    assert [int((frame.max(axis=2) > 0).sum()) for frame in frames] == [200] * 100


def test_a_gif_counts_identical_consecutive_frames_as_the_one_it_holds(tmp_path):
    from PIL import Image, ImageSequence

    gif = tmp_path / 'still.gif'
    # In a process of its own, as play's flags would clash with those of another tool.
    script = (
        'import numpy as np\n'
        'from alf_lite.bin.play import VideoWriter\n'
        f'video = VideoWriter({str(gif)!r}, fps=10)\n'
        'for value in [0, 50, 50, 50, 100, 0, 0]:\n'
        '    video.append(np.full((8, 8, 3), value, np.uint8))\n'
        'video.close()\n'
        'print(video.num_frames, video.frames_in_file)\n'
    )
    result = run_train([sys.executable, '-c', script])
    assert_ok(result)
    assert result.stdout.split() == ['7', '4']
    with Image.open(gif) as image:
        frames = [
            (int(f.convert('L').getextrema()[1]), f.info['duration'])
            for f in ImageSequence.Iterator(image)
        ]
    # Each run of identical frames is one, shown for the 100 ms of each of them.
    assert frames == [(0, 100), (50, 300), (100, 100), (0, 200)]


def test_a_gif_of_frames_larger_than_pillows_guard_against_others_files_is_written(tmp_path):
    # Pillow refuses to open an image above 2 x MAX_IMAGE_PIXELS (179M pixels) as a
    # decompression bomb; play reads its own GIF back to count its frames. The guard,
    # lowered here to 50 pixels, is left as it was.
    gif = tmp_path / 'large.gif'
    script = (
        'import numpy as np\n'
        'from PIL import Image\n'
        'from alf_lite.bin.play import VideoWriter, frames_written\n'
        'Image.MAX_IMAGE_PIXELS = 50\n'
        f'video = VideoWriter({str(gif)!r}, fps=10)\n'
        'for value in 0, 100, 200:\n'
        '    video.append(np.full((12, 10, 3), value, np.uint8))\n'
        'video.close()\n'
        'print(frames_written(video, "large.gif"), Image.MAX_IMAGE_PIXELS)\n'
    )
    result = run_train([sys.executable, '-c', script])
    assert_ok(result)
    assert result.stdout.strip() == '3 frames written to large.gif 50'


def write_still_gif(gif, appends):
    """Run ``appends`` (code appending frames to ``video``, a VideoWriter of ``gif`` at
    --fps 0.01: 100 s a frame) in a subprocess; what play would print, and each frame of
    the GIF as (its brightest grey level, its delay in ms)."""
    from PIL import Image, ImageSequence

    script = (
        'import numpy as np\n'
        'from alf_lite.bin.play import VideoWriter, frames_written\n'
        f'video = VideoWriter({str(gif)!r}, fps=0.01)\n'
        f'{appends}'
        'video.close()\n'
        f'print(frames_written(video, {gif.name!r}))\n'
    )
    result = run_train([sys.executable, '-c', script])
    assert_ok(result)
    with Image.open(gif) as image:
        frames = [
            (int(f.convert('L').getextrema()[1]), f.info['duration'])
            for f in ImageSequence.Iterator(image)
        ]
    return result.stdout.strip(), frames


def merged_and_shortened(kept, recorded):
    return (
        f'{kept} frames written to still.gif: of the {recorded} recorded, identical consecutive '
        'frames were merged into one, their durations summed; a run of them longer than '
        '655.35 s, the longest a GIF shows a frame, is shown that long'
    )


def test_a_run_of_identical_gif_frames_longer_than_a_gif_frame_holds_is_shown_that_long(
    tmp_path,
):
    # At --fps 0.01 each frame is shown 100 s: seven identical ones, 700 s, are more than
    # the 655.35 s of a GIF frame's 16-bit delay, which pillow fails to write.
    printed, frames = write_still_gif(
        tmp_path / 'still.gif',
        'for value in [0] + [50] * 7 + [100] * 6:\n'
        '    video.append(np.full((8, 8, 3), value, np.uint8))\n',
    )
    assert printed == merged_and_shortened(3, 14)
    # The run of 600 s is shown for its time.
    assert frames == [(0, 100_000), (50, 655_350), (100, 600_000)]


def test_gif_frames_that_differ_only_before_the_reduction_to_256_colours_merge_within_limit(
    tmp_path,
):
    # A frame of 300 colours whose first pixel alternates by one level of red: the frames
    # differ, but reduced to the 256 colours of a GIF they look the same, and pillow
    # merges them. At --fps 0.01 eight of them are 800 s, more than a GIF frame holds.
    printed, frames = write_still_gif(
        tmp_path / 'still.gif',
        'rng = np.random.default_rng(0)\n'
        'colours = rng.integers(0, 256, (300, 3), dtype=np.uint8)\n'
        'still = colours[rng.integers(0, 300, (64, 64))]\n'
        'video.append(np.zeros_like(still))\n'
        'for i in range(8):\n'
        '    frame = still.copy()\n'
        '    frame[0, 0, 0] ^= i % 2\n'
        '    video.append(frame)\n',
    )
    assert printed == merged_and_shortened(2, 9)
    assert frames[0] == (0, 100_000)
    assert frames[1][0] > 0 and frames[1][1] == 655_350
    assert len(frames) == 2


@pytest.mark.parametrize('name, size', [('floats.gif', None), ('floats.mp4', (4, 2))])
def test_frames_of_floats_are_taken_as_8_bit_colours_as_by_the_mp4_writer(tmp_path, name, size):
    import imageio.v3 as iio

    video_file = tmp_path / name
    # An env's own render() may give floats in [0, 1]; in a process of its own, as
    # play's flags would clash with those of another tool.
    script = (
        'import numpy as np\n'
        'from alf_lite.bin.play import VideoWriter\n'
        f'video = VideoWriter({str(video_file)!r}, fps=10, size={size!r})\n'
        'for value in [0.0, 0.5, 1.0]:\n'
        '    video.append(np.full((8, 8, 3), value))\n'
        'video.close()\n'
        'print(video.num_frames)\n'
    )
    result = run_train([sys.executable, '-c', script])
    assert_ok(result)
    assert result.stdout.split() == ['3']
    frames = iio.imread(video_file, index=None)[..., :3]
    assert frames.shape == ((3, 8, 8, 3) if size is None else (3, 2, 4, 3))
    # 0.5 is 127: in the GIF exactly, in the H.264 of the .mp4 within its rounding.
    assert [int(frame.mean().round()) for frame in frames] == pytest.approx([0, 127, 255], abs=2)


@pytest.mark.parametrize(
    'values, dtype, colours',
    [
        # Integers within [0, 255] keep their values, in each frame: imageio's conversion
        # stretched each frame's own range (20, 100, 211 in one frame: 0, 107, 255), and
        # failed on booleans.
        ([[20, 100, 211], [100, 100, 100]], 'np.int64', [[20, 100, 211], [100, 100, 100]]),
        ([[0, 100, 200], [255, 255, 255]], 'np.uint16', [[0, 100, 200], [255, 255, 255]]),
        ([[True, False, True], [False, False, False]], 'bool', [[255, 0, 255], [0, 0, 0]]),
        # Floats within [0, 1] are scaled by 255; others stretched from the frame's range.
        ([[0.0, 0.5, 1.0], [0.2, 0.2, 0.2]], 'np.float32', [[0, 128, 255], [51, 51, 51]]),
        ([[0.0, 1.0, 2.0], [3.0, 3.0, 3.0]], 'np.float64', [[0, 128, 255], [0, 0, 0]]),
        # NaN and infinities are left out of the range: a NaN pixel does not stretch a
        # frame within [0, 1] (0.5 was 255), an infinite one does not blacken it (0.5 was 0).
        ([[0.2, 0.5, np.nan], [0.2, 0.2, 0.2]], 'np.float32', [[51, 128, 51], [51, 51, 51]]),
        ([[0.0, 0.5, np.inf], [0.2, 0.2, 0.2]], 'np.float16', [[0, 128, 128], [51, 51, 51]]),
        ([[-np.inf, 1.0, 3.0], [3.0, 3.0, 3.0]], 'np.float64', [[0, 0, 255], [0, 0, 0]]),
        # A frame with no finite value at all is black.
        ([[np.nan, np.nan, np.inf], [0.2, 0.2, 0.2]], 'np.float32', [[0, 0, 0], [51, 51, 51]]),
    ],
    ids=[
        'int64',
        'uint16_0_and_255',
        'bool',
        'floats',
        'floats_beyond_1',
        'nan',
        'inf',
        'minus_inf',
        'no_finite_value',
    ],
)
def test_a_gif_of_frames_that_are_not_uint8_holds_their_colours(tmp_path, values, dtype, colours):
    from PIL import Image, ImageSequence

    gif = tmp_path / 'frames.gif'
    script = (
        'import numpy as np\n'
        'from alf_lite.bin.play import VideoWriter\n'
        f'video = VideoWriter({str(gif)!r}, fps=10)\n'
        'from numpy import inf, nan\n'
        f'for row in {values!r}:\n'
        f'    video.append(np.tile(np.array(row, dtype={dtype}), (2, 3, 1)).transpose(0, 2, 1))\n'
        'video.close()\n'
    )
    assert_ok(run_train([sys.executable, '-c', script]))
    with Image.open(gif) as image:
        frames = [np.asarray(f.convert('RGB')) for f in ImageSequence.Iterator(image)]
    # Each frame's three columns, in its first row (one colour per column, grey).
    assert [[int(c) for c in frame[0, :, 0]] for frame in frames] == colours


def test_play_whose_output_reader_is_gone_writes_its_video_and_exits_0(trained_run, tmp_path):
    # As `play ... | head -1` does: the episodes' lines met the closed pipe with a
    # BrokenPipeError traceback (or, buffered, Python's exit code 120 at exit).
    video = tmp_path / 'p.gif'
    command = [sys.executable, '-m', 'alf_lite.bin.play', '--root_dir', str(trained_run)]
    returncode, err = run_with_output_reader_gone(
        command + ['--num_episodes', '2', '--record_file', str(video)]
    )
    assert returncode == 0 and 'BrokenPipeError' not in err, err[-3000:]
    assert video.stat().st_size > 0


def test_play_says_how_many_frames_a_gif_holds_when_identical_ones_merge(trained_run, tmp_path):
    from PIL import Image, ImageSequence

    gif = tmp_path / 'one_pixel.gif'
    # Scaled to one pixel, the pendulum's frames are alike: pillow merges them.
    result = run_play(
        trained_run, '--num_episodes', '3', '--record_file', str(gif), '--render_size', '1'
    )
    assert_ok(result)
    with Image.open(gif) as image:
        delays = [frame.info['duration'] for frame in ImageSequence.Iterator(image)]
    recorded = 3 * (EPISODE_STEPS + 1)
    assert len(delays) < recorded
    frames = 'frame' if len(delays) == 1 else 'frames'
    assert (
        f'{len(delays)} {frames} written to {gif}: of the {recorded} recorded, identical '
        'consecutive frames were merged into one, their durations summed'
    ) in result.stdout, result.stdout
    # Still real time: Pendulum-v1's 30 frames a second.
    assert sum(delays) == pytest.approx(1000 * recorded / 30, abs=10)


def test_a_gifs_delays_add_up_to_real_time(trained_run, tmp_path):
    from PIL import Image, ImageSequence

    gif = tmp_path / 'mujoco_rate.GIF'  # the extension in any case
    # At 125 fps (MuJoCo's) every 3rd of the 12 frames is kept, each for 24 ms, which
    # a GIF cannot store (its delays are whole centiseconds): 20, 30, 20, 30 ms.
    result = run_play(trained_run, '--num_episodes', '2', '--record_file', str(gif), '--fps', '125')
    assert_ok(result)
    # The 4 frames kept differ: none merged, and nothing said of merging.
    assert f'4 frames written to {gif}' in result.stdout.splitlines(), result.stdout
    with Image.open(gif) as image:
        delays = [frame.info['duration'] for frame in ImageSequence.Iterator(image)]
    assert sum(delays) == 100  # 4 x 24 ms = 96 ms, to the centisecond


def test_play_renders_mujoco_headless_in_real_time_with_batch_norm_as_evaluated(
    ddpg_halfcheetah_run, tmp_path, monkeypatch
):
    from PIL import Image

    # Nothing says how to render: play picks EGL, which needs no display.
    monkeypatch.delenv('MUJOCO_GL', raising=False)
    gif = tmp_path / 'cheetah.gif'
    result = run_play(ddpg_halfcheetah_run, '--record_file', str(gif), '--render_size', '32')
    assert_ok(result)
    # Batch norm at its running statistics, as in the run's evaluation, which play repeats.
    ((episode_return, length),) = episodes(result.stdout)
    assert episode_return == pytest.approx(final_value(str(ddpg_halfcheetah_run)), abs=0.0051)
    # HalfCheetah-v5 steps 20 times a simulated second: a frame every 50 ms is real time.
    assert gif_frames(gif, fps=20) == length + 1
    with Image.open(gif) as image:
        assert image.info['duration'] == 50


def test_a_gin_param_that_plays_the_policy_on_another_env_is_warned_of(ddpg_halfcheetah_run):
    # Walker2d-v5 takes actions and gives observations of HalfCheetah-v5's sizes: the
    # networks load and play there. Was said nowhere.
    result = run_play(
        ddpg_halfcheetah_run, '--gin_param', "create_environment.env_name='Walker2d-v5'"
    )
    assert_ok(result)
    assert (
        f'--gin_param plays {ddpg_halfcheetah_run}/checkpoints/ckpt-2 on another env than it '
        "was trained on (create_environment.env_name = 'HalfCheetah-v5' -> "
        "create_environment.env_name='Walker2d-v5')"
    ) in result.stderr, result.stderr[-3000:]
    # Other settings of the env, and its own name given again, are no other env.
    result = run_play(
        ddpg_halfcheetah_run,
        '--gin_param',
        'create_environment.max_episode_steps=3',
        '--gin_param',
        "create_environment.env_name='HalfCheetah-v5'",
    )
    assert_ok(result)
    assert 'another env' not in result.stderr, result.stderr[-3000:]


def osmesa_is_installed():
    import ctypes.util

    return ctypes.util.find_library('OSMesa') is not None


@pytest.mark.parametrize(
    'backend',
    [
        'no_such_backend',
        pytest.param(
            'osmesa',
            marks=pytest.mark.skipif(osmesa_is_installed(), reason='OSMesa renders here'),
        ),
    ],
)
def test_a_mujoco_gl_that_mujoco_cannot_load_is_named_not_the_config(
    ddpg_halfcheetah_run, tmp_path, monkeypatch, backend
):
    # MuJoCo loads MUJOCO_GL's backend as it is imported, before the env is built.
    monkeypatch.setenv('MUJOCO_GL', backend)
    gif = tmp_path / 'cheetah.gif'
    command = [sys.executable, '-m', 'alf_lite.bin.play', '--root_dir', str(ddpg_halfcheetah_run)]
    result = run_train(command + ['--record_file', str(gif)], fresh_interpreter=True)
    assert result.returncode == 2, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f'error: MuJoCo does not import with MUJOCO_GL={backend}, the OpenGL backend it '
        'loads as it is imported ('
    ), result.stderr[-3000:]
    assert last.endswith(
        "Set MUJOCO_GL to one this machine has: egl (headless; play's choice where MUJOCO_GL "
        'is unset), osmesa (headless, in software; needs the OSMesa library) or glfw (needs '
        'a display).'
    ), last
    assert 'no longer builds' not in result.stderr
    assert os.listdir(tmp_path) == []


def test_a_mujoco_gl_that_cannot_render_here_is_named_with_the_ones_to_try(
    ddpg_halfcheetah_run, tmp_path, monkeypatch
):
    # GLFW opens a window: with no display to open it on, MuJoCo fails its first frame.
    for name in ('DISPLAY', 'WAYLAND_DISPLAY'):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv('MUJOCO_GL', 'glfw')
    gif = tmp_path / 'cheetah.gif'
    command = [sys.executable, '-m', 'alf_lite.bin.play', '--root_dir', str(ddpg_halfcheetah_run)]
    result = run_train(command + ['--record_file', str(gif)], fresh_interpreter=True)
    assert result.returncode == 1, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: Environment 'HalfCheetah-v5' (env 0 of 1) raised in render(): ")
    assert last.endswith(
        '. MuJoCo rendered with MUJOCO_GL=glfw; set it to a backend this machine has: egl '
        "(headless; play's choice where MUJOCO_GL is unset), osmesa (headless, in software; "
        f'needs the OSMesa library) or glfw (needs a display). {gif} was not written.'
    ), last
    assert os.listdir(tmp_path) == []


def played_returns(result):
    """The returns of the episodes ``result`` played."""
    assert_ok(result)
    played = episodes(result.stdout)
    assert played and {n for _, n in played} == {LONG_EPISODE_STEPS}
    return [r for r, _ in played]


def test_play_computes_at_the_runs_precision_and_repeats_its_evaluation(bfloat16_run):
    played = played_returns(run_play(bfloat16_run, '--num_episodes', '2', '--random_seed', '2'))
    # The first episode starts as the run's evaluation at 2 env steps did, the
    # checkpoint's step, with the networks of ckpt-2 in bfloat16. Float32
    # actions make the return differ.
    assert played[0] == pytest.approx(final_value(str(bfloat16_run)), abs=0.0051)
    assert played[1] != pytest.approx(played[0], abs=1.0)


def test_play_repeats_each_episode_of_the_evaluation_at_its_checkpoint(tmp_path_factory):
    # 3 episodes in rounds of 2 envs: the second round's env 1 plays its seed again, unlogged.
    run = tiny_pendulum_run(
        tmp_path_factory,
        'play_evaluation',
        [
            'TrainerConfig.num_eval_episodes=3',
            'TrainerConfig.num_eval_environments=2',
            'TrainerConfig.random_seed=5',
            f'create_environment.max_episode_steps={LONG_EPISODE_STEPS}',
        ],
    )
    played = played_returns(run_play(run, '--num_episodes', '4'))
    # Each episode starts as the same episode of the evaluation at 2 env steps: the first
    # three are that evaluation, whose mean the run logged (each printed to 0.01).
    assert np.mean(played[:3]) == pytest.approx(final_value(str(run)), abs=0.0051)
    # The fourth starts as a fourth episode of that evaluation would: another start.
    assert len({round(r, 1) for r in played}) == 4, played


def test_play_names_an_actor_of_ones_own_that_bfloat16_does_not_reach(bfloat16_run, caplog):
    import functools

    from alf_lite.algorithms.sac import SacAlgorithm
    from alf_lite.bin.policy import checkpoint_path, load_policy
    from alf_lite.config import parse_config
    from alf_lite.networks.actor import TanhNormalActorNetwork
    from alf_lite.trainer import TrainerConfig

    class ActorOfItsOwn(TanhNormalActorNetwork):
        """alf_lite's actor without its ``compute_dtype``: it computes in float32."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            del self.compute_dtype

        def _mean_and_log_std(self, observation):
            mean, raw = self._head(self._encoder(observation)).chunk(2, dim=-1)
            return mean, raw.clamp(-5.0, 2.0)

    parse_config([str(bfloat16_run / 'config.gin')], [])
    config = TrainerConfig(
        algorithm_ctor=functools.partial(SacAlgorithm, actor_network_ctor=ActorOfItsOwn)
    )
    assert config.precision == 'bfloat16'
    with caplog.at_level('WARNING'):
        load_policy(checkpoint_path(str(bfloat16_run), None), config, 3, 1)
    assert 'SacAlgorithm.actor_network_ctor (ActorOfItsOwn)' in caplog.text, caplog.text


def test_play_seeds_the_env_with_the_runs_seed_unless_told_otherwise(bfloat16_run):
    default = run_play(bfloat16_run)
    assert 'with random_seed 2' in default.stdout
    told = run_play(bfloat16_run, '--random_seed', '0')
    assert 'with random_seed 0' in told.stdout
    assert played_returns(default) == played_returns(run_play(bfloat16_run, '--random_seed', '2'))
    assert played_returns(told) != played_returns(default)


def test_play_warns_of_a_config_gin_changed_after_its_checkpoint(trained_run, tmp_path):
    run = tmp_path / 'run'
    shutil.copytree(trained_run, run)
    result = run_play(run)
    assert_ok(result)
    assert 'is not the config that' not in result.stderr, result.stderr[-3000:]
    config = run / 'config.gin'
    text = config.read_text()
    assert 'actor/Adam.lr = 0.1\n' in text
    config.write_text(text.replace('actor/Adam.lr = 0.1\n', 'actor/Adam.lr = 0.2\n'))
    result = run_play(run)
    assert_ok(result)
    assert (
        f'{config} is not the config that {run / "checkpoints" / "ckpt-2"} was trained with: '
        "it differs in 1 binding(s), e.g. ['actor/Adam.lr = 0.1 -> actor/Adam.lr = 0.2']"
    ) in result.stderr, result.stderr[-3000:]


def test_play_records_mp4_from_an_earlier_checkpoint(trained_run, tmp_path):
    import imageio

    mp4 = tmp_path / 'videos' / 'out.mp4'  # its missing directory is made
    umask = os.umask(0o022)  # play's process inherits it
    try:
        result = run_play(
            trained_run, '--checkpoint_step', '1', '--record_file', str(mp4), '--render_size', '32'
        )
    finally:
        os.umask(umask)
    assert_ok(result)
    # The permissions of any new file, not those of a private temporary one (0600).
    assert stat.S_IMODE(mp4.stat().st_mode) == 0o644
    assert 'ckpt-1' in result.stdout
    ((episode_return, length),) = episodes(result.stdout)
    assert length == EPISODE_STEPS
    # The networks of ckpt-1: the episode repeats the run's evaluation at 1 env step.
    steps, returns = read_scalar(str(trained_run), EVAL_RETURN)
    assert episode_return == pytest.approx(returns[list(steps).index(1)], abs=0.0051)
    with imageio.get_reader(mp4) as reader:
        frames = [frame for frame in reader]
    assert len(frames) == EPISODE_STEPS + 1
    assert {frame.shape for frame in frames} == {(32, 32, 3)}


@pytest.mark.parametrize('name', ['.mp4', '.MP4', '.gif'])
def test_a_video_named_only_by_its_extension_is_written(trained_run, tmp_path, name):
    # A hidden file whose name is all extension: os.path.splitext finds none in it.
    video = tmp_path / name
    result = run_play(trained_run, '--record_file', str(video), '--render_size', '16')
    assert_ok(result)
    assert f'{EPISODE_STEPS + 1} frames written to {video}' in result.stdout
    assert os.listdir(tmp_path) == [name]


def test_a_checkpoint_before_a_resume_that_changed_the_experiment_plays_its_config(
    trained_run, tmp_path
):
    root_dir = tmp_path / 'run'
    shutil.copytree(trained_run, root_dir)
    # The resume at 2 env steps keeps the config trained with until then in config-until-2.gin.
    params = ['create_environment.max_episode_steps=7', 'TrainerConfig.num_env_steps=3']
    assert_ok(run_train(train_command(root_dir, params=params)))
    assert (root_dir / 'config-until-2.gin').is_file()
    result = run_play(root_dir, '--checkpoint_step', '2')
    assert_ok(result)
    assert f'and {root_dir / "config-until-2.gin"}' in result.stdout
    # Its episodes had EPISODE_STEPS, as its evaluation at 2 env steps, which it repeats.
    ((episode_return, length),) = episodes(result.stdout)
    assert length == EPISODE_STEPS
    steps, returns = read_scalar(str(root_dir), EVAL_RETURN)
    assert episode_return == pytest.approx(returns[list(steps).index(2)], abs=0.0051)


@pytest.mark.parametrize(
    'video_name, sig',
    [('play.mp4', signal.SIGINT), ('play.gif', signal.SIGTERM), ('play.gif', signal.SIGHUP)],
    ids=['mp4, Ctrl-C to the group (ffmpeg too)', 'gif, SIGTERM', 'gif, a closed terminal'],
)
def test_a_stopped_play_leaves_the_video_already_there_as_it_was(
    trained_run, tmp_path, video_name, sig
):
    video = tmp_path / video_name
    video.write_bytes(b'the video of an earlier play')
    command = [sys.executable, '-m', 'alf_lite.bin.play', '--root_dir', str(trained_run)]
    process = start_in_own_session(
        command + ['--num_episodes', '100000', '--record_file', str(video)],
        stdout=subprocess.PIPE,
    )
    for line in process.stdout:  # stopped while it records, after its first episode
        if line.startswith('episode 1:'):
            break
    send_as_user(process, sig)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + sig, stderr[-3000:]
    expected = f'error: interrupted by {sig.name}. {video} was not written.'
    assert stderr.strip().endswith(expected), stderr[-3000:]
    assert 'Traceback' not in stderr, stderr[-3000:]
    assert video.read_bytes() == b'the video of an earlier play'
    assert os.listdir(tmp_path) == [video_name]  # no temporary file left


def test_a_second_signal_while_a_stopped_play_cleans_up_leaves_no_temporary_video(
    trained_run, tmp_path
):
    # The second SIGTERM comes while the first one's exit closes the env and the
    # .mp4's encoder (tens of milliseconds for a few hundred frames).
    video = tmp_path / 'play.mp4'
    command = [sys.executable, '-m', 'alf_lite.bin.play', '--root_dir', str(trained_run)]
    process = start_in_own_session(
        command + ['--num_episodes', '100000', '--record_file', str(video)],
        stdout=subprocess.PIPE,
    )
    for line in process.stdout:  # some hundred frames recorded
        if line.startswith('episode 100:'):
            break
    process.send_signal(signal.SIGTERM)
    time.sleep(0.02)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode in (128 + signal.SIGTERM, -signal.SIGTERM), stderr[-3000:]
    assert 'Traceback' not in stderr, stderr[-3000:]
    assert os.listdir(tmp_path) == []  # neither the video nor its temporary file


def play_stopped(run, video, prelude: str, signal_name: str, says: str) -> None:
    """play recording ``run`` to ``video`` after ``prelude``, which sends it ``signal_name``:
    it exits with 128 + its number, its last line naming the signal, then ``says``."""
    command = [sys.executable, '-m', 'alf_lite.bin.play', '--root_dir', str(run)]
    command = with_prelude(command + ['--record_file', str(video)], prelude, 'alf_lite.bin.play')
    result = run_train(command)
    assert result.returncode == 128 + getattr(signal, signal_name), result.stderr[-3000:]
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line == f'error: interrupted by {signal_name}. {says}', result.stderr[-3000:]


@pytest.mark.parametrize('sig', [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_a_signal_while_play_imports_its_modules_stops_it_with_one_line(tmp_path, sig):
    # Before main handles the signals: was a KeyboardInterrupt's traceback, or no word.
    video = tmp_path / 'play.gif'
    command = [sys.executable, '-m', 'alf_lite.bin.play', '--root_dir', str(tmp_path / 'run')]
    command = with_prelude(
        command + ['--record_file', str(video)],
        signal_on_import(sig),
        'alf_lite.bin.play',
        alter_sys=True,
    )
    result = run_train(command, cwd=tmp_path)
    assert result.returncode == 128 + sig, result.stderr[-3000:]
    assert result.stderr.strip().splitlines() == [f'error: interrupted by {sig.name}.']
    assert os.listdir(tmp_path) == []


def test_a_signal_while_the_video_writer_opens_leaves_no_temporary_video(trained_run, tmp_path):
    # The SIGINT comes once the .mp4's temporary file is made, as its encoder is set up.
    video = tmp_path / 'play.mp4'
    video.write_bytes(b'the video of an earlier play')
    prelude = (
        'import os, signal, imageio\n'
        'get_writer = imageio.get_writer\n'
        'def get_writer_then_interrupt(*args, **kwargs):\n'
        '    writer = get_writer(*args, **kwargs)\n'
        '    os.kill(os.getpid(), signal.SIGINT)\n'
        '    return writer\n'
        'imageio.get_writer = get_writer_then_interrupt\n'
    )
    play_stopped(trained_run, video, prelude, 'SIGINT', f'{video} was not written.')
    assert video.read_bytes() == b'the video of an earlier play'
    assert os.listdir(tmp_path) == ['play.mp4']  # no temporary file left


def test_a_video_that_cannot_replace_the_file_there_is_kept_and_named(trained_run, tmp_path):
    # Another user's file in a sticky directory (/tmp), or an immutable one: the kernel
    # refuses the rename onto it (EPERM) once every episode was played.
    video = tmp_path / 'play.gif'
    video.write_bytes(b'the video of an earlier play')
    prelude = (
        'import errno, os\n'
        'replace = os.replace\n'
        'def not_permitted(src, dst, **kwargs):\n'
        f'    if str(dst) == {str(video)!r}:\n'
        '        raise OSError(errno.EPERM, os.strerror(errno.EPERM), src, None, dst)\n'
        '    replace(src, dst, **kwargs)\n'
        'os.replace = not_permitted\n'
    )
    command = [sys.executable, '-m', 'alf_lite.bin.play', '--root_dir', str(trained_run)]
    command = with_prelude(command + ['--record_file', str(video)], prelude, 'alf_lite.bin.play')
    result = run_train(command)
    assert result.returncode == 1, result.stderr[-3000:]
    assert 'Traceback' not in result.stderr, result.stderr[-3000:]
    (kept,) = [name for name in os.listdir(tmp_path) if name != 'play.gif']
    assert result.stderr.strip().splitlines()[-1] == (
        f'error: cannot replace {video} with the new video: Operation not permitted. It was '
        f'written to {tmp_path / kept} instead.'
    ), result.stderr[-3000:]
    assert video.read_bytes() == b'the video of an earlier play'
    assert gif_frames(tmp_path / kept, fps=30) == EPISODE_STEPS + 1


@pytest.mark.parametrize(
    'video_name, reason',
    [
        # ffmpeg fails as it writes the video's index, at the end; imageio does not
        # check how it ended: the file is read back.
        ('play.mp4', 'the encoded video does not read back (ffmpeg: '),
        ('play.gif', 'File too large.'),
    ],
)
def test_a_video_that_cannot_be_written_leaves_the_file_there_as_it_was(
    trained_run, tmp_path, video_name, reason
):
    # As on a full disk: no file may grow past 1000 bytes, less than either video.
    video = tmp_path / video_name
    video.write_bytes(b'the video of an earlier play')
    command = [sys.executable, '-m', 'alf_lite.bin.play', '--root_dir', str(trained_run)]
    result = run_with_file_size_limit(command + ['--record_file', str(video)], 1000)
    assert result.returncode == 1, result.stderr[-3000:]
    assert 'Traceback' not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f'error: cannot write {video}: {reason}'), result.stderr[-3000:]
    assert last.endswith(f'{video} was not written.'), result.stderr[-3000:]
    assert 'frames written' not in result.stdout
    assert video.read_bytes() == b'the video of an earlier play'
    assert os.listdir(tmp_path) == [video_name]  # no temporary file left


def test_an_encoder_that_stops_taking_frames_fails_the_video_and_leaves_no_file(tmp_path):
    # In a process of its own, as play's flags would clash with those of another tool.
    script = (
        'import numpy as np, psutil\n'
        'from alf_lite.bin.play import VideoNotWrittenError, VideoWriter\n'
        'frame = np.zeros((16, 16, 3), dtype=np.uint8)\n'
        f'writer = VideoWriter({str(tmp_path / "play.mp4")!r}, fps=30)\n'
        'writer.append(frame)\n'
        '(encoder,) = psutil.Process().children()\n'
        'encoder.kill()\n'
        'encoder.wait(timeout=10)\n'
        'try:\n'
        '    for _ in range(100):  # past what the pipe to the dead encoder buffers\n'
        '        writer.append(frame)\n'
        'except VideoNotWrittenError as e:\n'
        '    print(e)\n'
        'writer.discard()\n'
    )
    result = run_python(script)
    assert_ok(result)
    assert result.stdout.startswith('the encoder (ffmpeg) took no more frames: '), result.stdout
    assert os.listdir(tmp_path) == []


def test_a_signal_once_the_video_is_moved_in_says_it_was_written(trained_run, tmp_path):
    # The SIGTERM comes as the finished video replaces the earlier one: that one is gone.
    video = tmp_path / 'play.gif'
    video.write_bytes(b'the video of an earlier play')
    prelude = (
        'import os, signal\n'
        'replace = os.replace\n'
        'def replace_then_terminate(src, dst, **kwargs):\n'
        '    replace(src, dst, **kwargs)\n'
        f'    if dst == {str(video)!r}:\n'
        '        os.kill(os.getpid(), signal.SIGTERM)\n'
        'os.replace = replace_then_terminate\n'
    )
    play_stopped(trained_run, video, prelude, 'SIGTERM', f'{video} was written.')
    assert video.read_bytes().startswith(b'GIF89a')
    assert os.listdir(tmp_path) == ['play.gif']


def test_an_env_that_raises_while_playing_exits_1_naming_it(tmp_path):
    # hanging_env's ids are registered in the tool's process before it runs.
    env = train_env()
    env['PYTHONPATH'] = os.pathsep.join([os.path.dirname(__file__), env['PYTHONPATH']])

    def tool(name, *args):
        script = (
            'import runpy, hanging_env\n'
            f'runpy.run_module("alf_lite.bin.{name}", run_name="__main__")\n'
        )
        command = [sys.executable, '-c', script, *args]
        return subprocess.run(
            command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
        )

    root_dir = tmp_path / 'run'
    params = TINY + [
        'TrainerConfig.initial_collect_steps=1',
        'TrainerConfig.num_env_steps=2',
        'TrainerConfig.num_eval_episodes=1',
        "create_environment.env_name='alf_lite_tests/HangsInStep5-v0'",
    ]
    assert_ok(tool('train', *train_command(root_dir, [PENDULUM], params)[3:]))
    # The same spaces; its first step after a reset with an eval env's seed raises.
    crashes = "create_environment.env_name='alf_lite_tests/CrashesWhenEvaluated-v0'"
    result = tool('play', '--root_dir', str(root_dir), '--gin_param', crashes)
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "error: Environment 'alf_lite_tests/CrashesWhenEvaluated-v0' (env 0 of 1) raised in "
        'step(): RuntimeError: the simulator exploded'
    ), result.stderr[-3000:]


def test_recording_an_env_without_rgb_array_frames_exits_2_naming_its_modes(trained_run, tmp_path):
    # The point task renders nothing: refused before any env is built, as bad input.
    gif = tmp_path / 'p.gif'
    env_name = "create_environment.env_name='alf_lite/PointTarget-v0'"
    command = [sys.executable, '-m', 'alf_lite.bin.play', '--root_dir', str(trained_run)]
    result = run_train(command + ['--gin_param', env_name, '--record_file', str(gif)])
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --record_file needs the env's 'rgb_array' frames, which "
        "'alf_lite/PointTarget-v0' does not render (its render modes: none)."
    ), result.stderr[-3000:]
    assert not gif.exists()


RENDER_ENVS = """
import gymnasium
from gymnasium.envs.classic_control.pendulum import PendulumEnv


class RenderRaises(PendulumEnv):
    def render(self):
        raise NotImplementedError('no frames here')


class RendersNothing(PendulumEnv):
    def render(self):
        return None


gymnasium.register('RenderRaises-v0', entry_point=RenderRaises, max_episode_steps=5)
gymnasium.register('RendersNothing-v0', entry_point=RendersNothing, max_episode_steps=5)
"""


@pytest.mark.parametrize(
    'env_id, problem',
    [
        # A sentence of its own before the one naming the video.
        ('RenderRaises-v0', 'raised in render(): NotImplementedError: no frames here.'),
        (
            'RendersNothing-v0',
            "returned None from render() in render_mode 'rgb_array', not an image "
            '(an H x W x 3 array).',
        ),
    ],
)
def test_an_env_that_renders_no_frame_exits_1_naming_it_and_writes_no_video(
    trained_run, tmp_path, env_id, problem
):
    # An env of the user's own, beside the working directory, named with its module.
    (tmp_path / 'render_envs.py').write_text(RENDER_ENVS)
    gif = tmp_path / 'p.gif'
    command = [sys.executable, '-m', 'alf_lite.bin.play', '--root_dir', str(trained_run)]
    env_name = f"create_environment.env_name='render_envs:{env_id}'"
    options = ['--trust_imports', '--gin_param', env_name, '--record_file', str(gif)]
    result = run_train(command + options, cwd=tmp_path)
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: Environment 'render_envs:{env_id}' (env 0 of 1) {problem} {gif} was not written."
    ), result.stderr[-3000:]
    assert 'Traceback' not in result.stderr
    # Nor its temporary file.
    assert set(os.listdir(tmp_path)) - {'__pycache__'} == {'render_envs.py'}


def _play_a_video_with_a_signal(trained_run, tmp_path, module, name, how=dropped_signal.DROPPED):
    """play of 2 episodes into ``tmp_path / 'video.gif'``, SIGINT sent in ``module.name``
    (``dropped_signal.run_tool``); checks that it stopped for it, writing nothing."""
    video = tmp_path / 'video.gif'
    args = ['--root_dir', str(trained_run), '--num_episodes', '2', '--record_file', str(video)]
    result = dropped_signal.run_tool('play', args, module, name, how)
    assert result.returncode == 128 + signal.SIGINT, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f'error: interrupted by SIGINT. {video} was not written.'
    ), result.stderr[-3000:]
    assert os.listdir(tmp_path) == []
    return result


@pytest.mark.parametrize(
    'module, name',
    [('alf_lite.bin.policy', 'load_policy'), ('alf_lite.evaluation', 'evaluate')],
    ids=['while_loading', 'in_the_first_episode'],
)
def test_a_signal_whose_exception_was_dropped_stops_play_before_the_video_is_written(
    trained_run, tmp_path, module, name
):
    result = _play_a_video_with_a_signal(trained_run, tmp_path, module, name)
    # Dropped, the signal let both episodes play; the check after them acts on it.
    assert 'episode 2:' in result.stdout, result.stdout
    assert 'Exception ignored' not in result.stderr, result.stderr[-3000:]


def test_a_signal_whose_exception_an_error_replaced_stops_play_with_one_line(trained_run, tmp_path):
    # The code the signal interrupted raised an error of its own in place of its exception
    # (as a C extension calling back into Python may): was that error's traceback, exit 1.
    result = _play_a_video_with_a_signal(
        trained_run, tmp_path, 'alf_lite.evaluation', 'evaluate', dropped_signal.REPLACED
    )
    assert 'Traceback' not in result.stderr, result.stderr[-3000:]


def test_missing_checkpoint_step_lists_the_available_ones(trained_run):
    result = run_play(trained_run, '--checkpoint_step', '7')
    assert result.returncode == 2, result.stderr
    assert re.search(r'no checkpoint at 7 env steps .*there are: 1, 2', result.stderr), (
        result.stderr
    )


def test_a_latest_checkpoint_that_training_removes_for_a_newer_one_plays_the_newer(
    trained_run, tmp_path
):
    # A run that is still training and keeps max_checkpoints_to_keep: as play builds the
    # env, the trainer writes ckpt-2 and removes ckpt-1, the latest play had picked. Was
    # "cannot read the checkpoint ... ckpt-1 (FileNotFoundError ...)", exit 2.
    run = tmp_path / 'run'
    shutil.copytree(trained_run, run)
    checkpoints = run / 'checkpoints'
    (checkpoints / 'ckpt-2').rename(tmp_path / 'ckpt-2')
    prelude = (
        'import os, shutil\n'
        'from alf_lite import checkpoint\n'
        'load_state = checkpoint.load_state\n'
        'def load_state_once_training_went_on(path, *args, **kwargs):\n'
        f'    if os.path.isdir({str(tmp_path / "ckpt-2")!r}):\n'
        f'        os.rename({str(tmp_path / "ckpt-2")!r}, {str(checkpoints / "ckpt-2")!r})\n'
        f'        shutil.rmtree({str(checkpoints / "ckpt-1")!r})\n'
        '    return load_state(path, *args, **kwargs)\n'
        'checkpoint.load_state = load_state_once_training_went_on\n'
    )
    command = [sys.executable, '-m', 'alf_lite.bin.play', '--root_dir', str(run)]
    result = run_train(with_prelude(command, prelude, 'alf_lite.bin.play'))
    assert_ok(result)
    removed = f'{checkpoints / "ckpt-1"} was removed as the run wrote a newer one: playing'
    assert f'{removed} {checkpoints / "ckpt-2"}\n' in result.stdout, result.stdout
    ((episode_return, _),) = episodes(result.stdout)
    # The networks of ckpt-2, the episode of the run's evaluation at 2 env steps.
    steps, returns = read_scalar(str(trained_run), EVAL_RETURN)
    assert episode_return == pytest.approx(returns[list(steps).index(2)], abs=0.0051)

    # A checkpoint asked for by its step is played or refused, never another.
    shutil.rmtree(checkpoints / 'ckpt-2')
    shutil.copytree(trained_run / 'checkpoints' / 'ckpt-1', checkpoints / 'ckpt-1')
    shutil.copytree(trained_run / 'checkpoints' / 'ckpt-2', tmp_path / 'ckpt-2')
    result = run_train(
        with_prelude(command + ['--checkpoint_step', '1'], prelude, 'alf_lite.bin.play')
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert 'cannot read the checkpoint' in result.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(
    'case',
    [
        'missing_root_dir',
        'no_config',
        'folder_of_a_run',
        'folder_of_runs',
        'no_checkpoint',
        'config_no_longer_parses',
        'gin_param_out_of_range',
        'gin_param_with_a_misspelt_device',
        'gin_param_that_changes_the_networks',
        'checkpoint_of_another_algorithm',
        'gin_param_that_makes_a_network_the_algorithm',
        'gin_param_that_makes_a_noise_the_algorithm',
        'gin_param_the_algorithm_refuses',
    ],
)
def test_unusable_root_dir_gives_a_clear_error(trained_run, tmp_path, case):
    root_dir = tmp_path / 'run'
    expected, args = {
        'missing_root_dir': ('does not exist', []),
        # As a run trained from Python leaves it.
        'no_config': (
            'holds no config.gin: it is not the root_dir of a train run. It holds checkpoints: '
            'a run trained from Python has a config.gin only where',
            [],
        ),
        'folder_of_a_run': (
            f'holds no config.gin: it is not the root_dir of a train run. It lies inside the run '
            f'{tmp_path / "run"}: give --root_dir {tmp_path / "run"}.',
            [],
        ),
        # A sweep's root.
        'folder_of_runs': (
            'holds no config.gin: it is not the root_dir of a train run. It holds 3 run(s): '
            f'give one as --root_dir, e.g. {tmp_path / "run" / "a"}, {tmp_path / "run" / "b"}.',
            [],
        ),
        'no_checkpoint': ('no checkpoint in', []),
        'config_no_longer_parses': ('num_env_stepz', []),
        'gin_param_out_of_range': (
            'with the given --gin_param no longer builds: TrainerConfig.random_seed must be in',
            ['--gin_param', 'TrainerConfig.random_seed=-1'],
        ),
        # play runs on the CPU whatever the run's device, but a value train refuses is no
        # device anywhere: it was ignored.
        'gin_param_with_a_misspelt_device': (
            "with the given --gin_param no longer builds: TrainerConfig.device must be 'auto', "
            "'cpu', 'cuda' or 'cuda:N', got 'gpu'.",
            ['--gin_param', "TrainerConfig.device='gpu'"],
        ),
        'gin_param_that_changes_the_networks': (
            'does not fit the networks config.gin builds',
            ['--gin_param', 'CriticNetwork.hidden_layers=(8,)'],
        ),
        # A SAC run's checkpoints where a TD3 run's config is: TD3 keeps a state SAC has not.
        'checkpoint_of_another_algorithm': (
            'does not fit the networks config.gin builds (was the config changed, or a '
            "--gin_param given that changes them?): it holds no 'actor_loss'",
            [],
        ),
        'gin_param_that_makes_a_network_the_algorithm': (
            'TrainerConfig.algorithm_ctor is the class CriticNetwork, which is no algorithm',
            ['--gin_param', 'TrainerConfig.algorithm_ctor=@CriticNetwork'],
        ),
        'gin_param_that_makes_a_noise_the_algorithm': (
            'TrainerConfig.algorithm_ctor is the class GaussianNoise, which is no algorithm',
            ['--gin_param', 'TrainerConfig.algorithm_ctor=@GaussianNoise'],
        ),
        # Refused only by the algorithm's constructor: it raised a traceback.
        'gin_param_the_algorithm_refuses': (
            'no longer builds its algorithm: SacAlgorithm: target_update_tau must be in (0, 1]',
            ['--gin_param', 'SacAlgorithm.target_update_tau=2.0'],
        ),
    }[case]
    if case == 'no_config':
        root_dir.mkdir()
        shutil.copytree(trained_run / 'checkpoints', root_dir / 'checkpoints')
    elif case == 'folder_of_a_run':
        shutil.copytree(trained_run, root_dir)
        root_dir = root_dir / 'eval'
    elif case == 'folder_of_runs':
        for name in 'cab':
            shutil.copytree(trained_run, root_dir / name)
        (root_dir / 'logs').mkdir()
    elif case == 'no_checkpoint':
        root_dir.mkdir()
        shutil.copy(trained_run / 'config.gin', root_dir / 'config.gin')
    elif case == 'config_no_longer_parses':
        shutil.copytree(trained_run, root_dir)
        config = root_dir / 'config.gin'
        config.write_text(config.read_text().replace('num_env_steps', 'num_env_stepz'))
    elif case.startswith('gin_param'):
        root_dir = trained_run
    elif case == 'checkpoint_of_another_algorithm':
        root_dir.mkdir()
        (root_dir / 'config.gin').write_text(f"include '{EXAMPLES / 'td3_pendulum.gin'}'\n")
        shutil.copytree(trained_run / 'checkpoints', root_dir / 'checkpoints')
    result = run_play(root_dir, *args)
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr, result.stderr
    assert 'Traceback' not in result.stderr, result.stderr


def test_unusable_flags_are_refused_before_playing(trained_run, tmp_path):
    (tmp_path / 'afile').write_text('mine')
    (tmp_path / 'adir.gif').mkdir()
    for args, message in (
        (['--fps', 'nan'], '--fps must be a finite number of at least 0.01, got nan'),
        (['--fps', 'inf'], '--fps must be a finite number of at least 0.01, got inf'),
        (['--fps', '1e-9'], '--fps must be a finite number of at least 0.01, got 1e-09'),
        (['--num_episodes', '0'], '--num_episodes and --fps must be positive'),
        (['--render_size', '0'], "--render_size must be 'W,H' or one positive number, got '0'"),
        # Without a video they would change nothing.
        (['--render_size', '64'], '--render_size applies only to a video: give --record_file'),
        (
            ['--fps', '10', '--render_size', '64,48'],
            '--render_size and --fps apply only to a video: give --record_file too.',
        ),
        # H.264 in yuv420p has a chroma sample per 2x2 pixels: the encoder would scale
        # an odd size to the next even one. Refused before the directory is made.
        *(
            (
                ['--record_file', str(tmp_path / 'new' / 'odd.mp4'), '--render_size', size],
                f'--render_size {shown} cannot be written to an .mp4: H.264 in yuv420p '
                'needs an even width and height',
            )
            for size, shown in (('161,121', '161,121'), ('160,121', '160,121'), ('33', '33,33'))
        ),
        (['--record_file', str(tmp_path / 'out.avi')], '--record_file must end in .mp4 or .gif'),
        (['--record_file', str(tmp_path / 'adir.gif')], 'adir.gif is a directory'),
        (
            ['--record_file', str(tmp_path / 'afile' / 'x.gif')],
            f'cannot write --record_file {tmp_path / "afile" / "x.gif"}: '
            f'{tmp_path / "afile"} is not a directory.',
        ),
        (
            ['--record_file', str(tmp_path / 'afile' / 'deeper' / 'x.gif')],
            f'{tmp_path / "afile"} is not a directory.',
        ),
        # A play that fails before playing makes none of the video's directories.
        (
            ['--record_file', str(tmp_path / 'new' / 'deeper' / 'x.gif'), '--checkpoint_step', '7'],
            'no checkpoint at 7 env steps',
        ),
        # Writable by its permissions for root, yet no file can be made there.
        (
            ['--record_file', '/proc/x.gif'],
            'cannot write --record_file /proc/x.gif: no file can be made in /proc (',
        ),
        # A name no file system here takes: refused before the policy is loaded.
        (
            ['--record_file', str(tmp_path / 'new' / f'{"v" * 252}.gif')],
            'its name is longer than the 255 bytes a file name may take.',
        ),
        (['--root_dir', str(tmp_path / 'afile')], 'afile is not a directory'),
        (['--random_seed', '-1'], '--random_seed must be in [0, 2**32), got -1'),
        (['--random_seed', str(2**32)], f'--random_seed must be in [0, 2**32), got {2**32}'),
    ):
        result = run_play(trained_run, *args)
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)
        assert 'Traceback' not in result.stderr and 'playing' not in result.stdout
    assert (tmp_path / 'afile').read_text() == 'mine'
    assert not (tmp_path / 'new').exists()


def test_a_render_size_whose_frames_need_more_than_the_available_memory_is_refused():
    # The kernel would kill play, with no word, as it scales or encodes the first frame.
    script = (
        'import alf_lite.device\n'
        'from alf_lite.bin.play import video_size_problem\n'
        'alf_lite.device.available_cpu_memory = lambda: (2**30, None)\n'
        "for name in 'v.mp4', 'v.gif':\n"
        '    print(video_size_problem(name, (8192, 8192)))\n'
        '    print(video_size_problem(name, (4096, 8192)))\n'
    )
    result = run_train([sys.executable, '-c', script])
    assert_ok(result)
    refused = (
        '--render_size 8192,8192: scaling and encoding a frame of that size takes about '
        '1.2 GiB, more than the 1.0 GiB of memory available. Give a smaller size.'
    )
    assert result.stdout.splitlines() == [refused, 'None'] * 2


def test_a_video_its_format_cannot_hold_is_refused_before_playing(trained_run, tmp_path):
    # ffmpeg would write a faster .mp4 at 1001000 frames per second (and fail with a
    # traceback above 2**31); pillow would fail writing a wider GIF, once every episode
    # was played.
    for args, message in (
        (
            ['--record_file', str(tmp_path / 'fast.mp4'), '--fps', '2e6'],
            '--fps 2e+06 cannot be written to an .mp4: ffmpeg takes at most 1001000 frames '
            'per second',
        ),
        (
            ['--record_file', str(tmp_path / 'fast.mp4'), '--fps', '1e12'],
            '--fps 1e+12 cannot be written to an .mp4',
        ),
        (
            ['--record_file', str(tmp_path / 'wide.gif'), '--render_size', '65536,2'],
            '--render_size 65536,2 cannot be written to a .gif: its width and height are at '
            'most 65535.',
        ),
        # x264 would fail to open and leave an .mp4 no player reads (exit 0).
        (
            ['--record_file', str(tmp_path / 'wide.mp4'), '--render_size', '16386,2'],
            '--render_size 16386,2 cannot be written to an .mp4: H.264 (x264) encodes at most '
            '16384 pixels a side.',
        ),
        # ffmpeg's image size check would fail as the first frame is sent.
        (
            ['--record_file', str(tmp_path / 'large.mp4'), '--render_size', '16384,16368'],
            '--render_size 16384,16368 cannot be written to an .mp4: ffmpeg takes a frame only '
            'while (width + 128) x (height + 128) is below 2**28 (268435456).',
        ),
    ):
        result = run_play(trained_run, *args)
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)
        assert 'Traceback' not in result.stderr and 'playing' not in result.stdout
    assert not list(tmp_path.iterdir())
    # At the limits the video is written, and ffmpeg keeps the frame rate asked for.
    mp4 = tmp_path / 'fastest.mp4'
    result = run_play(trained_run, '--record_file', str(mp4), '--fps', '1001000')
    assert result.returncode == 0, result.stderr
    import imageio_ffmpeg

    probe = subprocess.run(
        [imageio_ffmpeg.get_ffmpeg_exe(), '-i', str(mp4)], capture_output=True, text=True
    )
    assert ' 1001k fps' in probe.stderr, probe.stderr


def test_checkpoint_that_would_run_code_is_refused_and_runs_nothing(trained_run, tmp_path):
    root_dir = tmp_path / 'run'
    shutil.copytree(trained_run, root_dir)
    model = root_dir / 'checkpoints' / 'ckpt-2' / 'model.pt'
    marker = tmp_path / 'ran'
    torch.save({'algorithm': WritesAFile(marker)}, model)
    result = run_play(root_dir)
    assert result.returncode == 2, result.stderr
    assert str(model) in result.stderr and 'builtins.exec' in result.stderr, result.stderr
    assert not marker.exists()


@pytest.mark.parametrize(
    'damage, problem',
    [
        (
            lambda state: [
                v.fill_(float('nan'))
                for v in state['algorithm']['module'].values()
                if torch.is_tensor(v) and v.is_floating_point()
            ],
            'holds NaN or inf',
        ),
        (lambda state: state['algorithm'].pop('module'), "has no 'module' dict"),
    ],
    ids=['nan_weights', 'no_networks'],
)
def test_a_checkpoint_with_invalid_contents_is_named_with_its_problem(
    trained_run, tmp_path, damage, problem
):
    root_dir = tmp_path / 'run'
    shutil.copytree(trained_run, root_dir)
    model = root_dir / 'checkpoints' / 'ckpt-2' / 'model.pt'
    state = torch.load(model)
    damage(state)
    torch.save(state, model)
    result = run_play(root_dir)
    assert result.returncode == 2, result.stderr[-3000:]
    assert f'cannot read the checkpoint {model.parent}' in result.stderr, result.stderr[-3000:]
    assert problem in result.stderr and 'Traceback' not in result.stderr, result.stderr[-3000:]


def exception_of(call):
    """What ``call`` raised, caught as a script's ``except Exception`` catches it."""
    try:
        call()
    except Exception as e:  # noqa: BLE001  (a SystemExit is not caught: the test fails)
        return e
    raise AssertionError(f'{call} raised nothing')


def test_a_last_good_state_is_named_where_play_finds_no_checkpoint_to_play(trained_run, tmp_path):
    # A run that stopped at a NaN loss before its first checkpoint holds only last_good-N.
    from alf_lite.bin.policy import checkpoint_path
    from alf_lite.checkpoint import CheckpointError

    only = tmp_path / 'only' / 'checkpoints' / 'last_good-101'
    shutil.copytree(trained_run / 'checkpoints' / 'ckpt-2', only)
    error = exception_of(lambda: checkpoint_path(str(tmp_path / 'only'), None))
    assert isinstance(error, CheckpointError), error
    assert 'no checkpoint in' in str(error), error
    assert 'last_good-101 there is the state kept aside when training hit a NaN or inf' in str(
        error
    )
    assert 'torch.load(path, weights_only=True)' in str(error), error
    # Asked for by its step beside regular checkpoints.
    run = tmp_path / 'run'
    shutil.copytree(trained_run, run)
    shutil.copytree(run / 'checkpoints' / 'ckpt-2', run / 'checkpoints' / 'last_good-7')
    error = exception_of(lambda: checkpoint_path(str(run), 7))
    assert re.search('there are: 1, 2 .*last_good-7 there is the state kept aside', str(error))
    # None there: the messages as they were.
    error = exception_of(lambda: checkpoint_path(str(trained_run), 7))
    assert 'last_good' not in str(error), error


def test_the_policy_loader_raises_exceptions_that_a_python_caller_can_catch(trained_run, tmp_path):
    # A script loading several policies skips a bad one with ``except Exception``, which a
    # SystemExit passes.
    import alf_lite.all_configurables  # noqa: F401
    from alf_lite.bin.policy import checkpoint_path, load_policy
    from alf_lite.checkpoint import CheckpointError
    from alf_lite.config import ConfigError, parse_config
    from alf_lite.trainer import TrainerConfig

    (tmp_path / 'empty').mkdir()
    error = exception_of(lambda: checkpoint_path(str(tmp_path / 'empty'), None))
    assert isinstance(error, CheckpointError) and 'no checkpoint in' in str(error)
    error = exception_of(lambda: checkpoint_path(str(trained_run), 7))
    assert isinstance(error, CheckpointError), error
    assert re.search('no checkpoint at 7 env steps .*there are: 1, 2', str(error)), error

    damaged = tmp_path / 'ckpt-2'
    shutil.copytree(trained_run / 'checkpoints' / 'ckpt-2', damaged)
    model = damaged / 'model.pt'
    model.write_bytes(model.read_bytes()[:100])
    parse_config([str(trained_run / 'config.gin')], [])
    error = exception_of(lambda: load_policy(str(damaged), TrainerConfig(), 3, 1))
    assert isinstance(error, CheckpointError), error
    assert f'cannot read the checkpoint {damaged} (BadZipFile: ' in str(error), error

    path = checkpoint_path(str(trained_run), None)
    error = exception_of(lambda: load_policy(path, TrainerConfig(), 4, 1))
    assert isinstance(error, CheckpointError), error
    assert f'the checkpoint {path} does not fit the networks config.gin builds' in str(error)

    parse_config([str(trained_run / 'config.gin')], ['SacAlgorithm.target_update_tau=2.0'])
    error = exception_of(lambda: load_policy(path, TrainerConfig(), 3, 1))
    assert isinstance(error, ConfigError), error
    assert str(error) == (
        f'the config of {path} no longer builds its algorithm: SacAlgorithm: '
        'target_update_tau must be in (0, 1], got 2.0'
    )


def test_the_policy_loader_defines_no_flags_so_any_tool_can_import_it():
    # absl flags are global: a second tool's module defining --root_dir again
    # fails to import (benchmarks/icub_gait.py, or a notebook beside grid_search).
    script = (
        'from absl import flags\n'
        'import alf_lite.bin.grid_search\n'
        'before = set(flags.FLAGS)\n'
        'import alf_lite.bin.policy\n'
        'print(sorted(set(flags.FLAGS) - before))\n'
    )
    assert python_output(script).strip() == '[]'


@pytest.mark.parametrize(
    'env_name, observation_dim, action_dim', [('Pendulum-v1', 3, 1), ('Hopper-v5', 11, 3)]
)
def test_play_runs_the_policy_on_a_batch_of_the_evaluations_size(
    env_name, observation_dim, action_dim
):
    # A float32 product rounds by the size of its batch, and by the row: each episode of
    # an evaluation of 3 envs is repeated bit for bit only by a policy acting on 3 rows,
    # in the row of its env (on the iCub a policy on one row can play another episode
    # altogether). With Hopper's 11 observations the rows of a first layer of 2 or 3 rows
    # round differently from one another on this CPU; with Pendulum's 3 they do not.
    script = (
        'import torch\n'
        'import alf_lite.all_configurables\n'
        'from alf_lite.bin.play import play_episodes\n'
        'from alf_lite.config import parse_config\n'
        'from alf_lite.environments import create_environment\n'
        'from alf_lite.evaluation import evaluate\n'
        'from alf_lite.seeding import eval_env_seeds\n'
        'from alf_lite.trainer import TrainerConfig\n'
        'torch.set_num_threads(1)\n'
        f'parse_config([{str(PENDULUM)!r}], {TINY!r})\n'
        'torch.manual_seed(0)\n'
        'algorithm = TrainerConfig().algorithm_ctor(\n'
        f'    observation_dim={observation_dim}, action_dim={action_dim}\n'
        ')\n'
        'algorithm.train(False)\n'
        'seeds = eval_env_seeds(0, 3, 0)\n'
        f'with create_environment({env_name!r}, 3, use_subprocesses=False) as env:\n'
        '    evaluation = evaluate(env, algorithm.predict_step, seed=seeds)\n'
        f'with create_environment({env_name!r}, 1, seed=seeds[:1]) as env:\n'
        '    played = play_episodes(env, algorithm, 3, batch_size=3, seeds=seeds)\n'
        'for (ret, length), evaluated, evaluated_length in zip(\n'
        '    played, evaluation.returns, evaluation.lengths\n'
        '):\n'
        '    print(repr(float(ret)), length, repr(float(evaluated)), int(evaluated_length))\n'
    )
    lines = python_output(script).splitlines()[-3:]
    for line in lines:
        played_return, played_length, evaluated_return, evaluated_length = line.split()
        assert (played_return, played_length) == (evaluated_return, evaluated_length), lines
