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

from typing import Any, Dict, List, Optional, Tuple

import gymnasium
import numpy as np

# Episodes longer than this are not recorded (the record would cost more
# memory than it is worth); a resume restarts such an env instead.
MAX_RECORDED_STEPS = 100_000


class ReplayableEnv(gymnasium.Wrapper):
    """Records the running episode of ``env``; ``alf_lite_replay_episode`` rebuilds it elsewhere.

    Args:
        env: a gymnasium env whose randomness is its ``np_random`` and whose
            ``step`` is deterministic given its state and action.
        index: the env's index in its batch: ``alf_lite_replay_episode`` picks
            its own record from a list of all of them.
    """

    def __init__(self, env: gymnasium.Env, index: int):
        super().__init__(env)
        self._index = index
        self._record: Optional[dict] = None
        self._actions: List[np.ndarray] = []
        self._ended = False
        # Set by a replay of an episode whose last step was LAST: the next
        # ``step`` resets, as the vector env's next-step autoreset would have.
        self._reset_on_next_step = False

    def reset(self, *, seed=None, options=None):
        self._reset_on_next_step = False
        self._actions = []
        self._ended = False
        if options is not None:
            self._record = None  # options need not be plain values
        elif seed is None:
            self._record = {'seed': None, 'rng': _rng_state(self.env)}
        else:
            self._record = {'seed': int(seed), 'rng': None}
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        if self._reset_on_next_step:
            observation, info = self.reset()
            return observation, 0.0, False, False, info
        result = self.env.step(action)
        if self._record is not None:
            if len(self._actions) < MAX_RECORDED_STEPS:
                self._actions.append(np.array(action, copy=True))
            else:
                self._record, self._actions = None, []
        self._ended = bool(result[2] or result[3])
        return result

    def alf_lite_episode_record(self) -> Optional[dict]:
        """The running episode's record; None where it cannot be replayed (MAX_RECORDED_STEPS)."""
        if self._record is None:
            return None
        return dict(self._record, actions=self._stacked_actions(), ended=self._ended)

    def alf_lite_replay_episode(self, records: List[dict]) -> Tuple[Any, float, bool, bool]:
        """Rebuild the episode of ``records[index]``: reset as recorded, then step its actions.

        Returns:
            the observation, reward, terminated and truncated of the
            episode's last step (of its reset: reward 0, neither flag); or,
            when the env could not replay the record, what it raised, as a
            string (raising would end every env process of the batch).
        """
        try:
            return self._replay(records[self._index])
        except Exception as e:  # noqa: BLE001  (reported, and the caller restarts the env)
            return f'{type(e).__name__}: {e}'

    def _replay(self, record: dict) -> Tuple[Any, float, bool, bool]:
        if record['seed'] is not None:
            observation, _ = self.reset(seed=record['seed'])
        else:
            _set_rng_state(self.env, record['rng'])
            observation, _ = self.reset()
        reward, terminated, truncated = 0.0, False, False
        for action in record['actions']:
            observation, reward, terminated, truncated, _ = self.step(action)
        self._reset_on_next_step = bool(terminated or truncated)
        return observation, float(reward), bool(terminated), bool(truncated)

    def _stacked_actions(self) -> np.ndarray:
        if self._actions:
            return np.stack(self._actions)
        return np.zeros((0,) + self.action_space.shape, dtype=self.action_space.dtype)


def _rng_state(env: gymnasium.Env) -> Dict[str, Any]:
    return env.unwrapped.np_random.bit_generator.state


def _set_rng_state(env: gymnasium.Env, state: Dict[str, Any]) -> None:
    generator = env.unwrapped.np_random
    if generator.bit_generator.state['bit_generator'] != state['bit_generator']:
        # The env draws from another kind of generator than the one recorded.
        raise ValueError(
            f"the recorded generator is a {state['bit_generator']}, the env's a "
            f'{generator.bit_generator.state["bit_generator"]}'
        )
    generator.bit_generator.state = state
