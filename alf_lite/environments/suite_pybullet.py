"""PyBullet locomotion tasks (Humanoid, Ant, HalfCheetah, Hopper, Walker2D) as gymnasium envs.

pybullet's bundled ``pybullet_envs`` imports the retired ``gym`` package and
``pkg_resources``, so it cannot be imported next to gymnasium. These envs are
the same tasks written here on the ``pybullet`` API: the robots of
``pybullet_data/mjcf`` (``humanoid_symmetric.xml``, ``ant.xml``,
``half_cheetah.xml``, ``hopper.xml``, ``walker2d.xml``), the classic
observation layout and reward, registered as ``HumanoidBullet-v0``,
``AntBullet-v0``, ``HalfCheetahBullet-v0``, ``HopperBullet-v0`` and
``Walker2DBullet-v0`` (1000-step time limit).

Observation (float32, clipped to [-5, 5]), the classic layout:
    0: torso height minus its initial height
    1, 2: sin and cos of the angle from the torso's heading to the walk target
        (1 km ahead along +x)
    3-5: 0.3 x the torso's velocity in its yaw frame
    6, 7: torso roll and pitch
    then for each actuated joint: position scaled to [-1, 1] between its
        limits, 0.1 x its velocity
    then one 0/1 contact flag per foot.
Action: one torque per actuated joint in [-1, 1], scaled by the robot's power.
Reward: progress towards the target (m/s) + alive bonus + electricity cost +
joint-at-limit cost, as in pybullet_envs. Termination when the alive bonus is
negative (the torso fell; HalfCheetah never terminates).

Differences from pybullet_envs, on purpose: the ground is ``plane.urdf``
(friction 0.8, restitution 0.5, as the stadium's); the body position averages
the robot's moving links only (pybullet_envs also averaged in the floor; the
planar robots' base, fixed at the world origin, is left out too); foot
contacts are read before the observation is built, so the observation shows
this step's contacts, not the previous step's.
"""

import contextlib
import ctypes
import dataclasses
import functools
import importlib
import os
import sys
from typing import Callable, Dict, Optional, Sequence, Tuple
from xml.etree import ElementTree

import gymnasium
import numpy as np
from gymnasium import spaces


class _ImportedOnUse:
    """The module ``name``, imported at the first use of one of its attributes.

    pybullet prints its build time on stderr as it loads: it loads only in a
    process that builds a PyBullet env, not in every one that registers them.
    """

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attribute: str):
        # Called only for an attribute not yet looked up: kept here, the next use of it
        # (the env step's constants) costs a plain attribute read.
        value = getattr(importlib.import_module(self._name), attribute)
        setattr(self, attribute, value)
        return value


pybullet = _ImportedOnUse('pybullet')
pybullet_data = _ImportedOnUse('pybullet_data')
bullet_client = _ImportedOnUse('pybullet_utils.bullet_client')

# Physics of pybullet_envs' stadium scene: 4 substeps of 0.0165 / 4 s per env step.
CONTROL_DT = 0.0165
PHYSICS_SUBSTEPS = 4
GRAVITY = 9.8
WALK_TARGET = (1e3, 0.0)  # 1 km ahead along +x.
ELECTRICITY_COST = -2.0  # times mean |action * 0.1 joint speed|
STALL_TORQUE_COST = -0.1  # times mean action^2
JOINTS_AT_LIMIT_COST = -0.1  # per joint within 1% of a limit
# Beyond this magnitude a value becomes inf as float32, the type of observations and rewards.
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def clipped_action(action, space) -> np.ndarray:
    """``action`` as float64 clipped to [-1, 1]; a ValueError naming both shapes for one that
    is not of the shape of the action space ``space`` (a scalar or a single value would be
    broadcast to every joint)."""
    a = np.asarray(action, dtype=np.float64)
    if a.shape != space.shape:
        raise ValueError(f'the action is of shape {a.shape}, the action space of {space.shape}')
    return np.clip(a, -1.0, 1.0)


def finite_as_float32(*values) -> bool:
    """Whether every value of ``values`` (arrays or numbers) is finite as float32: neither NaN
    nor infinite, nor beyond float32's range (a float64 of 1e39 is stored as inf).

    A simulation that blew up can give such values with no NaN or inf among them.
    """
    # A NaN fails the comparison (the max of an array holding one is NaN).
    return all(
        (np.abs(value).max() if isinstance(value, np.ndarray) else abs(value)) <= _FLOAT32_MAX
        for value in values
    )


def _flush_c_stdio() -> None:
    """Write out what C's stdio buffers hold (where stdout is not a terminal, it buffers)."""
    try:
        ctypes.CDLL(None).fflush(None)
    except (AttributeError, OSError):  # no C library to ask (not on Linux or macOS)
        pass


@contextlib.contextmanager
def _native_stdout_discarded():
    """Standard output (file descriptor 1) goes to the null device while entered, what
    native code writes there included: PyBullet's prints ``argv[0]=`` as a client connects,
    on the stdout that carries the tools' results (play's returns). A Python thread's
    print in that moment is lost with it."""
    if sys.stdout is not None:
        sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no standard output to keep clean
        yield
        return
    try:
        _flush_c_stdio()  # what was written before goes where it was written
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, 1)
        finally:
            os.close(null)
        try:
            yield
        finally:
            _flush_c_stdio()
            os.dup2(saved, 1)
    finally:
        os.close(saved)


def connect_direct() -> 'bullet_client.BulletClient':
    """A headless PyBullet client of its own (one per env, so envs never share a world)."""
    with _native_stdout_discarded():
        client = bullet_client.BulletClient(connection_mode=pybullet.DIRECT)
    client.setAdditionalSearchPath(pybullet_data.getDataPath())
    return client


class ClosedClient:
    """Stands for the PyBullet client of a closed env: a use of it raises a RuntimeError."""

    def __init__(self, env: gymnasium.Env):
        self._name = env.spec.id if env.spec is not None else type(env).__name__

    def __getattr__(self, attribute: str):
        if attribute.startswith('__'):  # copy and pickle look for optional methods
            raise AttributeError(attribute)
        raise RuntimeError(f'this {self._name} env was closed: make a new one to use it.')


def close_client(env: gymnasium.Env) -> None:
    """Disconnect ``env._p`` and put a ``ClosedClient`` in its place; again, do nothing."""
    if not isinstance(env._p, ClosedClient):
        env._p.disconnect()
        env._p = ClosedClient(env)


# The colour of a geom without its own, where an MJCF file sets none by default.
MJCF_GEOM_RGBA = (0.8, 0.6, 0.4, 1.0)


@functools.cache
def mjcf_body_colors(path: str) -> Tuple[Tuple[float, ...], Dict[str, Tuple[float, ...]]]:
    """The colours an MJCF file gives its bodies: ``(default, {body name: rgba})``.

    ``default`` is the ``rgba`` of its ``<default><geom>`` (else ``MJCF_GEOM_RGBA``); a body
    is named where one of its own geoms has an ``rgba``. PyBullet's MJCF loader leaves
    every link white, which TinyRenderer draws nearly as pale as the floor.
    """

    def rgba(geom) -> Optional[Tuple[float, ...]]:
        text = geom.get('rgba')
        return None if text is None else tuple(float(v) for v in text.split())

    root = ElementTree.parse(path).getroot()
    default = next(
        (c for g in root.iter('default') for c in map(rgba, g.findall('geom')) if c), None
    )
    colors = {}
    for body in root.iter('body'):
        color = next((c for c in map(rgba, body.findall('geom')) if c), None)
        if color is not None and body.get('name'):
            colors[body.get('name')] = color
    return default or MJCF_GEOM_RGBA, colors


def render_rgb(
    client: 'bullet_client.BulletClient',
    target: Sequence[float],
    width: int = 320,
    height: int = 240,
    distance: float = 3.0,
    yaw: float = 0.0,
    pitch: float = -20.0,
) -> np.ndarray:
    """An ``[height, width, 3]`` uint8 frame from TinyRenderer, which needs no display.

    Args:
        client: the env's PyBullet client.
        target: world xyz the camera looks at.
        width, height: frame size in pixels.
        distance: camera distance from ``target`` in metres.
        yaw, pitch: camera angles in degrees.
    """
    view = client.computeViewMatrixFromYawPitchRoll(
        cameraTargetPosition=list(target),
        distance=distance,
        yaw=yaw,
        pitch=pitch,
        roll=0,
        upAxisIndex=2,
    )
    projection = client.computeProjectionMatrixFOV(
        fov=60, aspect=width / height, nearVal=0.1, farVal=100.0
    )
    _, _, rgba, _, _ = client.getCameraImage(
        width,
        height,
        viewMatrix=view,
        projectionMatrix=projection,
        renderer=pybullet.ER_TINY_RENDERER,
    )
    return np.asarray(rgba, dtype=np.uint8).reshape(height, width, 4)[:, :, :3].copy()


@dataclasses.dataclass(frozen=True)
class Robot:
    """What differs between the locomotion tasks.

    Args:
        xml: file in ``pybullet_data/mjcf``.
        torso: link whose pose is the body's pose ('' for the MJCF base).
        feet: links whose ground contact is observed.
        power: torque of action 1 is ``power * joint_power[joint]`` N·m.
        joint_power: per joint; joints not named get 100.
        alive_bonus: ``f(torso_z, pitch, feet_contact) -> float``; < 0 is a fall.
        terminates: end the episode when ``alive_bonus`` is negative.
        initial_z: torso height the first observation is relative to; None
            means the height right after reset.
        cost_scale: scales the electricity and stall costs.
    """

    xml: str
    torso: str
    feet: Tuple[str, ...]
    power: float
    alive_bonus: Callable[[float, float, np.ndarray], float]
    joint_power: Dict[str, float] = dataclasses.field(default_factory=dict)
    terminates: bool = True
    initial_z: Optional[float] = None
    cost_scale: float = 1.0


def _upright(z, pitch, _):
    return 1.0 if z > 0.8 and abs(pitch) < 1.0 else -1.0


def _cheetah_alive(_, pitch, feet_contact):
    # Thighs and shins on the ground (a walk on the knees) count as a fall.
    return 1.0 if abs(pitch) < 1.0 and not feet_contact[[1, 2, 4, 5]].any() else -1.0


ROBOTS = {
    'humanoid': Robot(
        xml='humanoid_symmetric.xml',
        torso='',
        feet=('right_foot', 'left_foot'),
        power=0.41,
        joint_power={
            'abdomen_z': 100,
            'abdomen_y': 100,
            'abdomen_x': 100,
            'right_hip_x': 100,
            'right_hip_z': 100,
            'right_hip_y': 300,
            'right_knee': 200,
            'left_hip_x': 100,
            'left_hip_z': 100,
            'left_hip_y': 300,
            'left_knee': 200,
            'right_shoulder1': 75,
            'right_shoulder2': 75,
            'right_elbow': 75,
            'left_shoulder1': 75,
            'left_shoulder2': 75,
            'left_elbow': 75,
        },
        # +2: 17 joints pay much electricity for policy noise alone; being
        # alive must still be worth more than falling.
        alive_bonus=lambda z, pitch, _: 2.0 if z > 0.78 else -1.0,
        initial_z=0.8,
        cost_scale=4.25,
    ),
    'ant': Robot(
        xml='ant.xml',
        torso='',
        power=2.5,
        feet=('front_left_foot', 'front_right_foot', 'left_back_foot', 'right_back_foot'),
        # 0.25 m is the torso sphere's radius: below it the torso scrapes the ground.
        alive_bonus=lambda z, pitch, _: 1.0 if z > 0.26 else -1.0,
    ),
    'half_cheetah': Robot(
        xml='half_cheetah.xml',
        torso='torso',
        power=0.9,
        feet=('ffoot', 'fshin', 'fthigh', 'bfoot', 'bshin', 'bthigh'),
        joint_power={
            'bthigh': 120,
            'bshin': 90,
            'bfoot': 60,
            'fthigh': 140,
            'fshin': 60,
            'ffoot': 30,
        },
        alive_bonus=_cheetah_alive,
        terminates=False,
    ),
    'hopper': Robot(
        xml='hopper.xml', torso='torso', feet=('foot',), power=0.75, alive_bonus=_upright
    ),
    'walker2d': Robot(
        xml='walker2d.xml',
        torso='torso',
        feet=('foot', 'foot_left'),
        power=0.4,
        joint_power={'foot_joint': 30, 'foot_left_joint': 30},
        alive_bonus=_upright,
    ),
}


class LocomotionBulletEnv(gymnasium.Env):
    """One of the classic PyBullet locomotion tasks (see the module docstring).

    The robot is loaded once (and anew after a step whose simulation blew up);
    ``reset`` restores the saved initial state and draws each joint position
    from U[-0.1, 0.1] rad (zero velocity).

    Args:
        robot: a key of ``ROBOTS``: 'humanoid', 'ant', 'half_cheetah',
            'hopper' or 'walker2d'.
        render_mode: None or 'rgb_array' (TinyRenderer, headless).
    """

    # 60.6 env steps per simulated second: a video at render_fps plays in real time.
    metadata = {'render_modes': ['rgb_array'], 'render_fps': 1 / CONTROL_DT}

    def __init__(self, robot: str = 'humanoid', render_mode: Optional[str] = None):
        if robot not in ROBOTS:
            raise ValueError(f"Unknown robot '{robot}'; one of {sorted(ROBOTS)}.")
        if render_mode not in (None, 'rgb_array'):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.render_mode = render_mode
        self._robot = ROBOTS[robot]
        self._build()
        # Set by a step whose simulation blew up: the next reset builds a new one.
        self._blew_up = False

        n = len(self._joints)
        self.action_space = spaces.Box(-1.0, 1.0, shape=(n,), dtype=np.float32)
        obs_dim = 8 + 2 * n + len(self._feet)
        self.observation_space = spaces.Box(-5.0, 5.0, shape=(obs_dim,), dtype=np.float32)
        self._feet_contact = np.zeros(len(self._feet), dtype=np.float32)

    def _build(self):
        """Connect a new PyBullet client, load the ground and the robot, and save that state."""
        robot = self._robot
        self._p = p = connect_direct()
        p.setGravity(0, 0, -GRAVITY)
        p.setDefaultContactERP(0.9)
        p.setPhysicsEngineParameter(
            fixedTimeStep=CONTROL_DT,
            numSubSteps=PHYSICS_SUBSTEPS,
            numSolverIterations=5,
            deterministicOverlappingPairs=1,
        )
        self._ground = p.loadURDF('plane.urdf')
        p.changeDynamics(self._ground, -1, lateralFriction=0.8, restitution=0.5)
        xml = os.path.join(pybullet_data.getDataPath(), 'mjcf', robot.xml)
        (self._body,) = p.loadMJCF(
            xml,
            flags=pybullet.URDF_USE_SELF_COLLISION
            | pybullet.URDF_USE_SELF_COLLISION_EXCLUDE_ALL_PARENTS,
        )
        # Drawn in the file's colours (the loader leaves them white), where it renders.
        colors = mjcf_body_colors(xml) if self.render_mode is not None else None
        if colors is not None:
            p.changeVisualShape(self._body, -1, rgbaColor=colors[0])

        links = {}
        self._joints, joint_power, lower, upper = [], [], [], []
        for j in range(p.getNumJoints(self._body)):
            info = p.getJointInfo(self._body, j)
            name, link = info[1].decode(), info[12].decode()
            links[link] = j
            if colors is not None:
                p.changeVisualShape(self._body, j, rgbaColor=colors[1].get(link, colors[0]))
            # Every joint motor off: the actions are torques. MJCF's planar
            # root joints are named 'ignore*' and stay passive.
            p.setJointMotorControl2(self._body, j, pybullet.POSITION_CONTROL, force=0)
            if info[2] == pybullet.JOINT_REVOLUTE and not name.startswith('ignore'):
                self._joints.append(j)
                joint_power.append(robot.joint_power.get(name, 100.0))
                lower.append(info[8])
                upper.append(info[9])
        self._torque_scale = robot.power * np.array(joint_power)
        self._joint_mid = 0.5 * (np.array(lower) + np.array(upper))
        self._joint_half_range = 0.5 * (np.array(upper) - np.array(lower))
        self._torso = links[robot.torso] if robot.torso else -1
        self._feet = [links[f] for f in robot.feet]
        self._links = sorted(links.values())
        # The planar robots' MJCF base has no mass: PyBullet fixes it at the
        # world origin, so it would pull the body position back towards 0.
        self._base_moves = p.getDynamicsInfo(self._body, -1)[0] > 0
        self._initial_state = p.saveState()

    def _torso_pose_and_velocity(self):
        if self._torso == -1:
            pos, orn = self._p.getBasePositionAndOrientation(self._body)
            vel, _ = self._p.getBaseVelocity(self._body)
        else:
            state = self._p.getLinkState(self._body, self._torso, computeLinkVelocity=1)
            pos, orn, vel = state[0], state[1], state[6]
        return np.array(pos), self._p.getEulerFromQuaternion(orn), np.array(vel)

    def _body_xy(self) -> np.ndarray:
        """Mean xy of the links that move with the robot."""
        positions = []
        if self._base_moves:
            positions.append(self._p.getBasePositionAndOrientation(self._body)[0])
        positions += [s[0] for s in self._p.getLinkStates(self._body, self._links)]
        return np.mean(positions, axis=0)[:2]

    def _potential(self, xy) -> float:
        # Minus the distance to the target in units of one env step: the
        # difference of two potentials is the speed towards the target (m/s).
        return -float(np.hypot(WALK_TARGET[0] - xy[0], WALK_TARGET[1] - xy[1])) / CONTROL_DT

    def _read_state(self):
        """Fill the observation parts; returns ``(obs, torso_z, pitch, xy)``."""
        states = self._p.getJointStates(self._body, self._joints)
        position = np.array([s[0] for s in states])
        self._joint_speed = 0.1 * np.array([s[1] for s in states])
        relative = (position - self._joint_mid) / self._joint_half_range
        self._joints_at_limit = int(np.count_nonzero(np.abs(relative) > 0.99))
        for i, foot in enumerate(self._feet):
            self._feet_contact[i] = float(
                bool(self._p.getContactPoints(self._body, self._ground, linkIndexA=foot))
            )

        pos, (roll, pitch, yaw), velocity = self._torso_pose_and_velocity()
        xy = self._body_xy()
        if self._initial_z is None:
            self._initial_z = pos[2]
        angle_to_target = np.arctan2(WALK_TARGET[1] - xy[1], WALK_TARGET[0] - xy[0]) - yaw
        c, s = np.cos(yaw), np.sin(yaw)
        # The torso's velocity in its yaw frame; 0.3 scales a typical speed to ~1.
        vx, vy = c * velocity[0] + s * velocity[1], -s * velocity[0] + c * velocity[1]
        more = [
            pos[2] - self._initial_z,
            np.sin(angle_to_target),
            np.cos(angle_to_target),
            0.3 * vx,
            0.3 * vy,
            0.3 * velocity[2],
            roll,
            pitch,
        ]
        joints = np.stack([relative, self._joint_speed], axis=1).ravel()
        state = np.concatenate([more, joints, self._feet_contact])
        # Checked before the clip, which turns an infinite value into a finite 5; a NaN
        # becomes 0: the episode's last observation is finite, for the policy that acts on it.
        self._state_is_finite = finite_as_float32(state)
        return np.clip(np.nan_to_num(state, nan=0.0), -5, 5).astype(np.float32), pos[2], pitch, xy

    def reset(self, *, seed=None, options=None):
        """Restore the initial state, then draw joint positions from U[-0.1, 0.1].

        Args:
            seed: seeds ``self.np_random`` when given.
            options: unused.
        Returns:
            ``(observation, info)``.
        """
        super().reset(seed=seed)
        if self._blew_up:
            # What blew up stays in PyBullet past restoreState (the robot would then fall
            # through the ground): the episode starts in a new simulation, as a new env's.
            self._p.disconnect()
            self._build()
            self._blew_up = False
        self._p.restoreState(self._initial_state)
        for j in self._joints:
            self._p.resetJointState(self._body, j, self.np_random.uniform(-0.1, 0.1), 0.0)
        self._initial_z = self._robot.initial_z
        # Contacts are found by a step; without this pass the reset observation
        # would show the previous episode's last contacts.
        self._p.performCollisionDetection()
        obs, _, _, xy = self._read_state()
        self._last_potential = self._potential(xy)
        return obs, {}

    def step(self, action):
        """Apply the torques for one env step (4 physics substeps).

        Args:
            action: array of shape ``action_space.shape``; clipped to [-1, 1].
        Raises:
            ValueError: ``action`` is of another shape.
        Returns:
            ``(observation, reward, terminated, truncated, info)``; ``info``
            holds the reward terms.
        """
        a = clipped_action(action, self.action_space)
        self._p.setJointMotorControlArray(
            self._body, self._joints, pybullet.TORQUE_CONTROL, forces=self._torque_scale * a
        )
        self._p.stepSimulation()
        obs, z, pitch, xy = self._read_state()

        alive = float(self._robot.alive_bonus(z, pitch, self._feet_contact))
        potential = self._potential(xy)
        progress = potential - self._last_potential
        self._last_potential = potential
        electricity = self._robot.cost_scale * (
            ELECTRICITY_COST * float(np.abs(a * self._joint_speed).mean())
            + STALL_TORQUE_COST * float(np.square(a).mean())
        )
        joints_at_limit = JOINTS_AT_LIMIT_COST * self._joints_at_limit
        reward = alive + progress + electricity + joints_at_limit
        # The reward holds what the observation does not: the progress of the position xy.
        blew_up = not (self._state_is_finite and finite_as_float32(reward))
        if blew_up:
            # The simulation blew up: the episode ends, with no reward from that state.
            reward = 0.0
            self._blew_up = True
        terminated = bool((self._robot.terminates and alive < 0) or blew_up)
        info = {
            'alive': alive,
            'progress': progress,
            'electricity': electricity,
            'joints_at_limit': joints_at_limit,
        }
        return obs, reward, terminated, False, info

    def render(self):
        """An RGB frame following the robot, or None unless render_mode is 'rgb_array'."""
        if self.render_mode != 'rgb_array':
            return None
        pos, _, _ = self._torso_pose_and_velocity()
        return render_rgb(self._p, pos, yaw=0.0)

    def close(self):
        """Disconnect the PyBullet client; calling it again does nothing. Once closed,
        reset, step and an 'rgb_array' render raise a RuntimeError naming the env."""
        close_client(self)


BULLET_IDS = {
    'HumanoidBullet-v0': 'humanoid',
    'AntBullet-v0': 'ant',
    'HalfCheetahBullet-v0': 'half_cheetah',
    'HopperBullet-v0': 'hopper',
    'Walker2DBullet-v0': 'walker2d',
}

for _env_id, _robot in BULLET_IDS.items():
    gymnasium.register(
        id=_env_id,
        entry_point='alf_lite.environments.suite_pybullet:LocomotionBulletEnv',
        kwargs={'robot': _robot},
        max_episode_steps=1000,
    )
