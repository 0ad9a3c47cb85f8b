"""Learning algorithms as pure tensor code: PPO (clip) and the episodic RLOO objective."""
