"""The iCub humanoid walking task (``ICubWalk-v0``, ``ICubWalk-v1``) on PyBullet, after
SocialRobot's ICubWalk.

SocialRobot's ICubWalk (Gazebo) is the task ALF's users trained SAC on. Here the
robot is the official iCub model of the ``icub-models`` PyPI package
(``iCubGazeboV2_5``, 33.06 kg) simulated by PyBullet, so nothing outside PyPI
is needed.

Task:
- 25 actuated joints: 12 leg (hip pitch/roll/yaw, knee, ankle pitch/roll per
  side), 3 torso, 8 arm (shoulder pitch/roll/yaw and elbow per side), 2 neck
  (pitch, roll); the other 7 (neck yaw, wrists) are held in place.
- Action in [-1, 1]^25; ``control_mode`` says what it means:
  'position_residual' (default): target angle = standing pose +
  ``position_scale`` x action, so a zero action stands; 'velocity': target
  speed = ``max_velocity`` x action; 'torque': torque = effort limit x action.
- Control at 20 Hz: each step runs ``physics_substeps`` (12) physics steps of 1/240 s.
- Observation: two stacked 85-value frames, this step's then the previous
  step's (170), clipped to +-100. A frame is: the mean xyz of root_link, chest and both feet
  (3); xyz and roll/pitch/yaw of root_link, chest, l_foot and r_foot (24); the
  base's linear and angular velocity (6); the 25 joint angles (25) and
  speeds (25); left and right foot contact with the ground (2).
- ``orientation`` says what a link's roll/pitch/yaw is: 'world' (``ICubWalk-v0``):
  of its world orientation q, as ``getEulerFromQuaternion`` gives it; standing, both
  feet's roll and yaw are near +-pi, where they wrap, so a tiny tilt makes them jump by
  about 2 pi. 'from_standing' (``ICubWalk-v1``): of q_stand^-1 * q, q_stand being the
  link's world orientation in the settled standing state that ``reset`` restores
  (before the joint noise): near 0 standing. Far from it they still jump: roll and yaw
  wrap at +-pi (half a turn), and flip by pi where a link pitches a quarter turn (its
  pitch, kept in [-pi/2, pi/2], passing +-pi/2).
- Reward ``1 + 6 * min(v, 1) - (mean(a^2) + 0.5 * mean(|q|))``: v is the
  forward speed (m/s) of the mean xyz above, a the clipped action, q the 25
  joint angles (rad).
- Terminated when the chest drops more than ``fall_height`` (0.13 m) below
  its standing height; truncated after 200 steps.

Facts about the model that the code handles:
- The URDF has 212 joints (32 revolute) and 174 links without ``<inertial>``
  (sensor and skin frames); PyBullet would give each of them 1 kg (207 kg in
  all). ``cleaned_urdf_path`` writes a copy without those leaf frames (the sole
  frames are kept, with a negligible mass) into a cache directory.
- Without ``URDF_USE_INERTIA_FROM_FILE`` PyBullet recomputes inertias from the
  collision meshes and the falling robot explodes.
- The model faces world -x: forward is -x (the robot is not rotated at spawn).
- ``getBasePositionAndOrientation`` gives the base's inertial frame, not
  root_link's frame; ``_root_pose`` converts.
- The URDF's effort limits of the torso, neck and arm joints are 50000
  placeholders; ``EFFORT_LIMITS`` sets realistic ones. The legs keep the URDF's.
"""

import hashlib
import math
import numbers
import os
import typing
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Literal, Optional

import gin
import gymnasium
import icub_models
import numpy as np
from gymnasium import spaces

from alf_lite.config import new_file_beside
from alf_lite.environments.suite_gym import EnvironmentSettingsError
from alf_lite.environments.suite_pybullet import (
    clipped_action,
    close_client,
    connect_direct,
    finite_as_float32,
    pybullet,
    render_rgb,
)

ICUB_WALK_ID = 'ICubWalk-v0'
# ICubWalk-v0 with orientation='from_standing'.
ICUB_WALK_V1_ID = 'ICubWalk-v1'
ICUB_MODEL = 'iCubGazeboV2_5'
# Where the cleaned URDF is written; default ~/.cache/alf_lite.
CACHE_DIR_ENV = 'ALF_LITE_CACHE_DIR'
# Bump when clean_urdf changes: the cache file name includes it.
CLEANING_VERSION = 1
SOLE_FRAMES = ('l_sole', 'r_sole')
# A sole frame's stand-in inertial: without one PyBullet gives the link 1 kg.
_FRAME_MASS = '1e-5'
_FRAME_INERTIA = '1e-9'

# SocialRobot's joint order.
ACTUATED_JOINTS = (
    'l_hip_pitch',
    'l_hip_roll',
    'l_hip_yaw',
    'l_knee',
    'l_ankle_pitch',
    'l_ankle_roll',
    'r_hip_pitch',
    'r_hip_roll',
    'r_hip_yaw',
    'r_knee',
    'r_ankle_pitch',
    'r_ankle_roll',
    'torso_yaw',
    'torso_roll',
    'torso_pitch',
    'l_shoulder_pitch',
    'l_shoulder_roll',
    'l_shoulder_yaw',
    'l_elbow',
    'neck_pitch',
    'neck_roll',
    'r_shoulder_pitch',
    'r_shoulder_roll',
    'r_shoulder_yaw',
    'r_elbow',
)
HELD_JOINTS = (
    'neck_yaw',
    'l_wrist_prosup',
    'l_wrist_pitch',
    'l_wrist_yaw',
    'r_wrist_prosup',
    'r_wrist_pitch',
    'r_wrist_yaw',
)
# N·m, replacing the URDF's 50000 placeholders; the legs keep the URDF's
# (37 N·m, 55.5 N·m for the hip pitch).
EFFORT_LIMITS = {'torso': 40.0, 'shoulder': 20.0, 'elbow': 10.0, 'neck': 10.0, 'wrist': 5.0}
# The standing pose: every joint at 0 except the arms, held slightly away
# from the body (0 is outside the elbow's range, whose lower limit is 0.26).
STANDING_POSE = {'l_shoulder_roll': 0.3, 'r_shoulder_roll': 0.3, 'l_elbow': 0.3, 'r_elbow': 0.3}
FRAME_SIZE = 85
# Observations are clipped to +-this (as SocialRobot's bounds): only a blown-up
# simulation reaches it (a joint spinning at 100 rad/s, 100 m walked).
OBSERVATION_BOUND = 100.0
# Bounds on the physics settings: the constructor settles the robot for one control period,
# at least 0.5 s, so at these bounds that alone is 100,000 physics steps (about 17 s on one
# core); past them it runs for minutes to forever.
MAX_PHYSICS_SUBSTEPS = 100_000
MIN_TIME_STEP = 1e-5
ControlMode = Literal['position_residual', 'velocity', 'torque']
CONTROL_MODES = typing.get_args(ControlMode)
Orientation = Literal['world', 'from_standing']
ORIENTATIONS = typing.get_args(Orientation)


def _default_cache_dir() -> Path:
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV])
    # As the XDG spec says, an empty or relative XDG_CACHE_HOME is ignored: it would put the
    # cache in the working directory.
    xdg_cache_home = os.environ.get('XDG_CACHE_HOME', '')
    if os.path.isabs(xdg_cache_home):
        return Path(xdg_cache_home) / 'alf_lite'
    return Path.home() / '.cache' / 'alf_lite'


def clean_urdf(text: str, mesh_root: str) -> str:
    """The iCub URDF without its inertia-less leaf frames, meshes by absolute path.

    Args:
        text: the URDF of icub-models.
        mesh_root: directory that ``package://`` mesh URIs are relative to
            (the ``share`` directory holding ``iCub/meshes``).
    Returns:
        the cleaned URDF text: leaf links without ``<inertial>`` and their fixed
        joints removed (the sole frames kept, with a negligible inertial),
        ``<gazebo>`` elements removed, mesh paths absolute so the file works
        from any directory.
    """
    robot = ET.fromstring(text)
    for gazebo in robot.findall('gazebo'):
        robot.remove(gazebo)
    while True:
        parents = {j.find('parent').get('link') for j in robot.findall('joint')}
        dropped = {
            link.get('name')
            for link in robot.findall('link')
            if link.find('inertial') is None
            and link.get('name') not in parents
            and link.get('name') not in SOLE_FRAMES
        }
        if not dropped:
            break
        for link in robot.findall('link'):
            if link.get('name') in dropped:
                robot.remove(link)
        for joint in robot.findall('joint'):
            if joint.find('child').get('link') in dropped:
                robot.remove(joint)
    for link in robot.findall('link'):
        if link.get('name') in SOLE_FRAMES and link.find('inertial') is None:
            inertial = ET.SubElement(link, 'inertial')
            ET.SubElement(inertial, 'mass', value=_FRAME_MASS)
            ET.SubElement(
                inertial,
                'inertia',
                ixx=_FRAME_INERTIA,
                iyy=_FRAME_INERTIA,
                izz=_FRAME_INERTIA,
                ixy='0',
                ixz='0',
                iyz='0',
            )
    for mesh in robot.iter('mesh'):
        filename = mesh.get('filename')
        if filename.startswith('package://'):
            mesh.set('filename', os.path.join(mesh_root, filename[len('package://') :]))
    return ET.tostring(robot, encoding='unicode')


def cleaned_urdf_path(cache_dir: Optional[str] = None) -> str:
    """Path of the cleaned iCub URDF, written on first use.

    The file name holds a hash of the source URDF, the mesh directory and
    ``CLEANING_VERSION``, so a new icub-models release or cleaning gets a new
    file. A file under that name that holds anything else (left empty by a power
    cut before it was synced, or cut short since) is written anew. Several env
    processes may start at once: each writes a temporary file and renames it into
    place (atomic), so no one reads a partial file.

    Args:
        cache_dir: where to write (a relative one from the working directory);
            None means ``$ALF_LITE_CACHE_DIR``, else ``$XDG_CACHE_HOME/alf_lite``
            where that is an absolute path, else ``~/.cache/alf_lite``.
    Returns:
        the absolute path of the cleaned URDF.
    """
    source = Path(icub_models.get_model_file(ICUB_MODEL))
    # .../share/iCub/robots/<model>/model.urdf; meshes are package://iCub/meshes/...
    mesh_root = str(source.parents[3])
    text = source.read_text()
    digest = hashlib.sha256(f'{CLEANING_VERSION}\n{mesh_root}\n{text}'.encode()).hexdigest()
    directory = Path(os.path.abspath(cache_dir if cache_dir else _default_cache_dir()))
    path = directory / f'{ICUB_MODEL}-clean-{digest[:16]}.urdf'
    cleaned = clean_urdf(text, mesh_root).encode()
    # A damaged file would fail every later env with PyBullet's "Cannot load URDF file",
    # which names no file.
    if not path.exists() or path.read_bytes() != cleaned:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = new_file_beside(str(path), '.tmp')
        try:
            with open(tmp, 'wb') as f:
                f.write(cleaned)
                # Whole on the disk before its name is: after a power cut, an empty file
                # under it would fail every later ICubWalk-v0.
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    return str(path)


def icub_walk_reward(
    forward_velocity: float, action: np.ndarray, joint_positions: np.ndarray
) -> float:
    """``1 + 6 * min(v, 1) - (mean(a^2) + 0.5 * mean(|q|))``, SocialRobot's ICubWalk reward.

    Args:
        forward_velocity: v, m/s along the robot's forward direction.
        action: a, the action in [-1, 1].
        joint_positions: q, the actuated joints' angles (rad).
    """
    return float(
        1.0
        + 6.0 * min(forward_velocity, 1.0)
        - (np.mean(np.square(action)) + 0.5 * np.mean(np.abs(joint_positions)))
    )


def _effort_limit(joint: str, urdf_limit: float) -> float:
    for part, limit in EFFORT_LIMITS.items():
        if part in joint:
            return limit
    return urdf_limit


@gin.configurable
class ICubWalkEnv(gymnasium.Env):
    """iCub walking forward on flat ground (see the module docstring).

    The robot is loaded once (and anew after a step whose simulation blew up),
    stood in its standing pose and settled for 0.5 s (at least one control period, for a
    longer one); that state is saved.
    ``reset`` restores it (well under a millisecond) and adds
    U[-joint_noise, joint_noise] to each actuated joint.

    Args:
        control_mode: 'position_residual', 'velocity' or 'torque'.
        physics_substeps: physics steps of ``time_step`` per env step (12
            gives 20 Hz control), at most 100,000.
        time_step: physics step in seconds, at least 1e-5.
        position_scale: 'position_residual': rad of target offset at action 1.
        max_velocity: 'velocity': rad/s of target speed at action 1.
        joint_noise: rad, half-width of the uniform noise added at reset.
        fall_height: m the chest may drop below its standing height before
            the episode terminates.
        render_mode: None or 'rgb_array' (TinyRenderer, headless).
        cache_dir: where the cleaned URDF is kept; see ``cleaned_urdf_path``.
        orientation: 'world' (``ICubWalk-v0``) or 'from_standing' (``ICubWalk-v1``):
            each link's roll/pitch/yaw in the frame is of its world orientation q, or of
            q_stand^-1 * q, its rotation from its orientation in the settled standing state
            (see the module docstring).
    """

    metadata = {'render_modes': ['rgb_array'], 'render_fps': 20}

    def __init__(
        self,
        control_mode: ControlMode = 'position_residual',
        physics_substeps: int = 12,
        time_step: float = 1.0 / 240,
        position_scale: float = 0.5,
        max_velocity: float = 5.0,
        joint_noise: float = 0.02,
        fall_height: float = 0.13,
        render_mode: Optional[str] = None,
        cache_dir: Optional[str] = None,
        orientation: Orientation = 'world',
    ):
        if control_mode not in CONTROL_MODES:
            raise EnvironmentSettingsError(
                f'control_mode must be one of {CONTROL_MODES}, got {control_mode!r}'
            )
        if orientation not in ORIENTATIONS:
            raise EnvironmentSettingsError(
                f'orientation must be one of {ORIENTATIONS}, got {orientation!r}'
            )
        if render_mode not in (None, 'rgb_array'):
            raise EnvironmentSettingsError(
                f"render_mode must be None or 'rgb_array', got {render_mode!r}"
            )
        # numbers.Integral: a numpy integer bound in Python (gin.bind_parameter) is one too.
        if isinstance(physics_substeps, bool) or not (
            isinstance(physics_substeps, numbers.Integral)
            and 1 <= physics_substeps <= MAX_PHYSICS_SUBSTEPS
        ):
            raise EnvironmentSettingsError(
                f'physics_substeps must be an integer from 1 to {MAX_PHYSICS_SUBSTEPS}, '
                f'got {physics_substeps!r}'
            )
        for name, value in (
            ('time_step', time_step),
            ('fall_height', fall_height),
            ('position_scale', position_scale),
            ('max_velocity', max_velocity),
            ('joint_noise', joint_noise),
        ):
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise EnvironmentSettingsError(f'{name} must be a number, got {value!r}')
        if not MIN_TIME_STEP <= time_step < math.inf:
            raise EnvironmentSettingsError(
                f'time_step must be a finite number of seconds >= {MIN_TIME_STEP}, '
                f'got {time_step!r}'
            )
        if not 0 < fall_height < math.inf:
            raise EnvironmentSettingsError(
                f'fall_height must be a positive finite number, got {fall_height!r}'
            )
        for name, value in (
            ('position_scale', position_scale),
            ('max_velocity', max_velocity),
            ('joint_noise', joint_noise),
        ):
            if not 0 <= value < math.inf:
                raise EnvironmentSettingsError(
                    f'{name} must be a finite number >= 0, got {value!r}'
                )
        self.control_mode = control_mode
        self.orientation = orientation
        self.render_mode = render_mode
        physics_substeps = int(physics_substeps)
        self.control_dt = physics_substeps * time_step
        # Not rounded: a video at render_fps plays in real time (240 / 7 = 34.3 env steps
        # per second, not 34), and a period of 2 s or more is no 0 frames per second.
        self.metadata = dict(self.metadata, render_fps=1 / self.control_dt)
        self._position_scale = position_scale
        self._max_velocity = max_velocity
        self._joint_noise = joint_noise
        self._physics_substeps = physics_substeps
        self._fall_height = fall_height
        if cache_dir and os.path.exists(cache_dir) and not os.path.isdir(cache_dir):
            # mkdir's FileExistsError would name the path, not what is wrong with it.
            raise EnvironmentSettingsError(
                f'cache_dir must be a directory (the cleaned URDF is written into it), got '
                f'{cache_dir!r}, which is a file'
            )
        self._urdf_path = cleaned_urdf_path(cache_dir)
        self._build()
        # Set by a step whose simulation blew up: the next reset builds a new one.
        self._blew_up = False

        self.action_space = spaces.Box(-1.0, 1.0, shape=(len(ACTUATED_JOINTS),), dtype=np.float32)
        self.observation_space = spaces.Box(
            -OBSERVATION_BOUND, OBSERVATION_BOUND, shape=(2 * FRAME_SIZE,), dtype=np.float32
        )

    def _build(self):
        """Connect a new PyBullet client, load the ground and the robot, stand it up and save
        that state."""
        self._p = p = connect_direct()
        p.setGravity(0, 0, -9.81)
        # One stepSimulation call runs all substeps: no Python loop per substep.
        p.setPhysicsEngineParameter(
            fixedTimeStep=self.control_dt,
            numSubSteps=self._physics_substeps,
            deterministicOverlappingPairs=1,
        )
        self._ground = p.loadURDF('plane.urdf')
        self._body = p.loadURDF(self._urdf_path, flags=pybullet.URDF_USE_INERTIA_FROM_FILE)
        joints, links = {}, {}
        effort = {}
        for j in range(p.getNumJoints(self._body)):
            info = p.getJointInfo(self._body, j)
            joints[info[1].decode()] = j
            links[info[12].decode()] = j
            effort[info[1].decode()] = _effort_limit(info[1].decode(), info[10])
        self._actuated = [joints[name] for name in ACTUATED_JOINTS]
        self._held = [joints[name] for name in HELD_JOINTS]
        self._effort = np.array([effort[name] for name in ACTUATED_JOINTS])
        self._held_effort = [effort[name] for name in HELD_JOINTS]
        self._lower = np.array([p.getJointInfo(self._body, j)[8] for j in self._actuated])
        self._upper = np.array([p.getJointInfo(self._body, j)[9] for j in self._actuated])
        self._stand = np.array([STANDING_POSE.get(name, 0.0) for name in ACTUATED_JOINTS])
        self._held_pose = [STANDING_POSE.get(name, 0.0) for name in HELD_JOINTS]
        self._chest = links['chest']
        self._feet = [links['l_foot'], links['r_foot']]
        # root_link's frame in the base's inertial frame (see _root_pose).
        inertial_pos, inertial_orn = p.getDynamicsInfo(self._body, -1)[3:5]
        self._inertial = (inertial_pos, inertial_orn)
        self._inertial_inverse = p.invertTransform(inertial_pos, inertial_orn)

        self._stand_up(links)
        self._standing_state = p.saveState()
        self._fall_z = self._chest_z() - self._fall_height
        # q_stand^-1 of root_link, chest and the feet, for orientation='from_standing'.
        self._standing_inverse = [
            p.invertTransform((0, 0, 0), orn)[1] for _, orn in self._link_poses()
        ]

    # --- poses ---------------------------------------------------------------------------

    def _set_root_pose(self, position, orientation=(0, 0, 0, 1)):
        base = self._p.multiplyTransforms(position, orientation, *self._inertial)
        self._p.resetBasePositionAndOrientation(self._body, *base)

    def _root_pose(self):
        """root_link's world position and orientation (PyBullet reports the inertial frame's)."""
        base = self._p.getBasePositionAndOrientation(self._body)
        return self._p.multiplyTransforms(*base, *self._inertial_inverse)

    def _chest_z(self) -> float:
        return self._p.getLinkState(self._body, self._chest, computeForwardKinematics=1)[4][2]

    def _stand_up(self, links):
        """Put the robot in its standing pose with the soles on the ground and let it settle."""
        p = self._p
        for j, q in zip(self._actuated + self._held, list(self._stand) + self._held_pose):
            p.resetJointState(self._body, j, q, 0.0)
        self._set_root_pose([0, 0, 1])
        sole_z = min(
            p.getLinkState(self._body, links[s], computeForwardKinematics=1)[4][2]
            for s in SOLE_FRAMES
        )
        self._set_root_pose([0, 0, 1 - sole_z + 1e-3])
        self._apply_hold()
        self._apply_stand_targets()
        # At least one control period: with none (a period of 1 s or more rounds 0.5 s to 0
        # periods) the saved state would be the spawn, never simulated: no foot contact found
        # and the chest, which fall_height is measured from, 1 cm below its settled height.
        for _ in range(max(1, int(round(0.5 / self.control_dt)))):
            p.stepSimulation()

    # --- control -------------------------------------------------------------------------

    def _apply_hold(self):
        self._p.setJointMotorControlArray(
            self._body,
            self._held,
            pybullet.POSITION_CONTROL,
            targetPositions=self._held_pose,
            forces=self._held_effort,
        )

    def _apply_stand_targets(self):
        self._p.setJointMotorControlArray(
            self._body,
            self._actuated,
            pybullet.POSITION_CONTROL,
            targetPositions=self._stand,
            forces=self._effort,
        )

    def _apply_action(self, a: np.ndarray):
        p = self._p
        if self.control_mode == 'position_residual':
            target = np.clip(self._stand + self._position_scale * a, self._lower, self._upper)
            p.setJointMotorControlArray(
                self._body,
                self._actuated,
                pybullet.POSITION_CONTROL,
                targetPositions=target,
                forces=self._effort,
            )
        elif self.control_mode == 'velocity':
            p.setJointMotorControlArray(
                self._body,
                self._actuated,
                pybullet.VELOCITY_CONTROL,
                targetVelocities=self._max_velocity * a,
                forces=self._effort,
            )
        else:
            p.setJointMotorControlArray(
                self._body, self._actuated, pybullet.TORQUE_CONTROL, forces=self._effort * a
            )

    # --- observation ---------------------------------------------------------------------

    def _link_poses(self):
        """World position and orientation of root_link, chest, l_foot and r_foot."""
        poses = [self._root_pose()]
        poses += [
            (s[4], s[5])
            for s in self._p.getLinkStates(
                self._body, [self._chest] + self._feet, computeForwardKinematics=1
            )
        ]
        return poses

    def _frame(self) -> np.ndarray:
        """One 85-value frame (see the module docstring); returns it float64."""
        p = self._p
        poses = self._link_poses()
        if self.orientation == 'from_standing':
            poses = [
                (pos, p.multiplyTransforms((0, 0, 0), inverse, (0, 0, 0), orn)[1])
                for (pos, orn), inverse in zip(poses, self._standing_inverse)
            ]
        positions = np.array([pos for pos, _ in poses])
        link_poses = [np.concatenate([pos, p.getEulerFromQuaternion(orn)]) for pos, orn in poses]
        linear, angular = p.getBaseVelocity(self._body)
        joint_states = p.getJointStates(self._body, self._actuated)
        contacts = [
            float(bool(p.getContactPoints(self._body, self._ground, linkIndexA=foot)))
            for foot in self._feet
        ]
        return np.concatenate(
            [
                positions.mean(axis=0),
                *link_poses,
                linear,
                angular,
                [s[0] for s in joint_states],
                [s[1] for s in joint_states],
                contacts,
            ]
        )

    def _observation(self) -> np.ndarray:
        obs = np.concatenate([self._current, self._previous])
        # A NaN (a simulation that blew up, which ends the episode) becomes 0: the
        # policy acts on this observation too.
        obs = np.nan_to_num(obs, nan=0.0)
        return np.clip(obs, -OBSERVATION_BOUND, OBSERVATION_BOUND).astype(np.float32)

    # --- gymnasium API -------------------------------------------------------------------

    def reset(self, *, seed=None, options=None):
        """Restore the settled standing state and add joint noise.

        Args:
            seed: seeds ``self.np_random`` when given.
            options: unused.
        Returns:
            ``(observation, info)``; the observation's two frames are equal.
        """
        super().reset(seed=seed)
        if self._blew_up:
            # What blew up stays in PyBullet past restoreState (the robot would then fall
            # through the ground): the episode starts in a new simulation, as a new env's.
            self._p.disconnect()
            self._build()
            self._blew_up = False
        p = self._p
        p.restoreState(self._standing_state)
        noise = self.np_random.uniform(-self._joint_noise, self._joint_noise, len(self._stand))
        for j, q in zip(self._actuated, np.clip(self._stand + noise, self._lower, self._upper)):
            p.resetJointState(self._body, j, q, 0.0)
        self._apply_hold()
        if self.control_mode == 'torque':
            # PyBullet's default velocity motors would brake every joint.
            p.setJointMotorControlArray(
                self._body,
                self._actuated,
                pybullet.VELOCITY_CONTROL,
                forces=np.zeros(len(self._actuated)),
            )
        else:
            self._apply_stand_targets()
        self._current = self._previous = self._frame()
        return self._observation(), {}

    def step(self, action):
        """Apply the action for one control period (``physics_substeps`` physics steps).

        Args:
            action: array of shape (25,); clipped to [-1, 1].
        Raises:
            ValueError: ``action`` is of another shape.
        Returns:
            ``(observation, reward, terminated, truncated, info)``; ``info``
            has ``forward_velocity`` (m/s) and the chest height ``chest_z`` (m).
        """
        a = clipped_action(action, self.action_space)
        self._apply_action(a)
        self._p.stepSimulation()
        self._previous, self._current = self._current, self._frame()
        # The model faces world -x.
        forward_velocity = -(self._current[0] - self._previous[0]) / self.control_dt
        joint_positions = self._current[33 : 33 + len(ACTUATED_JOINTS)]
        reward = icub_walk_reward(forward_velocity, a, joint_positions)
        chest_z = self._chest_z()
        terminated = chest_z < self._fall_z
        if not finite_as_float32(self._current, chest_z, reward):
            # The simulation blew up: the episode ends, with no reward from that state.
            terminated, reward = True, 0.0
            self._blew_up = True
        info = {'forward_velocity': forward_velocity, 'chest_z': chest_z}
        return self._observation(), reward, terminated, False, info

    def render(self):
        """An RGB frame following the robot, or None unless render_mode is 'rgb_array'."""
        if self.render_mode != 'rgb_array':
            return None
        position, _ = self._root_pose()
        return render_rgb(self._p, position, distance=2.0, yaw=-60.0, pitch=-15.0)

    def close(self):
        """Disconnect the PyBullet client; calling it again does nothing. Once closed,
        reset, step and an 'rgb_array' render raise a RuntimeError naming the env."""
        close_client(self)


gymnasium.register(
    id=ICUB_WALK_ID,
    entry_point='alf_lite.environments.icub_walking:ICubWalkEnv',
    max_episode_steps=200,
)
gymnasium.register(
    id=ICUB_WALK_V1_ID,
    entry_point='alf_lite.environments.icub_walking:ICubWalkEnv',
    max_episode_steps=200,
    kwargs={'orientation': 'from_standing'},
)
