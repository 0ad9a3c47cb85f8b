"""The five MinAtar games (Young & Tian, 2019) as batched torch envs, step for step the reference
``minatar`` package (1.0.15) with its sticky actions and difficulty ramps.

``GAMES`` maps the reference's game names to the env classes; the registry's tasks are
``minatar-asterix``, ``minatar-breakout``, ``minatar-freeway``, ``minatar-seaquest`` and
``minatar-space-invaders``. ``base.MinAtarEnv`` holds what the games share; each game is one
module of pure tensor functions (``initial_state``, ``dynamics``, ``observe``).
"""

from distrl.envs.minatar.asterix import Asterix
from distrl.envs.minatar.base import MinAtarEnv
from distrl.envs.minatar.breakout import Breakout
from distrl.envs.minatar.freeway import Freeway
from distrl.envs.minatar.seaquest import Seaquest
from distrl.envs.minatar.space_invaders import SpaceInvaders

GAMES: dict[str, type[MinAtarEnv]] = {
    cls.game: cls for cls in (Asterix, Breakout, Freeway, Seaquest, SpaceInvaders)
}

__all__ = ["GAMES", "Asterix", "Breakout", "Freeway", "MinAtarEnv", "Seaquest", "SpaceInvaders"]
