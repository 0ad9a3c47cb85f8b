"""One tree of frozen dataclasses for every run; parsed by tyro, never mutated.

Derived values (batch sizes, global env count) are properties, not flags. Use
``dataclasses.replace`` to change a field. ``validate`` raises a ``ValueError`` that names the
numbers and the fix before any env, process group or file is created.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from typing import Annotated, Literal

import tyro


@dataclass(frozen=True)
class EnvConfig:
    # --env.scene.num-envs: mjlab's / Isaac Lab's spelling, so seed 000's torchrun command of
    # the rsl_rl world runs as written
    num_envs: Annotated[int, tyro.conf.arg(aliases=("--env.scene.num-envs",))] = 1024
    """Environments per process (rank). Global envs = world_size * num_envs."""
    max_episode_steps: int | None = None
    """Override the task's time limit (None keeps the task's own, e.g. 500 for cartpole)."""
    check_finite: bool = True
    """Stop with an error naming env, step and field when an observation or reward is NaN/Inf."""
    vectorization: Literal["sync", "async"] = "sync"
    """How a Gymnasium task (`gym:<Id>`, `register_task(gym=...)`) or a Meta-World task steps its
    envs: sync, one after another in this process (Gymnasium's own batched implementation where
    the env has one that resets in the same step); async, in subprocesses, for slow Python envs:
    one per env for Gymnasium (its AsyncVectorEnv), --env.num-workers for Meta-World (each
    stepping its share of the rows; in this process, with a warning, if they cannot start).
    Same seed, same episodes either way. Batched torch tasks take sync only."""
    num_workers: int = 0
    """Subprocesses of a Meta-World task's envs with --env.vectorization async, each stepping
    its share of the rows (0: one per core of this rank, cores / ranks on this machine, at most
    one per env)."""


@dataclass(frozen=True)
class PolicyConfig:
    network: str = "mlp"
    """The actor and critic bodies: mlp (the hidden sizes and activation below), nature-cnn
    (images of at least 36x36, Atari's), minatar-cnn (small grids), multi-input (a Dict of
    images and vectors, SB3's MultiInputPolicy), or a name given to distrl.register_network
    (see distrl.policy.networks for the contract)."""
    actor_hidden: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the actor MLP."""
    critic_hidden: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the critic MLP."""
    activation: Literal["tanh", "elu", "relu"] = "tanh"
    """Hidden activation."""
    init_log_std: float = 0.0
    """Initial log standard deviation of the Gaussian head (continuous actions)."""
    obs_normalization: bool = True
    """Running mean/variance normalization of observations (moments merged across ranks)."""
    reward_normalization: bool = False
    """Scale rewards by the running std of the discounted return (gamma = --agent.gamma) and
    clip them to [-10, 10], as Gymnasium's NormalizeReward / SB3's VecNormalize do; the value
    head then predicts scaled returns. Moments merged across ranks; logged returns stay raw."""
    recurrent: Literal["none", "lstm", "gru"] = "none"
    """A recurrent core between the observations (or the network's encoder) and the heads,
    shared by actor and critic: its memory carries across rollouts and is zeroed where an
    episode starts; PPO trains on whole rollouts per env (truncated BPTT over --agent.num-steps,
    minibatches of envs). LSTM as CleanRL's ppo_atari_lstm and SB3's RecurrentPPO; GRU as
    Sample Factory's default."""
    recurrent_hidden: int = 128
    """Width of the recurrent core's memory (h, and c for an LSTM)."""
    popart_tasks: int = 0
    """PopArt per-task value normalization (0: off): the last popart_tasks entries of every
    observation are a one-hot task id (MT10's envs: 10), the critic gets one output per task,
    each predicting its task's value target normalized by that task's running mean and std, and
    its output layer is rescaled when they move so that values are preserved. Statistics are
    agreed across ranks. PPO tasks only."""
    head: Literal["default", "squashed-gaussian", "tanh"] = "default"
    """The actor's output (continuous actions; --algorithm sets it): default, the mean of a
    Gaussian with a learned state-independent std (PPO); squashed-gaussian, a mean and a
    state-dependent log std squashed by tanh into the bounds (SAC); tanh, a deterministic
    action squashed into the bounds (TD3). The deterministic action is the squashed mean."""
    layer_norm: bool = False
    """LayerNorm after every hidden layer of the MLP bodies, and in nature-cnn and minatar-cnn
    before each ReLU (PQN's default: it trains its Q network without a target network or
    replay)."""
    mapping: Literal["shared", "per-group"] = "shared"
    """Multi-agent tasks (PettingZoo): shared, one policy acts for every agent (its group's
    one-hot leads each row when the agents form two groups or more); per-group, each group of
    agents (adversary_0 and adversary_1 in one, agent_0 in another) has its own actor and
    critic, RLlib's policy mapping by agent type. ppo, rloo, pqn and dqn; an MLP network."""


@dataclass(frozen=True)
class OffPolicyConfig:
    """The off-policy learners (--algorithm dqn, pqn, sac, td3). An iteration collects
    --agent.num-steps steps of --env.num-envs envs per rank, then takes --offpolicy.updates
    gradient steps; under allreduce each step averages every rank's minibatch, so the batch is
    world size x --offpolicy.batch-size and the updates per env step stay those of one rank."""

    buffer_size: int = 1_000_000
    """Replay capacity in transitions per rank (dqn, sac, td3); its memory is printed at
    start-up. Observations are kept in the env's dtype (uint8 images stay uint8)."""
    batch_size: int = 256
    """Transitions per rank per gradient step (dqn, sac, td3)."""
    learning_starts: int = 5000
    """Transitions per rank collected (with random actions) before the first update."""
    updates: int = 1
    """Gradient steps per iteration (dqn, sac, td3); Stable-Baselines3's gradient_steps."""
    tau: float = 0.005
    """Target networks move this fraction towards the trained ones after each update (1.0: a
    hard copy every --offpolicy.target-interval updates)."""
    target_interval: int = 1
    """Updates between target-network moves."""
    eps_start: float = 1.0
    """dqn, pqn: the epsilon-greedy exploration rate at the start..."""
    eps_end: float = 0.05
    """...falling linearly to this..."""
    eps_fraction: float = 0.5
    """...over this fraction of the run's env steps (--agent.max-iterations)."""
    q_lambda: float = 0.65
    """pqn: lambda of its Q(lambda) returns over each rollout."""
    alpha: float | None = None
    """sac: the entropy temperature; None learns it (initial 1.0) towards an entropy of
    --offpolicy.target-entropy."""
    target_entropy: float | None = None
    """sac: the entropy the learned temperature aims at; None: minus the action dimension."""
    exploration_noise: float = 0.1
    """td3: std of the Gaussian noise on its actions while collecting (in half-ranges)."""
    policy_noise: float = 0.2
    """td3: std of the target policy's smoothing noise (in half-ranges)..."""
    noise_clip: float = 0.5
    """...clipped to this."""
    policy_delay: int = 2
    """td3: critic updates per actor and target update."""
    save_replay: bool = True
    """Write each rank's replay into the checkpoints, so that a resume continues bit for bit;
    off for huge buffers (a resume then refills it, and says so)."""
    n_step: int = 1
    """dqn, sac, td3: the replay holds n-step transitions, the discounted sum of up to n rewards
    and the observation n steps later (or where the episode ended first), and the target
    bootstraps with gamma^m, m the steps summed. 1: one-step transitions."""
    prioritized: bool = False
    """dqn, sac, td3: sample the replay in proportion to each transition's |TD error|^alpha
    (Schaul et al. 2016) and weight each sample's loss by its importance-sampling correction
    (sac, td3: the critics' loss; the priority is the mean of the twin critics' |TD error|)."""
    priority_alpha: float = 0.6
    """dqn, sac, td3, prioritized: the exponent of the priorities (0: uniform sampling)."""
    priority_beta: float = 0.4
    """dqn, sac, td3, prioritized: the importance-sampling exponent at the start, annealed
    linearly to 1 over the run (--agent.max-iterations)."""
    priority_eps: float = 1e-6
    """dqn, sac, td3, prioritized: added to |TD error| so that no transition's priority is 0."""
    actor_epsilon: float | None = None
    """dqn under --dist.strategy learner-actor (Ape-X): actor i of A explores with
    epsilon^(1 + 7 i / (A - 1)) all run long (Ape-X's 0.4 and 7: from much exploration to
    almost none) instead of the --offpolicy.eps-* schedule. None: every actor follows the
    schedule."""


@dataclass(frozen=True)
class AgentConfig:
    """PPO hyperparameters (names follow CleanRL / rsl_rl)."""

    num_steps: int = 32
    """Steps collected per env per iteration (T). Rollout batch per rank = num_envs * num_steps."""
    max_iterations: int = 100
    """Training iterations (rollout + update) to run."""
    stop_at: int | None = None
    """Stop at this iteration, with a checkpoint, while the schedules (the linear learning
    rate, exploration) still run to --agent.max-iterations: a run trained in parts, each
    continued with --resume auto (a population's generations)."""
    total_timesteps: int | None = None
    """Env-step budget: when set, it replaces max_iterations by the iterations it takes,
    ceil(total / (collecting ranks x num_envs x num_steps)) (the linear LR schedule decays over
    them); the run trains at least this many env steps. PPO tasks only."""
    target_return: float | None = None
    """Stop once the mean episode return over every rank's newest episodes (the logged
    episode_return_mean, the same on every rank) reaches this: the run ends after that
    iteration with a final checkpoint, and its last record says why (``stopped``). PPO tasks
    only (an episodic suite stops on its success instead; its refusal there names the flag)."""
    num_epochs: int = 5
    """Passes over the rollout batch per iteration (K)."""
    num_minibatches: int = 4
    """Minibatches per epoch (M); each rank splits its own batch into M."""
    learning_rate: float = 1e-3
    """Adam learning rate (initial value for the linear and adaptive schedules)."""
    lr_schedule: Literal["constant", "linear", "adaptive"] = "adaptive"
    """constant; linear decay to 0 over max_iterations; adaptive: KL-driven (rsl_rl rule)."""
    desired_kl: float = 0.01
    """Adaptive schedule (rsl_rl's rule), driven by the approx KL averaged over all ranks: the LR
    is divided by 1.5 when KL > 2 x desired_kl and multiplied by 1.5 when 0 < KL < desired_kl / 2,
    then clamped to [lr_min, lr_max] = [1e-5, 1e-2]; in between it stays."""
    target_kl: float | None = None
    """Stop the epoch loop of an iteration once the (global) approx KL exceeds this."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    clip_coef: float = 0.2
    """PPO ratio clip epsilon."""
    clip_vloss: bool = True
    """Clip the value loss around the old values (PPO2 style)."""
    vf_coef: float = 1.0
    """Value loss coefficient."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient."""
    compile: bool = False
    """torch.compile the minibatch forward and its backward (inductor). It pays where kernel
    launches dominate a large network's update on a GPU: see docs/benchmarks.md for where it
    was measured; the first update of a run waits for the compilation."""
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """bf16: the minibatch forward in bfloat16 autocast (convolutions and matrix products;
    losses, gradients and the optimizer stay float32). auto: bf16 for a network with an image
    encoder on a GPU (MinAtar Breakout on an H200: the update 2x faster, the same return at
    10M steps; docs/benchmarks.md), fp32 everywhere else."""
    max_grad_norm: float = 1.0
    """Global gradient norm clip (after averaging across ranks)."""
    norm_adv: bool = True
    """Normalize advantages to (A - mean) / (std + 1e-8) with the mean and std of the whole global
    batch (every rank's rollout together), once per iteration before the epochs; not per
    minibatch."""
    adam_eps: float = 1e-5
    """Adam epsilon."""
    save_interval: int = 50
    """Write a checkpoint every this many iterations (and always at the end)."""
    keep_checkpoints: int | None = None
    """Keep only the newest N checkpoints, deleting older ones (and their manifests) after each
    save; the newest checkpoint that verifies is never deleted, even when newer ones are corrupt.
    None keeps every checkpoint."""
    max_consecutive_skips: int = 10
    """Stop with an error after this many consecutive updates skipped for non-finite values."""
    grad_accum: int = 1
    """Compute each minibatch's gradient in this many chunks, their backward passes one after
    another, and step once on their size-weighted mean (RIPT's grad_accum): the same update to
    float rounding, with the activations of 1/K of the minibatch alive at a time. ppo and
    rloo; not with --policy.recurrent."""

    @property
    def last_iteration(self) -> int:
        """Where this run stops: --agent.stop-at, if set and sooner, else
        --agent.max-iterations."""
        if self.stop_at is None:
            return self.max_iterations
        return min(self.stop_at, self.max_iterations)

    @property
    def lr_min(self) -> float:
        return 1e-5

    @property
    def lr_max(self) -> float:
        return 1e-2


@dataclass(frozen=True)
class PSConfig:
    """Parameter-server strategies (--dist.strategy ps-bsp|ps-asp|ps-bap, after MALib)."""

    staleness: int = 2
    """ps-bap: a worker keeps computing with its cached parameters while it has fewer than this
    many rounds outstanding (1 = wait every round, as BSP)."""
    lifetime: float = 5.0
    """ps-bap: seconds a round may stay open; then it is closed with the gradients that came,
    and the late ones of that round are dropped (counted in dist/dropped)."""
    staleness_lr: bool = False
    """ps-asp: scale each step's learning rate by 1 / (staleness + 1)."""
    group_size: int = 0
    """Sink nodes (ps-*): ranks in groups of this many consecutive ranks; rank 0's group talks to
    the server directly, and the first rank of every other group is a sink node that closes
    its group's rounds and talks to the server for it (one gradient up, one set of parameters
    down). Set it to the processes per machine (--nproc) for one sink per machine; 0: none."""


@dataclass(frozen=True)
class DistConfig:
    strategy: Literal["allreduce", "elastic", "ps-bsp", "ps-asp", "ps-bap", "learner-actor"] = (
        "allreduce"
    )
    """How gradients become parameters across ranks: allreduce (DD-PPO: every rank collects and
    learns), elastic (allreduce that survives a lost rank without a restart: the survivors go
    on, a replacement rejoins; distrl train --nproc N only), a parameter server on rank 0 with
    the other ranks as workers: ps-bsp (wait for every worker each minibatch), ps-asp (apply
    each gradient as it comes), ps-bap (bounded staleness, see --dist.ps.*), or learner-actor
    (ranks < --dist.learners train, the others only collect; weights reach them through a
    routing table)."""
    backend: Literal["auto", "gloo", "nccl"] = "auto"
    """auto: NCCL when CUDA is used, Gloo otherwise."""
    timeout: float = 120.0
    """Seconds a collective may wait for a peer before every rank exits with an error."""
    profile_sync: bool = False
    """Barrier before each gradient all-reduce to measure time/sync (the barrier costs time)."""
    overlap: bool = False
    """allreduce, learner-actor's learners: start each bucket's gradient all-reduce while
    backward still runs (DD-PPO's overlap of communication with backprop); with two ranks the
    run is bitwise the same as without. Off by default: on the 2-core CPU machine it did not pay
    (docs/benchmarks.md, "Overlapping the all-reduce with backward")."""
    bucket_mb: float = 1.0
    """With --dist.overlap: MiB of gradients per bucket (one all-reduce each), filled from the
    last layer backward; a model smaller than one bucket makes one call, as without overlap."""
    preempt_fraction: float = 1.0
    """allreduce: DD-PPO's preemption threshold. Once this fraction of the ranks have collected
    their whole rollout, every other rank ends its rollout early (after at least a quarter of
    --agent.num-steps), so one slow rank does not hold up the iteration; the shorter rollout
    bootstraps from the value of the state it stopped at. 1.0: off (DD-PPO used 0.6)."""
    lr_scaling: Literal["none", "sqrt", "linear"] = "none"
    """The learning rate for a global batch that grows with the ranks: each collecting rank
    keeps its --env.num-envs and its --agent.num-minibatches, so a gradient step averages W
    times the rows of one process's. sqrt: --agent.learning-rate x sqrt(W) (the square-root
    rule for Adam); linear: x W (SGD's linear rule, aggressive for Adam); none: unchanged.
    W is the number of collecting ranks when the run (or an elastic restart) starts; epochs and
    minibatches stay as they are."""
    pin_cores: bool = True
    """CPU ranks: pin each local rank to its own share of the cores, so the scheduler never
    stacks two ranks on one core while the other idles (every rank would then wait for it)."""
    ps: PSConfig = field(default_factory=PSConfig)
    learners: int = 1
    """learner-actor: ranks 0..learners-1 learn (gradient all-reduce among themselves); the
    other ranks are actors, actor rank r feeding learner (r - learners) % learners."""
    sync: Literal["on-policy", "async"] = "on-policy"
    """learner-actor: on-policy: an actor waits for the weights its last rollout produced before
    collecting again (as one process); async: it goes on with the newest weights it holds."""
    max_policy_lag: int = 1
    """learner-actor, async: a rollout collected with weights more than this many versions old
    is dropped by its learner (counted in dist/dropped_samples), and an actor waits rather than
    collect one that would be. 1: on cartpole (1 learner + 2 actors, 5 seeds) async reached 475
    in 3.93 s against on-policy's 4.12 s; with 2 it took 4.99 s against 3.87 s (1.44x the env
    steps, at the maximum lag in 490 of 500 iterations)."""
    correction: Literal["vtrace", "none"] = "vtrace"
    """learner-actor, async: vtrace: advantages and value targets by V-trace (IMPALA's
    truncated importance weights, rho_bar = c_bar = 1) under the learner's current policy and
    critic, since a rollout may come from weights up to --dist.max-policy-lag versions old;
    none: GAE on the actor's values, as if on-policy."""

    @property
    def parameter_server(self) -> bool:
        return self.strategy.startswith("ps-")


@dataclass(frozen=True)
class EvalConfig:
    """Evaluation during training (``distrl.evaluation``): the deterministic policy on the main
    rank, in an env of its own, every episode decided before it runs. Episodic suites: each
    task from its held-out init states, success per task (``evaluate_suite``)."""

    interval: int = 0
    """Evaluate every this many iterations and after the last (0: never)."""
    episodes: int = 10
    """Episodes per evaluation (episodic suites: per task, held-out init states 0, 1, ...)."""
    seed: int = 12345
    """Env seed of every evaluation (the same episodes each time)."""
    num_envs: int = 64
    """At most this many envs step the episodes in parallel."""
    max_episode_steps: int | None = None
    """Episodic suites: the evaluation episodes' time limit (None: --env.max-episode-steps,
    the training one). A run trained on a shorter horizon is scored on the suite's own with
    e.g. 500 (Meta-World's)."""
    video_interval: int = 0
    """Film one deterministic episode (env seed --eval.seed) every this many iterations and
    after the last, on the main rank, to `RUN/videos/iteration_<k>.mp4` (0: never; needs the
    video extra and a task that renders, as distrl play --video)."""


@dataclass(frozen=True)
class MultiTaskConfig:
    """Multi-task episodic RLOO sharding (RIPT); read only by episodic suites (``reach10``,
    ``metaworld-mt10``). The parallel envs per rank are ``--env.num-envs``; of ``--agent`` the
    PPO-clip fields apply (epochs, minibatches, learning rate and schedule, clip, entropy, KL,
    grad norm, iterations, save interval), the critic and GAE ones do not (RLOO has no critic)."""

    tasks: tuple[str, ...] = ()
    """The suite's tasks to train (names); empty: all of them."""
    data_batch_size: int = 64
    """Episodes each rank collects per iteration, exactly; a multiple of group_size."""
    group_size: int = 8
    """K: rollouts per init state, one RLOO group (leave-one-out baseline over K - 1)."""
    drop_uniform: bool = True
    """Dynamic sampling: drop the groups whose K rewards are all equal (counted, not trained)."""
    refill_rounds: int = 0
    """With drop_uniform: up to this many more collections per iteration replace the groups
    whose K outcomes were all equal with groups of the task's next init states (RIPT's
    dynamic-sampling refill), so the update trains on a full batch where it can; 0: train on
    the groups kept. Each round's env steps count."""
    smart_init_states: int = 0
    """RIPT's init-state tracking: an init state whose group's K outcomes were all equal (all
    succeeded or all failed) sits out its next this-many turns (the task's cursor passes over
    it), so the batches go to the states that still teach something; 0: every state in turn."""
    demos: str | None = None
    """A `distrl demos` file of this suite: every RLOO minibatch adds bc_coef times the
    behaviour-cloning loss of a minibatch of its steps (DAPG), which holds the tasks that RLOO
    does not train (uniform groups) near their demonstrations."""
    bc_coef: float = 0.0
    """Weight of that behaviour-cloning loss (with --multitask.demos; 0 without)."""
    bc_batch_size: int = 256
    """Demonstration steps per minibatch for that loss (drawn afresh each minibatch)."""
    self_imitation: int = 0
    """With --multitask.demos: also keep up to this many steps per task of the rank's own
    successful training episodes (the newest), and draw the behaviour-cloning minibatches from
    the demonstrations and these together (self-imitation: successes on goals the
    demonstrations never showed, also those of groups RLOO drops as uniform). 0: off."""
    episode_weight: Literal["steps", "equal"] = "steps"
    """How the loss weighs a kept episode: by its valid steps (the mean over steps), or every
    episode the same (each step's advantage times mean kept length / its episode's length)."""
    noise_beta: float = 0.0
    """Colour of the Gaussian policy's exploration noise in collection: 0 draws white noise
    step by step; beta > 0 draws each episode's noise with power 1 / f^beta along its steps
    (0.5 to 1: correlated over tens of steps), still N(0, sigma^2) at each step, so the
    log-probabilities and PPO's ratios are unchanged (Hollenstein et al. 2024)."""
    skip_solved: float | None = None
    """Skip a task of a rank's shard while its latest training success (agreed over the ranks)
    is at least this, so the rollouts go to the unsolved ones; a skipped task is trained again
    once it has waited solved_revisit iterations (the demonstrations term, if any, holds it
    meanwhile). None: every task in turn (RIPT). Needs agreed statistics (allreduce, ps-bsp)."""
    solved_revisit: int = 10
    """With skip_solved: the most iterations a rank goes without training a solved task."""
    balance: Literal["episodes", "tasks"] = "episodes"
    """Gradient weights: every kept episode counts the same, or every task trained this
    iteration counts the same (ranks sharing a task split its share by their episodes)."""
    early_stop_success: float | None = None
    """Stop once the suite's success (mean over tasks of each task's latest success) is at
    least this for early_stop_patience iterations in a row; None trains max_iterations."""
    early_stop_patience: int = 3
    """Consecutive iterations at or above early_stop_success before stopping."""

    @property
    def init_states_per_iteration(self) -> int:
        """Init states a rank takes from its task's list each iteration."""
        return self.data_batch_size // self.group_size


@dataclass(frozen=True)
class TrainConfig:
    task: str = "cartpole"
    """Registered task name (see `distrl list`)."""
    algorithm: str | None = None
    """ppo, rloo, pqn, dqn, sac or td3 (docs/algorithms.md); None: the task's own
    (rloo for the episodic suites, else ppo). Its defaults come between the task's and yours."""
    env: EnvConfig = field(default_factory=EnvConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    dist: DistConfig = field(default_factory=DistConfig)
    multitask: MultiTaskConfig = field(default_factory=MultiTaskConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    offpolicy: OffPolicyConfig = field(default_factory=OffPolicyConfig)
    seed: int = 0
    """Base seed; each rank uses seed + global rank."""
    device: str = "auto"
    """auto: cuda:{LOCAL_RANK} when CUDA is available, else cpu. Or an explicit torch device."""
    distributed: bool = False
    """Join a torch.distributed process group (set by torchrun's env vars; see --nproc)."""
    nproc: int = 1
    """Start this many local processes under torchrun (standalone, loopback); per node with
    --nnodes."""
    nnodes: int = 1
    """Machines in an elastic run (--dist.strategy elastic): run the same command on each, with
    its own --node-rank and node 0's --master-addr; each starts --nproc ranks. Other strategies
    span machines with torchrun's multi-node recipe (docs/training.md)."""
    node_rank: int = 0
    """This machine's index, 0 .. --nnodes - 1 (with --nnodes); node 0 hosts the run's
    membership store, and a node started again after it was lost rejoins the run."""
    master_addr: str = "127.0.0.1"
    """With --nnodes: node 0's address, reachable from every node; node 0's store listens on
    exactly this address (not on every interface)."""
    master_port: int = 29500
    """With --nnodes: the port of node 0's membership store."""
    max_restarts: int = 0
    """torchrun elastic restarts when a rank dies (with --nproc N); the restarted ranks resume
    from the run's newest valid checkpoint (--resume auto is implied)."""
    stop_timeout: float = 300.0
    """With --nproc N: seconds the launcher waits, after Ctrl-C or SIGTERM, for every rank to
    stop at an iteration boundary and save a final checkpoint before it kills them (a second
    Ctrl-C kills at once); also torchrun's --shutdown-timeout. At least one iteration and a
    save."""
    threads: int | None = None
    """Intra-op threads per process; default cores / local world size."""
    run_dir: str | None = None
    """Output directory; default `runs/<task>/<timestamp>`."""
    resume: str | None = None
    """Checkpoint path, run directory, or 'auto' (newest valid checkpoint in --run-dir)."""
    init_from: str | None = None
    """Start from this checkpoint's policy (weights and observation normalizer): a run
    directory (its newest valid checkpoint), a `ckpt_*.pt` or a `best.pt`; fresh optimizer,
    iteration 0. Same task and --policy.* as that run. A checkpoint found by --resume auto
    wins."""
    init_normalizer: Literal["frozen", "updated"] = "frozen"
    """With --init-from: keep that policy's observation statistics as they are (its weights
    were fitted to them; a policy cloned from a few hundred demonstration steps loses most of its
    success when the first rollouts move them), or keep merging the rollouts into them."""
    tensorboard: bool = True
    """Write TensorBoard events into the run directory."""
    wandb: bool = False
    """Log to Weights & Biases (needs the wandb extra)."""
    wandb_project: str | None = None
    """W&B project; None: $WANDB_PROJECT, else 'distrl'."""
    wandb_entity: str | None = None
    """W&B entity (user or team); None: $WANDB_ENTITY, else your default entity."""
    progress: bool = True
    """Show the live progress display on the console."""

    @property
    def batch_size(self) -> int:
        """Transitions per rank per iteration."""
        return self.env.num_envs * self.agent.num_steps

    @property
    def minibatch_size(self) -> int:
        """Transitions per rank per minibatch."""
        return self.batch_size // self.agent.num_minibatches

    def with_lr_scaling(self, collectors: int) -> TrainConfig:
        """This config with ``agent.learning_rate`` scaled for ``collectors`` collecting ranks
        by ``--dist.lr-scaling`` (unchanged for "none" or one collector)."""
        factor = {"none": 1.0, "sqrt": math.sqrt(max(1, collectors)), "linear": max(1, collectors)}
        scale = factor[self.dist.lr_scaling]
        if scale == 1.0:
            return self
        lr = self.agent.learning_rate * scale
        return dataclasses.replace(self, agent=dataclasses.replace(self.agent, learning_rate=lr))

    def with_budget(self, collectors: int) -> TrainConfig:
        """This config with ``agent.max_iterations`` set from ``agent.total_timesteps`` for
        ``collectors`` collecting ranks (unchanged when no budget is set)."""
        total = self.agent.total_timesteps
        if total is None:
            return self
        per_iteration = max(1, collectors) * self.batch_size
        iterations = -(-total // per_iteration)
        return dataclasses.replace(
            self, agent=dataclasses.replace(self.agent, max_iterations=iterations)
        )


def _positive(errors: list[str], name: str, value: float, fix: str) -> None:
    """A positive finite number (NaN and inf are refused too: both would train nonsense)."""
    if not math.isfinite(value):
        errors.append(f"{name} must be a finite number, got {value}; {fix}")
    elif value <= 0:
        errors.append(f"{name} must be positive, got {value}; {fix}")


def _non_negative(errors: list[str], name: str, value: float, fix: str) -> None:
    if not (math.isfinite(value) and value >= 0):
        errors.append(f"{name} must be 0 or more (and finite), got {value}; {fix}")


def validate(cfg: TrainConfig) -> TrainConfig:
    """Check every relation between fields; raise one ValueError listing every problem. (An
    unknown task is refused by the registry, with close matches, before this runs.)"""
    errors: list[str] = []
    a, e = cfg.agent, cfg.env
    _positive(errors, "--env.num-envs", e.num_envs, "set it to 1 or more")
    _positive(errors, "--agent.num-steps", a.num_steps, "set it to 1 or more")
    _positive(errors, "--agent.max-iterations", a.max_iterations, "set it to 1 or more")
    if a.stop_at is not None:
        _positive(errors, "--agent.stop-at", a.stop_at, "or leave it unset")
    _positive(errors, "--agent.num-epochs", a.num_epochs, "set it to 1 or more")
    _positive(errors, "--agent.num-minibatches", a.num_minibatches, "set it to 1 or more")
    _positive(errors, "--agent.learning-rate", a.learning_rate, "use e.g. 3e-4")
    _positive(errors, "--agent.save-interval", a.save_interval, "set it to 1 or more")
    _positive(errors, "--nproc", cfg.nproc, "set it to 1 or more")
    _positive(errors, "--dist.timeout", cfg.dist.timeout, "use e.g. 120")
    _positive(errors, "--dist.bucket-mb", cfg.dist.bucket_mb, "use e.g. 1")
    _positive(errors, "--stop-timeout", cfg.stop_timeout, "use e.g. 300")
    _positive(errors, "--agent.max-consecutive-skips", a.max_consecutive_skips, "use e.g. 10")
    _positive(errors, "--agent.grad-accum", a.grad_accum, "use 1 (no accumulation) or more")
    if a.grad_accum > 1 and cfg.policy.recurrent != "none":
        errors.append(
            "--agent.grad-accum splits minibatches into chunks of rows, and a recurrent "
            "policy's minibatches are whole sequences; drop --agent.grad-accum"
        )
    if a.grad_accum > 1 and cfg.dist.overlap:
        errors.append(
            "--agent.grad-accum runs K backward passes per step, and --dist.overlap sends the "
            "gradient during the one backward; drop one of them"
        )
    if cfg.threads is not None:
        _positive(errors, "--threads", cfg.threads, "set it to 1 or more, or leave it unset")
    if cfg.max_restarts < 0:
        errors.append(
            f"--max-restarts must be 0 or more, got {cfg.max_restarts}; 0 disables restarts"
        )
    elif cfg.max_restarts > 0 and cfg.nproc == 1 and cfg.nnodes == 1:
        errors.append(
            f"--max-restarts {cfg.max_restarts} restarts the ranks that --nproc N starts under "
            f"torchrun, and one process (--nproc 1) has no torchrun to restart it; add --nproc N "
            f"(N >= 2), or drop --max-restarts"
        )
    _validate_nodes(errors, cfg)
    if e.max_episode_steps is not None:
        _positive(errors, "--env.max-episode-steps", e.max_episode_steps, "or leave it unset")
    if cfg.dist.lr_scaling not in ("none", "sqrt", "linear"):
        errors.append(f"--dist.lr-scaling must be none, sqrt or linear: {cfg.dist.lr_scaling!r}")
    if e.vectorization not in ("sync", "async"):
        errors.append(f"--env.vectorization must be sync or async, got {e.vectorization!r}")
    _validate_agent(errors, a)
    _validate_policy(errors, cfg.policy)
    if a.num_minibatches > 0 and e.num_envs > 0 and a.num_steps > 0:
        batch = cfg.batch_size
        if batch % a.num_minibatches:
            lo = batch - batch % a.num_minibatches
            errors.append(
                f"rollout batch {e.num_envs} envs x {a.num_steps} steps = {batch} is not "
                f"divisible by --agent.num-minibatches {a.num_minibatches}; choose num-envs so "
                f"that the batch is a multiple (e.g. a batch of {lo} or {lo + a.num_minibatches})"
                f" or a minibatch count that divides {batch}"
            )
        elif batch // a.num_minibatches < 2:
            errors.append(
                f"minibatch size {batch} // {a.num_minibatches} = {batch // a.num_minibatches} "
                f"is below 2 (advantage std and the update need at least 2 samples); raise "
                f"--env.num-envs or --agent.num-steps, or lower --agent.num-minibatches"
            )
    ps = cfg.dist.ps
    if ps.staleness < 1:
        errors.append(f"--dist.ps.staleness must be 1 or more, got {ps.staleness}; 1 = BSP")
    _positive(errors, "--dist.ps.lifetime", ps.lifetime, "use e.g. 5 (seconds)")
    if ps.group_size == 1 or ps.group_size < 0:
        errors.append(
            f"--dist.ps.group-size must be 0 (no sink nodes) or 2 or more (a sink and its "
            f"workers), got {ps.group_size}"
        )
    _positive(errors, "--dist.learners", cfg.dist.learners, "use e.g. 1")
    if cfg.offpolicy.actor_epsilon is not None and cfg.dist.strategy != "learner-actor":
        errors.append(
            "--offpolicy.actor-epsilon sets each actor's exploration under --dist.strategy "
            "learner-actor (Ape-X); add that, or drop the option"
        )
    f = cfg.dist.preempt_fraction
    if not (math.isfinite(f) and 0.0 < f <= 1.0):
        errors.append(
            f"--dist.preempt-fraction must be in (0, 1], got {f}; use e.g. 0.6 (DD-PPO's), or "
            f"1 to turn preemption off"
        )
    if cfg.dist.max_policy_lag < 0:
        errors.append(f"--dist.max-policy-lag must be 0 or more, got {cfg.dist.max_policy_lag}")
    if a.keep_checkpoints is not None and a.keep_checkpoints < 1:
        errors.append(
            f"--agent.keep-checkpoints must be 1 or more, got {a.keep_checkpoints}; it is how "
            f"many of the newest checkpoints to keep (leave it unset to keep them all)"
        )
    _validate_multitask(errors, cfg.multitask)
    if cfg.init_from is None and cfg.init_normalizer != "frozen":
        errors.append(
            f"--init-normalizer {cfg.init_normalizer} applies to a run started with --init-from; "
            f"add --init-from or drop it"
        )
    if cfg.init_from is not None and cfg.resume not in (None, "auto"):
        errors.append(
            f"--init-from {cfg.init_from} and --resume {cfg.resume} contradict each other: "
            f"--resume continues a run (its optimizer, iteration and env states), --init-from "
            f"starts a new one from a policy; keep one"
        )
    if not 0 <= cfg.env.num_workers <= cfg.env.num_envs:
        errors.append(
            f"--env.num-workers must be in 0..{cfg.env.num_envs} (--env.num-envs; 0: one per "
            f"core), got {cfg.env.num_workers}"
        )
    if cfg.eval.interval < 0:
        errors.append(f"--eval.interval must be 0 (off) or more, got {cfg.eval.interval}")
    if cfg.eval.episodes < 1:
        errors.append(f"--eval.episodes must be at least 1, got {cfg.eval.episodes}")
    if cfg.eval.num_envs < 1:
        errors.append(f"--eval.num-envs must be at least 1, got {cfg.eval.num_envs}")
    if cfg.eval.max_episode_steps is not None and cfg.eval.max_episode_steps < 1:
        errors.append(
            f"--eval.max-episode-steps must be at least 1 or None (the training limit), got "
            f"{cfg.eval.max_episode_steps}"
        )
    if a.total_timesteps is not None:
        _positive(errors, "--agent.total-timesteps", a.total_timesteps, "or leave it unset")
    if a.target_return is not None and not math.isfinite(a.target_return):
        errors.append(
            f"--agent.target-return must be a finite return, got {a.target_return}; or leave it "
            f"unset"
        )
    if a.target_kl is not None and not a.target_kl > 0:  # NaN too
        errors.append(f"--agent.target-kl must be positive or None, got {a.target_kl}")
    _validate_offpolicy(errors, cfg.offpolicy)
    if errors:
        raise ValueError("invalid configuration:\n  - " + "\n  - ".join(errors))
    return cfg


def _validate_offpolicy(errors: list[str], o: OffPolicyConfig) -> None:
    for name in ("buffer_size", "batch_size", "updates", "target_interval", "policy_delay"):
        _positive(
            errors, "--offpolicy." + name.replace("_", "-"), getattr(o, name), "use 1 or more"
        )
    _non_negative(errors, "--offpolicy.learning-starts", o.learning_starts, "0 updates at once")
    for name in ("exploration_noise", "policy_noise", "noise_clip"):
        _non_negative(errors, "--offpolicy." + name.replace("_", "-"), getattr(o, name), "e.g. 0.1")
    unit = ("tau", "eps_start", "eps_end", "eps_fraction", "q_lambda")
    for name in unit:
        v = getattr(o, name)
        if not 0.0 <= v <= 1.0:
            flag = "--offpolicy." + name.replace("_", "-")
            errors.append(f"{flag} must lie in [0, 1], got {v}")
    if o.tau == 0.0:
        errors.append("--offpolicy.tau 0 never moves the target networks; use e.g. 0.005, or 1.0")
    if o.alpha is not None:
        _non_negative(errors, "--offpolicy.alpha", o.alpha, "or leave it unset to learn it")
    _positive(errors, "--offpolicy.n-step", o.n_step, "use 1 (one-step) or more")
    if o.actor_epsilon is not None and not 0.0 < o.actor_epsilon < 1.0:
        errors.append(
            f"--offpolicy.actor-epsilon must be in (0, 1), got {o.actor_epsilon}; Ape-X uses 0.4"
        )

    _validate_priorities(errors, o)


def _validate_priorities(errors: list[str], o: OffPolicyConfig) -> None:
    """The prioritized replay's numbers, refused when set without --offpolicy.prioritized (they
    would change nothing)."""
    defaults = OffPolicyConfig()
    for name in ("priority_alpha", "priority_beta", "priority_eps"):
        if not o.prioritized and getattr(o, name) != getattr(defaults, name):
            flag = "--offpolicy." + name.replace("_", "-")
            errors.append(
                f"{flag} has no effect without --offpolicy.prioritized; add it, or drop {flag}"
            )
    _non_negative(errors, "--offpolicy.priority-alpha", o.priority_alpha, "e.g. 0.6")
    if not 0.0 <= o.priority_beta <= 1.0:
        errors.append(f"--offpolicy.priority-beta must lie in [0, 1], got {o.priority_beta}")
    _positive(errors, "--offpolicy.priority-eps", o.priority_eps, "e.g. 1e-6")


def _validate_nodes(errors: list[str], cfg: TrainConfig) -> None:
    """--nnodes and its companions: elastic only, a node rank in range, a usable port."""
    _positive(errors, "--nnodes", cfg.nnodes, "set it to 1 or more")
    if cfg.nnodes < 1:
        return
    if not 0 <= cfg.node_rank < cfg.nnodes:
        errors.append(
            f"--node-rank {cfg.node_rank} is not a node of --nnodes {cfg.nnodes}; give each "
            f"machine its own rank 0 .. {cfg.nnodes - 1}"
        )
    if not 0 < cfg.master_port < 65536:
        errors.append(f"--master-port must be 1..65535, got {cfg.master_port}")
    if cfg.nnodes > 1 and cfg.dist.strategy != "elastic":
        errors.append(
            f"--nnodes {cfg.nnodes} starts the ranks of --dist.strategy elastic on several "
            f"machines; for {cfg.dist.strategy} use torchrun's multi-node recipe: torchrun "
            f"--nnodes {cfg.nnodes} --nproc-per-node {cfg.nproc} --rdzv-backend c10d "
            f"--rdzv-endpoint HOST:PORT --no_python train {cfg.task} --distributed True "
            f"(docs/training.md)"
        )


def _validate_agent(errors: list[str], a: AgentConfig) -> None:
    """The PPO numbers that have a legal range but no relation to other fields."""
    if not 0.0 < a.gamma <= 1.0:  # also refuses NaN
        errors.append(
            f"--agent.gamma must be in (0, 1], got {a.gamma}; it is the discount factor, "
            f"e.g. 0.99 (0 would make every return the immediate reward)"
        )
    if not 0.0 <= a.gae_lambda <= 1.0:  # 0 is a real choice: one-step TD advantages
        errors.append(f"--agent.gae-lambda must be in [0, 1], got {a.gae_lambda}; use e.g. 0.95")
    _positive(errors, "--agent.clip-coef", a.clip_coef, "use e.g. 0.2")
    if not a.max_grad_norm > 0:  # inf is allowed: it turns the clip off
        errors.append(
            f"--agent.max-grad-norm must be positive, got {a.max_grad_norm}; use e.g. 0.5 or "
            f"1.0 (inf turns gradient clipping off)"
        )
    _positive(errors, "--agent.adam-eps", a.adam_eps, "use e.g. 1e-5")
    _positive(errors, "--agent.desired-kl", a.desired_kl, "use e.g. 0.01")
    _non_negative(errors, "--agent.vf-coef", a.vf_coef, "use e.g. 0.5 or 1.0")
    _non_negative(errors, "--agent.ent-coef", a.ent_coef, "use e.g. 0.0 or 0.01")


def _validate_policy(errors: list[str], p: PolicyConfig) -> None:
    for name, widths in (("actor-hidden", p.actor_hidden), ("critic-hidden", p.critic_hidden)):
        if any(w < 1 for w in widths):
            errors.append(
                f"--policy.{name} widths must be 1 or more, got {' '.join(map(str, widths))}; "
                f"e.g. --policy.{name} 64 64"
            )
    if not math.isfinite(p.init_log_std):
        errors.append(f"--policy.init-log-std must be finite, got {p.init_log_std}; use e.g. 0.0")
    if p.popart_tasks < 0:
        errors.append(
            f"--policy.popart-tasks must be 0 (off) or the width of the observations' task "
            f"one-hot, got {p.popart_tasks}"
        )


def _validate_multitask(errors: list[str], m: MultiTaskConfig) -> None:
    if m.skip_solved is not None and not 0.0 < m.skip_solved <= 1.0:
        errors.append(
            f"--multitask.skip-solved must be in (0, 1] or None, got {m.skip_solved}; it is a "
            f"training success, e.g. 0.9"
        )
    _positive(errors, "--multitask.solved-revisit", m.solved_revisit, "use e.g. 10")
    if m.smart_init_states < 0:
        errors.append(
            f"--multitask.smart-init-states must be 0 (off) or more, got {m.smart_init_states}"
        )
    if m.refill_rounds < 0:
        errors.append(f"--multitask.refill-rounds must be 0 or more, got {m.refill_rounds}")
    elif m.refill_rounds and not m.drop_uniform:
        errors.append(
            "--multitask.refill-rounds replaces the groups --multitask.drop-uniform drops, and "
            "it is off; drop --multitask.refill-rounds or set --multitask.drop-uniform True"
        )
    if not 0.0 <= m.noise_beta <= 4.0:  # NaN too
        errors.append(
            f"--multitask.noise-beta must be in [0, 4], got {m.noise_beta}; 0 is white noise, "
            f"0.5 to 1 correlates it over tens of steps"
        )
    if m.group_size < 2:
        errors.append(
            f"--multitask.group-size must be at least 2 (a leave-one-out baseline needs another "
            f"rollout of the same init state), got {m.group_size}"
        )
    _positive(errors, "--multitask.data-batch-size", m.data_batch_size, "use e.g. 64")
    if m.group_size >= 2 and m.data_batch_size > 0 and m.data_batch_size % m.group_size:
        lo = max(m.data_batch_size - m.data_batch_size % m.group_size, m.group_size)
        errors.append(
            f"--multitask.data-batch-size {m.data_batch_size} is not a multiple of "
            f"--multitask.group-size {m.group_size} (every RLOO group holds K episodes of one "
            f"init state); use {lo} or {lo + m.group_size}, or a group size dividing "
            f"{m.data_batch_size}"
        )
    if m.early_stop_success is not None and not 0.0 < m.early_stop_success <= 1.0:
        errors.append(
            f"--multitask.early-stop-success must be in (0, 1] or None, got {m.early_stop_success}"
        )
    _positive(errors, "--multitask.early-stop-patience", m.early_stop_patience, "use e.g. 3")
    if not (math.isfinite(m.bc_coef) and m.bc_coef >= 0):
        errors.append(f"--multitask.bc-coef must be a finite number >= 0, got {m.bc_coef}")
    elif (m.demos is None) != (m.bc_coef == 0):
        errors.append(
            f"--multitask.demos and --multitask.bc-coef go together (demos {m.demos!r}, "
            f"bc-coef {m.bc_coef}): give both, e.g. --multitask.demos mt10-5.pt "
            f"--multitask.bc-coef 0.01, or neither"
        )
    _positive(errors, "--multitask.bc-batch-size", m.bc_batch_size, "use e.g. 256")
    if m.self_imitation < 0:
        errors.append(
            f"--multitask.self-imitation must be >= 0 (steps kept per task), got "
            f"{m.self_imitation}; 0 turns it off"
        )
    elif m.self_imitation > 0 and m.demos is None:
        errors.append(
            f"--multitask.self-imitation {m.self_imitation} adds the rank's own successes to "
            f"the demonstrations term: give --multitask.demos FILE and --multitask.bc-coef too"
        )


def to_dict(cfg: TrainConfig) -> dict:
    """Plain nested dict (for config.yaml and checkpoint metadata)."""
    return dataclasses.asdict(cfg)


def from_dict(d: dict) -> TrainConfig:
    """Inverse of ``to_dict`` (nested dataclasses rebuilt, tuples restored)."""

    def build(cls, data):
        hints = typing.get_type_hints(cls)
        kwargs = {}
        for f in dataclasses.fields(cls):
            if f.name not in data:
                continue
            v, kind = data[f.name], hints[f.name]
            if dataclasses.is_dataclass(kind) and isinstance(v, dict):
                v = build(kind, v)
            elif isinstance(v, list):
                v = tuple(v)
            kwargs[f.name] = v
        return cls(**kwargs)

    return build(TrainConfig, d)
