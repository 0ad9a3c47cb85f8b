"""distrl: fast PPO on vectorized environments, scaled out with torch.distributed and torchrun."""

__version__ = "0.1.0"
