r"""Play a trained policy: returns per episode, optionally a video.

    python -m alf_lite.bin.play --root_dir runs/p1 --num_episodes 3 --record_file p1.mp4

Rebuilds the env and the algorithm from ``root_dir/config.gin`` (for a
checkpoint up to the step of a resume that changed the experiment, from the
``config-until-<step>.gin`` it was trained with; plus ``--gin_param``
overrides) and loads the networks of the latest checkpoint (or
``--checkpoint_step``; a latest one that a run still training removes as play loads it,
the newer one): no optimizer state, no replay buffer. The networks
compute at the run's ``TrainerConfig.precision``, and episode k is reset with the
seed of episode k of an evaluation at the checkpoint's env step, for the run's
``TrainerConfig.random_seed`` (or ``--random_seed``): where the run evaluated at
that step (always at its end), the first ``num_eval_episodes`` episodes replay
that evaluation, and their mean return is the one it logged (the policy acts on
a batch of the evaluation's ``num_eval_environments`` rows, whose float32
products round as the evaluation's did); later ones start as further episodes
of that evaluation would. The
deterministic policy acts in one in-process env; each episode's return and
length are printed, then their means.

A video holds one frame per step plus the reset frame of each episode, the
episodes one after another: ``sum(length + 1)`` frames, played at the env's
``render_fps`` (real time) unless ``--fps`` says otherwise. ``.mp4`` is
written with imageio-ffmpeg, ``.gif`` with pillow; a GIF above 50 frames per
second (MuJoCo's 125, say) keeps every k-th frame, k = ceil(fps / 50), since
GIF players cannot show frames faster; its delays, whole centiseconds, add up to
real time. Pillow stores consecutive frames of a GIF that look the same once reduced
to its 256 colours (a body at rest) as one, shown for their delays together (at
most 655.35 s, the longest a GIF frame is shown): play prints how many frames the
file holds. H.264 in yuv420p needs
an even width and height: an odd ``--render_size`` is refused for an ``.mp4``,
and so are an ``--fps`` above 1001000, the most ffmpeg takes, and sizes x264 or
ffmpeg cannot encode (``video_size_problem``); a GIF is at most 65535 pixels wide
and high. Rendering is headless: MuJoCo
through EGL (``MUJOCO_GL=egl`` unless set), PyBullet through TinyRenderer; a
``MUJOCO_GL`` MuJoCo cannot load or render with is named, with the backends to try.
The video is written beside ``--record_file`` and moved there once every
episode was played: a play that fails or is stopped by SIGINT, SIGTERM, SIGHUP, SIGUSR1 or
SIGUSR2 (exit code 128 + the signal number) leaves a file already there as it was.
"""

import contextlib
import hashlib
import itertools
import math
import os
import sys
import tempfile
import zlib
from typing import Optional

# Imports the standard library only: the handlers below are installed at once.
from alf_lite.bin.cli import (
    EXIT_FAULT,
    exit_if_interrupted,
    exit_on_signals_before_main,
    fail,
    fail_on_stray_arguments,
    print_out,
    run_tool,
)

if __name__ == '__main__':
    # Before the imports below, until main handles the signals.
    exit_on_signals_before_main()

from absl import flags  # noqa: E402

from alf_lite.bin.policy import checkpoint_path, load_policy  # noqa: E402
from alf_lite.config import new_file_beside  # noqa: E402
from alf_lite.run_dir import (  # noqa: E402
    CONFIG_FILE,
    RunDir,
    checkpoint_env_steps,
    enclosing_run,
    latest_checkpoint,
)
from alf_lite.runs import MAX_SEED  # noqa: E402
from alf_lite.signals import Interrupted, RaisingSignals  # noqa: E402

# Frames per second of a video when neither --fps nor the env says.
DEFAULT_FPS = 30
# GIF frame delays are whole hundredths of a second, and browsers draw delays
# under 2 of them as 10: a faster GIF keeps every k-th frame to play at about
# the requested speed.
MAX_GIF_FPS = 50
# GIF stores a frame's delay in hundredths of a second, up to 65535.
MIN_FPS = 0.01
MAX_GIF_DELAY_MS = 655_350
# ffmpeg reads a frame rate of at most this many frames per second: it writes a higher
# one as this, and fails on one above 2**31 once the first frame is sent.
MAX_MP4_FPS = 1_001_000
# GIF stores a frame's width and height in 16 bits.
MAX_GIF_SIDE = 65535
# x264 encodes at most this many pixels a side, and ffmpeg takes a frame only while
# (width + 128) * (height + 128) is below 2**31 / 8 (its image size check): past either
# the .mp4 is written unreadable, or ffmpeg fails as the first frame is sent.
MAX_MP4_SIDE = 16384
MAX_MP4_PADDED_PIXELS = 2**28
# Scaling and encoding a frame took at most about 17 bytes a pixel (a .gif of 200M pixels
# and an .mp4 of 262M): a size that needs more than the memory available would have
# the kernel kill play without a word.
VIDEO_BYTES_PER_PIXEL = 20

flags.DEFINE_string(
    'root_dir', None, 'Directory of a train run: its config.gin and checkpoints are read.'
)
flags.DEFINE_integer(
    'checkpoint_step', None, 'Env steps of the checkpoint to load; default: the latest.'
)
flags.DEFINE_integer('num_episodes', 1, 'Episodes to play.')
flags.DEFINE_integer(
    'random_seed',
    None,
    "Starts each episode as the same episode of an evaluation at the checkpoint's env "
    "step starts, for this random_seed. Default: the run's own TrainerConfig.random_seed.",
)
flags.DEFINE_string(
    'record_file', None, 'Write a video of the episodes: a path ending in .mp4 or .gif.'
)
flags.DEFINE_string(
    'render_size',
    None,
    "Video frame size: 'W,H' or one number for a square; "
    'frames are scaled and centre-cropped to it (even numbers for an .mp4); needs '
    '--record_file. '
    "Default: the env's own size.",
)
flags.DEFINE_float(
    'fps',
    None,
    'Frames per second of the video (needs --record_file). '
    "Default: the env's metadata['render_fps'], "
    f'which plays it in real time, or {DEFAULT_FPS} when the env has none.',
)
flags.DEFINE_multi_string(
    'gin_param',
    [],
    'Gin binding applied after config.gin, e.g. '
    "'create_environment.max_episode_steps=100'; repeat for several.",
)
flags.DEFINE_bool(
    'trust_imports',
    False,
    "Let root_dir's config.gin import code from outside the installed packages (a module "
    "beside the run, say) and use gin's dynamic registration. Off: such a config.gin is "
    'refused, as one from someone else could run anything.',
)
flags.mark_flag_as_required('root_dir')
FLAGS = flags.FLAGS

VIDEO_FORMATS = ('.mp4', '.gif')


def parse_render_size(text: str):
    """``(width, height)`` from ``'W,H'`` or ``'N'``; raises ValueError otherwise."""
    parts = [p.strip() for p in text.split(',')]
    try:
        size = tuple(int(p) for p in parts)
    except ValueError:
        size = ()
    if len(size) == 1:
        size = size * 2
    if len(size) != 2 or min(size) <= 0:
        raise ValueError(f"--render_size must be 'W,H' or one positive number, got {text!r}")
    return size


def as_8_bit_colours(frame):
    """An RGB ``frame`` of another dtype than uint8 (an env's own ``render()``) as 8-bit
    colours, which the GIF, the resizing and the .mp4 writer take.

    Booleans are 0 or 255, integers within [0, 255] keep their values and floats within
    [0, 1] are scaled by 255, the same for every frame (NaN and infinities left out of the
    range); other values are stretched from the frame's own range to [0, 255] (as the .mp4
    writer would), so their brightness can change from frame to frame.
    """
    import numpy as np

    if frame.dtype == np.bool_:
        return frame.astype(np.uint8) * 255
    if frame.size == 0 or not np.issubdtype(frame.dtype, np.number):
        return frame.astype(np.uint8)
    if np.issubdtype(frame.dtype, np.floating):
        finite = np.isfinite(frame)
        if not finite.all():
            # NaN and infinities take no part in the range (a NaN pixel would make a frame
            # within [0, 1] stretched, an infinite one all black): NaN and -inf are shown
            # as the frame's lowest finite value, inf as its highest.
            low, high = (frame[finite].min(), frame[finite].max()) if finite.any() else (0, 0)
            frame = np.nan_to_num(frame, nan=low, posinf=high, neginf=low)
    low, high = frame.min(), frame.max()
    if np.issubdtype(frame.dtype, np.integer) and 0 <= low and high <= 255:
        return frame.astype(np.uint8)
    if np.issubdtype(frame.dtype, np.floating) and 0 <= low and high <= 1:
        return np.rint(frame * 255).astype(np.uint8)
    # Finite by now: NaN and infinities were replaced above.
    low, high = float(low), float(high)
    if high <= low:
        return np.zeros(frame.shape, np.uint8)
    return np.rint((frame.astype(np.float64) - low) / (high - low) * 255).astype(np.uint8)


class VideoNotMovedError(OSError):
    """The finished video could not be moved to its path (another user's file in a sticky
    directory such as /tmp, an immutable file): it is left at ``filename``."""


class VideoNotWrittenError(Exception):
    """The video could not be written (a full disk, an encoder that failed); its temporary
    file is removed and the file at its path left as it was."""


class VideoWriter:
    """Frames to ``path`` (.mp4 via imageio-ffmpeg, .gif via pillow), resized to ``size``.

    Written to a temporary file beside ``path``: ``close`` moves it to ``path``,
    ``discard`` removes it, so a play that fails or is interrupted leaves a file
    already at ``path`` as it was.
    """

    def __init__(self, path: str, fps: float, size=None):
        # The real extension last: imageio picks the format by it. Taken as the one the
        # path ends in: os.path.splitext finds none in a name that is all extension ('.mp4').
        extension = next(f for f in VIDEO_FORMATS if path.lower().endswith(f))
        self._tmp = new_file_beside(path, '.partial' + path[-len(extension) :])
        self._discarded = False
        try:
            self._open(path, fps, size)
        except BaseException:
            # A signal (or an error) before the caller holds this writer to discard it.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._tmp)
            raise

    def _open(self, path: str, fps: float, size) -> None:
        import imageio

        self._path = path
        self._size = size
        # Frames taken into the video, and those the file holds once closed: fewer
        # in a GIF where identical consecutive frames were merged.
        self.num_frames = 0
        self.frames_in_file = None
        # Whether a run of identical frames is shown for less than its time, at most a
        # GIF frame's longest delay.
        self.shortened = False
        # Every how many frames one is written (a fast GIF keeps every k-th).
        self._every, self._seen = 1, 0
        self._gif = None
        if path.lower().endswith('.gif'):
            self._every = math.ceil(fps / MAX_GIF_FPS)
            self._frame_seconds = self._every / fps
            # Opened now, so that a path that cannot be written fails before the
            # episodes; the frames are written at close, each with its own delay.
            # Until then each is kept reduced to the 256 colours of a GIF, as pillow
            # would reduce it, and compressed: a rendered frame, mostly background,
            # shrinks about tenfold, so a long recording fits in memory.
            self._gif, self._frames = open(self._tmp, 'wb'), []
        else:
            # macro_block_size=2: H.264 needs even sizes; an env's own odd size is
            # scaled to the next even one (an odd --render_size is refused).
            self._writer = imageio.get_writer(
                self._tmp, fps=fps, codec='libx264', quality=8, macro_block_size=2
            )

    def append(self, frame) -> None:
        import numpy as np
        from PIL import Image, ImageOps

        self._seen += 1
        if (self._seen - 1) % self._every:
            return
        frame = np.asarray(frame)[:, :, :3]
        if frame.dtype != np.uint8:
            frame = as_8_bit_colours(frame)
        if self._size is not None and frame.shape[1::-1] != self._size:
            frame = np.asarray(
                ImageOps.fit(Image.fromarray(frame), self._size, Image.Resampling.LANCZOS)
            )
        if self._gif is None:
            try:
                self._writer.append_data(frame)
            except OSError as e:
                # imageio's message holds ffmpeg's whole command line: its first line says it.
                reason = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
                raise VideoNotWrittenError(
                    f'the encoder (ffmpeg) took no more frames: {reason}'
                ) from e
        else:
            reduced = Image.fromarray(frame).convert('P', palette=Image.Palette.ADAPTIVE)
            # How it looks (its colours, whatever their palette order), for close to merge
            # runs of frames that look the same without decompressing them.
            looks = hashlib.blake2b(reduced.convert('RGB').tobytes(), digest_size=16).digest()
            self._frames.append(
                (reduced.size, reduced.getpalette(), zlib.compress(reduced.tobytes(), 1), looks)
            )
        self.num_frames += 1

    def close(self) -> None:
        """Finish the video and move it to ``path``.

        Raises:
            VideoNotWrittenError: the video could not be written, or does not read back
                with its frames; ``path`` is left as it was.
            VideoNotMovedError: the finished video could not be moved to ``path``;
                it is left where it was written.
        """
        try:
            try:
                self._finish()
                self.frames_in_file = self._count_frames_in_file()
            except OSError as e:
                raise VideoNotWrittenError(e.strerror or str(e)) from e
        except BaseException:
            self.discard()
            raise
        try:
            os.replace(self._tmp, self._path)
        except OSError as e:
            raise VideoNotMovedError(e.errno, e.strerror, self._tmp) from e

    @property
    def moved_in(self) -> bool:
        """Whether ``close`` moved the video to ``path``: its temporary file is gone, and not
        by ``discard``."""
        return not self._discarded and not os.path.lexists(self._tmp)

    def discard(self) -> None:
        """Stop writing and remove the temporary file: ``path`` is left as it was."""
        self._discarded = True
        try:
            with contextlib.suppress(Exception):
                if self._gif is None:
                    self._writer.close()
                else:
                    self._gif.close()
        finally:
            # Also when a second signal interrupts the encoder's close.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._tmp)

    def _count_frames_in_file(self) -> int:
        if not self.num_frames:
            return self.num_frames
        if self._gif is None:
            return self._count_mp4_frames()
        from PIL import Image

        # Read back: pillow stores identical consecutive frames (after their
        # reduction to 256 colours) as one, with their delays summed, and has no
        # setting to keep them apart. n_frames skips through the frames undecoded.
        # Without Pillow's guard against decompression bombs in others' files: this one
        # is of --render_size, and a frame above 179M pixels would fail it.
        limit, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
        try:
            with Image.open(self._tmp) as image:
                return image.n_frames
        finally:
            Image.MAX_IMAGE_PIXELS = limit

    def _count_mp4_frames(self) -> int:
        """The frames of the closed .mp4, read back: the writer does not check how ffmpeg
        ended, and a full disk leaves a file without its index that no player opens."""
        import imageio_ffmpeg

        try:
            frames, _ = imageio_ffmpeg.count_frames_and_secs(self._tmp)
        except RuntimeError as e:
            lines = [line.strip() for line in str(e).splitlines() if line.strip()]
            raise VideoNotWrittenError(
                f'the encoded video does not read back (ffmpeg: {lines[-1] if lines else e})'
            ) from None
        if frames != self.num_frames:
            raise VideoNotWrittenError(
                f'the encoded video holds {frames} of its {self.num_frames} frames'
            )
        return frames

    def _finish(self) -> None:
        if self._gif is None:
            self._writer.close()
            return
        # A GIF delay is a whole number of centiseconds: frame j is shown from
        # j * frame_seconds on, rounded to the centisecond, so that the delays
        # add up to real time (a fixed 24 ms delay would be stored as 20 ms).
        starts = [round(100 * j * self._frame_seconds) for j in range(len(self._frames) + 1)]
        delays_ms = [10 * (end - start) for start, end in zip(starts, starts[1:])]
        # Pillow merges consecutive frames that look the same once reduced to 256 colours,
        # their delays summed past what a GIF frame holds, failing to write it: merged
        # here (the frames are kept reduced as pillow reduces them), within that delay.
        frames, merged_delays_ms = [], []
        for frame, delay_ms in zip(self._frames, delays_ms):
            if frames and frame[-1] == frames[-1][-1]:
                self.shortened |= merged_delays_ms[-1] + delay_ms > MAX_GIF_DELAY_MS
                merged_delays_ms[-1] = min(merged_delays_ms[-1] + delay_ms, MAX_GIF_DELAY_MS)
            else:
                frames.append(frame)
                merged_delays_ms.append(delay_ms)
        with self._gif:
            if frames:
                images = (self._image(frame) for frame in frames)
                # loop=0: repeat forever.
                next(images).save(
                    self._gif,
                    format='GIF',
                    save_all=True,
                    # Decompressed one at a time, as pillow writes them.
                    append_images=images,
                    duration=merged_delays_ms,
                    loop=0,
                )

    @staticmethod
    def _image(frame):
        """A kept frame, as the 256-colour image it was reduced to."""
        from PIL import Image

        size, palette, data, _ = frame
        image = Image.frombytes('P', size, zlib.decompress(data))
        image.putpalette(palette)
        return image


def video_size_problem(record_file: str, size) -> Optional[str]:
    """Why frames of ``size`` (width, height) cannot be recorded to ``record_file``, or None:
    found before playing, where the writer would fail, or write a wrong file, only once
    the episodes were played."""
    width, height = size
    cannot = f'--render_size {width},{height} cannot be written to'
    if record_file.lower().endswith('.mp4'):
        if width % 2 or height % 2:
            # The writer would scale the frames to the next even size instead.
            return (
                f'{cannot} an .mp4: H.264 in yuv420p needs an even width and height. Give '
                'even numbers, or a .gif.'
            )
        if max(size) > MAX_MP4_SIDE:
            return f'{cannot} an .mp4: H.264 (x264) encodes at most {MAX_MP4_SIDE} pixels a side.'
        if (width + 128) * (height + 128) >= MAX_MP4_PADDED_PIXELS:
            return (
                f'{cannot} an .mp4: ffmpeg takes a frame only while (width + 128) x '
                f'(height + 128) is below 2**28 ({MAX_MP4_PADDED_PIXELS}).'
            )
    elif max(size) > MAX_GIF_SIDE:
        return f'{cannot} a .gif: its width and height are at most {MAX_GIF_SIDE}.'
    # Imports torch: only once the sizes themselves are fine.
    from alf_lite.device import available_cpu_memory

    needed = width * height * VIDEO_BYTES_PER_PIXEL
    available = available_cpu_memory()[0]
    if needed > available:
        return (
            f'--render_size {width},{height}: scaling and encoding a frame of that size '
            f'takes about {needed / 2**30:.1f} GiB, more than the {available / 2**30:.1f} '
            'GiB of memory available. Give a smaller size.'
        )
    return None


# MuJoCo's OpenGL backends, which it reads from MUJOCO_GL as it is imported.
MUJOCO_GL_CHOICES = (
    "egl (headless; play's choice where MUJOCO_GL is unset), osmesa (headless, in "
    'software; needs the OSMesa library) or glfw (needs a display)'
)


def mujoco_import_problem(error: BaseException) -> Optional[str]:
    """Why building the env failed, where it is MuJoCo failing to load the OpenGL backend
    MUJOCO_GL names (``mujoco_gl_problem``), with play's backends to try; None otherwise."""
    from alf_lite.environments.suite_gym import mujoco_gl_problem

    problem = mujoco_gl_problem(error)
    return problem and f'{problem} Set MUJOCO_GL to one this machine has: {MUJOCO_GL_CHOICES}.'


def with_sentence_end(text: str) -> str:
    """``text`` ending a sentence, for another to follow it."""
    return text if text.rstrip().endswith(('.', '!', '?')) else f'{text.rstrip()}.'


def frames_written(video: VideoWriter, record_file: str) -> str:
    """The line saying how many frames the closed ``video`` holds."""
    frames = 'frame' if video.frames_in_file == 1 else 'frames'
    line = f'{video.frames_in_file} {frames} written to {record_file}'
    if video.frames_in_file < video.num_frames:
        line += (
            f': of the {video.num_frames} recorded, identical consecutive frames were '
            'merged into one, their durations summed'
        )
    if video.shortened:
        line += (
            f'; a run of them longer than {MAX_GIF_DELAY_MS / 1000:g} s, the longest a GIF '
            'shows a frame, is shown that long'
        )
    return line


def play_episodes(env, algorithm, num_episodes: int, video=None, batch_size: int = 1, seeds=None):
    """``[(return, length)]`` of ``num_episodes`` deterministic episodes, one after another.

    The policy acts on the observation repeated into a batch of ``batch_size`` rows (the
    trainer's ``num_eval_environments``), and episode i takes row ``i % batch_size``, the
    row of the env that plays it in an evaluation: a float32 product rounds by the size
    of its batch and by the row, and an env such as the iCub makes another episode of
    that rounding.

    ``seeds``: an iterable of at least ``num_episodes`` seeds, each episode's env reset
    with the next; None: the env is reset without a seed (its first reset takes the
    seed it was made with, later ones continue its generator).
    """
    import numpy as np

    from alf_lite.environments import EnvironmentCrashedError
    from alf_lite.evaluation import evaluate

    def record_frame(time_step):
        try:
            frame = env.render()[0]
        except EnvironmentCrashedError as e:
            if video.num_frames or 'mujoco' not in sys.modules:
                raise
            # The first frame: where MuJoCo cannot render at all, its error names
            # OpenGL, not the MUJOCO_GL (play's egl where it was unset) that picked it.
            raise EnvironmentCrashedError(
                f'{with_sentence_end(str(e))} MuJoCo rendered with '
                f'MUJOCO_GL={os.environ.get("MUJOCO_GL")}; set '
                f'it to a backend this machine has: {MUJOCO_GL_CHOICES}.'
            ) from e
        shape = np.shape(frame)
        if len(shape) != 3 or shape[2] < 3:
            # An env that renders nothing in this mode (None) or no colour image.
            what = 'None' if frame is None else f'a {type(frame).__name__} of shape {shape}'
            raise EnvironmentCrashedError(
                f"{env.which(0)} returned {what} from render() in render_mode 'rgb_array', "
                'not an image (an H x W x 3 array).'
            )
        video.append(frame)

    row = 0

    def policy(observation):
        return algorithm.predict_step(observation.repeat(batch_size, 1))[row : row + 1]

    results = []
    seeds = None if seeds is None else iter(seeds)
    for episode in range(num_episodes):
        row = episode % batch_size
        seed = None if seeds is None else [next(seeds)]
        played = evaluate(env, policy, record_frame if video is not None else None, seed)
        episode_return, length = float(played.returns[0]), int(played.lengths[0])
        results.append((episode_return, length))
        print_out(f'episode {episode + 1}: return {episode_return:.2f}, length {length}')
    returns, lengths = np.array(results).T
    print_out(
        f'mean over {num_episodes} episode(s): return {returns.mean():.2f}, '
        f'length {lengths.mean():.1f}'
    )
    return results


def another_env_warning(config_file: str, gin_params, checkpoint: str) -> Optional[str]:
    """What play says where ``gin_params`` change the env of ``config_file``, which
    ``checkpoint`` was trained on; None where they leave it as it was."""
    from alf_lite.run_dir import changed_bindings, read_config_text

    text = read_config_text(config_file)
    changes = [
        change
        for change in changed_bindings(text, '\n'.join([text, *gin_params]))
        if 'create_environment.env_name' in change
    ]
    if not changes:
        return None
    return (
        f'--gin_param plays {checkpoint} on another env than it was trained on ({changes[0]}): '
        'its observations and actions are of the sizes the networks take, but need not mean '
        'what they meant in training.'
    )


def newer_latest(path: str):
    """``(path, env_steps)`` of the latest checkpoint beside ``path`` where ``path`` is gone and
    that one is newer; None otherwise."""
    if os.path.lexists(path):
        return None
    latest = latest_checkpoint(os.path.dirname(path))
    if latest is None or checkpoint_env_steps(latest) <= checkpoint_env_steps(path):
        return None
    return latest, checkpoint_env_steps(latest)


def main(argv):
    signals = RaisingSignals()
    try:
        with signals:
            play(argv, signals)
    except (Interrupted, Exception) as e:
        exit_if_interrupted(signals, e)
        raise


def play(argv, signals) -> None:
    """Play as the flags say; ``signals``: SIGINT and SIGTERM raise ``Interrupted``."""
    fail_on_stray_arguments(argv, FLAGS.gin_param, takes_gin_files=False)
    # Its ~ was expanded with the other path flags' (parse_flags).
    root_dir = os.path.abspath(FLAGS.root_dir)
    if not os.path.isdir(root_dir):
        fail(
            f'root_dir {root_dir} '
            + ('is not a directory.' if os.path.exists(root_dir) else 'does not exist.')
        )
    run_dir = RunDir(root_dir)
    config_file = run_dir.config_file
    if not os.path.isfile(config_file):
        outer = enclosing_run(root_dir)
        hint = ''
        if outer is not None and os.path.isfile(RunDir(outer).config_file):
            # A folder of the run given for the run (its eval/, say).
            hint = f' It lies inside the run {outer}: give --root_dir {outer}.'
        else:
            # A sweep's root given for one of its runs.
            try:
                runs = sorted(
                    entry.path
                    for entry in os.scandir(root_dir)
                    if entry.is_dir() and os.path.isfile(RunDir(entry.path).config_file)
                )
            except OSError:  # not readable: the line says what it can
                runs = []
            if runs:
                hint = (
                    f' It holds {len(runs)} run(s): give one as --root_dir, e.g. '
                    f'{", ".join(runs[:2])}.'
                )
            elif run_dir.latest_checkpoint_env_steps() is not None:
                # A run trained through the Python API.
                hint = (
                    ' It holds checkpoints: a run trained from Python has a config.gin only '
                    "where its Trainer's train() wrote one (before_writing, in README's Quick "
                    'start); write there the config the Trainer was built with '
                    '(gin.config_str()), and play plays it.'
                )
        fail(f'{root_dir} holds no {CONFIG_FILE}: it is not the root_dir of a train run.{hint}')
    if FLAGS.num_episodes <= 0 or (FLAGS.fps is not None and FLAGS.fps <= 0):
        fail('--num_episodes and --fps must be positive.')
    if FLAGS.random_seed is not None and not 0 <= FLAGS.random_seed < MAX_SEED:
        fail(f'--random_seed must be in [0, 2**32), got {FLAGS.random_seed}')
    if FLAGS.fps is not None and not MIN_FPS <= FLAGS.fps < math.inf:
        fail(f'--fps must be a finite number of at least {MIN_FPS}, got {FLAGS.fps}')
    record_file = FLAGS.record_file
    if record_file is not None and not record_file.lower().endswith(VIDEO_FORMATS):
        fail(f'--record_file must end in {" or ".join(VIDEO_FORMATS)}, got {record_file!r}')
    try:
        size = parse_render_size(FLAGS.render_size) if FLAGS.render_size else None
    except ValueError as e:
        fail(str(e))
    if record_file is None:
        given = [f'--{name}' for name in ('render_size', 'fps') if FLAGS[name].present]
        if given:
            verb = 'applies' if len(given) == 1 else 'apply'
            fail(f'{" and ".join(given)} {verb} only to a video: give --record_file too.')
    if size is not None and record_file is not None:
        problem = video_size_problem(record_file, size)
        if problem:
            fail(problem)
    if (
        FLAGS.fps is not None
        and record_file is not None
        and record_file.lower().endswith('.mp4')
        and FLAGS.fps > MAX_MP4_FPS
    ):
        fail(
            f'--fps {FLAGS.fps:g} cannot be written to an .mp4: ffmpeg takes at most '
            f'{MAX_MP4_FPS} frames per second. Give a lower --fps, or a .gif.'
        )
    if record_file is not None:
        # Before playing: a video that cannot be written would be found out only at the end.
        if os.path.isdir(record_file):
            fail(f'--record_file {record_file} is a directory.')
        # Its missing directories are made only once the policy is loaded (a play that
        # fails before leaves none); the nearest existing one must take a file.
        existing = os.path.dirname(os.path.abspath(record_file))
        while not os.path.lexists(existing):
            existing = os.path.dirname(existing)
        if not os.path.isdir(existing):
            fail(f'cannot write --record_file {record_file}: {existing} is not a directory.')
        # A file made and removed there: permissions alone do not tell (root may
        # write anywhere by them, yet not in /proc or on a read-only mount).
        try:
            with tempfile.TemporaryFile(dir=existing):
                pass
        except OSError as e:
            # The error of a file made there, e.g. /proc's "No such file or directory".
            fail(
                f'cannot write --record_file {record_file}: no file can be made in {existing} '
                f'({e.strerror}).'
            )
        name_max = os.pathconf(existing, 'PC_NAME_MAX')
        if len(os.fsencode(os.path.basename(record_file))) > name_max:
            fail(
                f'cannot write --record_file {record_file}: its name is longer than the '
                f'{name_max} bytes a file name may take.'
            )
    if record_file is not None:
        # Read when MuJoCo first renders; EGL renders without a display.
        os.environ.setdefault('MUJOCO_GL', 'egl')
        # pygame (classic control) renders to an off-screen surface: no window,
        # no sound device, and no greeting on stdout.
        for name, value in (
            ('SDL_VIDEODRIVER', 'dummy'),
            ('SDL_AUDIODRIVER', 'dummy'),
            ('PYGAME_HIDE_SUPPORT_PROMPT', '1'),
        ):
            os.environ.setdefault(name, value)
    from alf_lite.checkpoint import CheckpointError

    try:
        path = checkpoint_path(root_dir, FLAGS.checkpoint_step)
    except CheckpointError as e:
        fail(str(e))
    env_steps = checkpoint_env_steps(path)
    config_file = run_dir.config_file_of(env_steps)

    import torch

    import alf_lite.all_configurables  # noqa: F401  (registers every configurable)
    from alf_lite.config import ConfigError, UntrustedCodeError, parse_config
    from alf_lite.environments import EnvironmentCrashedError, RenderModeError, create_environment
    from alf_lite.model_memory import ModelTooLargeError
    from alf_lite.seeding import eval_env_seeds
    from alf_lite.trainer import TrainerConfig

    try:
        parse_config([config_file], FLAGS.gin_param, trust_imports=FLAGS.trust_imports)
        config = TrainerConfig()
        torch.set_num_threads(config.torch_num_threads)
        seed = config.random_seed if FLAGS.random_seed is None else FLAGS.random_seed
        env = create_environment(
            num_parallel_environments=1,
            use_subprocesses=False,
            seed=eval_env_seeds(seed, 1, env_steps),
            render_mode='rgb_array' if record_file else None,
        )
    except UntrustedCodeError as e:
        fail(str(e))
    except RenderModeError as e:
        # The render mode is play's own choice, for the video: no setting of the run is wrong.
        modes = ', '.join(map(repr, e.modes)) or 'none'
        fail(
            f"--record_file needs the env's 'rgb_array' frames, which '{e.env_name}' does not "
            f'render (its render modes: {modes}).'
        )
    except (ConfigError, ValueError, TypeError, EnvironmentCrashedError) as e:
        # MuJoCo's import fails on a MUJOCO_GL it cannot load: no fault of the config.
        problem = mujoco_import_problem(e)
        if problem is not None:
            fail(problem)
        if isinstance(e, EnvironmentCrashedError):
            fail(str(e), exit_code=EXIT_FAULT)
        given = ' with the given --gin_param' if FLAGS.gin_param else ''
        fail(f'{config_file}{given} no longer builds: {e}')
    with_config = f' and {config_file}' if config_file != run_dir.config_file else ''
    print_out(f'playing {path} with random_seed {seed}{with_config}')
    video = None
    not_written = f' {record_file} was not written.' if record_file is not None else ''
    try:
        while True:
            try:
                algorithm = load_policy(
                    path, config, env.observation_dim, env.action_dim, config_file=config_file
                )
                break
            except (CheckpointError, ConfigError, ModelTooLargeError) as e:
                newer = None if FLAGS.checkpoint_step is not None else newer_latest(path)
                if newer is None or run_dir.config_file_of(newer[1]) != config_file:
                    fail(str(e))
            # A run still training, which keeps max_checkpoints_to_keep, removed the latest
            # checkpoint as it wrote a newer one: that one is played.
            print_out(f'{path} was removed as the run wrote a newer one: playing {newer[0]}')
            path, env_steps = newer
        if FLAGS.gin_param:
            another_env = another_env_warning(config_file, FLAGS.gin_param, path)
            if another_env is not None:
                from absl import logging

                logging.warning('%s', another_env)
        torch.manual_seed(seed)
        if record_file is not None:
            fps = FLAGS.fps or env.render_fps or DEFAULT_FPS
            try:
                os.makedirs(os.path.dirname(os.path.abspath(record_file)), exist_ok=True)
            except OSError as e:
                fail(f'cannot write --record_file {record_file}: {e}')
            video = VideoWriter(record_file, fps, size)
        # Episode i starts as episode i of an evaluation at the checkpoint's step does.
        seeds = (eval_env_seeds(seed, 1, env_steps, first=i)[0] for i in itertools.count())
        play_episodes(
            env, algorithm, FLAGS.num_episodes, video, config.num_eval_environments, seeds
        )
        signals.raise_if_received()
        if video is not None:
            try:
                video.close()
            except VideoNotMovedError as e:
                # The episodes are played: their video is kept, not discarded.
                video = None
                fail(
                    f'cannot replace {record_file} with the new video: {e.strerror}. It was '
                    f'written to {e.filename} instead.',
                    exit_code=EXIT_FAULT,
                )
            print_out(frames_written(video, record_file))
            video = None
    except (Interrupted, Exception) as e:
        if video is not None and video.moved_in:
            # The signal came once the video was in place: the earlier file is replaced.
            not_written = f' {record_file} was written.'
        # Also an error that the code a signal interrupted raised in its place.
        exit_if_interrupted(signals, e, lambda interrupted: f'{interrupted}.{not_written}')
        if isinstance(e, EnvironmentCrashedError):
            message = with_sentence_end(str(e)) if not_written else str(e)
            fail(f'{message}{not_written}', exit_code=EXIT_FAULT)
        if isinstance(e, VideoNotWrittenError):
            # From a frame the encoder did not take, or the close: the temporary file is gone.
            fail(f'cannot write {record_file}: {e}.{not_written}', exit_code=EXIT_FAULT)
        raise
    finally:
        try:
            env.close()
        finally:
            # Also when a second signal interrupts the env's close.
            if video is not None:
                video.discard()


if __name__ == '__main__':
    run_tool(main)
