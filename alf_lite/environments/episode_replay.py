"""An env's running episode as a record to rebuild it from: how it was reset, and the actions since.

A simulator's state is often not serialisable (MuJoCo's warm start, PyBullet's
contact cache), but a deterministic env reset the same way and given the same
actions reaches the same state. ``ReplayableEnv`` records, for the running
episode, the seed of its reset (or the state of ``np_random`` before an
unseeded reset) and every action since; ``alf_lite_replay_episode`` rebuilds
the episode from that record in a new env, in a new process. A checkpoint holds
one record per training env (``BatchedEnvironment.episode_records``), so a
resumed run continues each episode where it stopped (``BatchedEnvironment.replay``).
The methods' names are prefixed as they are found through gymnasium's
``get_wrapper_attr``, which must not find an attribute of the env itself.

A record is plain values (ints, strings, bools) and one numpy array, which a
checkpoint turns into a tensor and loads with ``weights_only=True``.
"""

from typing import Any, Dict, Optional, Tuple

import gymnasium
import numpy as np

# Episodes longer than this are not recorded (the record would cost more
# memory than it is worth); a resume restarts such an env instead.
MAX_RECORDED_STEPS = 100_000


class ReplayableEnv(gymnasium.Wrapper):
    """Records the running episode of ``env``; ``alf_lite_replay_episode`` rebuilds it elsewhere.

    An unseeded reset is recorded only where ``np_random`` is a numpy
    ``Generator`` whose state is plain values (numpy's default PCG64, which
    gymnasium uses); other episodes are not recorded.

    Args:
        env: a gymnasium env whose randomness is its ``np_random`` and whose
            ``step`` is deterministic given its state and action.
    """

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        # The record ``alf_lite_replay_episode`` replays; set through the vector
        # env's ``set_attr``, which gives each env its own.
        self.alf_lite_replay_record: Optional[dict] = None
        self._record: Optional[dict] = None
        # The episode's actions: rows [0, _num_actions) of a buffer that doubles when full.
        self._actions = np.zeros((0,) + env.action_space.shape, env.action_space.dtype)
        self._num_actions = 0
        self._ended = False
        # Set by a replay of an episode whose last step was LAST: the next
        # ``step`` resets, as the vector env's next-step autoreset would have.
        self._reset_on_next_step = False

    def reset(self, *, seed=None, options=None):
        self._reset_on_next_step = False
        self._num_actions = 0
        self._ended = False
        if options is not None:
            self._record = None  # options need not be plain values
        elif seed is None:
            rng = _rng_state(self.env)
            self._record = None if rng is None else {'seed': None, 'rng': rng}
        else:
            self._record = {'seed': int(seed), 'rng': None}
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        if self._reset_on_next_step:
            observation, info = self.reset()
            return observation, 0.0, False, False, info
        # Recorded before the step: an env may change the array it is given (``action *= 2``),
        # and its replay must give it the action as it came.
        if self._record is not None:
            if self._num_actions < MAX_RECORDED_STEPS:
                self._append(action)
            else:
                self._record = None
        result = self.env.step(action)
        self._ended = bool(result[2] or result[3])
        return result

    def alf_lite_episode_record(self) -> Optional[dict]:
        """The running episode's record; None where it cannot be replayed (MAX_RECORDED_STEPS)."""
        if self._record is None:
            return None
        actions = self._actions[: self._num_actions].copy()
        return dict(self._record, actions=actions, ended=self._ended)

    def alf_lite_replay_episode(self) -> Tuple[Any, float, bool, bool]:
        """Rebuild the episode of ``alf_lite_replay_record``: reset as recorded, then step its
        actions.

        Returns:
            the observation, reward, terminated and truncated of the
            episode's last step (of its reset: reward 0, neither flag); or,
            when the env could not replay the record, what it raised, as a
            string (raising would end every env process of the batch).
        """
        record, self.alf_lite_replay_record = self.alf_lite_replay_record, None
        try:
            return self._replay(record)
        except Exception as e:  # noqa: BLE001  (reported, and the caller restarts the env)
            return f'{type(e).__name__}: {e}'

    def _replay(self, record: dict) -> Tuple[Any, float, bool, bool]:
        if record['seed'] is not None:
            observation, _ = self.reset(seed=record['seed'])
        else:
            _set_rng_state(self.env, record['rng'])
            observation, _ = self.reset()
        reward, terminated, truncated = 0.0, False, False
        # A copy: an env that changes its action in place would otherwise change the record,
        # which in process is the caller's (a checkpoint's).
        for action in np.array(record['actions']):
            observation, reward, terminated, truncated, _ = self.step(action)
        self._reset_on_next_step = bool(terminated or truncated)
        return observation, float(reward), bool(terminated), bool(truncated)

    def _append(self, action) -> None:
        action = np.asarray(action)
        if action.dtype != self._actions.dtype:  # keep each action exactly as given
            dtype = np.result_type(self._actions.dtype, action.dtype)
            if dtype != self._actions.dtype:
                self._actions = self._actions.astype(dtype)
        if self._num_actions == len(self._actions):
            shape = (max(64, 2 * len(self._actions)),) + self._actions.shape[1:]
            grown = np.zeros(shape, self._actions.dtype)
            grown[: self._num_actions] = self._actions[: self._num_actions]
            self._actions = grown
        self._actions[self._num_actions] = action
        self._num_actions += 1


def _rng_state(env: gymnasium.Env) -> Optional[Dict[str, Any]]:
    """The state of the env's ``np_random``; None where it is no plain values (e.g. a
    legacy ``RandomState``, or an MT19937 whose state holds an array)."""
    bit_generator = getattr(env.unwrapped.np_random, 'bit_generator', None)
    state = getattr(bit_generator, 'state', None)
    return state if _is_plain(state) else None


def _is_plain(value) -> bool:
    """Whether ``value`` is ints, strings and bools in dicts (what a checkpoint keeps as such)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain(v) for k, v in value.items())
    return isinstance(value, (int, str))


def _set_rng_state(env: gymnasium.Env, state: Dict[str, Any]) -> None:
    generator = env.unwrapped.np_random
    if generator.bit_generator.state['bit_generator'] != state['bit_generator']:
        # The env draws from another kind of generator than the one recorded.
        raise ValueError(
            f"the recorded generator is a {state['bit_generator']}, the env's a "
            f'{generator.bit_generator.state["bit_generator"]}'
        )
    generator.bit_generator.state = state
