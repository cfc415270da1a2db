"""The PyBullet locomotion suite: gymnasium's checks, the classic layout and reward, physics."""

import re
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


@pytest.mark.parametrize(
    'blown_up',
    [(None, [0.0, 0.0, np.inf]), (None, [0.0, 0.0, np.nan]), ([0.0, 0.0, np.nan], None)],
    ids=['infinite_velocity', 'nan_velocity', 'nan_position'],
)
def test_a_state_that_blew_up_terminates_with_a_finite_observation_and_reward(make, blown_up):
    env = make('HalfCheetahBullet-v0')  # never terminates otherwise
    env.reset(seed=0)
    u = env.unwrapped
    pose_and_velocity = u._torso_pose_and_velocity
    position, velocity = blown_up

    def blown_up_pose_and_velocity():
        pos, euler, vel = pose_and_velocity()
        return (
            pos if position is None else np.array(position),
            euler,
            vel if velocity is None else np.array(velocity),
        )

    u._torso_pose_and_velocity = blown_up_pose_and_velocity
    obs, reward, terminated, truncated, _ = env.step(np.zeros(6))
    assert terminated and not truncated
    assert np.isfinite(obs).all() and np.abs(obs).max() <= 5.0
    assert reward == 0.0


def test_the_episode_after_a_simulation_that_blew_up_is_that_of_a_new_env(make):
    # NaN torques blow the simulation up for real. What blew up stays in PyBullet past
    # restoreState: without a new simulation, the ant would fall through the ground.
    used, new = make('AntBullet-v0'), make('AntBullet-v0')
    used.reset(seed=1)
    _, reward, terminated, _, _ = used.step(np.full(8, np.nan))
    assert terminated and reward == 0.0
    np.testing.assert_array_equal(used.reset(seed=5)[0], new.reset(seed=5)[0])
    rng = np.random.default_rng(0)
    for _ in range(30):
        action = rng.uniform(-1, 1, 8)
        (obs, reward, terminated, _, _), expected = used.step(action), new.step(action)
        np.testing.assert_array_equal(obs, expected[0])
        assert (reward, terminated) == expected[1:3]


def test_an_action_beyond_one_acts_and_costs_as_the_clipped_action(make):
    env = make('HopperBullet-v0')
    action = np.array([3.0, -2.0, 0.5])
    env.reset(seed=0)
    clipped = env.step(np.clip(action, -1.0, 1.0))
    env.reset(seed=0)
    beyond = env.step(action)
    np.testing.assert_array_equal(beyond[0], clipped[0])
    assert beyond[1:] == clipped[1:]
    assert clipped[4]['electricity'] < 0


@pytest.mark.parametrize('action', [0.5, np.zeros(1), np.zeros(4)], ids=['scalar', 'one', 'four'])
def test_an_action_not_of_the_spaces_shape_is_refused_naming_both(make, action):
    # numpy would broadcast a scalar or a single value to every joint.
    env = make('HopperBullet-v0')
    env.reset(seed=0)
    shape = np.shape(action)
    with pytest.raises(ValueError, match=re.escape(f'of shape {shape}, the action space of (3,)')):
        env.step(action)


def test_render_rgb_array_headless(make):
    env = make('HumanoidBullet-v0', render_mode='rgb_array')
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (240, 320, 3) and frame.dtype == np.uint8
    assert frame.std() > 10  # A scene, not a blank image.
    # Frames at render_fps play in real time: 4 substeps of 0.0165 / 4 s per env step
    # are 60.6 env steps per simulated second (rounded to 61 they played 0.6% fast).
    assert env.metadata['render_fps'] * CONTROL_DT == pytest.approx(1, rel=1e-12)


@pytest.mark.parametrize('env_id', sorted(CLASSIC_DIMS))
def test_the_robot_is_drawn_in_its_mjcf_colours_against_the_floor(make, env_id):
    # PyBullet's MJCF loader leaves every link white: a robot as pale as the floor.
    env = make(env_id, render_mode='rgb_array')
    env.reset(seed=0)
    frame = env.render().astype(int)
    # The floor is blue and white, the sky white: the brown robot alone is redder than blue.
    brown = np.count_nonzero(frame[:, :, 0] - frame[:, :, 2] > 50)
    assert brown > 150, brown


def test_a_link_takes_the_colour_its_mjcf_body_gives_else_the_files_default(make):
    env = make('Walker2DBullet-v0', render_mode='rgb_array').unwrapped
    client, body = env._p, env._body
    link_index = {
        client.getJointInfo(body, j)[12].decode(): j for j in range(client.getNumJoints(body))
    }
    colors = {data[1]: data[7] for data in client.getVisualShapeData(body)}
    # walker2d.xml: '.7 .3 .6 1' on the left leg's geoms, '0.8 0.6 .4 1' by default.
    assert colors[link_index['thigh_left']] == pytest.approx((0.7, 0.3, 0.6, 1.0))
    assert colors[link_index['foot_left']] == pytest.approx((0.7, 0.3, 0.6, 1.0))
    assert colors[link_index['thigh']] == pytest.approx((0.8, 0.6, 0.4, 1.0))


@pytest.mark.parametrize('render_mode', ['rgb_array', None])
def test_a_closed_env_closes_again_and_refuses_the_rest_clearly(make, render_mode):
    env = make('HopperBullet-v0', render_mode=render_mode)
    env.reset(seed=0)
    env.close()
    env.close()
    closed = 'this HopperBullet-v0 env was closed: make a new one to use it.'
    uses = [lambda: env.reset(seed=0), lambda: env.step(env.action_space.sample())]
    if render_mode is None:
        assert env.render() is None
    else:
        uses.append(env.render)
    for use in uses:
        with pytest.raises(RuntimeError, match=closed):
            use()


def _actuated_joints(env):
    """Index, lower and upper limit of each actuated joint: revolute and not MJCF's 'ignore*'."""
    p, body = env.unwrapped._p, env.unwrapped._body
    joints = []
    for j in range(p.getNumJoints(body)):
        info = p.getJointInfo(body, j)
        if info[2] == pybullet.JOINT_REVOLUTE and not info[1].startswith(b'ignore'):
            joints.append((j, info[8], info[9]))
    return joints


@pytest.mark.parametrize(
    'env_id, cost_scale', [('HumanoidBullet-v0', 4.25), ('HalfCheetahBullet-v0', 1.0)]
)
def test_joint_observations_and_reward_terms_by_hand_from_pybullet(make, env_id, cost_scale):
    # Electricity: cost_scale x (-2 mean |a x 0.1 joint speed| - 0.1 mean a^2);
    # joints at limit: -0.1 per joint beyond 99% of its half range from the middle.
    env = make(env_id)
    p, body = env.unwrapped._p, env.unwrapped._body
    joints = _actuated_joints(env)
    n = len(joints)
    lower, upper = np.array([j[1] for j in joints]), np.array([j[2] for j in joints])
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    relatives = []
    for _ in range(60):
        a = rng.uniform(-1, 1, n)
        obs, reward, terminated, _, info = env.step(a)
        states = p.getJointStates(body, [j[0] for j in joints])
        q, speed = np.array([s[0] for s in states]), np.array([s[1] for s in states])
        relative = (q - 0.5 * (lower + upper)) / (0.5 * (upper - lower))
        relatives.append(relative)
        np.testing.assert_allclose(obs[8 : 8 + 2 * n : 2], np.clip(relative, -5, 5), atol=1e-5)
        np.testing.assert_allclose(obs[9 : 8 + 2 * n : 2], np.clip(0.1 * speed, -5, 5), atol=1e-5)
        electricity = cost_scale * (
            -2.0 * np.mean(np.abs(a * 0.1 * speed)) - 0.1 * np.mean(np.square(a))
        )
        assert info['electricity'] == pytest.approx(electricity, rel=1e-6)
        assert info['joints_at_limit'] == pytest.approx(-0.1 * np.sum(np.abs(relative) > 0.99))
        if terminated:
            env.reset(seed=1)
    relatives = np.abs(np.array(relatives))
    # Joints were at their limits, and close to them without being at them.
    assert (relatives > 0.99).any() and ((relatives > 0.9) & (relatives <= 0.99)).any()


def test_humanoid_is_alive_while_its_torso_is_above_0_78_m(make):
    env = make('HumanoidBullet-v0')
    p, body = env.unwrapped._p, env.unwrapped._body
    env.reset(seed=0)
    heights = []
    for _ in range(200):
        _, _, terminated, _, info = env.step(np.zeros(17))
        z = p.getBasePositionAndOrientation(body)[0][2]  # the humanoid's torso is its base
        heights.append(z)
        assert info['alive'] == (2.0 if z > 0.78 else -1.0), z
        assert terminated == (z <= 0.78)
        if terminated:
            break
    assert terminated and 0.7 < heights[-1] <= 0.78


def test_torso_velocity_and_target_angle_are_in_the_torsos_yaw_frame(make):
    env = make('AntBullet-v0')
    p, body = env.unwrapped._p, env.unwrapped._body
    env.reset(seed=0)
    position, _ = p.getBasePositionAndOrientation(body)
    # Turned 0.5 rad left of the target (1 km along +x), moving along +x.
    p.resetBasePositionAndOrientation(body, position, p.getQuaternionFromEuler([0, 0, 0.5]))
    p.resetBaseVelocity(body, [1.0, 0.0, 0.0], [0.0, 0.0, 0.0])
    obs, *_ = env.step(np.zeros(8))
    _, orientation = p.getBasePositionAndOrientation(body)
    velocity, _ = p.getBaseVelocity(body)
    yaw = p.getEulerFromQuaternion(orientation)[2]
    assert yaw == pytest.approx(0.5, abs=0.01)
    np.testing.assert_allclose(obs[1:3], [np.sin(-yaw), np.cos(-yaw)], atol=1e-3)
    forward = np.cos(yaw) * velocity[0] + np.sin(yaw) * velocity[1]
    sideways = -np.sin(yaw) * velocity[0] + np.cos(yaw) * velocity[1]
    np.testing.assert_allclose(
        obs[3:6], 0.3 * np.array([forward, sideways, velocity[2]]), atol=1e-5
    )
    assert obs[3] == pytest.approx(0.3 * np.cos(0.5), abs=0.01)
    assert obs[4] == pytest.approx(-0.3 * np.sin(0.5), abs=0.01)


@pytest.mark.parametrize('env_id', ['HumanoidBullet-v0', 'HopperBullet-v0'])
def test_reset_draws_each_joint_position_from_minus_to_plus_0_1_rad(make, env_id):
    env = make(env_id)
    p, body = env.unwrapped._p, env.unwrapped._body
    indices = [j[0] for j in _actuated_joints(env)]
    positions = []
    for seed in range(20):
        env.reset(seed=seed)
        states = p.getJointStates(body, indices)
        positions.append([s[0] for s in states])
        assert all(s[1] == 0.0 for s in states)  # at rest
    positions = np.array(positions)
    assert np.all(np.abs(positions) <= 0.1)
    assert positions.min() < -0.08 and positions.max() > 0.08
    assert abs(positions.mean()) < 0.02


def _set_joint(env, name, value):
    p, body = env.unwrapped._p, env.unwrapped._body
    for j in range(p.getNumJoints(body)):
        if p.getJointInfo(body, j)[1] == name.encode():
            p.resetJointState(body, j, value)
            return
    raise AssertionError(f'no joint {name}')


# 0.05 rad either side of the 1 rad limit (the measured pitch is checked to 0.02).
@pytest.mark.parametrize('pitch, alive', [(0.95, 1.0), (1.05, -1.0), (-1.05, -1.0)])
def test_hopper_tilted_more_than_1_rad_falls_however_high_it_is(make, pitch, alive):
    env = make('HopperBullet-v0')
    p, body = env.unwrapped._p, env.unwrapped._body
    torso = [j for j in range(p.getNumJoints(body)) if p.getJointInfo(body, j)[12] == b'torso']
    env.reset(seed=0)
    # The planar root: ignore2 slides along z, ignore3 turns about y (the pitch).
    _set_joint(env, 'ignore3', pitch)
    _set_joint(env, 'ignore2', 0.0)
    z = p.getLinkState(body, torso[0])[0][2]
    _set_joint(env, 'ignore2', 1.5 - z)  # the torso 1.5 m up, well above 0.8 m
    _, _, terminated, _, info = env.step(np.zeros(3))
    state = p.getLinkState(body, torso[0])
    assert state[0][2] > 1.4
    assert abs(p.getEulerFromQuaternion(state[1])[1]) == pytest.approx(abs(pitch), abs=0.02)
    assert info['alive'] == alive
    assert terminated == (alive < 0)


def test_half_cheetah_with_a_thigh_or_shin_on_the_ground_has_fallen(make):
    # Its alive bonus is -1 once a thigh or shin touches the ground (a walk
    # on the knees) or the torso pitches beyond 1 rad; it never terminates.
    env = make('HalfCheetahBullet-v0')
    p, body, ground = env.unwrapped._p, env.unwrapped._body, env.unwrapped._ground
    links = {p.getJointInfo(body, j)[12].decode(): j for j in range(p.getNumJoints(body))}
    legs = [links[name] for name in ('fthigh', 'fshin', 'bthigh', 'bshin')]
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    seen = set()
    for _ in range(300):
        _, _, terminated, _, info = env.step(rng.uniform(-1, 1, 6))
        on_knees = any(p.getContactPoints(body, ground, linkIndexA=link) for link in legs)
        pitch = p.getEulerFromQuaternion(p.getLinkState(body, links['torso'])[1])[1]
        upright = abs(pitch) < 1.0
        assert info['alive'] == (1.0 if upright and not on_knees else -1.0)
        assert not terminated
        seen.add((upright, on_knees))
    # Upright on its feet, and upright on its knees, both happened.
    assert {(True, False), (True, True)} <= seen


@pytest.mark.parametrize(
    'env_id, newton_metres',
    [
        # pybullet_envs' power x joint power (100 unless named).
        ('HopperBullet-v0', [0.75 * 100] * 3),
        ('HalfCheetahBullet-v0', 0.9 * np.array([120, 90, 60, 140, 60, 30])),
    ],
)
def test_an_action_is_a_torque_of_the_robots_power_per_joint(make, env_id, newton_metres):
    env = make(env_id)
    p, body = env.unwrapped._p, env.unwrapped._body
    indices = [j[0] for j in _actuated_joints(env)]
    action = np.linspace(-1, 1, len(indices))
    # The same step by hand: the torques in N·m, then the 4 physics substeps.
    env.reset(seed=0)
    torques = np.multiply(newton_metres, action)
    p.setJointMotorControlArray(body, indices, pybullet.TORQUE_CONTROL, forces=torques)
    p.stepSimulation()
    by_hand = [s[:2] for s in p.getJointStates(body, indices)]
    env.reset(seed=0)
    env.step(action)
    stepped = [s[:2] for s in p.getJointStates(body, indices)]
    np.testing.assert_allclose(stepped, by_hand, rtol=0, atol=1e-9)
    assert np.abs(np.array(stepped)[:, 1]).max() > 0.1  # The joints did move.
