from setuptools import find_packages, setup

setup(
    name='alf_lite',
    version='0.1.0',
    description='A gin-configured off-policy RL framework (SAC, DDPG, TD3) in PyTorch.',
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    packages=find_packages(include=['alf_lite', 'alf_lite.*']),
    python_requires='>=3.10',
    install_requires=[
        # torch is installed first by the Makefile as torch==2.13.0, the build that
        # pip's configuration or TORCH_INDEX_URL gives; this range must admit it so
        # pip does not fetch another build. 2.5: the first whose fused Adam / AdamW (the
        # default of alf_lite.optimizers) is built for the CPU and on the meta device, where
        # model_memory counts the networks; pip keeps an older torch that this admits.
        'torch>=2.5',
        'gin-config==0.5.0',
        # classic-control: pygame(-ce), which renders Pendulum and the other classic tasks.
        # 1.1: the first with gymnasium.vector.AutoresetMode, which suite_gym imports.
        'gymnasium[mujoco,classic-control]>=1.1,<2',
        'pybullet>=3.2',
        'icub-models>=3.2',
        'numpy',
        'absl-py',
        'tensorboard',
        # Imported directly (the env factories' pickling check; reading event files), though
        # gymnasium and tensorboard bring them too.
        'cloudpickle',
        'protobuf',
        'psutil',
        'matplotlib',
        'imageio',
        'imageio-ffmpeg',
        'pillow',
    ],
    extras_require={
        'test': ['pytest', 'pytest-timeout', 'pytest-xdist>=3.8', 'ruff==0.17.6'],
        'bench': ['stable-baselines3'],
        'ray': ['ray'],
    },
)
