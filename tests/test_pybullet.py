"""The PyBullet locomotion suite: gymnasium's checks, the classic layout and reward, physics."""

import warnings

import gymnasium
import numpy as np
import pybullet
import pytest
from gymnasium.utils.env_checker import check_env

from alf_lite.environments.suite_pybullet import BULLET_IDS, CONTROL_DT

# (observation, action) dims of pybullet_envs' classic tasks.
CLASSIC_DIMS = {
    'HumanoidBullet-v0': (44, 17),
    'AntBullet-v0': (28, 8),
    'HalfCheetahBullet-v0': (26, 6),
    'HopperBullet-v0': (15, 3),
    'Walker2DBullet-v0': (22, 6),
}


@pytest.fixture
def make():
    envs = []

    def _make(env_id, **kwargs):
        envs.append(gymnasium.make(env_id, **kwargs))
        return envs[-1]

    yield _make
    for env in envs:
        env.close()


def test_every_classic_task_is_registered():
    assert set(BULLET_IDS) == set(CLASSIC_DIMS)


@pytest.mark.parametrize('env_id', sorted(CLASSIC_DIMS))
def test_passes_check_env_with_classic_dims(make, env_id):
    env = make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        check_env(env.unwrapped)
    assert (env.observation_space.shape[0], env.action_space.shape[0]) == CLASSIC_DIMS[env_id]
    assert env.observation_space.dtype == np.float32
    assert env.spec.max_episode_steps == 1000


def test_humanoid_observation_layout_at_reset(make):
    env = make('HumanoidBullet-v0')
    obs, _ = env.reset(seed=0)
    # Torso height relative to 0.8 m; the torso starts at 1.4 m.
    assert obs[0] == pytest.approx(0.6, abs=0.05)
    # The target is straight ahead along +x: angle 0.
    assert obs[1] == pytest.approx(0.0, abs=0.05) and obs[2] == pytest.approx(1.0, abs=0.01)
    np.testing.assert_allclose(obs[3:8], 0.0, atol=1e-3)  # At rest, upright.
    joints = obs[8 : 8 + 34]
    # Positions scaled to [-1, 1] between the limits; the knees' range ends
    # at -2 degrees, so the reset's U[-0.1, 0.1] rad may lie a little beyond.
    assert np.all(np.abs(joints[0::2]) <= 1.1)
    np.testing.assert_array_equal(joints[1::2], 0.0)  # Zero speed after reset.
    np.testing.assert_array_equal(obs[42:], 0.0)  # Spawned above the ground.


@pytest.mark.parametrize('env_id', sorted(CLASSIC_DIMS))
def test_used_env_resets_to_the_first_observation_of_a_fresh_env(make, env_id):
    used = make(env_id)
    used.reset(seed=1)
    rng = np.random.default_rng(0)
    num_feet = len(used.unwrapped._feet)
    for _ in range(200):  # until a foot touches the ground
        obs, _, _, _, _ = used.step(rng.uniform(-1, 1, used.action_space.shape))
        if obs[-num_feet:].any():
            break
    assert obs[-num_feet:].any()
    # The foot contacts too: those of the reset pose, not of the last step.
    np.testing.assert_array_equal(used.reset(seed=5)[0], make(env_id).reset(seed=5)[0])


def test_humanoid_without_torques_falls_and_terminates(make):
    env = make('HumanoidBullet-v0')
    env.reset(seed=0)
    rewards, infos, feet_contact = [], [], []
    for _ in range(200):
        obs, reward, terminated, truncated, info = env.step(np.zeros(17))
        rewards.append(reward)
        infos.append(info)
        feet_contact.append(obs[-2:])
        if terminated:
            break
    assert terminated and not truncated
    assert 10 < len(rewards) < 200
    assert infos[0]['alive'] == 2.0 and infos[-1]['alive'] == -1.0
    assert np.any(feet_contact)  # It landed on its feet before it fell.
    # Zero action: no electricity or stall cost.
    assert all(i['electricity'] == 0.0 for i in infos)


def test_progress_is_the_body_speed_towards_the_target(make):
    env = make('HalfCheetahBullet-v0')
    env.reset(seed=0)
    u = env.unwrapped

    p, body = u._p, u._body

    def mean_xy():
        # Not the MJCF base: a planar robot's base stays at the world origin.
        links = [p.getLinkState(body, j)[0] for j in range(p.getNumJoints(body))]
        return np.mean(links, axis=0)[:2]

    rng = np.random.default_rng(0)
    for _ in range(30):
        assert p.getBasePositionAndOrientation(body)[0] == (0.0, 0.0, 0.0)
        before = mean_xy()
        _, reward, _, _, info = env.step(rng.uniform(-1, 1, 6))
        after = mean_xy()
        # The target is 1 km ahead along +x: progress is the x speed.
        assert info['progress'] == pytest.approx((after[0] - before[0]) / CONTROL_DT, abs=1e-3)
        assert reward == pytest.approx(
            info['alive'] + info['progress'] + info['electricity'] + info['joints_at_limit']
        )


def _move_forward(env, dx):
    """Move the whole robot ``dx`` metres along +x, towards the target."""
    p, body = env.unwrapped._p, env.unwrapped._body
    for j in range(p.getNumJoints(body)):
        info = p.getJointInfo(body, j)
        if info[2] == pybullet.JOINT_PRISMATIC and info[13] == (1.0, 0.0, 0.0):
            # A planar robot: its x is this slider's, its base stays at the origin.
            p.resetJointState(body, j, p.getJointState(body, j)[0] + dx)
            return
    pos, orientation = p.getBasePositionAndOrientation(body)
    p.resetBasePositionAndOrientation(body, (pos[0] + dx, pos[1], pos[2]), orientation)


@pytest.mark.parametrize('env_id', sorted(CLASSIC_DIMS))
def test_robot_moved_one_metre_forward_makes_one_metre_of_progress(make, env_id):
    env = make(env_id)
    env.reset(seed=0)
    _move_forward(env, 1.0)
    _, _, _, _, info = env.step(np.zeros(env.action_space.shape))
    # Plus the few millimetres the robot itself moves in the step.
    assert info['progress'] * CONTROL_DT == pytest.approx(1.0, abs=0.01)


def test_half_cheetah_never_terminates_and_is_truncated_at_1000(make):
    env = make('HalfCheetahBullet-v0')
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for t in range(1, 1001):  # noqa: B007  (t is read after the loop)
        _, _, terminated, truncated, _ = env.step(rng.uniform(-1, 1, 6))
        assert not terminated
        if truncated:
            break
    assert truncated and t == 1000


def test_a_state_that_blew_up_terminates_although_the_observation_is_clipped(make):
    env = make('HalfCheetahBullet-v0')  # never terminates otherwise
    env.reset(seed=0)
    u = env.unwrapped
    pose_and_velocity = u._torso_pose_and_velocity

    def infinite_velocity():
        pos, euler, _ = pose_and_velocity()
        return pos, euler, np.array([0.0, 0.0, np.inf])  # up: no other term uses it

    u._torso_pose_and_velocity = infinite_velocity
    obs, _, terminated, truncated, _ = env.step(np.zeros(6))
    assert terminated and not truncated
    assert np.isfinite(obs).all() and obs.max() == 5.0


def test_render_rgb_array_headless(make):
    env = make('HumanoidBullet-v0', render_mode='rgb_array')
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (240, 320, 3) and frame.dtype == np.uint8
    assert frame.std() > 10  # A scene, not a blank image.
