"""What every benchmark that trains a Stable-Baselines3 model needs."""


def mute_logger(model):
    """Give ``model`` a logger that writes nothing.

    Without one, each ``learn`` call makes a fresh ``SB3-<time>`` folder in
    the system's temporary directory and leaves it there.
    """
    from stable_baselines3.common.logger import Logger

    model.set_logger(Logger(folder=None, output_formats=[]))
