"""Import every module that registers gin configurables, so a gin file can name any of them."""

import alf_lite.algorithms  # noqa: F401
import alf_lite.environments  # noqa: F401
import alf_lite.networks  # noqa: F401
import alf_lite.optimizers  # noqa: F401
import alf_lite.replay_buffer  # noqa: F401
import alf_lite.trainer  # noqa: F401
