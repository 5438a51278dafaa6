"""``auto_checkpoint(model, budget)``: any PyTorch model trained under a memory budget, in one call.

The model's graph is captured once per input signature with ``torch.export`` (non-strict, the
training IR: the same ATen operators eager mode dispatches, dropout and BatchNorm included, the
model's own parameter and buffer objects), and cut into a chain (Note [Cut points]). The chain's
stages are ``torch.fx`` sub-graphs run by :class:`~torch_exec.CheckpointedSequential`, which profiles
them, solves for the budget and runs the schedule; a model whose inputs' branches meet (two towers, a
Siamese network) runs as a join network instead (Note [Join detection]). Where the graph cannot be captured
(data-dependent Python control flow), the model's own structure is used instead (Note [Block
fallback]); when neither works, one error names both reasons and the manual route.

Note [Cut points]
    A node of the captured graph either *carries* gradient (it reads a trainable parameter, an input
    that requires grad, or a carrying node) or is *side* data: token ids, labels, masks and position
    ids made from them, buffer bookkeeping (``num_batches_tracked += 1``). Side nodes run once per
    step before the chain (the prologue) and stay available to every stage; they need no gradient,
    so no stage ever recomputes them (except one that draws random numbers after a carrying node
    drew: it stays in the chain, so that every draw keeps plain autograd's order). They are held
    through the step, so the budget counts them:
    each new storage behind them once, whole (:func:`side_nbytes`; views such as a mask expanded to
    the batch add nothing). A cut after carrying node p is valid when the carrying values
    made up to p and used after p are at most :data:`MAX_CROSSING` tensor(s) (more where a value read late
    leaves few cuts: Note [Values read late]), and no later node writes in place into one of them (a
    held checkpoint must not change). These are the articulation points
    of the data-flow graph with parameters, buffers and side data excluded. Of the valid cuts at most
    ``max_stages - 1`` are kept, spread evenly over the bytes the carrying nodes allocate (a proxy of
    both memory and time; the solver then merges stages where nothing is saved between them).
    The last stage returns every carrying tensor of the model's output; the output's structure
    (tuple, dict, a ``CausalLMOutput``) is rebuilt around them.

Note [Side values nothing reads]
    A frozen part of the model (a backbone whose parameters require no grad, a linear probe's encoder)
    is side data too: its intermediates need no gradient. The prologue returns only the side values a
    stage, the join's head or the model's output reads (the frozen part's last value, the masks); the
    others are freed inside it after their last use, as plain autograd frees them. Returning them all
    held a frozen backbone's every intermediate through the step: a two-tower probe measured 5.76x
    plain autograd's peak, and "100%" was that much (bench/repros/rv_join_frozen_towers.py).

Note [What a captured graph fixes]
    ``torch.export`` runs the model's Python once and keeps the operations it issued: every value the
    Python read is fixed in the graph. Beside the inputs, the training modes and the parameters'
    dtypes and ``requires_grad`` (``module_state_key``), the input signature therefore holds each
    module's scalar attributes (``Dropout.p``, a temperature the loop anneals) and which forward hooks
    are registered (``captured_state_key`` in torch_exec/_util.py): changing one captures again, where
    the graph captured before went on with the old value (a review: loss and gradients frozen at the
    first step's temperature, 0.386 off). A forward hook runs while capturing, on FakeTensors too, and
    what it does to outputs is in the graph; it does not run at each step, so the capture says so once
    (hooks that must run every step, logging or activation statistics: ``capture="blocks"``).
    A plain tensor attribute (``self.scale = torch.tensor(1.0)``, not a buffer) is held by the graph as a
    constant, the very tensor object: written in place it is read live, but a loop that replaced it
    (``model.scale = torch.tensor(1.5)``) trained on with the old value, silently (a review, 2026-11-29:
    bench/repros/rv20a_auto_tensor_attribute_fixed_in_graph.py: loss 1.53 where plain autograd gave 163.9).
    The capture records which module attributes its constants are (``Capture.constants``, from
    ``ep.constants``) and a call that finds one replaced captures again, warning each time with the count (a
    capture costs seconds; a buffer written in place costs nothing; a loop that replaced one at every step
    re-exported at every step, silently after a first warning: review rv20r). Python values read in the
    forward that no module attribute holds as a scalar (a global, a list attribute's items) stay fixed at
    capture, unseen.

Note [Attributes the forward writes at every call]
    A forward that keeps a Python counter on a module and computes from it (``self.calls += 1; alpha =
    min(1, self.calls / 4)``: a warm-up factor, an annealed temperature, a quantiser's observer steps) is
    run once by torch.export, which fixes the value it read and keeps no Python side effect (and puts the
    modules' attributes back when it returns): the graph ran on with the capture's value and the counter
    never moved again, silently (a review, 2026-11-29:
    bench/repros/rv20a_auto_forward_counter_attribute_frozen.py: loss 0.0705 where plain autograd gave
    0.0121). The probe (Note [Probing the model]) has run the forward once before the export run, so an
    attribute written at the first call only (a warn-once flag, a lazy module's sizes) is not written
    again there; one that is (:func:`_export_watching_attributes`, read by a forward hook where the
    model's forward returns) is written at every call: export is refused naming it (``Class.attr``, the
    two values) and the fix (a buffer updated in place, which the graph writes at each step; the training
    loop; ``capture="blocks"``). The block fallback runs the model's code at each step, so the counter
    moves there, but the capture's own runs of that code (the probe, finding and checking the blocks,
    measuring the rest) moved it too: the wrapper puts the attributes written at every call (those export
    found, and those that changed after the probe's forward) back as they were before the first call's
    capture (:meth:`AutoCheckpointed._put_back_written`; ``prepare()`` likewise), and leaves them out of
    the input signature (``AutoCheckpointed._unkeyed``, by position in the modules' walk; a counter
    keyed captured again at every step), so that the counter ends each step as plain autograd's. One
    written inside a block's own forward is refused by the profiler (Note [Attributes a forward writes]
    in torch_exec/profiler.py).

Note [Gradient hooks registered in the forward]
    A forward that calls ``h.register_hook(fn)`` on an intermediate tensor (gradient scaling, a
    gradient-reversal trick) changes the gradients of everything before ``h``. ``torch.export`` keeps
    the operations, not the hook: the layers before it got plain gradients (a review: a third of plain
    autograd's). The block fallback runs the model's code around the blocks once per step, with every
    block call after the first returning the chain's output: a hook the model puts on a block's output
    lands on the last block's. ``h.retain_grad()`` is such a hook too (it fills ``h.grad`` in the backward):
    export dropped it and ``h.grad`` stayed None, silently (a review, 2026-11-29: bench/repros/
    rv20a_auto_retain_grad_in_forward_dropped.py); and no capture could fill it, since the schedule
    back-propagates through its own runs of the layers, not through the ``h`` it returned. Both captures
    therefore watch ``Tensor.register_hook`` and ``Tensor.retain_grad`` on a non-leaf (a
    ``TorchFunctionMode``, :class:`_TensorHooks`, :data:`_WATCHED_HOOKS`) in their checking run and refuse,
    naming the method and the line; a ``register_hook`` inside a block's own forward runs with the block and
    is left alone. ``retain_grad`` is refused wherever it is, by the probe (Note [Probing the model]), before
    either capture: the block fallback's runs without grad would raise on it, or it would fill the ``.grad``
    of a tensor the user never sees.

Note [Probing the model]
    Before either capture, the first call of an input signature runs the model once as plain autograd
    (:func:`_probe_model`; its saved tensors are dropped, so it holds no activations), on copies of the
    inputs, and every capture run after it uses those copies too: a forward that writes into its input
    (``x.mul_(2)``) changed the caller's tensor once per capture run, and the first step's loss was 4.68
    against plain autograd's 1.29 (a review). The probe refuses, before any capture, what neither capture
    can replay, each of which trained silently wrong before:

    - draws from Python's ``random`` or NumPy's global generator in the forward (LayerDrop written as
      ``if random.random() < p``): ``torch.export`` fixes the first draw in the graph (the same layers
      skipped at every step, three of eight never trained), and a recomputation could not replay it
      (the executor records torch's generators only). Drawing with torch (``torch.rand(())``) works.
    - tensors carrying gradient that the forward stores on a module off the path to its outputs
      (``self.aux_loss = ...``, or held through list, tuple and dict attributes up to four levels deep,
      ``self.stats["aux"].append(...)``, read by the training loop; a loss kept in a tuple or in a dict's
      list went unseen until a review of 2026-11-27): under export the attribute keeps the probe's
      value, and in the block fallback a block run without a tape stores one with no gradient (five
      blocks' auxiliary losses gave their parameters no gradient). Returning it from ``forward`` works.
      A stored tensor the outputs' graph reaches is left alone: weight norm's and spectral norm's hooks
      set ``module.weight`` that way, and a kept attention map is one (a second review: the first
      version of the probe refused all three, which export trains with plain autograd's gradients).

    - ``h.retain_grad()`` on an intermediate (Note [Gradient hooks registered in the forward]).
    - reentrant ``torch.utils.checkpoint`` (``use_reentrant=True``: :data:`CHECKPOINT_FUNCTION`, seen by
      :func:`_reentrant_checkpoints`). Its forward runs the layers without grad, so export's graph gave them
      no gradient; export was refused (Note [Custom autograd Functions]), and the block fallback then trained
      with every gradient wrong (its backward recomputes the block, which the fallback answers with the
      chain's output; a review, 2026-11-29: bench/repros/rv20a_blocks_reentrant_checkpoint_wrong_grads.py).
      ``use_reentrant=False`` is captured by export and trains as plain autograd.

    A forward that seeds the generator itself (``np.random.seed(1234)`` before a fixed permutation, as
    transformers' BigBird does) draws the same numbers from any state: the probe runs once more from
    another state, and refuses only a generator that then ends elsewhere. A forward that seeds torch's
    own default generator (``torch.manual_seed(1234); x = x + 0.1 * torch.randn_like(x)``, fixed noise
    or a fixed random projection) is not kept by torch.export either, which keeps operations, not the
    seeding: the graph's draws (that noise and every dropout after it) took whatever state the generator
    was in, and every gradient and the RNG state after the step differed from plain autograd's, silently
    (a review, 2026-11-29: bench/repros/rv20a_auto_torch_manual_seed_in_forward.py). The probe's forward
    runs with the default generators (CPU, and the CUDA devices') seeded with :data:`_PROBE_SEED`; one
    whose ``initial_seed()`` ends otherwise was seeded by the forward (``torch.manual_seed``,
    ``torch.seed``, ``torch.set_rng_state``: no second forward is needed), and export is refused naming
    it (``_Probe.seeded``), so that under ``capture="auto"`` the block fallback, which runs the model's
    code at each step and replays the blocks' draws, trains it. A seeding undone before the forward
    returns (inside ``torch.random.fork_rng``) is not seen. The model's own generators (Note [Generators of
    the model's own] in torch_exec/_util.py) are seeded with :data:`_PROBE_SEED` too, and one the forward
    seeds (``self.gen.manual_seed(1234)``: the fix this refusal named until a review of 2026-11-29 found
    export trained it 0.14 off plain autograd's gradients, bench/repros/rv21d_auto_own_generator_seeded_in_forward.py)
    is refused by export the same way (``_Probe.seeded_own``). Export keeps a generator the forward makes
    at each call (``torch.Generator().manual_seed(9)``) as a constant of the graph, the one made at capture,
    which then draws on at every step: a generator constant of the exported program that is none of the
    model's own is refused (:func:`_graph_generators_not_own`; the graph holds another Python object for
    the same generator, so they are told apart by seeds marked on the model's). A generator passed as an
    argument (``model(x, gen)``) is recorded by neither capture, and is refused at the call, before the
    probe (:func:`_generator_arguments`). Where the block fallback's check finds the model's outputs
    changed, a second plain run from the same recorded state tells draws from a generator nobody records
    (:data:`_UNRECORDED_DRAWS`) from the model's structure, which was blamed before. A forward that differentiates
    itself (``torch.autograd.grad`` inside it) reads what the probe does not save and is refused by
    name. The probe leaves the generators as they were and puts back every attribute that holds or held
    a tensor, and the contents of a list or dict attribute that gained one, on the module objects it found
    (a forward may replace a submodule). An error the model
    raises in the probe is the caller's (a misspelt keyword) and is raised as it is, not as a capture
    failure.

Note [Lazy modules]
    A lazy module (``nn.LazyLinear``) draws its initial weights from torch's generator at its first call, at
    its place in the forward. Preparing (the probe, the capture, profiling) ran the forward first and put the
    RNG state back, so the weights came from the probe's seed and the step's draws started where the
    initialisation should have moved them from (a review, 2026-11-29: weights 0.33 off plain autograd's,
    bench/repros/rv21d_auto_lazy_module_init_draws.py). A call that finds parameters or buffers not yet
    materialised (``torch.nn.parameter.is_lazy``) runs as plain autograd, outside the budget, with a warning,
    and the wrapper prepares at the next call; the check is made until the first call with grad, once. A lazy
    module that call did not run (an evaluation-only head the training forward never calls) stays lazy, and
    every later step raised torch's "Attempted to use an uninitialized parameter" (the snapshots, the signature,
    the capture and the profile read every parameter; review rv21r:
    bench/repros/rv21r_auto_unused_lazy_module_fails.py). Its parameters and buffers still lazy are found at the
    next call (:func:`_lazy_tensors`) and taken out of their modules while the wrapper prepares or runs a call,
    put back after in their order (:func:`_lazy_left_out`), so the steps train without them; a
    :class:`_LazyGuard` put first on each such module refuses, naming it, a call with grad that runs it after
    all (materialising it there, without its parameters, would break it), and does nothing outside the
    wrapper's calls (an evaluation run materialises it as usual; the next call then keys, captures and profiles
    it). ``prepare`` and ``sample=`` before the first call refuse lazy modules, naming them: preparing would draw
    their weights from its own seed. But lazy modules the forward does not call (the model called once before
    wrapping, as the refusal asks, left an evaluation-only head lazy, and the refusal stood: review rv22b,
    bench/repros/rv22b_auto_lazy_eval_head_prepare_refused.py) are found so first (:meth:`AutoCheckpointed.
    _lazy_uncalled`: one forward without grad, their tensors taken out and guarded): then ``prepare``, ``sample=``
    and the first call prepare at once, leaving them out.

Note [Join detection]
    A model with several inputs whose branches meet (CLIP's image and text towers, a Siamese or
    triplet network: one encoder applied to each input) has no cut inside its later branches: the
    finished branches' outputs cross every point of the next. Such a graph runs as a join network
    (:class:`~torch_exec.join.CheckpointedJoin`, the join DP) instead, when :func:`_find_join` finds one:

    - Groups of inputs: each *root* (a carrying node made from no carrying node, or an input
      requiring grad) is made from some tensor inputs (through side data: masks, casts); the inputs
      one root is made from are one group. Inputs no root is made from (labels, a mask only later
      nodes read) join no group: they are side data any part may read.
    - Each carrying node belongs to the groups of its carrying inputs and of the inputs its side
      data comes from. A node of one group is that branch's; of two or more, the head's (so is all
      that follows it). A node made from parameters only (a learned position table, a scale) belongs
      where it is read: one branch, or the head; read by several branches, the graph stays a chain.
    - Each branch hands the head one tensor (the join's branch output; :data:`MAX_CROSSING`). When it
      hands more (CLIP returning both the embedding and its normalised copy), the branch ends at its
      last valid cut (Note [Cut points]) and what it computes after that runs in the head.
    - No node writes in place into another part's value. A branch whose only value is an input the
      head reads directly, or branches that never meet, keep the graph a chain.
    - Either way some part runs whole (the head as the turn; as a chain, the stretches between its
      cuts): the graph stays a chain when that part would be at least as large as a join (BERT with
      ``token_type_ids``, whose two lookups meet at once: the encoder would be the head).
    - Merged groups: where the head's first node joins some of the groups but not all (a BERT-style
      text tower's ``token_type_ids`` meeting its token ids at the embedding, inside a two-tower
      model), those groups are tried again as one, and so on until the head's first node joins them
      all. Of the splits found, the one whose largest part that runs whole is smallest is taken (the
      two towers as branches, not the text encoder as the head).
    - Branches are numbered in the order the model starts them, plain autograd's order, which the
      join keeps; a model that runs them in lockstep while they draw random numbers or update
      buffers stays a chain.

    Each branch is then cut like a chain (at most ``max_stages // k`` stages, fewer where the join DP's
    work would exceed :data:`JOIN_DP_WORK`: its table grows as the product of the branch lengths), the
    head is one sub-graph over the k branch outputs and its side data, and side data is counted as
    for a chain (``held_bytes``). A note on the capture says when a join was found but cut as one
    chain, and why (``join=False``, a backend without a join DP, an executor keyword the
    join does not take such as ``offload=``, too many branches for :data:`JOIN_DP_WORK`). The join
    reserves its head's output whole: ``caller_keeps="loss"`` is noted and not applied.

Note [Running concatenation]
    Dense connectivity (torchvision's DenseNet: each layer reads ``torch.cat(features)`` of every
    earlier feature map, and the block returns the ``cat`` of all of them) leaves all earlier
    feature maps crossing every point inside a block, so no cut exists there and a whole block
    becomes one stage. Before the cuts are found, a ``cat`` whose tensor list extends the list of an
    earlier ``cat`` (same dimension) is rewritten to concatenate that earlier result with the new
    tensors: ``cat([f0, f1, f2]) -> cat([cat([f0, f1]), f2])``. The values are the same bit for bit
    (a ``cat`` copies) and only the latest concatenation then crosses between two layers: one tensor,
    a valid cut. The gradients sum the same terms; where each shared tensor is read only by the
    concatenations (DenseNet) they also sum them in the same order, so they are bitwise equal, and
    otherwise equal up to the order of summation. A rewrite is skipped when the two results' dtypes
    differ (promotion could round the shared tensors differently) and when anything may write in
    place into the earlier result or a shared tensor (through a view, a list argument, or inside an
    exported ``no_grad``/autocast region, whose inputs all count as written).

Note [Values read late]
    A value made early and read late (every layer's router logits, kept for a mixture of experts'
    load-balancing loss; an encoder's output, read by every decoder layer's cross-attention) crosses
    every point in between beside the hidden state. With one value across a cut no cut exists there, and
    the least budget stayed close to plain autograd's peak (transformers' Mixtral with its auxiliary
    loss 94.8 %, BART and T5 65-88 %; ``bench/results/long_lived_cpu_narrow.md``). When one value
    crosses more than :data:`LONG_LIVED` of the points, the graph is cut again with up to
    :data:`LONG_LIVED_CROSSING` values across a cut (the state between two stages is then a tuple: the
    hidden state and the values read late so far). That chain is taken when it has more cuts and its
    :func:`_least_unit` is smaller (the largest part between two cuts, which may run whole, with twice
    the state after it: a state that passes a large value on counts it in every checkpoint and gradient
    of it, so where the values read late are large beside what the layers reading them make, an
    encoder's output over a long source read by a decoder over a few tokens, the wider chain's least
    budget came out 14 % higher, ``tests/test_auto.py``); a note on the capture says which. Of the cuts
    several values cross, only those whose values hold at most :data:`WIDE_CUT_BYTES` times the median
    bytes crossing a valid cut are kept: inside an MLP's activation (GPT-2's tanh GELU) several
    intermediates of four times the hidden width cross, and a stage boundary there holds all of them as
    a checkpoint and as a gradient; with them GPT-2's least budget was 49.9 % of plain autograd's peak
    with up to 8 values across every cut instead of 41.9 % with one, without them 40.8 %
    (``bench/results/max_crossing_cpu.md``). The budget holds as for any tuple state: the cost model
    counts the tensors a stage passes on (Note [Outputs passed through] in gpusolve/chain.py) and a
    segment's input takes the gradients the engine hands it without a copy in the middle of the backward
    (Note [Segment inputs] in torch_exec/executor.py; before it, such a copy took DenseNet cut this way
    14 % over its budget). Where more values than that still cross most points, the capture warns "few
    places to cut". Not the default for every graph (:data:`MAX_CROSSING`). A conversion that changes
    nothing (``r.type(x.dtype)`` in each of transformers' XLNet layers, ``aten.to`` returning its input
    itself) is dropped from the graph before it is cut (:func:`_drop_unchanged_conversions`): export made
    one value per layer of the position embedding they all read, none crossing enough points to be
    seen, and XLNet's least budget was 85.1 % of plain autograd's peak (40.9 % now;
    ``bench/results/auto_models_cpu_hf_more_before.md``).

Note [Custom autograd Functions]
    torch.export traces a ``torch.autograd.Function``'s forward into the graph and drops its
    backward: the captured graph back-propagates through the forward's operations instead. Where the
    backward is not their derivative (a straight-through estimator: ``round`` forward, identity
    backward; reversible layers that recompute their input in the backward, transformers' Reformer)
    the gradients came out wrong without a word: zero for the layers before a rounding, a loss that
    did not require grad for Reformer. Before a graph is captured, one forward runs eagerly with grad
    (its saved tensors dropped as they are packed, so it holds no more than a forward without grad)
    and the autograd graph of its outputs is searched for custom Functions' nodes. Each Function
    found is checked (:func:`_backward_differs`), on copies of the arguments of its first call in a
    forward without grad: ``apply``'s gradients against those of its forward's own operations, for
    one random seed of the outputs' gradients, within a few roundings of their dtype (BLOOM's GELU,
    whose derivative it writes by hand, differs from autograd's by one rounding in bfloat16). Refused
    as well: a forward that runs other custom Functions (their backward would stand in for the
    derivative: a quantiser calling an estimator passed) and one that reads tensors it is not given
    (a module's parameters, which its backward may leave without a gradient). With a Function
    refused the graph is not captured (the block fallback runs the model's own code, Functions and
    all) and the message names each one and why. ``torch.library.custom_op``'s ``register_autograd``
    runs through a Function too, but export keeps the op and its backward: not checked; nor are torch.cond's and the
    other higher-order operators' own (Note [Higher-order operators in the forward]). A backward
    that agrees with the derivative on those arguments and not on others would pass wrongly (a
    clamp's estimator whose first inputs all lie inside the clamp). Reentrant
    ``torch.utils.checkpoint`` is refused before, by the probe (Note [Probing the model]): its forward runs
    under ``no_grad``, and export made a graph in which the layers inside it got no gradient. A forward that runs a backward itself
    (``torch.autograd.grad`` inside the model) cannot run with its saved tensors dropped; the message
    says that the check raised, and the block fallback is tried.

Note [Sharing the model's state]
    The wrapper shares the model's ``_parameters``, ``_buffers`` and ``_modules`` dictionaries, so
    ``parameters()``, ``named_parameters()``, ``state_dict()`` and ``load_state_dict()`` see exactly
    the model's names (a checkpoint saved from either loads into the other) and ``.to()``,
    ``.train()`` and ``.eval()`` act on the model's modules. The captured sub-graphs reference the
    same tensor objects; a capture whose tensors are no longer the model's (``.to()`` replaces
    buffers) is captured again: the walk that keys each call (``captured_state_key``) also lists the
    ids of the model's parameters and buffers, compared with the capture's (``Capture.tensor_ids``;
    the capture holds those tensors, so their ids stay theirs), one walk a call instead of two.

Note [Block fallback]
    When the graph cannot be captured, the ``nn.ModuleList``/``nn.Sequential`` of blocks whose
    outputs feed the next block (each called once per forward, every other argument the same for
    all blocks) becomes the chain; of several such lists, the one whose blocks make the most bytes
    in a forward (new storages of the ops run inside them, counted without grad by a dispatch mode:
    what checkpointing can free), then the one holding the most parameters, then the longest. Ranked
    by parameters alone, torchvision's MNASNet and MobileNetV3 chose their ``classifier`` (dropout and
    a large linear layer on a vector: nothing to free) over their convolutional features. Blocks that
    return a tuple (the hidden state and values such as ``None`` for attention maps not asked for)
    get their other items back from every call as the first run gave them, tensors among them as
    ``None`` (a 1-tuple broke the models that unpack two or three: transformers' DeBERTa-v2, XLNet,
    RWKV, Swin; the schedule keeps no tensor but the hidden state, and a model whose outputs read one
    of them is refused by the check below); items that could depend on the data (floats, objects)
    would be stale, and their list is not taken. When no list is taken the error names the lists
    tried and the first test each failed (transformers' Gemma2 alternates sliding and full attention
    masks between its layers). While the wrapper runs, the first block's call runs all the blocks
    under the schedule and the later calls return its result. The rest of the model runs as plain
    autograd, its memory measured once and
    counted in the budget (Note [The rest of the model]). The substitution is checked once on the
    sample before it is used: outputs equal to the plain model's, and nothing made inside the blocks
    reaching the outputs but the last block's output (:func:`_check_blocks`). Arguments the blocks
    share that carry an autograd graph (an encoder's output read by every decoder block, a gate made
    from parameters) cannot stay in the blocks' closure: the schedule runs the blocks' forward and
    backward again, and a graph made before them would be back-propagated into several times
    (autograd raises on the second). They travel in the chain's state instead, ``(hidden, *those)``,
    each block passing them on beside its output (:class:`_BoundBlock`), so the executor hands their
    gradient, summed over the blocks, to the code that made them, once (Note [Outputs passed
    through] in gpusolve/chain.py: a checkpoint does not count them again). transformers 5.17's BART
    (LayerDrop drawn with torch.rand: torch.export cannot capture it) reached this fallback with its
    encoder's output, and its first GPU run raised a CaptureError on it.

Note [Draws between the blocks]
    The fallback runs every block at the first one's call, so code between the blocks that draws random
    numbers runs after them all, not between them. transformers' LayerDrop (Wav2Vec2, BART, Whisper,
    with ``config.layerdrop > 0``) draws ``torch.rand([])`` before each block and skips it at random:
    wav2vec2 with its default layerdrop 0.1 was refused as "changes the model's outputs (the model uses
    a block's output for more than the next block)", the draws having moved past the blocks' dropout
    masks; with the dropouts at 0 the check passed, and of 12 steps 3 raised "called out of order"
    mid-step (block 0 skipped) and 5 returned another loss than plain autograd with no warning (a skipped
    block had already run in the chain; a review, 2026-11-28:
    bench/repros/rv11_hf_wav2vec2_layerdrop_wrong_cause.py). The probe that tests a list
    (:func:`_blocks_of`) now watches the random ops run outside its blocks between the first block's start
    and the last one's end (:class:`_DrawsBetween`) and sets their results, and those of the draws before
    the blocks (fairseq's LayerDropModuleList draws for every block first), to 0, which any LayerDrop
    probability above 0 takes as "skip": a block that then does not run refuses the list, naming
    LayerDrop and its remedy (a LayerDrop written the other way round, run while a draw is below 1 - p,
    is not seen there: it raises at the first call that skips a block). Draws between blocks that skip nothing (a library that draws for a
    LayerDrop of 0) are harmless where the blocks draw nothing themselves (the draws keep their order)
    and refuse the list where they do (the blocks' dropout masks would change). A call that skips a block
    anyway raises, at the block called out of order or at the model's return, never training on a chain
    the model did not run.

Note [The rest of the model]
    Under the block fallback the code before the blocks (embeddings) and after them (a language
    model's head and its loss) runs as plain autograd inside the step. Counting the blocks only, a
    measured step went over its budget by that code's memory (8-20 % on a gated transformer whose
    logits are as large as a block's activations). When a capture is made, one step of the model runs
    with the blocks replaced by a stand-in (:class:`_StandIn`: the blocks without grad in its
    forward, a zero gradient of the hidden state from its backward, the hidden state kept until
    then, as the chain keeps a_0), its parameters' new gradients dropped as they are set (the plans
    count each as a transient, Note [Gradients set during the step] in torch_exec/report.py), its
    outputs held and seeded through the backward (with ``caller_keeps="loss"`` only its scalar
    outputs). A memory meter reads:

    - ``held``: the bytes allocated when the blocks are reached (the hidden state, the tensors the
      code before them saved for its backward), held until the chain's backward has run;
    - ``kept``: what the code after the blocks still holds when the gradient of their output
      arrives (that gradient, the outputs, what is saved for later), above the moment the blocks
      returned;
    - ``turn``: the most that code adds above that moment before then (its forward, the seeds, its
      backward), less ``kept``;
    - ``floor``: the most the step reaches outside the chain: before the blocks, and after their
      backward (the code before them running its backward).

    Every plan reserves ``held`` (made before the chain's meter starts: each measured step adds it)
    and ``kept`` (``beside_bytes``: made while the meter runs) for the whole step, and ``turn`` at
    the moment the code after the blocks runs: right after stage N's forward with tape, the last op
    of the chain's forward (``turn_bytes``: stage N's forward transient is at least that). So at
    every moment the step's bytes are at most what the plan counts; the gradient of the blocks'
    output, which the chain reserves, is counted a second time in ``turn`` (a hidden state: 3 % of
    the gated transformer's least budget). ``floor`` is the executor's ``floor_bytes``: no budget
    below it is planned for (the least budget, an infeasible budget's error and plain autograd's
    peak, of which percentages are taken, count it). Plain autograd's peak is the blocks' plus
    ``held``, ``kept`` and what ``turn`` adds to the model's store-all peak.

    Where the model returns a scalar (its loss) only the scalars are seeded, as a loop
    back-propagates its loss; else every output. One step is measured, on the sample: code around the
    blocks whose memory depends on the data (a head run only on the tokens that have a label) can
    reach more on another batch of the same shape. The step meter (the first steps on CUDA,
    ``measure_memory()``) warns when a step goes over its budget.

Note [A step measured from the model's call]
    Under the block fallback the step's meter (torch_exec/report.py's StepMeter) started when the
    executor was called, at the first block, and each measured step added ``held`` (Note [The rest of
    the model]) for what the code before the blocks had made. On the CPU that meter is a profiler
    session, which never sees the free of a block allocated before it started: a tensor the code
    before the blocks made and freed after them (wav2vec2's positional-convolution output, a local of
    its encoder's forward) stayed counted for the rest of the step, and a step within its budget by
    18 304 B was reported 22 144 B over it with a MemoryBudgetWarning (a review, 2026-11-28:
    bench/repros/rv10_hf_wav2vec2_blocks_meter_unseen_frees.py). Once a signature is profiled, a due
    step's meter now starts at the model's call (``StepMeter.open``), as the exported path's does, and
    the executor adopts it with nothing held before (``StepMeter.withdraw`` gives an early meter up if a
    step turns out to profile). The first call of a signature profiles inside the step, with meters of
    its own, so its meter could only start at the first block: on the CPU it then read the same unseen
    frees, 10 112 B over a Wav2Vec2's least budget, learned them as the caller's, and the next call
    refused a budget the model fits (a review, 2026-11-29: bench/repros/
    rv19d_hf_wav2vec2_first_call_learned_excess.py). That step is not measured (``StepMeter.postpone``):
    the measurement stays due and the next call takes it, from the model's call. On CUDA the allocator's
    counters see every free, and the first call is measured from the first block.
"""
from __future__ import annotations

import contextlib
import functools
from collections import OrderedDict
import inspect
import io
import logging
import numbers
import operator
import warnings
from dataclasses import dataclass, field

import torch
import torch.utils._pytree as pytree
from torch import fx, nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from gpusolve.errors import warn_once
from gpusolve.dp.buckets import parse_bucket
from gpusolve.join.solve import JOIN_BACKENDS
from gpusolve.units import check_flag, format_bytes

from . import _util as U
from .meter import MemoryMeter, ProfilerBusyError, measure_peak
from .executor import (REUSE_WITHIN, CheckpointedSequential, _backend_setting, _budget_setting,
                       _compiler_disable, _offload_setting, _standin_params, check_offload_backend, check_schedule_fn,
                       check_sequential_settings, kept)
from .join import CheckpointedJoin
from .profiler import a_wrapper_step, runs_as_a_stage

MAX_CROSSING = 1
"""Most tensors that may cross a cut (Note [Cut points]), unless one value read late leaves few cuts
(:data:`LONG_LIVED_CROSSING`). More on every graph changes every chain (more, smaller stages: longer
profiling and solving), and a state of several tensors counts what it passes on in every checkpoint and
tape holding it (two held at once count a shared one twice, Note [Outputs passed through] in
gpusolve/chain.py). On seven example models, up to 8 with :data:`WIDE_CUT_BYTES` gave least budgets
equal or lower (``bench/results/max_crossing_cpu.md``); it is not the default until the wider sweeps
(``bench/auto_models.py``) are run that way."""

LONG_LIVED_CROSSING = 64
"""Most tensors that may cross a cut when, with :data:`MAX_CROSSING`, one value crosses most points of
the chain (Note [Values read late])."""

DEFAULT_MAX_STAGES = {"cpu": 64, "exact": 32, "cuda": 256, "auto": 96}
"""Most chain stages kept by default, per solver backend: the CPU backend's time grows as N^3 (64
stages at 1024 buckets: about a second), the GPU's makes hundreds cheap."""

MANY_CAPTURES = 8
"""Input signatures (shapes, dtypes, non-tensor values) captured by one wrapper before it warns: each is
captured once (and profiled and solved once, unless a planned one with larger sizes serves it: Note [Sizes that vary
between calls] in torch_exec/executor.py), which costs seconds per new signature."""

JOIN_DP_WORK = {"cpu": 150_000, "auto": 150_000, "cuda": 15_000_000}
"""Most (l + 2)^k * k * l per join (k branches of at most l stages: the join DP's rows times its
candidates per row), per solver backend. On this project's 2-core CPU the NumPy join DP at 1024
buckets took 0.5 s at 2 x 24 stages (32 448), 1.8 s at 2 x 40 (141 120), 2.6 s at 2 x 48 (240 000),
1.1 s at 3 x 13 (131 625), 4.5 s at 3 x 20 (638 880) and 30 s at 3 x 32 (3 773 184)
(``bench/results/join_dp_work_cpu.md``); the cap keeps a join's solve to about 2 s there (2 x 40,
3 x 13, 4 x 6 stages). The CUDA figure is a guess, unmeasured on a GPU so far; ``"auto"`` takes the
CPU's."""


def _join_work(k: int, stages: int) -> int:
    """The join DP's work for k branches of ``stages`` stages (:data:`JOIN_DP_WORK`'s measure)."""
    return (stages + 2) ** k * k * stages


def _join_stage_cap(max_stages: int, k: int, backend: str) -> int:
    """Most stages per branch of a join of k branches: ``max_stages`` shared, within :data:`JOIN_DP_WORK`."""
    cap = max(2, max_stages // k)
    while cap > 2 and _join_work(k, cap) > JOIN_DP_WORK.get(backend, JOIN_DP_WORK["cpu"]):
        cap -= 1
    return cap


def _join_too_large(k: int, backend: str) -> str:
    """Why a join of k branches is not solved as one (two stages per branch exceed :data:`JOIN_DP_WORK`), or ""."""
    work = JOIN_DP_WORK.get(backend, JOIN_DP_WORK["cpu"])
    if _join_work(k, 2) <= work:
        return ""
    return (f"{k} branches: the join DP's work (l + 2)^k * k * l at two stages per branch, {_join_work(k, 2)}, "
            f"exceeds JOIN_DP_WORK[{backend!r}] = {work}")


CaptureError = U.CaptureError  # the model could not be turned into a chain (the message says why and what to do)


# ---------------------------------------------------------------------------- the captured program
class GraphStage(nn.Module):
    """One chain stage: a sub-graph of the captured model taking the carried tensors (the state
    between stages: a tensor or a tuple) and reading the side values it needs from the capture."""

    def __init__(self, graph_module: fx.GraphModule, n_carried: int, side_index: list[int], side: U.CallData,
                 label: str):
        super().__init__()
        self.graph_module = graph_module
        self.n_carried = n_carried
        self.side_index = side_index
        self._side = side
        self.label = label
        self.cut = None  # the name of the captured graph's node it ends at (_chain_of)

    def forward(self, *state):
        if len(state) > 1:  # a join's head, called with the k branch outputs
            carried = state
        else:
            state = state[0]
            carried = () if self.n_carried == 0 else ((state,) if isinstance(state, torch.Tensor) else tuple(state))
        values = self._side.get()  # the call's side values (Note [Data bound to a call] in torch_exec/executor.py)
        if values is None and self.side_index:
            raise RuntimeError(f"internal error: stage {self.label} ran outside a call of its model (no side values bound)")
        return self.graph_module(*carried, *[values[i] for i in self.side_index])

    def extra_repr(self) -> str:
        return self.label


@dataclass
class Capture:
    """One input signature's captured program: prologue, stages, output assembly."""

    method: str                          # "export" or "blocks"
    prologue: fx.GraphModule | None      # flat inputs -> side values (export)
    stages: list[GraphStage]
    side: U.CallData                     # the step's side values (export) or the blocks' other arguments
    chain_input: list[int]               # flat input positions forming a_0
    outputs: list[tuple[str, object]]    # per flat output: ("chain", k) | ("side", i) | ("const", v)
    out_spec: object
    kw_order: list[str]
    tensors: list[tuple[str, torch.Tensor]] = field(default_factory=list)  # (name, tensor) of the model it reads
    tensor_ids: tuple = ()                # ids of the model's parameters and buffers, in captured_state_key's walk
    generator_ids: tuple = ()             # ids of the generators the model held (AutoCheckpointed._generator_key)
    # (module, attribute, tensor) of the plain tensor attributes the graph holds as constants (Note [What a captured
    # graph fixes])
    constants: list = field(default_factory=list)
    executor: CheckpointedSequential | None = None
    side_bytes: int | None = None     # bytes the prologue makes (besides the inputs), once known
    prologue_peak: int | None = None  # the prologue's peak on the first step (Note [Side values nothing reads])
    notes: list[str] = field(default_factory=list)
    blocks: object = None                # _Blocks of the fallback
    rest: "_Rest | None" = None          # the block fallback's code around its blocks (Note [The rest of the model])
    # a join network (Note [Join detection]): per branch its stages and its a_0 (flat input positions)
    branches: list | None = None
    branch_inputs: list | None = None
    head: GraphStage | None = None       # the head, over the k branch outputs


# ---------------------------------------------------------------------------- graph analysis
def _is_tensor_value(node: fx.Node) -> bool:
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor)


def _schema(node: fx.Node):
    return getattr(node.target, "_schema", None) if node.op == "call_function" else None


def _written_args(node: fx.Node, opaque: bool = False) -> list[fx.Node]:
    """Input nodes an ATen op writes into (in-place and out= arguments, single tensors or lists). With
    ``opaque``, every tensor input of a higher-order op (export's ``no_grad``/autocast regions, whose
    sub-graph may write into them) counts as written too."""
    if opaque and node.op == "call_function" and isinstance(node.target, torch._ops.HigherOrderOperator):
        return [a for a in _node_inputs(node) if _is_tensor_value(a)]
    schema = _schema(node)
    if schema is None:
        return []
    out = []
    for i, arg in enumerate(schema.arguments):
        info = arg.alias_info
        if info is None or not info.is_write:
            continue
        value = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
        values = value if isinstance(value, (list, tuple)) else [value]
        out += [v for v in values if isinstance(v, fx.Node)]
    return out


def _is_view(node: fx.Node) -> bool:
    """Whether the op's result aliases an input (a view or an in-place op returning its input)."""
    schema = _schema(node)
    if schema is None:
        return node.op == "call_function" and node.target is operator.getitem
    return any(r.alias_info is not None for r in schema.returns)


def _nbytes(node: fx.Node) -> int:
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return int(val.numel()) * val.element_size()
    if isinstance(val, (tuple, list)):
        return sum(int(v.numel()) * v.element_size() for v in val if isinstance(v, torch.Tensor))
    return 0


def _module_path(node: fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    return path.replace("L['self'].", "").replace("L__self__.", "")


def _node_inputs(node: fx.Node) -> list[fx.Node]:
    return list(node.all_input_nodes)


def _view_bases(nodes: list, among=None) -> dict:
    """Each node's base: what a view (or an in-place op returning its input) aliases, followed
    through chains of views; with ``among``, only inputs in it are followed (the others are not
    tracked). ``nodes`` in program order."""
    base = {}
    for n in nodes:
        ins = [a for a in _node_inputs(n) if among is None or a in among]
        base[n] = base[ins[0]] if _is_view(n) and ins else n
    return base


def _cat_parts(node: fx.Node):
    """(tensor list, dimension) of an ``aten.cat`` node with a normalised dimension, else None."""
    if node.op != "call_function" or node.target is not torch.ops.aten.cat.default:
        return None
    tensors = node.args[0]
    if not isinstance(tensors, (list, tuple)) or not all(isinstance(t, fx.Node) for t in tensors):
        return None
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor) and isinstance(dim, int) and dim < 0:
        dim += val.dim()
    return list(tensors), dim


def _drop_unchanged_conversions(gm: fx.GraphModule) -> int:
    """Note [Values read late]: each ``aten.to`` that returns its input itself (the same dtype, device,
    layout and strides, no copy asked) replaced by that input; the count."""
    dropped = 0
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or getattr(n.target, "overloadpacket", None) is not torch.ops.aten.to:
            continue
        src = n.args[0] if n.args else None
        out, val = n.meta.get("val"), getattr(src, "meta", {}).get("val")
        at = [a.name for a in n.target._schema.arguments].index("copy")
        copies = n.args[at] if at < len(n.args) else n.kwargs.get("copy", False)
        if (isinstance(out, torch.Tensor) and isinstance(val, torch.Tensor) and not copies
                and out.dtype == val.dtype and out.device == val.device and out.layout == val.layout
                and out.shape == val.shape and out.stride() == val.stride()):
            n.replace_all_uses_with(src)
            gm.graph.erase_node(n)
            dropped += 1
    if dropped:
        gm.graph.lint()
        gm.recompile()
    return dropped


def _running_concatenation(gm: fx.GraphModule) -> int:
    """Note [Running concatenation]: rewrite every ``cat`` that extends an earlier one; the count."""
    nodes = list(gm.graph.nodes)
    base = _view_bases(nodes)
    written = {base[t] for n in nodes for t in _written_args(n, opaque=True)}
    earlier: list[tuple[fx.Node, list, object, object]] = []  # (cat node, its original list, dim, dtype)
    rewritten = 0
    for n in nodes:
        parts = _cat_parts(n)
        if parts is None:
            continue
        tensors, dim = parts
        dtype = getattr(n.meta.get("val"), "dtype", None)
        best = None
        for node, prefix, pdim, pdtype in earlier:
            if (pdim == dim and pdtype == dtype is not None and len(prefix) < len(tensors)
                    and tensors[:len(prefix)] == prefix and (best is None or len(prefix) > len(best[1]))
                    and base[node] not in written and not any(base[t] in written for t in prefix)):
                best = (node, prefix)
        earlier.append((n, tensors, dim, dtype))
        if best is not None:
            node, prefix = best
            n.args = ([node] + tensors[len(prefix):], *n.args[1:])
            rewritten += 1
    if rewritten:
        gm.graph.lint()
        gm.recompile()
    return rewritten


# Note [Side values the chain writes]
#     A side node runs once per step, in the prologue, and its value is held for the stages that read it. A
#     carrying node that writes into such a value in place would write into it at every run of its stage: each
#     profiling pass, and the no-grad forward and the recomputation of a checkpointing plan. Mixture-of-experts
#     routers count tokens per expert with ``torch.zeros(E).scatter_add_(0, selected_experts, mask)`` (transformers'
#     load_balancing_loss_func with an attention mask; about 30 families): the counts piled up, aux_loss 38.0 where
#     plain autograd gives 2.0, and the same pattern inside the layers gave gradients 0.07-0.14 off at every step that
#     recomputed, silently (a review, 2026-11-28: bench/repros/rv12_hf_moe_inplace_write_into_side_value.py). Such a
#     value (the written view's base and its views) carries: it is made again in the stage that writes it, and no
#     cut separates the two (:func:`_cuts` never cuts a value written after the cut). Its readers follow it into the
#     chain, and what they write is looked at again, to a fixed point.


class _Graph:
    """Classification of a captured graph's nodes (Note [Cut points])."""

    def __init__(self, gm: fx.GraphModule, flat_inputs: list):
        self.gm = gm
        nodes = list(gm.graph.nodes)
        self.placeholders = [n for n in nodes if n.op == "placeholder"]
        self.output = next(n for n in nodes if n.op == "output")
        if len(self.placeholders) != len(flat_inputs):
            raise CaptureError(f"internal error: {len(self.placeholders)} graph inputs for {len(flat_inputs)} values")
        self.params: set = set()
        self.attrs: set = set()
        for n in nodes:
            if n.op == "get_attr":
                self.attrs.add(n)
                value = _fetch_attr(gm, n.target)
                if isinstance(value, torch.Tensor) and value.requires_grad:
                    self.params.add(n)
        grad_inputs = {n for n, v in zip(self.placeholders, flat_inputs)
                       if isinstance(v, torch.Tensor) and v.requires_grad}
        self.grad_inputs = [n for n in self.placeholders if n in grad_inputs]
        regions = _transform_regions(nodes)
        forced: set = set()
        bases = _view_bases([n for n in nodes if n.op != "output"])  # what each value aliases: fixed by the graph
        while True:  # Note [Side values the chain writes]
            self._classify(nodes, grad_inputs, forced)
            written = self._side_written_by_chain(bases)
            # Note [Function transforms in the graph]: a vmap region with a carrying node runs whole in one stage
            self.regions = {n for r in regions if any(n in self.carry for n in r) for n in r}
            if written | self.regions <= forced:
                break
            forced |= written | self.regions
        self._check_side_effects()

    def _classify(self, nodes: list, grad_inputs: set, forced: set) -> None:
        """Split the nodes into carrying (``main``, ``carry``) and side ones; ``forced``: side-looking nodes that
        carry (Note [Side values the chain writes])."""
        self.carry: set = set(grad_inputs)
        self.side: list = []
        self.main: list = []
        drawn = False  # a carrying node drew random numbers before
        for n in nodes:
            if n.op in ("placeholder", "get_attr", "output"):
                continue
            # A side node that draws after a carrying node did stays in the chain: run in the prologue,
            # it would draw before that node and change plain autograd's random numbers.
            if (n in forced or any(a in self.carry or a in self.params for a in _node_inputs(n))
                    or (drawn and _draws(n))):
                self.carry.add(n)
                self.main.append(n)
                drawn = drawn or _draws(n)
            else:
                self.side.append(n)

    def _side_written_by_chain(self, base: dict) -> set:
        """The side nodes a carrying node writes into, through views (the written view's base, from ``base``, and
        every side view of it), where that base is made in the step or is a module's buffer: a buffer written in
        place in the prologue (an EMA's ``mul_``) and again in a stage (its ``add_``) was read by the stage as a side
        value, not as its buffer, so neither profiling nor Note [Recomputing from the step's buffers] in
        torch_exec/executor.py put it back, and the first step's profiling passes left it 18 x plain autograd's
        (review rv20a: bench/repros/rv20a_first_call_profiling_writes_buffer_ema.py); moved into the stage, it is
        the stage's buffer. Note [Side values the chain writes]."""
        side = set(self.side)
        # a buffer the prologue resizes (a QAT observer's first forward sizes its min/max) stays there: the re-runs'
        # copies of it are of its old shape (tests/test_auto.py::test_a_buffer_the_first_forward_resizes_...)
        resized = {base[t] for n in self.side if n.target is torch.ops.aten.resize_.default for t in _written_args(n)}
        hit = {base[t] for n in self.main for t in _written_args(n, opaque=True)
               if t in side and (base[t] in side or base[t].op == "get_attr" and base[t] not in resized)}
        return {n for n in self.side if base[n] in hit}

    def _check_side_effects(self) -> None:
        """A side node runs before the chain: it must not write into a value a carrying node reads
        before it in the program (that would change what the carrying node sees)."""
        order = {n: i for i, n in enumerate(self.gm.graph.nodes)}
        for n in self.side:
            for target in _written_args(n):
                early = [u for u in target.users if u in self.carry and order[u] < order[n]]
                if early:
                    raise CaptureError(f"the graph writes into {target.name} ({n.target}) after {early[0].name} read it; "
                                       f"it cannot be moved before the chain")

    def cuts(self) -> tuple[list[int], list[list[fx.Node]]]:
        """Valid cut positions (index into ``main``: after that node) and the values crossing each."""
        return _cuts(self.main, self.grad_inputs, self.output.all_input_nodes)


def _cuts(main: list, grad_inputs: list, ends, blockers: dict | None = None,
          limit: int | None = None) -> tuple[list[int], list[list[fx.Node]]]:
    """Valid cut positions in the carrying nodes ``main`` (program order; index into it: after that
    node) and the values crossing each (Note [Cut points]), at most ``limit`` (default
    :data:`MAX_CROSSING`). ``grad_inputs``: the placeholders requiring grad that ``main`` starts from;
    ``ends``: the values needed after ``main`` (its outputs). ``blockers``: filled with, per value, the
    points it crosses where more than ``limit`` do."""
    limit = MAX_CROSSING if limit is None else limit
    index = {n: i for i, n in enumerate(main)}
    for n in grad_inputs:
        index[n] = -1
    end = len(main)
    last = {}
    for i, n in enumerate(main):
        for a in _node_inputs(n):
            if a in index:
                last[a] = max(last.get(a, -1), i)
    for a in ends:
        if a in index:
            last[a] = end
    # Views: a write into a view writes its base; track the base of every carrying value.
    base = _view_bases(list(grad_inputs) + main, among=index)
    written_after = {}  # base -> index of the last node writing into it
    for i, n in enumerate(main):
        for target in _written_args(n, opaque=True):
            if target in base:
                written_after[base[target]] = i
    positions, crossing = [], []
    live: dict = {n: None for n in grad_inputs if last.get(n, -1) >= 0}
    depth = 0  # inside a vmap level: no cut (Note [Function transforms in the graph])
    for p, n in enumerate(main[:-1]):
        depth += _nesting(n)
        live[n] = None
        for a in _node_inputs(n):
            if a in live and last.get(a, -1) <= p:
                del live[a]
        if n in live and last.get(n, -1) <= p:
            del live[n]
        cross = list(live)
        if blockers is not None and len(cross) > limit:
            for c in cross:
                blockers[c] = blockers.get(c, 0) + 1
        if not cross or len(cross) > limit or depth:
            continue
        if not all(_is_tensor_value(c) for c in cross):
            continue
        if any(written_after.get(base[c], -1) > p for c in cross):
            continue
        positions.append(p)
        crossing.append(cross)
    if limit > 1 and positions:  # Note [Values read late]: where several cross, what crosses must be small
        sizes = [sum(_nbytes(c) for c in cross) for cross in crossing]
        most = WIDE_CUT_BYTES * sorted(sizes)[len(sizes) // 2]
        keep = [i for i, cross in enumerate(crossing) if len(cross) == 1 or sizes[i] <= most]
        positions, crossing = [positions[i] for i in keep], [crossing[i] for i in keep]
    return positions, crossing


WIDE_CUT_BYTES = 4.0
"""A cut that several values cross is kept only where they hold at most this many times the median bytes
crossing the graph's valid cuts (Note [Values read late])."""


LONG_LIVED = 0.4
"""A value crossing more than this fraction of a chain's points, beside the value carried, leaves few
cuts (:func:`_long_lived_note`): the chain is cut again with more values across a cut, or the capture
warns (Note [Values read late])."""

LONG_LIVED_ADVICE = (
    "so the least budget is close to plain autograd's peak. Such values: router logits kept for an auxiliary loss "
    "(a mixture of experts' output_router_logits), an encoder's output read by every decoder layer, a U-Net's skips; "
    "cut by hand (torch_exec.CheckpointedSequential) to checkpoint through them")


def _long_lived_note(main: list, ends, blockers: dict, limit: int) -> str | None:
    """Why a chain has few cuts, when one value made early and read late crosses most of its points
    (router logits kept for an auxiliary loss, an encoder's output read by every decoder layer);
    ``blockers``: what :func:`_cuts` filled in while cutting ``main`` with at most ``limit`` values
    across a cut. The warning adds :data:`LONG_LIVED_ADVICE`."""
    if not blockers:
        return None
    value, count = max(blockers.items(), key=lambda kv: kv[1])
    points = len(main) - 1
    if count <= LONG_LIVED * points:
        return None
    order = {n: i for i, n in enumerate(main)}
    readers = sorted((n for n in value.users if n in order), key=order.get)
    read = _module_path(readers[-1]) if readers and value not in set(ends) else ""  # an output: read at the end
    made = _module_path(value)
    return (f"few places to cut: {value.name}{f' (made in {made})' if made else ''} is read again "
            f"{f'in {read}' if read else 'at the end'} "
            f"and crosses {count} of the {points} points where a cut could go (a cut takes at most {limit} "
            f"value{'s' if limit > 1 else ''})")


def _fetch_attr(gm: nn.Module, target: str):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _choose(positions: list[int], weights: list[int], max_stages: int) -> list[int]:
    """At most ``max_stages - 1`` of the cut positions, spread evenly over the cumulative weight."""
    if len(positions) < max_stages:
        return list(positions)
    total = float(sum(weights)) or 1.0
    cum, acc = [], 0
    for w in weights:
        acc += w
        cum.append(acc)
    chosen, k = [], 1
    for p in positions:
        if len(chosen) == max_stages - 1:
            break
        if cum[p] >= k * total / max_stages:
            chosen.append(p)
            while k * total / max_stages <= cum[p]:
                k += 1
    return chosen


# ---------------------------------------------------------------------------- building the program
def _export(model: nn.Module, args: tuple, kwargs: dict):
    """torch.export (non-strict), quiet: a failure is reported by the caller in one line."""
    loggers = [logging.getLogger(name) for name in ("torch", "torch._dynamo", "torch.export", "torch._export",
                                                    "torch.fx.experimental.symbolic_shapes")]
    levels = [lg.level for lg in loggers]
    try:
        for lg in loggers:
            lg.setLevel(logging.CRITICAL)
        # export prints the partial graph of a failed capture on stderr itself
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            return torch.export.export(model, args, kwargs, strict=False)
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _subgraph(gm: fx.GraphModule, nodes: list, inputs: list, outputs: list, single_output: bool) -> fx.GraphModule:
    """A GraphModule computing ``outputs`` from ``inputs`` with ``nodes`` (in order), reading the
    root's attributes (the model's own tensors)."""
    graph = fx.Graph()
    env: dict = {}
    for n in inputs:
        env[n] = graph.placeholder(n.name)
        env[n].meta = dict(n.meta)
    for n in nodes:
        for a in _node_inputs(n):
            if a not in env and a.op == "get_attr":
                env[a] = graph.get_attr(a.target)
                env[a].meta = dict(a.meta)
        env[n] = graph.node_copy(n, lambda a: env[a])
    if single_output:
        graph.output(env[outputs[0]])
    else:
        graph.output(tuple(env[o] for o in outputs))
    graph.lint()
    return fx.GraphModule(gm, graph)


@dataclass
class _JoinSplit:
    """Note [Join detection]: the carrying nodes of a captured graph split into k branches and a head."""

    branches: list      # per branch: its carrying nodes, in program order
    grad_inputs: list   # per branch: its placeholders requiring grad
    inputs: list        # per branch: the tensor placeholders it is made from
    outputs: list       # per branch: the one value the rest of the graph reads
    head: list          # the head's carrying nodes, in program order


def _find_join(g: _Graph, model_outputs: list) -> tuple[_JoinSplit | None, str]:
    """The graph's join (Note [Join detection]), or (None, why not): "" when the graph is a chain (its
    carrying nodes come from one group of inputs), else the reason it cannot run as a join. Groups
    that meet before the rest do are tried as one (Note [Join detection], merged groups): the split
    whose largest part that runs whole is smallest wins."""
    merged: list = []
    best, why = None, ""
    for _ in range(len(g.placeholders)):
        split, reason, unit, first_meet = _join_attempt(g, model_outputs, merged)
        if split is not None and (best is None or unit < best[1]):
            best = (split, unit)
        elif best is None and not why:
            why = reason
        if first_meet is None:
            break
        merged.append(first_meet)
    return (best[0], "") if best is not None else (None, why)


def _join_attempt(g: _Graph, model_outputs: list, merged: list) -> tuple:
    """One grouping of the inputs for :func:`_find_join`, the groups holding the inputs of each of
    ``merged`` taken as one: (the split or None, why not, the largest part that runs whole, the inputs
    of the groups the head's first node joins when they are not all of them, else None)."""
    nodes = list(g.gm.graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    tensor_inputs = [p for p in g.placeholders if _is_tensor_value(p)]
    deps: dict = {}
    for n in nodes:
        if n.op == "placeholder":
            deps[n] = frozenset([n]) if n in tensor_inputs else frozenset()
        elif n.op in ("get_attr", "output"):
            deps[n] = frozenset()
        else:
            deps[n] = frozenset().union(*(deps[a] for a in _node_inputs(n)))
    parent = {p: p for p in tensor_inputs}

    def find(p):
        while parent[p] is not p:
            p = parent[p]
        return p
    # Roots: carrying values made from no carrying value. The inputs each is made from are one group.
    roots = list(g.grad_inputs) + [n for n in g.main if not any(a in g.carry for a in _node_inputs(n))]
    grouped: set = set()
    for r in roots:
        label = sorted(deps[r], key=order.get)
        for p in label[1:]:
            a, b = sorted((find(label[0]), find(p)), key=order.get)
            parent[b] = a
        grouped |= set(label)
    for inputs in merged:  # groups that meet first, tried as one
        for p in inputs[1:]:
            a, b = sorted((find(inputs[0]), find(p)), key=order.get)
            parent[b] = a
    groups = list(dict.fromkeys(find(p) for p in sorted(grouped, key=order.get)))  # their root inputs, in order
    if len(groups) < 2:
        return None, "", 0, None
    index = {root: beta for beta, root in enumerate(groups)}
    of: dict = {p: frozenset([index[find(p)]]) for p in g.grad_inputs}
    for n in g.main:
        got = set()
        for a in _node_inputs(n):
            if a in g.carry:
                got |= of[a]
            else:
                got |= {index[find(p)] for p in deps[a] if p in grouped}
        of[n] = frozenset(got)
    k = len(groups)
    base = _view_bases(nodes)
    where: dict = {n: (next(iter(b)) if len(b) == 1 else "head") for n, b in of.items() if b}
    meet = next((of[n] for n in g.main if len(of[n]) >= 2), None)
    if meet is None:
        return None, "its inputs' branches never meet", 0, None
    # the inputs of the groups the head's first node joins: one group in the next attempt
    first_meet = (sorted((p for p in grouped if index[find(p)] in meet), key=order.get) if len(meet) < k else None)

    def fail(reason):
        return None, reason, 0, first_meet
    outputs = set(model_outputs)
    for n in reversed(g.main):  # made from parameters only: it belongs where it is read
        if of[n]:
            continue
        users = {where[u] for u in n.users if u in where} | ({"head"} if n in outputs else set())
        if len(users) > 1:
            return fail(f"{n.name} ({_module_path(n) or n.target}) is made from parameters only and read by "
                        f"several branches")
        where[n] = users.pop() if users else "head"
    written = {base[t] for n in nodes for t in _written_args(n, opaque=True)}
    branches = [_reads_first([n for n in g.main if where[n] == beta], of, written) for beta in range(k)]
    grad_inputs = [[p for p in g.grad_inputs if where[p] == beta] for beta in range(k)]
    crossing = []
    for beta in range(k):
        if not branches[beta]:
            return fail(f"input {grad_inputs[beta][0].name} goes to where the branches meet without a stage of its own")
        out = [v for v in grad_inputs[beta] + branches[beta]
               if v in outputs or any(where.get(u, beta) != beta for u in v.users)]
        if len(out) > MAX_CROSSING or not all(_is_tensor_value(v) for v in out):
            # The branch ends at its last valid cut; what it computes after that runs in the head.
            positions, values = _cuts(branches[beta], grad_inputs[beta], out)
            if not positions:
                names = ", ".join(v.name for v in out)
                return fail(f"branch {beta} hands {len(out)} values ({names}) to where the branches meet, and no "
                            f"single tensor of it carries them all")
            for n in branches[beta][positions[-1] + 1:]:
                where[n] = "head"
            branches[beta] = branches[beta][:positions[-1] + 1]
            out = values[-1]
        crossing.append(out[0])
    for n in g.main:
        for target in _written_args(n, opaque=True):
            owner = where.get(base[target])
            if owner is not None and owner != where[n]:
                return fail(f"{n.name} ({n.target}) writes in place into {target.name} of another branch")
    head = [n for n in g.main if where[n] == "head"]
    # Either way some part runs whole: the head as the turn, or as a chain the stretches between cuts.
    join_unit = max([_weight(head)] + [_largest_stage(b, gi, [o]) for b, gi, o in zip(branches, grad_inputs, crossing)])
    chain_unit = _largest_stage(g.main, g.grad_inputs, model_outputs)
    if join_unit >= chain_unit:
        return fail(f"its largest part that runs whole would be {join_unit} B as a join (the head, or a branch's "
                    f"stage) against {chain_unit} B as one chain (the bytes its operations allocate)")
    groups_of = [[p for p in tensor_inputs if p in grouped and index[find(p)] == beta] for beta in range(k)]
    # Branches in the order the model runs them (plain autograd's: CheckpointedJoin's branch order).
    first = [min(order[n] for n in b if of[n]) for b in branches]
    perm = sorted(range(k), key=first.__getitem__)
    branches, grad_inputs, groups_of, crossing = ([x[i] for i in perm]
                                                  for x in (branches, grad_inputs, groups_of, crossing))
    # Random draws and buffer updates must keep plain autograd's order: the join runs (and re-orders
    # its forward phase to) one branch after the other, then the head, so branches the model runs in lockstep
    # stay a chain, and so does a model that draws in its head (what a branch computes after its last cut
    # included) before a branch runs, or writes there a buffer a branch writes (review rv19:
    # bench/repros/rv19_join_head_remainder_draw_order.py; the head's own BatchNorm beside, SimSiam's predictor,
    # keeps its order against the branches' statistics).
    rank = {n: beta for beta, b in enumerate(branches) for n in b}
    written = {base[t] for n in rank for t in _written_args(n, opaque=True) if base[t].op == "get_attr"}
    heads = set(head)
    sensitive = [rank.get(n, k) for n in g.main
                 if n in rank and _draws_or_updates(n, base)
                 or n in heads and (_draws(n) or any(base[t] in written for t in _written_args(n, opaque=True)))]
    if sensitive != sorted(sensitive):
        return fail("its branches and head interleave random draws or buffer updates (dropout, BatchNorm "
                    "statistics) in the order the model runs them, which a join (each branch in turn, then the "
                    "head) cannot keep")
    return _JoinSplit(branches, grad_inputs, groups_of, crossing, head), "", join_unit, first_meet


def _reads_first(nodes: list, of: dict, written: set) -> list:
    """A branch's nodes with each value made from parameters only (``of`` empty: a learned scale, a
    position table) moved to just before its first reader: at its program position (``logit_scale.exp()``
    first in a forward) it would cross every point up to that reader and leave the branch no cut.
    Unchanged when something writes into what such a value reads."""
    free = {n for n in nodes if not of[n]}
    if not free or any(a in written for n in free for a in _node_inputs(n)):
        return nodes
    out, placed = [], set()

    def place(n):
        if n in placed:
            return
        for a in _node_inputs(n):
            if a in free:
                place(a)
        placed.add(n)
        out.append(n)
    for n in nodes:
        if n not in free:
            place(n)
    for n in nodes:  # read by no other node of the branch (the head reads it)
        place(n)
    return out


def _draws(n: fx.Node) -> bool:
    """Whether the node draws random numbers (dropout, ``randn_like``: ATen's nondeterministic_seeded ops)."""
    return n.op == "call_function" and torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ())


def _draws_or_updates(n: fx.Node, base: dict) -> bool:
    """Whether the node draws random numbers or writes into a buffer of the model (BatchNorm statistics)."""
    return _draws(n) or any(base[t].op == "get_attr" for t in _written_args(n, opaque=True))


def _weight(nodes) -> int:
    """Bytes the nodes allocate (views and in-place writes allocate nothing): the size proxy of
    :func:`_choose` and :func:`_largest_stage`."""
    return sum(0 if _is_view(n) or _written_args(n) else _nbytes(n) for n in nodes)


def _least_unit(main: list, grad_inputs: list, ends: list, limit: int) -> int:
    """A proxy of the least budget of ``main`` cut with at most ``limit`` values across a cut: the most, over
    the stretches between its valid cuts, of the bytes the stretch's nodes allocate (it may run whole)
    and twice the bytes crossing the cut after it (that state held, and its gradient). Note [Values read
    late]."""
    positions, crossing = _cuts(main, grad_inputs, ends, limit=limit)
    state = [sum(_nbytes(c) for c in cross) for cross in crossing] + [0]
    return max(w + 2 * size for w, size in zip(_stretch_weights(main, positions), state, strict=True))


def _stretch_weights(main: list, positions: list[int]) -> list[int]:
    """The :func:`_weight` of each stretch of ``main`` between the cut ``positions``."""
    bounds = [-1] + positions + [len(main) - 1]
    return [_weight(main[a + 1:b + 1]) for a, b in zip(bounds, bounds[1:])]


def _largest_stage(main: list, grad_inputs: list, ends: list) -> int:
    """The largest :func:`_weight` of the stretches of ``main`` between its valid cuts: what no plan can
    split (a stage runs whole)."""
    return max(_stretch_weights(main, _cuts(main, grad_inputs, ends)[0]))


def _label(nodes: list) -> str:
    paths = [p for p in (_module_path(n) for n in nodes) if p]
    label = paths[0] if paths else nodes[0].name
    if paths and paths[-1] != paths[0]:
        label = f"{paths[0]}..{paths[-1]}"
    return label


def _used_side(nodes: list, side_pos: dict, given: list) -> list:
    """The side values ``nodes`` read that are not among their ``given`` inputs, in first-use order."""
    used = []
    for n in nodes:
        for a in _node_inputs(n):
            if a in side_pos and a not in used and a not in given:
                used.append(a)
    return used


def _chain_of(gm: fx.GraphModule, g: _Graph, flat: list, main: list, grad_inputs: list, outs: list, side_pos: dict,
              side: U.CallData, max_stages: int, tuple_out: bool, fallback: fx.Node, inputs=None,
              blockers: dict | None = None, limit: int | None = None, prefer: tuple = ()) -> tuple[list, list, int]:
    """``main`` (carrying nodes in program order) cut into at most ``max_stages`` stages computing
    ``outs`` (the last stage returns a tuple when ``tuple_out``): (the stages, their input a_0 as
    placeholders, the number of valid cuts). a_0 is ``grad_inputs`` and the other tensor inputs the
    first stage reads (its input then, so that the profiler sees them as the chain's input, which
    the budget leaves out); with ``inputs``, only those. When the first stage reads none (its data is
    made inside), a_0 is ``fallback``, which it does not take. ``blockers``, ``limit``: as for :func:`_cuts`.
    ``prefer``: the names of the nodes to cut after, where each is a valid cut (Note [Sizes that vary between calls]
    in torch_exec/executor.py: the cuts of another signature's capture, whose profile then serves this one); each
    stage's ``cut`` names the node it ends at."""
    positions, crossing = _cuts(main, grad_inputs, outs, blockers, limit)
    weights = [_weight([n]) for n in main]
    chosen = _choose(positions, weights, max_stages)
    valid = {main[p].name: p for p in positions}
    if prefer and len(prefer) < max_stages and all(name in valid for name in prefer):
        chosen = sorted(valid[name] for name in prefer)
    cross_at = dict(zip(positions, crossing))
    bounds = [-1] + chosen + [len(main) - 1]
    first = {a for n in main[:bounds[1] + 1] for a in _node_inputs(n)}
    first_inputs = [n for n, v in zip(g.placeholders, flat)
                    if n in first and n not in g.carry and isinstance(v, torch.Tensor)
                    and (inputs is None or n in inputs)]
    a0 = list(grad_inputs) + first_inputs
    carried = list(a0)
    stages = []
    for k in range(len(bounds) - 1):
        nodes = main[bounds[k] + 1: bounds[k + 1] + 1]
        last = k == len(bounds) - 2
        stage_outs = outs if last else cross_at[bounds[k + 1]]
        used_side = _used_side(nodes, side_pos, carried)
        sub = _subgraph(gm, nodes, carried + used_side, stage_outs, single_output=len(stage_outs) == 1 and not
                        (last and tuple_out))
        stages.append(GraphStage(sub, len(carried), [side_pos[a] for a in used_side], side, _label(nodes)))
        stages[-1].cut = nodes[-1].name
        carried = list(stage_outs)
    return stages, a0 or [fallback], len(positions)


def _drop_guards(gm: fx.GraphModule) -> None:
    """``ep.module()`` calls a guard module on the inputs (``_guards_fn``: checks of their shapes) and
    uses nothing it returns. Reading every input, it would carry gradient when an input requires grad
    and block every cut (and every join) while the inputs live; the captures are keyed by input
    signature, so the check is dropped."""
    for n in list(gm.graph.nodes):
        if n.op == "call_module" and n.target == "_guards_fn" and not n.users:
            gm.graph.erase_node(n)
    gm.recompile()


CHECKPOINT_FUNCTION = "torch.utils.checkpoint.CheckpointFunction"  # reentrant torch.utils.checkpoint

# Note [Function transforms in the graph]
#     torch.export keeps a ``torch.vmap`` inside the forward as calls that change functorch's global state around the
#     ops they wrap: ``_vmap_increment_nesting``, ``_add_batch_dim``, the ops on batched tensors, ``_remove_batch_dim``,
#     ``_vmap_decrement_nesting``. The nesting calls make no tensor, so they were side nodes run in the prologue, while
#     the batched ops carried gradient and ran in a stage at no vmap level: the first call's profiling raised
#     functorch's "your tensor may have escaped from inside a function being vmapped" (a review, 2026-11-29:
#     bench/repros/rv20a_auto_vmap_region_cut.py). Such a region, from an increment to its decrement, now runs in one
#     stage, in program order, when one of its nodes carries: then all of them carry (:func:`_transform_regions`, the
#     ``forced`` nodes of :class:`_Graph`: made again at each run of the stage, as any carrying node), no cut lies
#     inside it (:func:`_cuts`), and a graph holding one is not run as a join (whose branches reorder nodes). A region
#     of side data only (a mask made with vmap from the inputs) runs whole in the prologue, in program order. ``torch.func.jvp`` and forward-mode AD
#     (dual levels) are refused by name (:func:`_refuse_transforms`): not tried; under capture="auto" the block
#     fallback runs the model's own code, the transform included, around its blocks. Forward-mode AD is known by its
#     dual-level nodes or by the aten ops of dual tensors (``_make_dual``, ``_unpack_dual``): torch 2.11's export keeps
#     no dual-level node (the graph then ran ``_make_dual`` at no level and raised "Trying to access a forward AD level
#     with an invalid index"; 2026-11-29, under torch 2.11).
# Note [Higher-order operators in the forward]
#     ``torch.cond`` (and torch's other control-flow operators, ``torch._higher_order_ops``) runs under autograd through
#     a Function of torch's own (``CondAutogradOp``), which the check of custom Functions took for the model's (Note
#     [Custom autograd Functions]): the model was refused naming it, and the block fallback's dispatch modes raised
#     torch's NotImplementedError for a higher-order operator, reported as the model's failure with a hint about the
#     mode (a review, 2026-11-29: bench/repros/rv20a_auto_torch_cond_refused_wrong_cause.py). torch.export keeps such an
#     operator as one node (its branches are sub-graphs, its backward torch's), and a node lies whole in one stage, so
#     it trains as plain autograd, recomputed with its stage: its Functions are not checked (``_EXPORTED_FUNCTIONS``).
#     The dispatch modes (:class:`_BytesMade`, :class:`_DrawsBetween`) take higher-order operators
#     (``supports_higher_order_operators``) and run them as they are: the ops inside a branch are not seen one by one
#     (the bytes a branch makes count by its outputs; a draw inside a branch between the blocks is not seen). Eager
#     ``torch.cond`` runs through ``torch.compile``, which skips a frame under a dispatch mode and marks its code skipped
#     for good: once the modes had run a torch.cond, every later one in the process raised dynamo's "marked as
#     skipped". The modes therefore ignore compile internals (``ignore_compile_internals``: off while torch.compile
#     compiles, on while its code runs), as torch's own infrastructure modes do.
_VMAP_NESTING = {"_vmap_increment_nesting": 1, "_vmap_decrement_nesting": -1}
_TRANSFORMS = {"_jvp_increment_nesting": "torch.func.jvp", "_enter_dual_level": "forward-mode AD (torch.autograd.forward_ad)"}
# the aten ops of dual tensors: torch 2.11's export keeps no dual-level node, only these (torch 2.13 keeps both)
_DUAL_OPS = (torch.ops.aten._make_dual, torch.ops.aten._unpack_dual)


def _nesting(n: fx.Node) -> int:
    """+1 where the node enters a vmap level, -1 where it leaves one, else 0 (Note [Function transforms in the
    graph])."""
    if n.op != "call_function" or getattr(n.target, "__module__", "") != "torch._functorch.predispatch":
        return 0
    return _VMAP_NESTING.get(getattr(n.target, "__name__", ""), 0)


def _transform_regions(nodes: list) -> list[list]:
    """The nodes from each outermost vmap level's entry to its exit, both included, one list per region (Note
    [Function transforms in the graph]); ``nodes`` in program order."""
    regions, depth = [], 0
    for n in nodes:
        step = _nesting(n)
        if step > 0 and not depth:
            regions.append([])
        if depth or step > 0:
            regions[-1].append(n)
        depth += step
    if depth:
        raise CaptureError("internal error: the exported graph enters a vmap level it does not leave")
    return regions


def _refuse_transforms(gm: fx.GraphModule) -> None:
    """Note [Function transforms in the graph]: a CaptureError naming the function transforms other than vmap that the
    graph runs."""
    found: dict = {}
    for n in gm.graph.nodes:
        name = getattr(n.target, "__name__", "") if n.op == "call_function" else ""
        if name in _TRANSFORMS and getattr(n.target, "__module__", "") == "torch._functorch.predispatch":
            found.setdefault(_TRANSFORMS[name], _module_path(n) or "the model's forward")
        elif n.op == "call_function" and getattr(n.target, "_overloadpacket", None) in _DUAL_OPS:
            found.setdefault(_TRANSFORMS["_enter_dual_level"], _module_path(n) or "the model's forward")
    if found:
        raise CaptureError(f"the model's forward runs {', '.join(f'{t} (in {w})' for t, w in found.items())}, "
                           f"which the exported graph's stages cannot run apart (Note [Function transforms in the "
                           f"graph]); use capture='blocks' (the model's code runs around its blocks, the transform "
                           f"inside one block or between them), or cut the model by hand: "
                           f"torch_exec.CheckpointedSequential(stages, budget=...) (see docs/pytorch.md, 'The manual "
                           f"route')")


_WATCHED_HOOKS = {torch.Tensor.register_hook: "register_hook", torch.Tensor.retain_grad: "retain_grad"}
"""The tensor methods that put a gradient hook on a tensor (Note [Gradient hooks registered in the forward])."""


class _TensorHooks(TorchFunctionMode):
    """Records where the code it watches puts gradient hooks on tensors (``Tensor.register_hook``, and
    ``Tensor.retain_grad`` on a non-leaf), each as "method at file:line", except while ``paused`` (Note
    [Gradient hooks registered in the forward])."""

    def __init__(self):
        super().__init__()
        self.sites: list[str] = []
        self.paused = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        method = _WATCHED_HOOKS.get(func) if not self.paused else None
        # retain_grad on a leaf does nothing (a leaf's .grad is set anyway)
        if method is not None and not (method == "retain_grad" and args and getattr(args[0], "is_leaf", True)):
            import traceback
            frames = [f for f in traceback.extract_stack()[:-1]
                      if "/torch/" not in f.filename and not f.filename.endswith("torch_exec/auto.py")]
            site = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "the model's forward"
            self.sites.append(f"Tensor.{method} at {site}")
        return func(*args, **(kwargs or {}))


def _hooks_error(sites: list[str], where: str, consequence: str) -> CaptureError:
    """Note [Gradient hooks registered in the forward]: the refusal, naming each site (:class:`_TensorHooks`) and
    the fix for each kind of hook."""
    fixes = []
    if any(s.startswith("Tensor.register_hook") for s in sites):
        fixes.append("register it on a parameter, or inside a block's own forward (if h.requires_grad: "
                     "h.register_hook(fn))")
    if any(s.startswith("Tensor.retain_grad") for s in sites):
        fixes.append("for h.retain_grad(): the schedule back-propagates through its own runs of the layers, not "
                     "through h, so read h.grad from a step of the unwrapped model (wrapper.model(...), plain "
                     "autograd) on the steps that need it")
    return CaptureError(f"the model registers a gradient hook on a tensor {where} ({', '.join(sorted(set(sites))[:3])}),"
                        f" which {consequence} (Note [Gradient hooks registered in the forward]); "
                        + "; ".join(fixes))


def _probe_inputs(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Copies of the inputs for the runs that capture the model (Note [Probing the model]); a tensor
    passed twice is copied once."""
    copies: dict = {}

    def copy(v):
        if not isinstance(v, torch.Tensor):
            return v
        if id(v) not in copies:
            c = v.detach().clone()
            copies[id(v)] = c.requires_grad_(v.requires_grad) if v.requires_grad else c
        return copies[id(v)]
    return pytree.tree_map(copy, (args, kwargs))


_host_rng_state, _set_host_rng_state = U.host_rng_state, U.set_host_rng_state  # Note [Python's and NumPy's ...]


def _advance_host_rng() -> None:
    """One draw from each of Python's ``random`` and NumPy's global generator: another starting state."""
    import random

    import numpy as np
    random.random()
    np.random.random()


_host_rng_moved = U.host_rng_moved


class _NoSavedTensors:
    """Saved-tensor hooks that keep nothing, for a forward run only to be inspected (it holds no
    activations); ``read`` says a saved tensor was read inside the forward (it differentiates itself)."""

    def __init__(self):
        self.read = False
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    @staticmethod
    def _pack(t):
        return None

    def _unpack(self, _):
        self.read = True
        raise RuntimeError("a saved tensor was read in the forward")

    def __enter__(self):
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        return self._hooks.__exit__(*exc)


_DIFFERENTIATES_ITSELF = (
    "the model's forward differentiates itself (torch.autograd.grad or .backward() inside forward), which "
    "auto_checkpoint cannot capture (Note [Probing the model]); cut it by hand around that part "
    "(torch_exec.CheckpointedSequential(stages, budget=...), see docs/pytorch.md, 'The manual route'), or train it with "
    "budget=None")


@dataclass
class _Probe:
    """What one inspecting forward of the model saw: its outputs' autograd roots (``grad_fn``), where it
    registered gradient hooks on tensors (Note [Gradient hooks registered in the forward]) and what it ran
    under reentrant ``torch.utils.checkpoint`` (Note [Probing the model])."""

    roots: list
    hook_sites: list
    reentrant: list = field(default_factory=list)  # the functions CheckpointFunction ran (a block, a closure)
    seeded: list = field(default_factory=list)  # torch's default generators the forward seeded (Note [Probing the model])
    seeded_own: list = field(default_factory=list)  # the model's own generators the forward seeded (the same Note)
    # (module, attribute) of the scalar attributes the forward writes at every call, found by the export run
    # (Note [Attributes the forward writes at every call])
    written: list = field(default_factory=list)


@contextlib.contextmanager
def _reentrant_checkpoints(calls: list):
    """Appends to ``calls`` the function each call of reentrant ``torch.utils.checkpoint`` (``CheckpointFunction``,
    :data:`CHECKPOINT_FUNCTION`) runs, while the context lasts (Note [Probing the model])."""
    from torch.utils.checkpoint import CheckpointFunction
    saved = CheckpointFunction.__dict__["forward"]
    forward = saved.__func__

    @functools.wraps(forward)  # Function.apply binds arguments by the forward's signature
    def watched(ctx, run_function, *a, **kw):
        calls.append(run_function)
        return forward(ctx, run_function, *a, **kw)
    CheckpointFunction.forward = staticmethod(watched)
    try:
        yield calls
    finally:
        CheckpointFunction.forward = saved


def _probe_forward(model: nn.Module, args: tuple, kwargs: dict) -> _Probe:
    """One forward of the model under grad, keeping no saved tensors, torch's generators forked (and seeded with
    :data:`_PROBE_SEED`: Note [Probing the model]); the model's own errors are raised as they are."""
    hooks, sites = _NoSavedTensors(), _TensorHooks()
    devices = U.all_rng_devices()
    own = U.generators_of([model])  # Note [Generators of the model's own] in torch_exec/_util.py
    try:
        with (torch.enable_grad(), U.fork_rng(devices, own), hooks, sites,
              _reentrant_checkpoints([]) as reentrant):
            generators = _default_generators(devices)
            for g in [*generators.values(), *own]:
                g.manual_seed(_PROBE_SEED)
            out = model(*args, **kwargs)
            seeded = [name for name, g in generators.items() if g.initial_seed() != _PROBE_SEED]
            seeded_own = [g for g in own if g.initial_seed() != _PROBE_SEED]
    except Exception:
        if hooks.read:
            raise CaptureError(_DIFFERENTIATES_ITSELF) from None
        raise
    return _Probe([t.grad_fn for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)], sites.sites, reentrant,
                  seeded, _generator_names(model, seeded_own))


_PROBE_SEED = 0x7E57_5EED_C0DE_0001
"""The seed of torch's default generators while the probe's forward runs: one that ends seeded otherwise was seeded
by the forward itself (Note [Probing the model])."""


def _lazy_modules(model: nn.Module) -> list[str]:
    """The names of the modules holding a parameter or buffer not materialised yet (``nn.LazyLinear`` before its first
    call; Note [Lazy modules])."""
    from torch.nn.parameter import is_lazy
    return [name or type(model).__name__ for name, m in model.named_modules()
            if any(is_lazy(t) for t in [*m._parameters.values(), *m._buffers.values()] if t is not None)]


def _lazy_tensors(model: nn.Module) -> list[tuple]:
    """(module name, module, "_parameters" or "_buffers", key) of each parameter or buffer not materialised yet."""
    from torch.nn.parameter import is_lazy
    return [(name or type(model).__name__, m, where, key) for name, m in model.named_modules()
            for where in ("_parameters", "_buffers") for key, t in m.__dict__[where].items()
            if t is not None and is_lazy(t)]


class _LazyCalled(CaptureError):
    """A lazy module whose tensors a wrapper's call took out was called (:class:`_LazyGuard`)."""


class _LazyGuard:
    """A forward pre-hook put (once, first) on each lazy module the first call with grad left lazy (Note [Lazy
    modules]): while a wrapper's call has the module's tensors taken out (:func:`_lazy_left_out`), a forward that calls
    it after all is refused naming it, before its own hook would materialise it without them. Outside such a call it
    does nothing (an evaluation run materialises the module as usual)."""

    taken: set = set()  # ids of the modules whose lazy tensors a call has taken out now

    def __init__(self, name: str):
        self.name = name

    def __call__(self, module, args):
        if id(module) in _LazyGuard.taken:
            raise _LazyCalled(f"auto_checkpoint: {self.name}, a lazy module the first call with grad did not call, is "
                               f"called at this call, not materialised yet: its parameters were left out of the "
                               f"wrapper's steps; call it once (a forward through it) before wrapping the model, or "
                               f"before this call (Note [Lazy modules] in torch_exec/auto.py)")


def _guard_lazy(left: list) -> list:
    """Guard each module of :func:`_lazy_tensors`' ``left`` by a :class:`_LazyGuard` (once); the handles of the guards
    put now."""
    handles = []
    for name, m, _, _ in left:
        if not any(isinstance(h, _LazyGuard) for h in m._forward_pre_hooks.values()):
            handles.append(m.register_forward_pre_hook(_LazyGuard(name), prepend=True))
    return handles


@contextlib.contextmanager
def _lazy_left_out(left: list):
    """Note [Lazy modules]: the parameters and buffers of ``left`` (:func:`_lazy_tensors`) still lazy are taken out of
    their modules while the wrapper prepares or runs a call (its snapshots, signature, capture and profile read every
    parameter, and a lazy one raises at any use), and put back after, each dictionary in its order. A forward that calls
    such a module after all is refused naming it (:class:`_LazyGuard`)."""
    from torch.nn.parameter import is_lazy
    taken: dict = {}  # id of a dictionary: (the dictionary, its items before, the keys taken out)
    modules: set = set()
    for _, m, where, key in left:
        d = m.__dict__[where]
        if d.get(key) is not None and is_lazy(d[key]):
            taken.setdefault(id(d), (d, list(d.items()), set()))[2].add(key)
            del d[key]
            modules.add(id(m))
    if not taken:
        yield
        return
    _LazyGuard.taken |= modules
    try:
        yield
    finally:
        _LazyGuard.taken -= modules
        for d, items, keys in taken.values():
            now = dict(d)
            d.clear()
            for key, value in items:  # in their order: those taken out, and those still there (set since or not)
                if key in now:
                    d[key] = now.pop(key)
                elif key in keys:
                    d[key] = value
            d.update(now)  # added during the call


def _generator_names(model: nn.Module, generators) -> list[str]:
    """Where the model holds each of ``generators``: a module attribute's dotted name, else "a torch.Generator its
    forward reaches" (a global, a plain object's)."""
    names = {}
    for name, m in model.named_modules():
        for key, value in vars(m).items():
            if isinstance(value, torch.Generator):
                names.setdefault(id(value), f"{name}.{key}".lstrip("."))
    return [names.get(id(g), "a torch.Generator its forward reaches") for g in generators]


def _graph_generators_not_own(ep, model: nn.Module) -> list[str]:
    """The names of the ``torch.Generator`` constants of the exported program ``ep`` that are none of the generators
    the wrapper records (:func:`U.generators_of`) or torch's default ones: one the forward made (each call's
    ``torch.Generator().manual_seed(9)``), which the graph keeps, the one made at capture, and draws on from. The graph
    holds another Python object for the same generator, so each known generator is marked with a seed of its own
    (its state put back after) and the constants' seeds are read (Note [Probing the model])."""
    constants = [(name, v) for name, v in ep.constants.items() if isinstance(v, torch.Generator)]
    if not constants:
        return []
    known = [*_default_generators(U.all_rng_devices()).values(), *U.generators_of([model])]
    states = [g.get_state() for g in known]
    try:
        for i, g in enumerate(known):
            g.manual_seed(_PROBE_SEED + 1 + i)
        marks = {_PROBE_SEED + 1 + i for i in range(len(known))}
        return [name for name, v in constants if v.initial_seed() not in marks]
    finally:
        for g, st in zip(known, states):
            g.set_state(st)


def _generator_arguments(args: tuple, kwargs: dict) -> list[str]:
    """The arguments of a call that are (or hold) a ``torch.Generator``: "argument i" or "keyword 'name'"."""
    found = [f"argument {i}" for i, a in enumerate(args)
             if any(isinstance(v, torch.Generator) for v in pytree.tree_leaves(a))]
    found += [f"keyword {k!r}" for k, a in kwargs.items()
              if any(isinstance(v, torch.Generator) for v in pytree.tree_leaves(a))]
    return found


def _default_generators(devices: list[int]) -> dict:
    """torch's default generators, the CPU's and those of the CUDA ``devices``, by name."""
    found = {"the CPU's": torch.default_generator}
    found.update({f"cuda:{d}'s": torch.cuda.default_generators[d] for d in devices})
    return found


class _Contents:
    """A list, tuple or dict attribute's contents as they were (:func:`_module_state`), the lists, tuples
    and dicts among them recorded the same way, for putting them back in place (:func:`_put_back`)."""

    __slots__ = ("obj", "items")

    def __init__(self, obj, depth: int, seen: set):
        seen.add(id(obj))

        def record(v):
            return (_Contents(v, depth - 1, seen) if isinstance(v, _CONTAINERS) and depth > 1 and id(v) not in seen
                    else v)
        self.obj = obj
        self.items = {k: record(v) for k, v in obj.items()} if isinstance(obj, dict) else [record(v) for v in obj]


def _put_back(c: _Contents):
    """The container of ``c`` holding what it held, its lists and dicts put back too (in place: the model
    may hold them elsewhere as well; a tuple's own items cannot have changed)."""
    values = c.items if isinstance(c.items, list) else list(c.items.values())
    restored = [_put_back(v) if isinstance(v, _Contents) else v for v in values]
    if isinstance(c.obj, list):
        c.obj[:] = restored
    elif isinstance(c.obj, dict):
        c.obj.clear()
        c.obj.update(zip(c.items, restored))
    return c.obj


_ATTRIBUTE_DEPTH = 4  # how deep the probe looks into an attribute's lists, tuples and dicts
_MODULE_KEYS = frozenset(vars(nn.Module()))  # nn.Module's own dictionaries (its parameters, hooks, ...)
_CONTAINERS = (list, tuple, dict)


def _tensors_in(v, depth: int = _ATTRIBUTE_DEPTH, seen: set | None = None) -> list:
    """The tensors ``v`` is or holds through lists, tuples (named ones too) and dicts, ``depth`` levels deep."""
    if isinstance(v, torch.Tensor):
        return [v]
    if depth == 0 or not isinstance(v, _CONTAINERS):
        return []
    seen = set() if seen is None else seen
    if id(v) in seen:
        return []
    seen.add(id(v))
    return [t for x in (v.values() if isinstance(v, dict) else v) for t in _tensors_in(x, depth - 1, seen)]


def _module_state(m: nn.Module) -> tuple:
    """A module's plain attributes (its ``__dict__`` copied), the contents of its list, tuple and dict attributes
    (nn.Module's own dictionaries aside: a module's ``self._losses`` is looked into), and the tensors each held, for
    :func:`_stored_tensors` and :func:`_restore_attributes`."""
    d = vars(m)
    contents = {key: _Contents(v, _ATTRIBUTE_DEPTH, set()) for key, v in d.items()
                if isinstance(v, _CONTAINERS) and key not in _MODULE_KEYS}
    held = {key: {id(t) for t in _tensors_in(v)} for key, v in d.items() if key in contents}
    return m, dict(d), contents, held


def _gained(state: tuple, key: str, v) -> list:
    """The tensors attribute ``key`` of the module of ``state`` holds as ``v`` that it did not hold then."""
    _, was, _, held = state
    old = was.get(key, _MISSING)
    before = held[key] if old is v and key in held else {id(t) for t in _tensors_in(old)}
    return [t for t in _tensors_in(v) if id(t) not in before]


def _stored_tensors(state: tuple):
    """``(attribute, tensor)`` for each tensor the module of ``state`` holds now that it did not then: a
    plain attribute, or one held through a list, tuple or dict attribute (``self.losses.append(...)``,
    ``self.stats["aux"].append(...)``, ``self.last = (loss, n)``)."""
    m, was, contents, _ = state
    for key, v in vars(m).items():
        if v is was.get(key) and key not in contents:
            continue
        for t in _gained(state, key, v):
            yield (key if t is v else f"{key}[...]"), t


def _restore_attributes(before: list) -> None:
    """Put back every plain attribute of the modules in ``before`` (:func:`_module_state`) that holds or
    held a tensor, and the contents of a list or dict attribute that gained one (the lists and dicts in
    it too), on those module objects (a forward may replace a submodule)."""
    for state in before:
        m, was, contents, _ = state
        now = vars(m)
        for key in set(now) | set(was):
            old, new = was.get(key, _MISSING), now.get(key, _MISSING)
            if old is new:
                if key in contents and _gained(state, key, new):
                    _put_back(contents[key])
                continue
            if not (_tensors_in(old) or _tensors_in(new)):
                continue
            if old is _MISSING:
                del now[key]
            else:
                now[key] = old


_MISSING = object()


def _probe_model(model: nn.Module, args: tuple, kwargs: dict) -> _Probe:
    """Run the model once as plain autograd on (copies of) its inputs, saving no activations, and refuse
    what no capture can replay (Note [Probing the model]); the generators and the modules' attributes
    are left as they were, and the model's own errors are raised as they are. The export path's checks
    read what it saw (:func:`_custom_functions`)."""
    names = {id(m): name for name, m in model.named_modules()}
    before = [_module_state(m) for m in model.modules()]
    host_rng = _host_rng_state()
    try:
        probe = _probe_forward(model, args, kwargs)
        reached = set(U.graph_nodes(probe.roots))
        stored = sorted(f"{names[id(state[0])]}.{key}".lstrip(".") for state in before
                        for key, v in _stored_tensors(state)
                        if v.requires_grad and v.grad_fn is not None and v.grad_fn not in reached)
        del reached
        moved = _host_rng_moved(host_rng)
        if moved:  # a forward that seeds the generator itself draws the same numbers from any state
            ends = _host_rng_state()
            _set_host_rng_state(host_rng)
            _advance_host_rng()
            _probe_forward(model, *_probe_inputs(args, kwargs))
            again = _host_rng_moved(ends)  # those that end elsewhere from elsewhere
            moved = [name for name in moved if name in again]
    finally:
        _set_host_rng_state(host_rng)
        _restore_attributes(before)
    if probe.reentrant:
        around = sorted({names.get(id(fn)) or getattr(fn, "__qualname__", type(fn).__name__) for fn in probe.reentrant})
        raise CaptureError(f"the model calls reentrant torch.utils.checkpoint ({CHECKPOINT_FUNCTION}, "
                           f"use_reentrant=True) around {U.first_few(around)}, which neither capture can replay: its "
                           f"forward runs the layers without grad (torch.export's graph gives them no gradient) and its "
                           f"backward runs them again (the block fallback's chain would be back-propagated from the "
                           f"wrong graph) (Note [Probing the model]). auto_checkpoint plans the recomputation itself: "
                           f"call the layers without torch.utils.checkpoint (transformers: "
                           f"model.gradient_checkpointing_disable()), or pass use_reentrant=False")
    retained = [site for site in probe.hook_sites if site.startswith("Tensor.retain_grad")]
    if retained:  # Note [Gradient hooks registered in the forward]: neither capture fills h.grad
        raise _hooks_error(retained, "in its forward", "neither capture keeps (torch.export drops it, and the block "
                           "fallback runs the layers again apart from the h it returned)")
    if moved:
        raise U.host_rng_error(moved, "the model's forward", "neither capture can replay (torch.export fixes the first "
                               "draw in the graph, and recomputation would draw again: Note [Probing the model])")
    if stored:
        raise CaptureError(f"the model's forward stores tensors that carry gradient on its modules, off the path to "
                           f"its outputs ({U.first_few(sorted(set(stored)))}): "
                           f"a captured graph would not update them and a block run without a tape would store them "
                           f"without gradient (Note [Probing the model]); return them from forward (e.g. with the "
                           f"output) instead")
    return probe


def _custom_functions(model: nn.Module, args: tuple, kwargs: dict, probe: _Probe | None = None) -> list[str]:
    """The custom autograd Functions one forward of the model runs whose backward is not shown to be the
    derivative of their forward's operations, each as "name: why" (Note [Custom autograd Functions]),
    read off ``probe`` (:func:`_probe_model`'s forward; None: one is run here); the model's state is the
    caller's to restore (buffers, RNG)."""
    if probe is None:
        probe = _probe_forward(model, args, kwargs)
    if probe.hook_sites:
        raise _hooks_error(probe.hook_sites, "in its forward", "torch.export drops")
    classes = {f"{cls.__module__}.{cls.__qualname__}": cls for cls in _function_classes(probe.roots)
               if not cls.__module__.startswith(_EXPORTED_FUNCTIONS)}
    if not classes:
        return []
    inputs = _function_inputs(model, args, kwargs, list(classes.values()))
    refused = []
    for name, cls in sorted(classes.items()):
        why = (_backward_differs(cls, *inputs[cls]) if cls in inputs else
               "its first call was not seen in a forward without grad")
        if why:
            refused.append(f"{name}: {why}")
    return refused


# torch.library.custom_op's autograd (register_autograd) runs through a Function of the first module, torch.cond's
# and the other higher-order operators' through Functions of the second; export keeps the op and its backward (Note
# [Higher-order operators in the forward])
_EXPORTED_FUNCTIONS = ("torch._library.autograd", "torch._higher_order_ops")


def _function_classes(roots: list) -> list:
    """The custom Function classes whose nodes the autograd graph from ``roots`` holds."""
    classes = {node._forward_cls: None for node in U.graph_nodes(roots)
               if isinstance(node, torch.autograd.function.BackwardCFunction)}
    return list(classes)


def _function_inputs(model: nn.Module, args: tuple, kwargs: dict, classes: list) -> dict:
    """``{Function class: (its forward's arguments, keywords)}`` at its first call in a forward without grad
    (tensors copied), for :func:`_backward_differs`."""
    seen: dict = {}
    saved = {cls: cls.__dict__.get("forward") for cls in classes}

    def recording(cls, forward, with_ctx):
        @functools.wraps(forward)  # Function.apply binds arguments by the forward's signature
        def run(*a, **kw):
            if cls not in seen:  # copies: the forward (or the model after it) may write into its arguments
                seen[cls] = pytree.tree_map(lambda v: v.detach().clone() if isinstance(v, torch.Tensor) else v,
                                            (a[1:] if with_ctx else a, kw))
            return forward(*a, **kw)
        return staticmethod(run)
    try:
        for cls in classes:
            with_ctx = not torch.autograd.function._is_setup_context_defined(cls.setup_context)
            cls.forward = recording(cls, cls.forward, with_ctx)
        with torch.no_grad(), U.fork_rng(U.all_rng_devices(), U.generators_of([model])), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # reentrant checkpoint warns without grad
            model(*args, **kwargs)
    except Exception:  # noqa: BLE001, S110 - the classes not seen are refused
        pass
    finally:
        for cls, forward in saved.items():
            if forward is None:
                del cls.forward
            else:
                cls.forward = forward
    return seen


def _backward_differs(cls, args: tuple, kwargs: dict) -> str:
    """Why ``cls.apply``'s gradients are not shown to equal those of its forward's operations on these
    arguments ("" when they are: a random seed for the outputs' gradients, the same random numbers drawn
    by both, within a few roundings of their dtype; Note [Custom autograd Functions])."""
    leaves = pytree.tree_map(lambda v: v.detach().clone().requires_grad_(v.is_floating_point() or v.is_complex())
                             if isinstance(v, torch.Tensor) else v, (args, kwargs))
    wrt = [v for v in pytree.tree_leaves(leaves) if isinstance(v, torch.Tensor) and v.requires_grad]
    try:
        grads = []
        state = U.RngState.capture(U.all_rng_devices())
        with torch.random.fork_rng(U.all_rng_devices()), torch.enable_grad():
            for own in (True, False):
                state.restore()
                # copies of the leaves: a forward may write into its input (ctx.mark_dirty), not into a leaf
                a, kw = pytree.tree_map(lambda v: v.clone() if isinstance(v, torch.Tensor) and v.requires_grad else v,
                                        leaves)
                if own:
                    out = cls.apply(*a, **kw)
                elif torch.autograd.function._is_setup_context_defined(cls.setup_context):
                    out = cls.forward(*a, **kw)
                else:
                    ctx = torch.autograd.function.FunctionCtx()
                    ctx.needs_input_grad = tuple(isinstance(v, torch.Tensor) and v.requires_grad for v in a)
                    out = cls.forward(ctx, *a, **kw)
                outs = [v for v in pytree.tree_leaves(out) if isinstance(v, torch.Tensor) and v.is_floating_point()]
                if own:
                    generator = torch.Generator(device=outs[0].device).manual_seed(0)
                    seeds = [torch.randn(o.shape, dtype=o.dtype, device=o.device, generator=generator) for o in outs]
                pairs = [(o, g) for o, g in zip(outs, seeds) if o.requires_grad]
                if not own:
                    roots = [o.grad_fn for o, _ in pairs]
                    inner = _function_classes(roots)
                    if inner:  # their own backward would stand in for the derivative
                        return f"its forward runs other custom Functions ({', '.join(c.__qualname__ for c in inner)})"
                    given = {id(v) for v in wrt}
                    leaves_read = [U.accumulated_leaf(node) for node in U.graph_nodes(roots)]
                    if any(v is not None and id(v) not in given for v in leaves_read):
                        return "its forward reads tensors it is not given as arguments (a module's parameters)"
                if not pairs:
                    return "its forward's outputs do not require grad"
                got = torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs], allow_unused=True)
                grads.append([torch.zeros_like(x) if g is None else g for x, g in zip(wrt, got)])
    except Exception as exc:  # noqa: BLE001 - a forward that does not run this way (custom kernels): refused
        return f"checking its backward raised {type(exc).__name__}: {_first_line(exc)}"
    for own, derived in zip(*grads):
        rtol = max(1e-3, 16 * torch.finfo(own.dtype).eps) if own.is_floating_point() else 1e-3
        if not torch.allclose(own, derived, rtol=rtol, atol=rtol * max(1e-3, float(own.abs().max()))):
            return "its backward is not the derivative of its forward"
    return ""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def _users_hooks(hooks: dict) -> list:
    """The hooks of ``hooks`` that are not transformers' own output recorders (installed at the first forward asking
    for hidden states, attentions or router logits: what they collect is among the graph's outputs) nor this
    wrapper's guards of lazy modules left out (:class:`_LazyGuard`, doing nothing in a call that does not call them:
    a capture warned about them as the user's hooks), nor torch's own hook materialising a lazy module at its first
    call (a lazy module the forward does not call keeps it: Note [Lazy modules])."""
    from torch.nn.modules.lazy import LazyModuleMixin
    return [h for h in hooks.values() if not isinstance(h, _LazyGuard)
            and getattr(h, "__func__", None) is not LazyModuleMixin._infer_parameters
            and not str(getattr(h, "__module__", "") or "").startswith("transformers.utils.output_capturing")]


def _capture_export(model: nn.Module, args: tuple, kwargs: dict, max_stages: int, join=True,
                    backend: str = "auto", probe: _Probe | None = None, prefer: tuple = ()) -> Capture:
    """The model's graph cut into a chain, or into a join network's branches and head (Note [Join
    detection]) when ``join`` is True; a string ``join`` says why a join is cut as one chain instead.
    ``probe``: what :func:`_probe_model` saw of these inputs. ``prefer``: a chain's cuts, where valid (:func:`_chain_of`)."""
    if probe is None:
        probe = _probe_forward(model, args, kwargs)
    functions = _custom_functions(model, args, kwargs, probe)
    if functions:  # (reentrant torch.utils.checkpoint was refused by the probe: Note [Probing the model])
        raise CaptureError(f"the model runs custom autograd Functions whose backward torch.export would drop "
                           f"(Note [Custom autograd Functions]): {'; '.join(functions)}")
    if probe.seeded:  # Note [Probing the model] (Reformer's reversible layers seed too: their Function first)
        raise CaptureError(f"the model's forward seeds torch's default generator ({' and '.join(probe.seeded)}: "
                           f"torch.manual_seed, torch.seed or torch.set_rng_state inside forward), which torch.export "
                           f"does not keep: the graph's draws (dropout, randn_like) would take whatever state the "
                           f"generator is in (Note [Probing the model]); use capture='blocks' (the model's code, "
                           f"seeding included, runs at each step, and the blocks' draws are recorded and replayed; "
                           f"capture='auto' falls back to it), or seed outside the forward")
    if probe.seeded_own:  # the same for the model's own generators (review rv21d: export trained it wrong, silently)
        raise CaptureError(f"the model's forward seeds its torch.Generator {U.first_few(sorted(set(probe.seeded_own)))} "
                           f"(generator.manual_seed or set_state inside forward), which torch.export does not keep: "
                           f"the graph's draws would take whatever state the generator is in (Note [Probing the "
                           f"model]); use capture='blocks' (the model's code, seeding included, runs at each step; "
                           f"capture='auto' falls back to it), or seed the generator outside the forward")
    hooked = [name or type(model).__name__ for name, m in model.named_modules()
              if _users_hooks(m._forward_hooks) or _users_hooks(m._forward_pre_hooks)]
    if hooked or any(U.global_forward_hooks()):
        warn_once(f"auto_checkpoint: the forward hooks of {', '.join(hooked[:3]) or 'the global registry'}"
                  f"{' and more' if len(hooked) > 3 else ''} run while the graph is captured (on FakeTensors too) and "
                  f"not at each step; what they do to outputs is in the graph (Note [What a captured graph fixes]). "
                  f"Hooks that must run every step: capture='blocks'", UserWarning, stacklevel=5)
    ep = _export_watching_attributes(model, args, kwargs, probe)
    made = _graph_generators_not_own(ep, model)
    if made:  # review rv21d: the generator made at capture, never seeded again, drew on at every step
        raise CaptureError(f"the model's forward draws from a torch.Generator none of its modules holds (one it makes "
                           f"at each call: torch.Generator().manual_seed(9)), which torch.export keeps as a constant "
                           f"of the graph ({U.first_few(made)}): every step would draw on from the one made at "
                           f"capture (Note [Probing the model]); keep the generator as a module attribute (self.gen, "
                           f"seeded outside the forward), or use capture='blocks' (the model's code runs at each step; "
                           f"capture='auto' falls back to it)")
    gm = ep.module()
    _drop_guards(gm)
    _refuse_transforms(gm)
    _drop_unchanged_conversions(gm)
    concatenations = _running_concatenation(gm)
    in_spec = ep.call_spec.in_spec
    kw_order = list(in_spec.child(1).context) if in_spec.num_children == 2 else []
    flat = pytree.tree_leaves((args, {k: kwargs[k] for k in kw_order}))
    g = _Graph(gm, flat)
    if not g.main:
        raise CaptureError("no operation of the model needs a gradient (no trainable parameter is used)")
    # Side values: the placeholders that need no gradient, then the side nodes, in program order.
    side_nodes = [n for n in g.placeholders if n not in g.carry] + g.side
    side_pos = {n: i for i, n in enumerate(side_nodes)}
    # Output leaves.
    out_nodes = pytree.tree_leaves(g.output.args[0])
    chain_outputs = []
    outputs = []
    for leaf in out_nodes:
        if isinstance(leaf, fx.Node) and leaf in g.carry and not _is_tensor_value(leaf):
            # the chain hands back tensors only: the block fallback runs the model's own code for it
            raise CaptureError(f"the model returns a number computed from tensors that carry gradient ({leaf.name}, "
                               f"{leaf.target}: .item() or .tolist() in forward), which the captured chain, handing "
                               f"back tensors only, cannot return; return a tensor instead (x.norm().detach()), or "
                               f"use capture='blocks' (the model's own code runs around its blocks)")
        if isinstance(leaf, fx.Node) and leaf in g.carry:
            if leaf not in chain_outputs:
                chain_outputs.append(leaf)
            outputs.append(("chain", chain_outputs.index(leaf)))
        elif isinstance(leaf, fx.Node) and leaf in side_pos:
            outputs.append(("side", side_pos[leaf]))
        elif isinstance(leaf, fx.Node):
            outputs.append(("attr", leaf.target))
        else:
            outputs.append(("const", leaf))
    if not chain_outputs:
        raise CaptureError("the model's output does not depend on any trainable parameter")
    side = U.CallData()
    notes = []
    split, why = _find_join(g, chain_outputs)
    if split is not None and g.regions:
        split, why = None, "it runs torch.vmap, whose region a join's branches could reorder (Note [Function " \
                           "transforms in the graph])"
    if why:
        notes.append(f"not run as a join network: {why} (Note [Join detection]); cut as one chain")
    elif split is not None and join is not True:
        notes.append(f"a join network of {len(split.branches)} branches, cut as one chain: {join}")
        split = None
    elif split is not None and (too_large := _join_too_large(len(split.branches), backend)):
        notes.append(f"a join network, cut as one chain: {too_large}")
        split = None
    branches = branch_inputs = head = None
    if split is not None:
        k = len(split.branches)
        per_branch = _join_stage_cap(max_stages, k, backend)
        branches, branch_inputs, cuts = [], [], []
        for beta in range(k):
            stages, a0, n_cuts = _chain_of(gm, g, flat, split.branches[beta], split.grad_inputs[beta],
                                           [split.outputs[beta]], side_pos, side, per_branch, False,
                                           split.inputs[beta][0], inputs=set(split.inputs[beta]))
            branches.append(stages)
            branch_inputs.append([g.placeholders.index(n) for n in a0])
            cuts.append(n_cuts)
        used_side = _used_side(split.head, side_pos, split.outputs)
        sub = _subgraph(gm, split.head, split.outputs + used_side, chain_outputs, single_output=False)
        head = GraphStage(sub, k, [side_pos[a] for a in used_side], side, f"head:{_label(split.head)}")
        stages = [s for b in branches for s in b] + [head]
        chain_input = [i for b in branch_inputs for i in b]
        notes.append(f"captured with torch.export as a join network (Note [Join detection]): {k} branches of "
                     f"{', '.join(str(len(b)) for b in split.branches)} operations carrying gradient, "
                     f"{', '.join(str(c) for c in cuts)} valid cuts, {', '.join(str(len(b)) for b in branches)} "
                     f"stages kept (at most {per_branch} per branch: max_stages={max_stages}, JOIN_DP_WORK), meeting at a head of "
                     f"{len(split.head)} operations")
    else:
        first_tensor = next(n for n, v in zip(g.placeholders, flat) if isinstance(v, torch.Tensor))

        def chain(limit: int, blockers: dict) -> tuple[list, list, int]:
            return _chain_of(gm, g, flat, g.main, g.grad_inputs, chain_outputs, side_pos, side, max_stages, True,
                             first_tensor, blockers=blockers, limit=limit, prefer=prefer)
        limit, blockers = MAX_CROSSING, {}
        stages, a0, n_cuts = chain(limit, blockers)
        few = _long_lived_note(g.main, chain_outputs, blockers, limit)
        if few and LONG_LIVED_CROSSING > limit:  # Note [Values read late]
            wide: dict = {}
            cut = chain(LONG_LIVED_CROSSING, wide)
            units = [_least_unit(g.main, g.grad_inputs, chain_outputs, k) for k in (limit, LONG_LIVED_CROSSING)]
            if cut[2] > n_cuts and units[1] < units[0]:
                notes.append(f"{few}: cut with up to {LONG_LIVED_CROSSING} values across a cut instead, {cut[2]} "
                             f"valid cuts instead of {n_cuts}, the largest part between two cuts and the state after "
                             f"it {units[1]} B instead of {units[0]} B (Note [Values read late])")
                (stages, a0, n_cuts), limit = cut, LONG_LIVED_CROSSING
                few = _long_lived_note(g.main, chain_outputs, wide, limit)
            elif cut[2] > n_cuts:
                notes.append(f"not cut with up to {LONG_LIVED_CROSSING} values across a cut: the largest part between "
                             f"two cuts and the state after it would be {units[1]} B instead of {units[0]} B "
                             f"(Note [Values read late])")
        chain_input = [g.placeholders.index(n) for n in a0]
        notes.append(f"captured with torch.export: {len(g.main)} operations carry gradient, {n_cuts} valid cuts, "
                     f"{len(stages)} stages kept (max_stages={max_stages})")
        if few:
            notes.append(f"{few}, {LONG_LIVED_ADVICE}")
            warn_once(f"auto_checkpoint: {few}, {LONG_LIVED_ADVICE}", UserWarning, stacklevel=5)
    # The prologue: the side values a stage, the head or the output reads, from the flat inputs. The
    # others (a frozen backbone's intermediates) are freed inside it, as plain autograd frees them:
    # Note [Side values nothing reads].
    read = {i for stage in stages for i in stage.side_index} | {v for kind, v in outputs if kind == "side"}
    graph = fx.Graph()
    env = {}
    for n in g.placeholders:
        env[n] = graph.placeholder(n.name)
    for n in g.side:
        for a in _node_inputs(n):
            if a not in env and a.op == "get_attr":
                env[a] = graph.get_attr(a.target)
        env[n] = graph.node_copy(n, lambda a: env[a])
    graph.output(tuple(env[n] if i in read else None for i, n in enumerate(side_nodes)))
    prologue = fx.GraphModule(gm, graph)
    if concatenations:
        notes.append(f"{concatenations} concatenation(s) extend the one before (Note [Running concatenation])")
    return Capture(method="export", prologue=prologue, stages=stages, side=side, chain_input=chain_input,
                   outputs=outputs, out_spec=ep.call_spec.out_spec, kw_order=kw_order,
                   tensors=_model_tensors(model), notes=notes, branches=branches, branch_inputs=branch_inputs,
                   head=head, constants=_attribute_constants(model, ep))


def _export_watching_attributes(model: nn.Module, args: tuple, kwargs: dict, probe: _Probe):
    """:func:`_export`, refusing a model whose forward writes a scalar attribute at every call: one the export run
    changes again after the probe's forward (Note [Attributes the forward writes at every call]), put back and
    recorded in ``probe.written``."""
    before = _scalar_state(model)
    ends: list = []  # torch.export puts the attributes back when it returns: read where the forward returns
    handle = model.register_forward_hook(lambda *_: ends.append(_scalar_state(model)), always_call=True)
    try:
        ep = _export(model, args, kwargs)
    finally:
        handle.remove()
        written = _scalars_changed(before, ends[-1]) if ends else []
        _put_back_scalars(before, [(i, name) for i, _, name, _, _ in written])
        probe.written.extend((i, name) for i, _, name, _, _ in written)
    if written:
        raise CaptureError(
            f"the model's forward writes the attribute(s) "
            f"{U.first_few([f'{type(m).__name__}.{name} ({old!r} -> {new!r})' for _, m, name, old, new in written])} "
            f"at every call, which torch.export runs once, while capturing: the graph keeps what the forward "
            f"computed from the value it read then, and the write is never made again (Note [Attributes the "
            f"forward writes at every call]); keep such a value in a buffer updated in place "
            f"(self.register_buffer('calls', torch.zeros((), dtype=torch.long)); self.calls += 1), update it in "
            f"the training loop, or use capture='blocks' (the model's code runs at each step)")
    return ep


def _scalar_state(model: nn.Module) -> list:
    """``[(module, {name: value})]``: every module's scalar attributes, in the walk of the input signature
    (``captured_state_key``; Note [Attributes the forward writes at every call])."""
    return [(m, dict(U.scalar_attributes(m))) for m in U.walked_modules(model)]


def _scalars_changed(before: list, after: list) -> list:
    """``(position, module, name, old, new)`` of each scalar attribute of :func:`_scalar_state` ``before`` that
    ``after`` (a later state of the same model) holds as another scalar (one that holds a tensor, or held one, is the
    probe's: Note [Probing the model])."""
    if [m for m, _ in before] != [m for m, _ in after]:  # the forward replaced a submodule: compared by object
        now = {id(m): values for m, values in after}
        after = [(m, now.get(id(m), values)) for m, values in before]
    changed = []
    for i, ((m, old), (_, new)) in enumerate(zip(before, after)):
        for name in old.keys() & new.keys():
            a, b = old[name], new[name]
            if type(a) is not type(b) or a != b:
                changed.append((i, m, name, a, b))
    return changed


def _put_back_changed_scalars(before: list, model: nn.Module) -> None:
    """Every scalar attribute of ``model`` that changed since :func:`_scalar_state` ``before``, as it was then."""
    _put_back_scalars(before, [(i, name) for i, _, name, _, _ in _scalars_changed(before, _scalar_state(model))])


def _put_back_scalars(before: list, which) -> None:
    """The scalar attributes ``which`` (``(position, name)``) as :func:`_scalar_state` ``before`` holds them."""
    for i, name in which:
        if i < len(before) and name in before[i][1]:  # (else the model's structure changed since)
            before[i][0].__dict__[name] = before[i][1][name]


def _attribute_constants(model: nn.Module, ep) -> list:
    """``(module, attribute, tensor)`` for each tensor constant of the exported program that is a plain attribute of
    one of the model's modules (``self.scale = torch.tensor(...)``, not a buffer): the graph holds that tensor object,
    and a call after the attribute was replaced captures again (Note [What a captured graph fixes]). Constants made in
    the forward (``torch.tensor(3.0)``) are no attribute's."""
    out = []
    for name, value in ep.constants.items():
        if not isinstance(value, torch.Tensor):
            continue
        prefix, _, attr = name.rpartition(".")
        try:
            owner = model.get_submodule(prefix)
        except AttributeError:
            continue
        if owner.__dict__.get(attr) is value:
            out.append((owner, attr, value))
    return out


def _replaced_constants(cap: Capture, model: nn.Module) -> list[str]:
    """The attributes of :func:`_attribute_constants` that no longer hold the captured tensor."""
    replaced = [(m, attr) for m, attr, t in cap.constants if m.__dict__.get(attr) is not t]
    if not replaced:  # every call: no walk of the modules
        return []
    names = {id(m): name for name, m in model.named_modules()}
    return [f"{names.get(id(m), type(m).__name__)}.{attr}".lstrip(".") for m, attr in replaced]


def side_nbytes(values: list, inputs: list, model_tensors: list) -> int:
    """Bytes a step's side values add (Note [Cut points]): every distinct storage behind them, whole, in
    the allocator's blocks (:func:`torch_exec._util.held_nbytes`'s rule), except the storages of the
    inputs and of the model's parameters and buffers. A view adds nothing of its own: an expanded mask,
    a slice of a buffer, the several views of one position tensor a prologue returns."""
    known = set(U.storages(list(inputs))) | set(U.storages([t for _, t in model_tensors]))
    return sum(U.block_bytes(key) for key in U.storages(list(values)) if key not in known)


def _model_tensors(model: nn.Module) -> list:
    out = [(name, p) for name, p in model.named_parameters(remove_duplicate=False)]
    out += [(name, b) for name, b in model.named_buffers(remove_duplicate=False)]
    return out


# ---------------------------------------------------------------------------- the block fallback
class _Blocks:
    """Note [Block fallback]: the blocks of one ModuleList/Sequential run as one chain."""

    def __init__(self, name: str, blocks: list[nn.Module], position: str | int, tuple_out: bool):
        self.name = name
        self.blocks = blocks
        self.position = position      # where the hidden state is passed: a positional index or a keyword
        self.tuple_out = tuple_out    # blocks return (hidden, ...) rather than a tensor
        self.tails: list = []         # with tuple_out, each block's other items (tensors as None), handed back
        self.calls = 0
        self.result = None
        self.chosen = ""              # why this list (Note [Block fallback]), for the capture's notes


class _BytesMade(TorchDispatchMode):
    """Bytes of the new storages the ops make while a candidate's blocks run, per candidate
    (Note [Block fallback]: the ranking of the lists). Views and in-place results are not new."""

    supports_higher_order_operators = True  # Note [Higher-order operators in the forward]: what they return counts

    @classmethod
    def ignore_compile_internals(cls) -> bool:  # Note [Higher-order operators in the forward]
        return True

    def __init__(self, n: int):
        super().__init__()
        self.running = [0] * n   # blocks of each candidate running now (nested calls count once)
        self.made = [0] * n

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        now = [c for c, depth in enumerate(self.running) if depth]
        if now:
            known = {U.storage_key(t) for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
            made = sum(key[2] for key in U.storages(out) if key not in known)
            for c in now:
                self.made[c] += made
        return out


# what a model whose LayerDrop skips blocks does to train under a budget (Note [Draws between the blocks])
_SKIPS_AT_RANDOM = "the model skips blocks at random (LayerDrop"
_LAYERDROP_REMEDY = ("set the model's layerdrop to 0 (transformers: config.layerdrop=0) for training under a budget, "
                     "or cut the model by hand")


class _DrawsBetween(TorchDispatchMode):
    """Random ops (ATen's nondeterministic_seeded) run outside a list's blocks before the last one ended
    (``forced``), their floating-point results set to 0 so that a LayerDrop with any probability above 0 skips
    a block; those after the first block started (``between``); and whether the blocks draw themselves
    (``inside``): Note [Draws between the blocks]."""

    supports_higher_order_operators = True  # Note [Higher-order operators in the forward]

    @classmethod
    def ignore_compile_internals(cls) -> bool:  # Note [Higher-order operators in the forward]
        return True

    def __init__(self, blocks: list):
        super().__init__()
        self.depth, self.started, self.ended, self.between, self.inside = 0, False, False, [], False
        self.forced: list = []  # the draws set to 0: before the last block ended, outside the blocks
        last = len(blocks) - 1
        self.handles = [b.register_forward_pre_hook(self._enter) for b in blocks]
        self.handles += [b.register_forward_hook(lambda *_, i=i: self._leave(i == last), always_call=True)
                         for i, b in enumerate(blocks)]

    def _enter(self, *_):
        self.depth += 1
        self.started = True

    def _leave(self, last: bool):
        self.depth -= 1
        self.ended = self.ended or (last and not self.depth)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()):  # a higher-order operator has none
            if self.depth:
                self.inside = True
            elif not self.ended:  # before the blocks too: fairseq's LayerDropModuleList draws for all of them first
                self.forced.append(str(func.overloadpacket.__name__))
                if self.started:
                    self.between.append(str(func.overloadpacket.__name__))
                for t in pytree.tree_leaves(out):
                    if isinstance(t, torch.Tensor) and t.is_floating_point():
                        t.zero_()
        return out

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def _bytes_made(model: nn.Module, args: tuple, kwargs: dict, candidates: list) -> tuple[list[int] | None, str]:
    """What each candidate's blocks make in one forward without grad (:class:`_BytesMade`), or None and
    why when the model does not run under the counting mode (then the lists are ranked by parameters)."""
    meter = _BytesMade(len(candidates))
    handles = []

    def enter(c):
        def pre(mod, a):
            meter.running[c] += 1
        return pre

    def leave(c):
        def post(mod, a, out):
            meter.running[c] -= 1
        return post

    for c, (_, blocks) in enumerate(candidates):
        for b in blocks:
            handles.append(b.register_forward_pre_hook(enter(c)))
            handles.append(b.register_forward_hook(leave(c), always_call=True))
    try:
        with torch.no_grad(), U.fork_rng(U.all_rng_devices(), U.generators_of([model])), meter:
            model(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - a model the mode cannot run: rank by parameters, saying so
        return None, f"{type(exc).__name__}: {_first_line(exc)}"
    finally:
        for h in handles:
            h.remove()
    return meter.made, ""


def _find_blocks(model: nn.Module, args: tuple, kwargs: dict) -> tuple[_Blocks | None, list[str]]:
    """The list of blocks that makes the most activations, among those whose outputs feed the next
    (Note [Block fallback]); else None and why each list was not taken."""
    candidates, scripted = [], []
    for name, mod in model.named_modules():
        if isinstance(mod, (nn.ModuleList, nn.Sequential)) and len(mod) >= 2:
            if any(isinstance(b, torch.jit.ScriptModule) for b in mod):  # they take no hooks (review rv20a)
                scripted.append(f"'{name}': its blocks are TorchScript modules (torch.jit.script), which take no "
                                f"hooks; pass the modules before scripting, or cut them by hand (the manual route)")
                continue
            candidates.append((name, list(mod)))
    if not candidates:
        return None, scripted
    made, failed = _bytes_made(model, args, kwargs, candidates)
    made = made or [0] * len(candidates)
    params = [sum(p.numel() for b in blocks for p in b.parameters()) for _, blocks in candidates]
    # The list whose blocks make the most bytes first (what checkpointing can free), then the one
    # holding most of the model's parameters, then the longest.
    order = sorted(range(len(candidates)), key=lambda c: (-made[c], -params[c], -len(candidates[c][1])))
    probed: dict = {}  # candidate -> _blocks_of's answer: each list's probe is a forward of the model, run once

    def probe(c: int):
        if c not in probed:
            probed[c] = _blocks_of(model, args, kwargs, *candidates[c])
        return probed[c]

    refused, skipping = list(scripted), {}  # the lists LayerDrop skips: name -> blocks
    for c in order:
        name, blocks = candidates[c]
        found, why = probe(c)
        if found is None:
            refused.append(f"'{name}': {why}")
            if why.startswith(_SKIPS_AT_RANDOM):
                skipping[name] = blocks
            continue
        inside = {id(m) for b in blocks for m in b.modules()}
        # lists ranked below it too, where they lie outside its blocks: one forward each (wav2vec2 on long audio,
        # whose convolutional feature encoder makes the most and ranks above its LayerDrop layers: a review,
        # bench/repros/rv12c_diff_layerdrop_beside_higher_ranked_list.py)
        for d in order[order.index(c) + 1:]:
            other_name, other = candidates[d]
            if {id(m) for b in other for m in b.modules()} & inside:  # inside its blocks, or around them
                continue
            if probe(d)[1].startswith(_SKIPS_AT_RANDOM):
                skipping[other_name] = other
        around = [n for n, skipped in skipping.items() if not all(id(b) in inside for b in skipped)]
        if around:  # Note [Draws between the blocks]: LayerDrop left in the rest of the model
            refused.append(f"'{name}': the blocks of {U.first_few(around)} would run beside it, in the rest of the "
                           f"model, whose memory is measured once, while LayerDrop runs more or fewer of them at "
                           f"each step (a Wav2Vec2 step measured 1.51x its least budget: bench/repros/"
                           f"rv12b_hf_layerdrop_rest_over_budget.py); {_LAYERDROP_REMEDY}")
            continue
        found.chosen = (f"the lists of blocks ranked by parameters, since the forward that measures the bytes "
                        f"each list's blocks make raised {failed}" if failed else
                        f"its blocks make {format_bytes(made[c])} in a forward, the most of the lists whose "
                        f"outputs feed the next")
        if refused:  # lists ranked above it, not taken: their blocks make more (wav2vec2's LayerDrop layers)
            found.chosen += f" that could be taken (not taken: {U.first_few(refused, '; ')})"
        return found, refused
    return None, refused


def _blocks_of(model: nn.Module, args: tuple, kwargs: dict, name: str, blocks: list) -> tuple[_Blocks | None, str]:
    """``blocks`` as a chain (Note [Block fallback]): each called once, on the previous one's output, with
    the same other arguments; else None and why not."""
    calls: dict = {}
    handles = []
    for i, b in enumerate(blocks):
        def hook(mod, a, kw, out, i=i):
            calls.setdefault(i, []).append((a, kw, out))
        handles.append(b.register_forward_hook(hook, with_kwargs=True))
    draws = _DrawsBetween(blocks)
    try:
        with torch.no_grad(), U.fork_rng(U.all_rng_devices(), U.generators_of([model])), draws:
            model(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the model itself fails without grad: not a candidate
        return None, f"the model raised without grad ({type(exc).__name__}: {_first_line(exc)})"
    finally:
        for h in handles:
            h.remove()
        draws.remove()
    if draws.forced and any(len(calls.get(i, ())) != 1 for i in range(len(blocks))):  # Note [Draws between the blocks]
        ops = ", ".join(sorted(set(draws.forced)))
        return None, (f"{_SKIPS_AT_RANDOM}: a draw before or between its blocks, {ops}, "
                      f"decides whether they run), which the fallback cannot replay: it runs all the blocks at the "
                      f"first one's call; {_LAYERDROP_REMEDY}")
    if draws.between:
        ops = ", ".join(sorted(set(draws.between)))
        if draws.inside:
            return None, (f"the model draws random numbers between its blocks ({ops}) and inside them (dropout): the "
                          f"fallback runs all the blocks at the first one's call, which would change the order of the "
                          f"draws and with it the blocks' random numbers. Cut the model by hand, or use a version of its "
                          f"library that draws nothing for a LayerDrop of 0 (transformers 5.24 draws nothing)")
    for i in range(len(blocks)):
        if len(calls.get(i, ())) != 1:
            return None, f"block {i} ran {len(calls.get(i, ()))} times in a forward, not once"
    first_a, first_kw, first_out = calls[0][0]
    position: str | int = 0
    if (first_a[0] if first_a else None) is None:  # the hidden state passed by keyword
        keys = [k for k, v in first_kw.items() if isinstance(v, torch.Tensor) and v.is_floating_point()]
        if not keys:
            return None, "its first block takes no floating-point tensor"
        position = keys[0]
    tuple_out = isinstance(first_out, (tuple, list))
    for i in range(len(blocks)):
        a, kw, out = calls[i][0]
        if tuple_out != isinstance(out, (tuple, list)):
            return None, f"block {i} returns a {type(out).__name__}, block 0 a {type(first_out).__name__}"
        stale = [v for v in pytree.tree_leaves(list(out[1:]))
                 if not (v is None or isinstance(v, (torch.Tensor, bool, int, str)))] if tuple_out else []
        if stale:  # handed back as the first run made them, a value that depends on the data would be stale
            return None, (f"block {i} returns {type(stale[0]).__name__} values beside its output, which the "
                          f"fallback cannot hand back")
        if i == 0:
            continue
        prev_out = calls[i - 1][0][2]
        prev = prev_out[0] if tuple_out else prev_out
        got = a[0] if position == 0 and a else kw.get(position) if isinstance(position, str) else None
        if got is not prev:
            return None, f"block {i} does not take block {i - 1}'s output as its first argument"
        rest_a = a[1:] if position == 0 else a
        rest0 = first_a[1:] if position == 0 else first_a
        if len(rest_a) != len(rest0):
            return None, f"block {i} gets {len(rest_a)} other positional arguments, block 0 {len(rest0)}"
        for j, (x, y) in enumerate(zip(rest_a, rest0)):
            if x is not y and not _same_constant(x, y):
                return None, f"block {i} gets another positional argument {j + (position == 0)} than block 0"
        kw_rest = {k: v for k, v in kw.items() if k != position}
        kw0 = {k: v for k, v in first_kw.items() if k != position}
        if kw_rest.keys() != kw0.keys():
            return None, f"block {i} gets keywords {sorted(kw_rest)}, block 0 {sorted(kw0)}"
        for k in kw0:
            if kw_rest[k] is not kw0[k] and not _same_constant(kw_rest[k], kw0[k]):
                return None, f"block {i} gets another {k!r} than block 0"
    found = _Blocks(name, blocks, position, tuple_out)
    # a tuple's other items are handed back by every call, tensors as None (the schedule keeps none of them:
    # a model whose outputs read them is refused by _check_blocks); the rest are None, bools, ints (shapes,
    # fixed for an input signature) and strings
    found.tails = [pytree.tree_map(lambda v: None if isinstance(v, torch.Tensor) else v, tuple(calls[i][0][2][1:]))
                   for i in range(len(blocks))] if tuple_out else []
    return found, ""


def _same_constant(x, y) -> bool:
    if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
        return False
    try:
        return bool(x == y)
    except Exception:  # noqa: BLE001
        return False


class _BoundBlock(nn.Module):
    """A block as a chain stage, called with the hidden state and the step's other arguments. With
    arguments that carry a gradient (Note [Block fallback]: an encoder's output), the state is
    ``(hidden, *those)``: they are put back in their places, and passed on beside the block's output."""

    def __init__(self, block: nn.Module, blocks: _Blocks, args_box: U.CallData):
        super().__init__()
        self.block = block
        self._blocks = blocks
        self._box = args_box

    def forward(self, state):
        bound = self._box.get()  # this call's (Note [Data bound to a call] in torch_exec/executor.py)
        if bound is None:
            raise RuntimeError(f"internal error: block {self.label} ran outside a call of its model (no arguments bound)")
        a, kw, spec, side_at = bound
        hidden, side = (state[0], tuple(state[1:])) if side_at else (state, ())
        if side_at:  # the arguments that carry a gradient come from the state, not from the box
            leaves = pytree.tree_leaves((a, kw))
            for j, t in zip(side_at, side, strict=True):
                leaves[j] = t
            a, kw = pytree.tree_unflatten(leaves, spec)
        position = self._blocks.position
        if position == 0:
            out = self.block(hidden, *a[1:], **kw)
        else:
            out = self.block(*a, **dict(kw, **{position: hidden}))
        out = out[0] if isinstance(out, (tuple, list)) else out
        return (out, *side) if side_at else out


# ---------------------------------------------------------------------------- the module
_STATE_DICTS = ("_parameters", "_buffers", "_non_persistent_buffers_set", "_modules", "_state_dict_hooks",
                "_state_dict_pre_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks")


@contextlib.contextmanager
def _undone_on_error(model: nn.Module, armed: bool):
    """Where ``armed``, an error inside the block puts ``model``'s buffers, gradients, the RNG state and its modules'
    scalar attributes (Note [Attributes the forward writes at every call]) back as they were at its start (what a
    step's code run before the error changed: the step did not happen)."""
    snapshot = U.ModelSnapshot([model], values=False, suspend=False) if armed else None
    scalars = _scalar_state(model) if armed else None
    try:
        yield
    except BaseException:
        if snapshot is not None:
            snapshot.restore()
            _put_back_changed_scalars(scalars, model)
        raise


def _refuse_block_hooks(blocks: _Blocks) -> None:
    """Forward hooks on a block module itself (Note [Block fallback]): the model's own call of a block returns the
    chain's result (the last block's output), so its hooks saw the wrong tensors, and they ran again at each
    run of the block by the schedule: a feature hook for a deep-supervision loss gave twice the features,
    wrong gradients at "100%" and a bare "backward through the graph a second time" under a plan (a review,
    2026-11-28: bench/repros/rv6_train_blocks_forward_hook_features.py). Refused, naming them. FSDP2's own
    hooks (``fully_shard``: gathering a block's parameters for each run) are kept. Hooks on the modules inside
    a block run at each run of it, recomputations included, as under ``torch.utils.checkpoint``."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # pragma: no cover - torch without distributed
        FSDPModule = ()  # noqa: N806
    hooked = [f"{blocks.name}.{i}" for i, b in enumerate(blocks.blocks)
              if not isinstance(b, FSDPModule) and (_users_hooks(b._forward_hooks) or _users_hooks(b._forward_pre_hooks))]
    recorded = [f"{blocks.name}.{i}" for i, b in enumerate(blocks.blocks)  # FSDP2's own hooks are kept (a review)
                if not isinstance(b, FSDPModule) and len(_users_hooks(b._forward_hooks)) < len(b._forward_hooks)]
    if recorded and not hooked:  # transformers' own output recorders (a review: rv12b_hf_recorder_hooks_blamed_on_user)
        raise CaptureError(f"auto_checkpoint: transformers records the outputs of the blocks {U.first_few(recorded)} "
                           f"(output_hidden_states, output_attentions or output_router_logits asked for them), which "
                           f"the block fallback cannot give it: the model's own call of a block returns the chain's "
                           f"result. Turn those outputs off for training under a budget (a router's auxiliary loss "
                           f"needs output_router_logits: then cut the model by hand, torch_exec.CheckpointedSequential)")
    if hooked:
        raise CaptureError(f"auto_checkpoint: forward hooks on the blocks {U.first_few(hooked)} cannot run as in "
                           f"plain autograd under the block fallback: the model's own call of a block returns the "
                           f"chain's result, and the schedule runs a block once more for each recomputation. Return "
                           f"what the hook takes from the model's forward instead, hook a module inside the block (it "
                           f"then runs at every run of the block, as under torch.utils.checkpoint), or cut the model "
                           f"by hand: torch_exec.CheckpointedSequential (see docs/pytorch.md, 'The manual route')")


def _refuse_plain_tensor_parameters(model: nn.Module) -> None:
    """Parameters that are plain tensors, not ``nn.Parameter`` (``torch.func.functional_call`` or another
    reparametrization swapped them in for this call: MAML's fast weights, SAM's perturbed weights) cannot be
    stood in for, profiled nor routed: capture failed with a bare TypeError, or export's "could not find a
    chain" and the wrong fix (a review, 2026-11-28). Refused, naming them and the remedy."""
    plain = [name for name, p in model.named_parameters() if not isinstance(p, nn.Parameter)]
    if plain:
        raise CaptureError(f"auto_checkpoint: the model's parameters {U.first_few(plain)} "
                           f"are plain tensors in this call, not nn.Parameter (torch.func.functional_call, or another "
                           f"reparametrization, swapped them in): the wrapper profiles and plans the model's own "
                           f"parameters only. Call functional_call on the unwrapped model (plain autograd), or train "
                           f"the model's own parameters through the wrapper")


def _max_stages_setting(value) -> int:
    """``max_stages``: a whole number >= 2 (one stage leaves nothing to checkpoint)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 2:
        raise ValueError(f"max_stages={value!r}: give a whole number of at least 2, the most chain stages the model "
                         f"is cut into (more stages give the solver more plans, and lower budgets; None: "
                         f"{DEFAULT_MAX_STAGES})")
    return value


def _check_executor_kwargs(kwargs: dict, backend: str) -> None:
    """The keywords :func:`auto_checkpoint` passes on to :class:`CheckpointedSequential`: known ones only,
    checked before any capture."""
    defaults = inspect.signature(CheckpointedSequential.__init__).parameters
    known = set(defaults) - {"self", "stages", "budget", "bucket", "backend"}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise TypeError(f"auto_checkpoint got unexpected keyword argument(s) {', '.join(map(repr, unknown))}; it takes "
                        f"budget, backend, bucket, sample, max_stages, capture, join and {', '.join(sorted(known))}")
    check_sequential_settings(backend, **{name: kwargs.get(name, defaults[name].default) for name in known})


class _Forward:
    """The wrapper's ``forward`` as an instance attribute with the model's signature: transformers'
    Trainer keeps only the batch columns ``inspect.signature(model.forward)`` names, and the wrapper's
    own ``(*args, **kwargs)`` named none (a review: every column dropped). Picklable and copyable with
    the wrapper (a closure would not be)."""

    def __init__(self, wrapper: "AutoCheckpointed"):
        self.wrapper = wrapper

    def __call__(self, *args, **kwargs):
        return type(self.wrapper).forward(self.wrapper, *args, **kwargs)

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.signature(self.wrapper._model.forward)


def _refuse_parallel_wrapper(model: nn.Module) -> None:
    """A data-parallel wrapper around the model is refused, naming the order that works: auto_checkpoint
    runs the model's forward several times in its first call without a backward for each, and DDP's
    reducer then raised "Expected to have finished reduction in the prior iteration" at the first step,
    pointing at find_unused_parameters (a review, 2026-11-27); export cannot trace DDP either."""
    from torch.nn.parallel import DataParallel, DistributedDataParallel
    if isinstance(model, DistributedDataParallel):
        raise TypeError("auto_checkpoint got a DistributedDataParallel; wrap the model first and give the wrapper to "
                        "DDP: DistributedDataParallel(auto_checkpoint(ddp.module, budget), ...) (see docs/pytorch.md, "
                        "'Distributed training')")
    if isinstance(model, DataParallel):
        raise TypeError("auto_checkpoint got an nn.DataParallel, whose replicas it cannot plan for; train with "
                        "DistributedDataParallel(auto_checkpoint(model, budget)) instead (one process per GPU)")


class AutoCheckpointed(nn.Module):
    """``model`` trained under a memory budget: called exactly like ``model`` (same arguments, same
    outputs), with the model's parameters, buffers and ``state_dict`` names. See
    :func:`auto_checkpoint`."""

    def __init__(self, model: nn.Module, budget, *, backend: str = "auto", bucket=None, max_stages: int | None = None,
                 capture: str = "auto", join: bool = True, **executor_kwargs):
        super().__init__()
        if not isinstance(model, nn.Module):
            raise TypeError(f"auto_checkpoint needs an nn.Module, got {type(model).__name__}; for a list of stages "
                            f"use torch_exec.CheckpointedSequential(stages, budget=...)")
        if capture not in ("auto", "export", "blocks"):
            raise ValueError(f"capture must be 'auto', 'export' or 'blocks', got {capture!r}")
        _refuse_parallel_wrapper(model)
        if getattr(model, "_compiled_call_impl", None) is not None:
            raise ValueError("auto_checkpoint: the model was compiled in place (model.compile()), and the capture would "
                             "read the compiler's graph instead of the model; wrap the model itself and compile the "
                             "wrapper: torch.compile(auto_checkpoint(model, budget)) (a checkpointed step runs eagerly "
                             "under it: Note [torch.compile] in torch_exec/executor.py)")
        object.__setattr__(self, "_model", model)
        for name in _STATE_DICTS:  # Note [Sharing the model's state]
            self.__dict__[name] = getattr(model, name)
        self.training = model.training
        self.__dict__["forward"] = _Forward(self)  # the model's signature (Trainer's column filter)
        self.budget = _budget_setting(budget)  # a bad budget fails here, before any capture
        self.backend = _backend_setting(backend)  # and a bad backend, bucket or max_stages, or an unknown keyword
        self.bucket = parse_bucket(bucket)
        self.max_stages = DEFAULT_MAX_STAGES[backend] if max_stages is None else _max_stages_setting(max_stages)
        _check_executor_kwargs(executor_kwargs, self.backend)  # and every setting passed on to the executor
        self.capture_method = capture
        check_flag(join, "join")
        self.join = join
        self._executor_kwargs = dict(executor_kwargs)
        self._captures: dict = {}
        # {position in the modules' walk: names} of the scalar attributes the model's code writes at every call, left
        # out of the input signature (Note [Attributes the forward writes at every call])
        self._unkeyed: dict = {}
        self._recaptures = 0  # captures made again for a replaced tensor attribute (Note [What a captured graph fixes])
        self._lazy_checked = False  # no lazy module left to materialise (Note [Lazy modules])
        self._lazy_left: list | None = []  # the lazy tensors the first call with grad left lazy (None: not found yet)
        # where the model holds its own generators (U.GeneratorSites), found at the first key: a captured graph holds
        # them as constants, so the generators there now are keyed (Note [Generators of the model's own] in _util.py)
        self._generator_sites = None
        self._measure_next = 0  # steps measure_memory() asked for that have not run yet
        self._last: Capture | None = None
        self._use_cache_note = False
        self._forward_takes_use_cache: bool | None = None

    # ------------------------------------------------------------ nn.Module behaviour
    # Note [Saving the wrapper]
    #     ``torch.save(wrapper)`` and ``pickle`` save the wrapper without its captures (:meth:`__getstate__`): the
    #     loaded wrapper captures each input signature again at its first call, as a new one does. The captures'
    #     stages are ``torch.fx.GraphModule``s, which torch.fx unpickles by tracing their code again, with the
    #     model's buffers handed to the code as the real tensors: every in-place write of a buffer ran at load time,
    #     once per graph holding it (BatchNorm's ``num_batches_tracked`` 2 where 1 was saved, an EMA buffer moved;
    #     a review, 2026-11-29: bench/repros/rv20b_auto_pickle_load_writes_buffers.py). What the executors learned
    #     (profiles, plans, a caller's measured memory) is not saved either. ``copy.deepcopy`` keeps the captures
    #     (:meth:`__deepcopy__`: a GraphModule is deep-copied with its graph, not traced again, and the copies read the
    #     copied model's tensors through the same memo), so a copy (a model EMA, AveragedModel) is not captured
    #     again.
    def __getstate__(self):
        state = super().__getstate__()
        state["_captures"], state["_last"] = {}, None  # Note [Saving the wrapper]
        state["_generator_sites"] = None  # found again at the first call
        return state

    def __deepcopy__(self, memo):
        import copy
        new = type(self).__new__(type(self))
        memo[id(self)] = new  # the copied _Forward and the captures refer to the copy
        new.__setstate__(copy.deepcopy(super().__getstate__(), memo))  # captures and all: Note [Saving the wrapper]
        return new

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.__dict__["_model"], name)

    def train(self, mode: bool = True):
        self._model.train(mode)
        self.training = mode
        return self

    @property
    def model(self) -> nn.Module:
        """The wrapped model (plain autograd when called directly)."""
        return self._model

    @property
    def plan(self):
        """The plan of the latest call (or :meth:`prepare`)."""
        return None if self._last is None or self._last.executor is None else self._last.executor.plan

    @property
    def capture(self) -> Capture | None:
        """How the latest input signature was turned into a chain (method, stages, notes)."""
        return self._last

    @property
    def executor(self) -> CheckpointedSequential | CheckpointedJoin | None:
        """What runs the latest input signature's steps: a :class:`~torch_exec.CheckpointedSequential`, or
        for a join network a :class:`~torch_exec.join.CheckpointedJoin` (Note [Join detection])."""
        return None if self._last is None else self._last.executor

    @property
    def last_profile(self) -> dict | list | None:
        """The latest input signature's measured profile, its executor's ``last_profile``: one ``measured-chain/1``
        dict for a chain, one per branch for a join network; None before the first call or :meth:`prepare`."""
        return None if self.executor is None else self.executor.last_profile

    @property
    def min_budget_bytes(self) -> int:
        """The least budget of the latest input signature (its executor's ``min_budget_bytes``; call the
        model or :meth:`prepare` first)."""
        least = None if self.executor is None else self.executor.min_budget_bytes
        if least is None:
            raise RuntimeError("auto_checkpoint: min_budget_bytes is known once the model has been called or "
                               "prepared (model.prepare(*inputs)) within its budget; an InfeasibleBudgetError "
                               "carries it as .min_bytes")
        return least

    def memory_report(self):
        """The measured steps of every input signature's capture (each numbered by its own executor),
        in the order the captures were made; None before the first capture."""
        if self.executor is None:
            return None
        report = type(self.executor.memory_report())()
        for cap in self._captures.values():
            report.extend(cap.executor.memory_report())
        return report

    def measure_memory(self, steps: int = 1) -> None:
        """Measure the next ``steps`` steps, whichever input signature they have, including one not
        captured yet (the wrapper arms each step's executor as the step starts)."""
        if steps < 0:
            raise ValueError(f"steps must be >= 0, got {steps}")
        self._measure_next = steps
        for cap in self._captures.values():  # armed by the steps themselves from now on
            cap.executor.measure_memory(0)

    def replan(self, budget="keep", **kwargs) -> None:
        """:meth:`torch_exec.CheckpointedSequential.replan` for every input signature seen; one that raises
        leaves them all, and this wrapper's budget, as they were."""
        setting = self.budget if budget == "keep" else _budget_setting(budget)
        caps = [cap for cap in self._captures.values() if cap.executor is not None]
        unknown = sorted(set(kwargs) - {"schedule_fn", "profile", "offload"})
        if unknown:
            raise TypeError(f"replan got unexpected keyword argument(s) {', '.join(map(repr, unknown))}; it takes "
                            f"budget, schedule_fn, profile and offload")
        schedule_fn = kwargs.get("schedule_fn", "keep")
        changes_schedule = not kept(schedule_fn)
        if changes_schedule:
            check_schedule_fn(schedule_fn)
        offload = kwargs.pop("offload", "keep")
        changes_offload = not kept(offload)
        if changes_offload:
            check_offload_backend(_offload_setting(offload), self.backend)
        joins = [cap for cap in caps if cap.branches is not None]
        if changes_offload and offload is not None and joins:
            raise ValueError(
                f"replan(offload={offload!r}): {len(joins)} input signature(s) of this model are captured as a join "
                f"network (CheckpointedJoin), which takes no offload link; make the wrapper with offload=... "
                f"(auto_checkpoint then cuts the join as one chain), or with join=False")
        with contextlib.ExitStack() as undo:
            for cap in caps:
                undo.enter_context(cap.executor._all_or_nothing())
            for cap in caps:
                extra = {"offload": offload} if changes_offload and cap.branches is None else {}
                cap.executor.replan(budget=budget, **kwargs, **extra)
        self.budget = setting
        if changes_schedule:  # the signatures captured from now on too
            self._executor_kwargs["schedule_fn"] = schedule_fn
        if changes_offload:  # the signatures captured from now on are planned with it too
            if offload is None:
                self._executor_kwargs.pop("offload", None)
            else:
                self._executor_kwargs["offload"] = offload

    def extra_repr(self) -> str:
        budget = self.budget if isinstance(self.budget, str) or self.budget is None else format_bytes(self.budget)
        return f"{type(self._model).__name__}, budget={budget}"

    # ------------------------------------------------------------ preparing
    def prepare(self, *args, **kwargs):
        """Capture, profile and solve for inputs like these now (otherwise the first call does it);
        returns the plan. Parameters, buffers, gradients and RNG state are left as they were."""
        U.refuse_inference_mode("auto_checkpoint")
        lazy = [] if self.__dict__.get("_lazy_checked", True) else _lazy_modules(self._model)
        # Note [Lazy modules]: preparing would draw their weights from its own seed, then put the RNG back
        if lazy and not self._lazy_uncalled(args, kwargs):
            raise CaptureError(f"auto_checkpoint: {U.first_few(lazy)} hold parameters not materialised yet (lazy "
                               f"modules), which a model's first call draws at their place in the forward; call the "
                               f"model once (a training step) before preparing it (Note [Lazy modules])")
        with _lazy_left_out(self._lazy_left_now()):
            return self._prepare(args, kwargs)

    @_compiler_disable
    @U.without_caches  # as _call_scheduled
    def _prepare(self, args, kwargs):
        kwargs = self._training_kwargs(kwargs)
        snapshot = U.ModelSnapshot([self._model])
        scalars = _scalar_state(self._model)  # Note [Attributes the forward writes at every call]
        try:
            cap = self._capture_for(args, kwargs)
            if cap.method == "export":
                flat = pytree.tree_leaves((args, {k: kwargs[k] for k in cap.kw_order}))
                with cap.side.bound(self._run_prologue(cap, flat)):
                    cap.executor.prepare(*_executor_inputs(cap, flat))
            else:
                blocks, box = cap.blocks

                def prepare_then_run(hidden):
                    cap.executor.prepare(hidden)
                    return _run_plain(cap.stages, hidden)
                with _substituted(blocks, box, prepare_then_run):
                    self._model(*args, **kwargs)
        finally:
            snapshot.restore()
            _put_back_scalars(scalars, [(i, name) for i, names in self._unkeyed.items() for name in names])
        return self.plan

    def _finalize_meters(self, keep_pending: bool = False) -> None:
        """Stop the captures' ended step meters (a CPU meter cannot start while another is running);
        ``keep_pending``: not one whose backward has not come, which a call joins (Note [Calls before one
        backward] in torch_exec/report.py)."""
        for cap in self._captures.values():
            if not (keep_pending and cap.executor._meter.measuring):
                cap.executor._meter.finalize()

    def _key(self, args, kwargs, tensor_ids: list | None = None):
        def leaf_key(v):
            if isinstance(v, torch.Tensor):
                return ("T", U.Sizes(v.shape), v.dtype, v.device, v.requires_grad)
            try:
                hash(v)
                return ("V", type(v).__name__, v)
            except TypeError:
                return ("O", type(v).__name__, id(v))
        leaves, spec = pytree.tree_flatten((args, dict(sorted(kwargs.items()))))
        # the model's own modes and frozen parameters, not the wrapper's mode: model.train() or a layer
        # unfrozen after the first call changes them without the wrapper (a captured graph has them fixed),
        # its attributes and forward hooks (Note [What a captured graph fixes]); the generators it holds are checked
        # per capture (_generator_key: an exported graph holds them, the block fallback looks them up at each call)
        return (tuple(leaf_key(v) for v in leaves), str(spec),
                U.captured_state_key(self._model, tensor_ids, self._unkeyed), U.autocast_key())

    def _cover_cuts(self, key) -> tuple:
        """Note [Sizes that vary between calls] in torch_exec/executor.py: the cuts of the exported capture whose
        planned profile would serve the signature ``key`` (it covers ``key`` within ``reuse_within``, the closest), for
        the new capture to cut there too; else (). An export's cuts are spread over the bytes each operation
        allocates, which move with the sizes (an encoder-decoder whose two lengths changed in other proportions was cut
        elsewhere, its stages named otherwise, and profiled: review rv22c,
        bench/repros/rv22c_hf_encdec_export_never_covered.py)."""
        within = self._executor_kwargs.get("reuse_within", REUSE_WITHIN)
        if within is None:
            return ()
        best = U.closest_cover(((known, cap) for known, cap in self._captures.items()
                                if cap.method == "export" and cap.branches is None
                                and getattr(cap, "executor", None) is not None
                                and not cap.executor._reuse_stopped() and cap.executor._has_plan()), key, within)
        cuts = () if best is None else tuple(stage.cut for stage in best[2].stages[:-1])
        return () if None in cuts else cuts

    def _generator_key(self) -> tuple:
        """The identities of the generators the model holds now (Note [Generators of the model's own] in
        torch_exec/_util.py): an exported graph holds those it was captured with as constants, so a call after one was
        replaced captures again; the block fallback runs the modules, whose executor looks them up at each call
        (keyed, a loop that sets a new generator at every step re-profiled at every step: review rv22b,
        bench/repros/rv22b_auto_blocks_new_generator_each_step_reprofiles.py)."""
        sites = self.__dict__.get("_generator_sites")
        if sites is None:
            sites = self._generator_sites = U.generator_sites([self._model])
        return sites.key()

    def _build(self, args, kwargs, probe: _Probe | None = None, prefer: tuple = ()) -> Capture:
        errors = []
        cap = None
        if self.capture_method in ("auto", "export"):
            try:
                cap = _capture_export(self._model, args, kwargs, self.max_stages, join=self._join_setting(),
                                      backend=self.backend, probe=probe, prefer=prefer)
            except CaptureError as exc:
                errors.append(f"torch.export: {exc}")
            except Exception as exc:  # noqa: BLE001 - export's own errors are many; report the first line
                errors.append(f"torch.export could not capture the graph ({type(exc).__name__}: "
                              f"{_first_line(exc)})")
        if cap is None and self.capture_method in ("auto", "blocks"):
            blocks, refused = _find_blocks(self._model, args, kwargs)
            if blocks is None:
                errors.append(f"no nn.ModuleList/nn.Sequential of blocks could be the chain (lists tried: "
                              f"{U.first_few(refused, '; ')})" if refused else
                              "no nn.ModuleList/nn.Sequential of blocks whose outputs feed the next block was found")
            else:
                if kwargs.get("use_cache") is True:
                    raise CaptureError(
                        f"auto_checkpoint cannot train {type(self._model).__name__} with use_cache=True: "
                        f"{errors[0] if errors else 'the graph was not captured'}, and under the block fallback every "
                        f"run of a block (profiling, recomputation) appends its keys and values to the call's one "
                        f"key/value cache; pass use_cache=False (a cache is for generation, not training)")
                try:
                    cap = self._blocks_capture(blocks, args, kwargs)
                except CaptureError as exc:  # what made the fallback needed, beside why it cannot run
                    if not errors:
                        raise
                    raise CaptureError(f"{exc}. (The block fallback was tried because {errors[0]})") from None
                if errors:
                    passed = f" ranked above it: {refused[0]}" if refused else ""
                    warnings.warn(f"auto_checkpoint: {errors[0]}; using the model's blocks "
                                  f"'{blocks.name}' ({len(blocks.blocks)} blocks) as the chain; the rest runs as plain "
                                  f"autograd, its memory measured once and counted in the budget"
                                  + (f" (a list{passed}, was not taken)" if refused else ""), stacklevel=4)
        if cap is None:
            raise CaptureError(
                f"auto_checkpoint could not find a chain in {type(self._model).__name__}: " + "; ".join(errors)
                + ". Cut the model by hand: torch_exec.CheckpointedSequential(stages, budget=...) with an nn.Sequential "
                  "of stages, each taking the previous stage's output (a tensor or a tuple of tensors); see docs/pytorch.md, "
                  "'The manual route'")
        kwargs_exec = {"budget": self.budget, "bucket": self.bucket, "backend": self.backend,
                       "network": type(self._model).__name__}
        kwargs_exec.update(self._executor_kwargs)
        if cap.method == "blocks" and kwargs_exec.get("caller_keeps") == "loss":
            # the blocks' output is the hidden state the rest of the model reads inside the step, not the loss
            kwargs_exec["caller_keeps"] = "output"
            cap.notes.append("caller_keeps='loss' does not apply to the blocks' chain: its output is the hidden "
                             "state the rest of the model reads, reserved whole; the model's code after the blocks "
                             "is measured keeping only its scalar outputs through the backward")
        if cap.branches is not None:
            if kwargs_exec.pop("caller_keeps", "output") == "loss":
                cap.notes.append("caller_keeps='loss' does not apply to a join network: the join reserves its head's "
                                 "output whole (usually the loss itself)")
            if "reuse_within" in kwargs_exec:
                kwargs_exec.pop("reuse_within")
                cap.notes.append("reuse_within does not apply to a join network: each of its input signatures is "
                                 "profiled (Note [Sizes that vary between calls] in torch_exec/executor.py)")
            cap.executor = CheckpointedJoin([_sequential(b) for b in cap.branches], cap.head, **kwargs_exec)
        else:
            cap.executor = CheckpointedSequential(_sequential(cap.stages), **kwargs_exec)
        cap.executor.call_data = cap.side  # Note [Data bound to a call] in torch_exec/executor.py
        # an exported graph's stages drop on every call what they drop once (Note [Planning to the exact peak])
        cap.executor.static_stages = cap.method == "export"
        cap.executor.state_keyed_outside = True  # this wrapper's key holds the model's whole state
        # the step makes the gradients of the whole model's parameters, the rest's too (Note [The step's parameters])
        cap.executor.step_params = self._model.parameters
        where = (f"at the blocks of {cap.blocks[0].name!r} (the block fallback)" if cap.method == "blocks" else
                 "where its exported graph allows")
        cap.executor.cut_remedy = (  # _merged_hint in torch_exec/executor.py: the cuts are this capture's
            f"auto_checkpoint cut the model {where}: raise the budget, or cut the model by hand where an op saves its "
            f"input (torch_exec.CheckpointedSequential(stages, budget=...), docs/pytorch.md, 'The manual route')")
        return cap

    def _join_setting(self):
        """True when a join network may run as one (Note [Join detection]), else why not."""
        if not self.join:
            return "join=False"
        if self.backend not in JOIN_BACKENDS:
            return f"backend={self.backend!r} has no join DP (it has {', '.join(JOIN_BACKENDS)})"
        unknown = sorted(set(self._executor_kwargs) - {"caller_keeps", "reuse_within"}  # a note says what the join does
                         - set(inspect.signature(CheckpointedJoin).parameters))
        if unknown:
            return f"CheckpointedJoin takes no {', '.join(unknown)}"
        return True

    def _blocks_capture(self, blocks: _Blocks, args, kwargs) -> Capture:
        _refuse_block_hooks(blocks)
        box = U.CallData()  # the blocks' other arguments, bound per call by _substituted
        stages = [_BoundBlock(b, blocks, box) for b in blocks.blocks]
        for i, s in enumerate(stages):
            s.label = f"{blocks.name}.{i}"
        cap = Capture(method="blocks", prologue=None, stages=stages, side=box, chain_input=[], outputs=[],
                      out_spec=None, kw_order=[], tensors=_model_tensors(self._model),
                      notes=[f"graph not captured; the chain is the {len(stages)} blocks of '{blocks.name}': "
                             f"{blocks.chosen}"])
        cap.blocks = (blocks, box)
        return cap

    def _capture_for(self, args, kwargs) -> Capture:
        ids: list = []
        key = self._key(args, kwargs, ids)
        ids = tuple(ids)
        cap = self._captures.get(key)
        if cap is not None and cap.tensor_ids != ids:
            cap = None  # Note [Sharing the model's state]: the model's tensors changed (.to(), reassignment)
        elif cap is not None and cap.constants and (replaced := _replaced_constants(cap, self._model)):
            # said at every re-capture, with their count: a loop that replaces one at every step re-exported at every
            # step, silently, after the first warning (review rv20r)
            self._recaptures += 1
            warnings.warn(f"auto_checkpoint: the model's tensor attribute(s) {U.first_few(replaced)} (not buffers) "
                          f"were replaced since the graph was captured, which is therefore captured again, profiled "
                          f"and solved (seconds; {self._recaptures} time(s) so far); register such a tensor as a "
                          f"buffer (register_buffer(name, t, persistent=False)) and write it in place "
                          f"(model.scale.fill_(v)): the graph reads it live (Note [What a captured graph fixes])",
                          UserWarning, stacklevel=5)
            cap = None
        elif cap is not None and cap.method != "blocks" and cap.generator_ids != self._generator_key():
            self._recaptures += 1  # Note [Generators of the model's own] in torch_exec/_util.py
            warnings.warn(f"auto_checkpoint: a torch.Generator the model holds was replaced since the graph was "
                          f"captured, which holds it as a constant: captured again, profiled and solved (seconds; "
                          f"{self._recaptures} time(s) so far); reseed one generator instead "
                          f"(self.gen.manual_seed(step)), or capture='blocks', which looks the generators up at each "
                          f"call", UserWarning, stacklevel=5)
            cap = None
        if cap is None:
            U.refuse_meta("auto_checkpoint", [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)],
                          self._model)
            given = _generator_arguments(args, kwargs)
            if given:  # Note [Generators of the model's own] in torch_exec/_util.py (review rv21d)
                raise CaptureError(f"auto_checkpoint: the model is called with a torch.Generator ({', '.join(given)}), "
                                   f"which neither capture records or replays (torch.export keeps it as a constant of "
                                   f"the graph, and a recomputed block would draw on from it: gradients taken at other "
                                   f"noise than the forward's); keep the generator as an attribute of the module that "
                                   f"draws from it (model.gen = gen; torch.randn(shape, generator=self.gen)) and seed or "
                                   f"replace it there between steps (Note [Generators of the model's own] in "
                                   f"torch_exec/_util.py)")
            _refuse_plain_tensor_parameters(self._model)
            self._finalize_meters()  # a CPU meter cannot start while another is running
            # finding the blocks and checking them run the model: its buffers (BatchNorm's statistics), gradients
            # and RNG state are put back, as profiling leaves them (its parameters: nothing here changes them)
            snapshot = U.ModelSnapshot([self._model], values=False)
            args, kwargs = _probe_inputs(args, kwargs)  # Note [Probing the model]
            # and the scalar attributes the forward writes at every call: Note [Attributes the forward writes at
            # every call]
            scalars, first, probe = _scalar_state(self._model), None, None
            try:
                # a wrapper inside the model is one of its stages here too: it runs plainly (Note [A wrapper
                # inside another's step] in torch_exec/profiler.py; it profiled itself in the probe before)
                with a_wrapper_step():  # (the blocks run as _run_plain here, never through the executor)
                    probe = _probe_model(self._model, args, kwargs)
                    first = _scalar_state(self._model)
                    # the key the model has after its first forward, which later calls see: transformers installs
                    # its output recorders (forward hooks) at the first forward asking for hidden states, so the
                    # key taken before the probe never matched again and each signature was captured twice (a
                    # review: bench/repros/rv12_hf_output_hooks_capture_twice.py)
                    after: list = []
                    key = self._key(args, kwargs, after)
                    ids = tuple(after)
                    cap = self._build(args, kwargs, probe, self._cover_cuts(key))
                    if cap.method == "blocks":
                        _check_blocks(self, cap, args, kwargs)
                        # Note [The rest of the model]; its backward on stand-ins for the parameters, whose
                        # accumulators DDP has not hooked (Note [DistributedDataParallel] in the executor)
                        with _standin_params([self._model]):
                            cap.rest = _measure_rest(self, cap, args, kwargs)
                        cap.rest.apply(cap.executor)
                        cap.notes.append(cap.rest.note(cap.blocks[0].name))
            finally:
                snapshot.restore()
                written = self._put_back_written(scalars, first, probe)
            if written:  # a block fallback: its key leaves them out, the model's code writes them at each step
                cap.notes.append(f"the model's code writes {U.first_few(written)} at every call, which the block "
                                 f"fallback runs at each step; left out of the input signature (Note [Attributes the "
                                 f"forward writes at every call])")
                after = []
                key = self._key(args, kwargs, after)
                ids = tuple(after)
            cap.tensor_ids = ids
            cap.generator_ids = self._generator_key()
            self._captures[key] = cap
            cap.executor.signature = key  # Note [Sizes that vary between calls] in torch_exec/executor.py
            if len(self._captures) == MANY_CAPTURES:
                _warn_many_captures(list(self._captures)[-2], key, args, kwargs)
            # one model, one memory envelope: a percentage below a smaller batch's least budget plans it
            # within the other signatures' budgets (_PlannedModule._percent_ceiling)
            executors = [c.executor for c in self._captures.values()]
            for c in self._captures.values():
                c.executor.siblings = [e for e in executors if e is not c.executor]
        self._last = cap
        return cap

    def _put_back_written(self, scalars: list, first: list | None, probe: _Probe | None) -> list[str]:
        """Note [Attributes the forward writes at every call]: the scalar attributes the capture's runs wrote at every
        call (the export run found them, or they changed after the probe's forward, the model's first call here) put
        back as :func:`_scalar_state` ``scalars`` (before the probe) holds them, and left out of the input signature
        from now on; their names. Those the first call alone wrote (a warn-once flag, a lazy module's sizes) stay."""
        written = set(probe.written) if probe is not None else set()
        if first is not None:
            written |= {(i, name) for i, _, name, _, _ in _scalars_changed(first, _scalar_state(self._model))}
        _put_back_scalars(scalars, sorted(written))
        for i, name in written:
            self._unkeyed[i] = self._unkeyed.get(i, frozenset()) | {name}
        return sorted(f"{type(scalars[i][0]).__name__}.{name}" for i, name in written if i < len(scalars))

    # ------------------------------------------------------------ forward
    def forward(self, *args, **kwargs):
        # inside another wrapper's profiling or step this model is one of its stages, run plainly (Note [A
        # wrapper inside another's step] in torch_exec/profiler.py)
        if self.budget is None or not torch.is_grad_enabled() or runs_as_a_stage():
            return self._model(*args, **kwargs)
        if U.nothing_requires_grad((args, kwargs), self._model):  # no backward comes: as under no_grad
            return U.ran_without_grad(self._model(*args, **kwargs), "auto_checkpoint")
        if not self.__dict__.get("_lazy_checked", True):  # (a wrapper pickled before the check: none)
            lazy = _lazy_modules(self._model)
            if lazy and not self._lazy_uncalled(args, kwargs):  # Note [Lazy modules]
                warnings.warn(f"auto_checkpoint: {U.first_few(lazy)} hold parameters not materialised yet (lazy "
                              f"modules); this call runs as plain autograd, outside the budget, materialising them as "
                              f"the model's own first call does, and the wrapper prepares at the next call (call the "
                              f"model once before wrapping it to keep this step in budget)", UserWarning, stacklevel=2)
                self._lazy_checked = True  # once: a lazy module the forward never calls stays lazy
                self._lazy_left = None  # those it left lazy are found at the next call
                return self._model(*args, **kwargs)
            self._lazy_checked = True
        left = self._lazy_left_now()
        if left:  # Note [Lazy modules]: a lazy module the training forward never calls (an eval-only head)
            with _lazy_left_out(left):
                return self._call_scheduled(args, kwargs)
        return self._call_scheduled(args, kwargs)

    def _lazy_uncalled(self, args, kwargs) -> bool:
        """Note [Lazy modules]: whether a forward on these inputs leaves every lazy module uncalled (an evaluation-only
        head the training forward never calls, with the rest materialised by the model's own call before wrapping):
        one forward without grad, their tensors taken out and guarded, the model's buffers, RNG state and scalar
        attributes put back after. Then they are left out of this call and the later ones, which prepare at once."""
        left = _lazy_tensors(self._model)
        guards = _guard_lazy(left)
        snapshot = U.ModelSnapshot([self._model], values=False)
        scalars = _scalar_state(self._model)
        try:
            with _lazy_left_out(left), torch.no_grad(), a_wrapper_step():
                self._model(*args, **kwargs)
        except Exception:  # noqa: BLE001 - _LazyCalled: the forward calls one; another error (code reading a lazy
            # module's weight without calling it): not told, the first call runs as before. No guard is left on a
            # module the forward may call (a hook the capture would see)
            for guard in guards:
                guard.remove()
            return False
        finally:
            snapshot.restore()
            _put_back_changed_scalars(scalars, self._model)
        self._lazy_checked, self._lazy_left = True, left
        return True

    def _lazy_left_now(self) -> list:
        """The parameters and buffers the first call with grad left lazy (Note [Lazy modules]), found once."""
        left = self.__dict__.get("_lazy_left", [])
        if left is None:
            left = self._lazy_left = _lazy_tensors(self._model)
            _guard_lazy(left)
        return left

    @_compiler_disable  # capture, profiling and the step run eagerly: Note [torch.compile] in the executor
    @U.without_caches  # the capture too: a weight parametrize cached would be captured as a constant
    def _call_scheduled(self, args, kwargs):
        kwargs = self._training_kwargs(kwargs)
        cap = self._capture_for(args, kwargs)
        self._finalize_meters(keep_pending=True)
        if self._measure_next > 0:  # measure_memory(): this step is one of those asked for
            self._measure_next -= 1
            cap.executor.measure_memory(1)
        # the first call of a signature profiles and solves inside the step, after the model's code before the
        # chain has run (BatchNorm's statistics, random numbers): a plan that fails undoes that code too
        with _undone_on_error(self._model, cap.executor._unsettled()):
            if cap.method == "blocks":
                return self._run_blocks(cap, args, kwargs)
            flat = pytree.tree_leaves((args, {k: kwargs[k] for k in cap.kw_order}))
            values = self._run_prologue(cap, flat)
            with cap.side.bound(values):  # this call's, for its recomputations too (Note [Data bound to a call])
                outs = cap.executor(*_executor_inputs(cap, flat))
        outs = (outs,) if isinstance(outs, torch.Tensor) else tuple(outs)
        leaves = []
        for kind, value in cap.outputs:
            if kind == "chain":
                leaves.append(outs[value])
            elif kind == "side":
                leaves.append(values[value])
            elif kind == "attr":
                leaves.append(_fetch_attr(self._model, value))
            else:
                leaves.append(value)
        return pytree.tree_unflatten(leaves, cap.out_spec)

    @staticmethod
    def _run_prologue(cap: Capture, flat: list) -> list:
        """The step's side values (Note [Cut points]), bound to the call by the caller (Note [Data bound to
        a call] in torch_exec/executor.py); the bytes they add are noted once. Its peak (a frozen part's
        forward) is measured on the first step, where it sets the executor's least budget, and on measured
        steps, whose records count it (Note [Side values nothing reads])."""
        found = U.tensors(flat)
        device = found[0].device if found else torch.device("cpu")
        meter = cap.executor._meter
        reading = values = None
        if cap.prologue_peak is None or meter.due(device):
            try:
                with torch.no_grad():
                    values, reading = measure_peak(cap.prologue, *flat, device=device)
                values = list(values)
            except ProfilerBusyError:  # Note [One profiler per thread] in torch_exec/meter.py
                if cap.prologue_peak is None:  # the first step, which profiles: refused
                    raise
                # a measured step under the user's profiler: not measured (the step's meter says so)
        if reading is not None:
            if cap.prologue_peak is None:
                cap.prologue_peak = reading.peak
                cap.executor.floor_bytes = max(int(cap.executor.floor_bytes), reading.peak)
            meter.note_before_peak(reading.peak)
        else:
            with torch.no_grad():
                values = list(cap.prologue(*flat))
        if cap.side_bytes is None:
            cap.side_bytes = side_nbytes(values, flat, cap.tensors)
            if cap.side_bytes:
                cap.executor.held_bytes = cap.side_bytes  # made inside each step: the budget counts it
                cap.notes.append(f"{cap.side_bytes} B of data made from the inputs (masks, position ids) is held "
                                 f"through each step and counted in the budget")
        return values

    def _training_kwargs(self, kwargs: dict) -> dict:
        """transformers' models return a key/value cache by default; training under checkpointing turns
        it off (as transformers' own gradient checkpointing does), saying so once."""
        config = getattr(self._model, "config", None)
        if "use_cache" in kwargs or not getattr(config, "use_cache", False):
            return kwargs
        if self._forward_takes_use_cache is None:  # read once, not on every step
            try:  # by name, or through **kwargs (GraniteMoE, Llava, Qwen3-VL, OpenAIGPT, ... pass it on: a review,
                # bench/repros/rv12_hf_kv_cache_blocks_backward_twice.py)
                parameters = inspect.signature(self._model.forward).parameters
                self._forward_takes_use_cache = "use_cache" in parameters or any(
                    p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
            except (TypeError, ValueError):
                self._forward_takes_use_cache = False
        if not self._forward_takes_use_cache:
            return kwargs
        if not self._use_cache_note:
            self._use_cache_note = True
            warnings.warn("auto_checkpoint: use_cache=False while training under a budget (the model's config asks for "
                          "a key/value cache; transformers' gradient checkpointing turns it off too); pass use_cache "
                          "explicitly to silence this", stacklevel=4)
        return dict(kwargs, use_cache=False)

    @U.without_caches  # the code around the blocks too (Note [Autocast's cache] in torch_exec/executor.py)
    def _run_blocks(self, cap: Capture, args, kwargs):
        blocks, box = cap.blocks
        executor = cap.executor
        # Note [A step measured from the model's call]: a due step's meter starts here, not at the first block,
        # once the signature is profiled (the first call profiles inside the step, with meters of its own)
        if not any(m._meter.measuring for m in [executor, *executor.siblings]):
            found = U.tensors(pytree.tree_leaves((args, kwargs))) or list(self._model.parameters())
            if found and (not executor._unsettled() or executor._may_reuse()):  # (Note [Sizes that vary between calls])
                executor._meter.open(found[0].device, executor.step_params())
            elif found and found[0].device.type != "cuda" and executor._meter.due(found[0].device):
                # this call profiles, so its meter would start at the first block, and on the CPU a meter started
                # there misses the frees of what the code before it made: a Wav2Vec2 step read 10 112 B over its
                # least budget, learned it as the caller's, and refused its next call (a review: bench/repros/
                # rv19d_hf_wav2vec2_first_call_learned_excess.py). The next call is measured, from the model's call.
                executor._meter.postpone()
        try:
            with _substituted(blocks, box, executor):
                return self._model(*args, **kwargs)
        finally:  # a call that raised before the blocks, or ran none of them, leaves no meter running
            executor._meter.withdraw()
            executor._meter.resume()



_SKIPPED_HINT = ("the block fallback needs every block called once, in order (Note [Draws between the blocks] in "
                 f"torch_exec/auto.py): a model that skips blocks (LayerDrop) is not a chain; {_LAYERDROP_REMEDY}")


@contextlib.contextmanager
def _substituted(blocks: _Blocks, box: U.CallData, executor: CheckpointedSequential):
    """While the model runs, its first block's call runs all blocks under the schedule and the later
    calls return that result (Note [Block fallback])."""
    state = {"calls": 0, "out": None, "inside": False}
    saved = [b.__dict__.get("forward") for b in blocks.blocks]
    originals = [f if f is not None else type(b).forward.__get__(b) for b, f in zip(blocks.blocks, saved)]

    def call(i):
        def run(*a, **kw):
            if state["inside"]:  # the schedule running the block itself
                return originals[i](*a, **kw)
            k = state["calls"]
            state["calls"] += 1
            if k != i:
                raise RuntimeError(f"auto_checkpoint: block {i} of '{blocks.name}' was called out of order; "
                                   f"{_SKIPPED_HINT}")
            if i == 0:
                hidden = a[0] if blocks.position == 0 else kw[blocks.position]
                # the other arguments, for the blocks (their recomputations too); not the hidden state, which
                # the box would keep alive after the step, nor the arguments that carry a gradient: those
                # travel in the chain's state (Note [Block fallback])
                other = ((None, *a[1:]), kw) if blocks.position == 0 else (a, {k: v for k, v in kw.items()
                                                                              if k != blocks.position})
                leaves, spec = pytree.tree_flatten(other)
                side_at = [j for j, v in enumerate(leaves) if isinstance(v, torch.Tensor) and v.grad_fn is not None]
                side = [leaves[j] for j in side_at]
                for j in side_at:
                    leaves[j] = None
                state["inside"] = True
                try:
                    with box.bound((*pytree.tree_unflatten(leaves, spec), spec, side_at)):
                        out = executor((hidden, *side) if side_at else hidden)
                    state["out"] = out[0] if side_at else out
                finally:
                    state["inside"] = False
            out = state["out"]
            return (out, *blocks.tails[i]) if blocks.tuple_out else out
        return run

    for i, b in enumerate(blocks.blocks):
        b.forward = call(i)
    try:
        yield
        if state["calls"] not in (0, len(blocks.blocks)):  # the schedule ran blocks the model then skipped
            raise RuntimeError(f"auto_checkpoint: the model called {state['calls']} of the {len(blocks.blocks)} "
                               f"blocks of '{blocks.name}' (the chain ran them all at the first one's call); "
                               f"{_SKIPPED_HINT}")
    finally:
        for b, f in zip(blocks.blocks, saved):
            if f is None:
                del b.forward
            else:
                b.forward = f


_UNRECORDED_DRAWS = (
    "the model's forward draws random numbers from a generator auto_checkpoint cannot record and replay: two plain "
    "runs of it from the same recorded RNG state computed different outputs (a torch.Generator reached some other "
    "way than those Note [Generators of the model's own] in torch_exec/_util.py lists: a global that a helper "
    "function, not the module's forward, names; one made elsewhere), so a recomputed block would draw other numbers "
    "than its forward did; keep the generator as an attribute of the module that draws from it (self.gen = "
    "torch.Generator(); torch.randn(shape, generator=self.gen)), or draw from torch's default generator")


def _reproducible(wrapper, given: tuple, ref: list, state, buffers, scalars) -> bool:
    """Whether one more plain run of the model (without grad) from the RNG state, buffers and scalar attributes of
    :func:`_check_blocks`'s reference run computes its outputs ``ref`` again: if not, the outputs the block
    substitution changed were changed by draws no recorded generator replays, not by the model's structure (a
    review: the structure was blamed, bench/repros/rv21d_blocks_unseen_generator_refused_wrong_cause.py)."""
    generators = U.generators_of([wrapper._model])
    try:
        with U.fork_rng(U.all_rng_devices(), generators), torch.no_grad():
            state.restore()
            buffers.restore()
            _put_back_changed_scalars(scalars, wrapper._model)
            args, kwargs = _probe_inputs(*given)
            again = wrapper._model(*args, **kwargs)
    except Exception:  # noqa: BLE001 - a forward that does not run without grad: the structural refusal stands
        return True
    leaves = [t for t in pytree.tree_leaves(again) if isinstance(t, torch.Tensor)]
    return len(leaves) == len(ref) and all(a.shape == b.shape and torch.allclose(a, b, rtol=1e-4, atol=1e-5)
                                           for a, b in zip(ref, leaves))


def _check_blocks(wrapper: AutoCheckpointed, cap: Capture, args, kwargs) -> None:
    """The block substitution computes the model's outputs (checked once), and nothing made inside the
    blocks reaches them but the blocks' output: the substituted run records each block's graph apart
    (its input detached: one block's activations at a time) and cuts the output, so an output whose
    graph still reaches a block's parameters read something else the blocks made (transformers' MoE
    models record each layer's router logits with hooks for their auxiliary loss). The schedule
    cannot recompute such values: their backward raised in the middle of a training step."""
    blocks, box = cap.blocks
    devices = U.all_rng_devices()
    given = (args, kwargs)
    args, kwargs = _probe_inputs(*given)  # each run its own copy: a forward may write into its input
    generators = U.generators_of([wrapper._model])  # Note [Generators of the model's own] in torch_exec/_util.py
    with U.fork_rng(devices, generators):
        state = U.RngState.capture(devices, generators)  # both runs draw the same numbers (CPU and CUDA)
        # and start from the same buffers: a model that updates a buffer and reads it (spectral norm's power
        # iteration, an EMA centre, a MoCo queue) computed other outputs in the second run, and was refused as
        # "uses a block's output for more than the next block" (a review, 2026-11-28)
        buffers = U.ModelSnapshot([wrapper._model], values=False, suspend=False)
        # and from the same scalar attributes: a counter the forward writes (Note [Attributes the forward writes at
        # every call]) computed other outputs in the second run, refused as above (review rv20r:
        # bench/repros/rv20r_auto_counter_block_fallback_refused.py)
        scalars = _scalar_state(wrapper._model)
        # the reference run records a graph (saving nothing) so that the model's code around the blocks
        # registers its gradient hooks, which are watched there: Note [Gradient hooks registered in the forward]
        hooks = _TensorHooks()
        pause = [b.register_forward_pre_hook(lambda *_: setattr(hooks, "paused", True)) for b in blocks.blocks]
        pause += [b.register_forward_hook(lambda *_: setattr(hooks, "paused", False), always_call=True)
                  for b in blocks.blocks]
        try:
            with torch.enable_grad(), _NoSavedTensors(), hooks:
                ref = pytree.tree_map(lambda v: v.detach() if isinstance(v, torch.Tensor) else v,
                                      wrapper._model(*args, **kwargs))
        finally:
            for handle in pause:
                handle.remove()
        if hooks.sites:
            raise _hooks_error(hooks.sites, f"between the blocks of '{blocks.name}'", "would land on another tensor")
        state.restore()
        buffers.restore()
        _put_back_changed_scalars(scalars, wrapper._model)
        args, kwargs = _probe_inputs(*given)
        try:
            with torch.enable_grad(), _substituted(blocks, box, lambda h: _run_plain(cap.stages, h, cut=True)):
                got = wrapper._model(*args, **kwargs)
        except CaptureError:
            raise
        except Exception as exc:  # noqa: BLE001 - the model did more with a block than feed the next
            raise CaptureError(f"running the blocks of '{blocks.name}' as one chain fails ({type(exc).__name__}: "
                               f"{exc})") from None
    params = {id(p) for b in blocks.blocks for p in b.parameters()}
    if _graph_reaches([t for t in pytree.tree_leaves(got) if isinstance(t, torch.Tensor)], params):
        raise CaptureError(f"the model's outputs read values made inside the blocks of '{blocks.name}' other than "
                           f"the last block's output (such as router logits kept for an auxiliary loss: "
                           f"output_router_logits=True), which the block fallback cannot recompute; turn that "
                           f"output off, or cut the model by hand: torch_exec.CheckpointedSequential(stages, "
                           f"budget=...) (see docs/pytorch.md, 'The manual route')")
    got = pytree.tree_map(lambda v: v.detach() if isinstance(v, torch.Tensor) else v, got)
    ref_leaves = [t for t in pytree.tree_leaves(ref) if isinstance(t, torch.Tensor)]
    got_leaves = [t for t in pytree.tree_leaves(got) if isinstance(t, torch.Tensor)]
    if len(ref_leaves) != len(got_leaves) or not all(
            a.shape == b.shape and torch.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(ref_leaves, got_leaves)):
        if not _reproducible(wrapper, given, ref_leaves, state, buffers, scalars):
            raise CaptureError(_UNRECORDED_DRAWS)
        raise CaptureError(f"running the blocks of '{blocks.name}' as one chain changes the model's outputs (the model "
                           f"uses a block's output for more than the next block, or its code between the blocks "
                           f"depends on when they run)")


@dataclass
class _Rest:
    """The memory of the model's code around its blocks, in bytes (Note [The rest of the model])."""

    held: int    # allocated when the blocks are reached, held through the chain's step
    kept: int    # held by the code after the blocks when the gradient of their output arrives
    turn: int    # the most that code adds before then, beyond ``kept``
    floor: int   # the most the step reaches outside the chain (before the blocks, after their backward)

    def apply(self, executor: CheckpointedSequential) -> None:
        executor.held_bytes, executor.beside_bytes, executor.turn_bytes = self.held, self.kept, self.turn
        executor.floor_bytes = self.floor

    def note(self, name: str) -> str:
        return (f"the model's code around the blocks of '{name}' (measured once) is counted in every plan: "
                f"{self.held} B held from before them, {self.kept} B held after them through the backward, "
                f"{self.turn} B more at the turn from forward to backward; alone it reaches {self.floor} B")


class _StandIn(torch.autograd.Function):
    """The blocks without their tape (Note [The rest of the model]): the forward runs them without
    grad; the backward hands back a zero gradient of the hidden state, which is kept until then (the
    chain keeps a_0 through its backward). ``tick(name)`` takes the meter's marks."""

    @staticmethod
    def forward(ctx, run, tick, hidden, _grad_anchor, *side):
        tick("enter")
        out = run(hidden)
        tick("return")
        ctx.tick, ctx.hidden = tick, hidden
        ctx.side = [(t.shape, t.dtype, t.device) for t in side]  # a gradient of each arrives (zeros here)
        return out

    @staticmethod
    def backward(ctx, grad):
        ctx.tick("gradient")
        hidden, ctx.hidden = ctx.hidden, None
        g = torch.zeros_like(hidden) if ctx.needs_input_grad[2] else None
        del hidden, grad
        side = [torch.zeros(shape, dtype=dtype, device=device) if ctx.needs_input_grad[4 + j] else None
                for j, (shape, dtype, device) in enumerate(ctx.side)]
        ctx.tick("backward")
        return None, None, g, None, *side


def _stand_in(run, tick, state, anchor):
    """:class:`_StandIn` on the chain's state: the hidden state, or (hidden, *the arguments that carry a
    gradient) passed on beside the blocks' output as the chain passes them (Note [Block fallback])."""
    if not isinstance(state, tuple):
        return _StandIn.apply(run, tick, state, anchor)
    hidden, *side = state
    out = _StandIn.apply(lambda x: run((x, *side))[0], tick, hidden, anchor, *side)
    return (out, *side)


@U.without_caches  # as the steps run (Note [Autocast's cache] in torch_exec/executor.py)
def _measure_rest(wrapper: "AutoCheckpointed", cap: Capture, args, kwargs) -> _Rest:
    """One step of the model with a stand-in for its blocks, under a memory meter (Note [The rest of
    the model]). Parameters, buffers, gradients and RNG state are left as they were."""
    blocks, box = cap.blocks
    model = wrapper._model
    loss_only = wrapper._executor_kwargs.get("caller_keeps") == "loss"
    leaves = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
    params = [p for p in model.parameters() if p.requires_grad]
    device = (params or leaves or [torch.empty(0)])[0].device
    # the inputs cut from the caller's graph: this backward must not reach (and free) it
    args, kwargs = pytree.tree_map(lambda v: v.detach().requires_grad_(v.requires_grad)
                                   if isinstance(v, torch.Tensor) else v, (args, kwargs))
    snapshot = U.ModelSnapshot([model], values=False)  # suspends post-accumulate hooks until restored
    for p in params:
        p.grad = None
    handles = [p.register_post_accumulate_grad_hook(lambda p: setattr(p, "grad", None)) for p in params]
    anchor = torch.zeros(0, device=device, requires_grad=True)  # the stand-in's output carries a gradient
    marks: dict = {}
    try:
        with torch.enable_grad(), MemoryMeter(device) as meter:  # prepare() may be called without grad
            def tick(name):
                marks[name] = meter.mark()
            with _substituted(blocks, box, lambda h: _stand_in(lambda x: _run_plain(cap.stages, x), tick, h, anchor)):
                out = model(*args, **kwargs)
            outs = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad]
            losses = [t for t in outs if t.numel() == 1]
            if loss_only and not losses:
                raise ValueError("auto_checkpoint: caller_keeps='loss' but the model's output has no scalar tensor "
                                 "that carries a gradient (a loss); a model returning logits for a loss computed "
                                 "outside it needs caller_keeps='output' (the default)")
            outs = losses or outs  # the loss where there is one, as the loop back-propagates it, else every output
            if loss_only:  # the loop keeps the loss only (Note [The caller holds a_N] in torch_exec/executor.py)
                del out
                out = None
            if outs:
                torch.autograd.backward(outs, [torch.ones_like(t) for t in outs])
            tick("end")
            del out, outs, losses
    finally:
        for h in handles:
            h.remove()
        snapshot.restore()
    start = meter.first_mark
    if "gradient" not in marks:  # the backward never reached the blocks' output: the code after them ends at "end"
        marks["gradient"] = marks["backward"] = marks["end"]
    before = meter.between(start, marks["enter"])
    after = meter.between(marks["return"], marks["gradient"])
    later = meter.between(marks["backward"], marks["end"])
    kept = max(after.delta, 0)
    return _Rest(held=before.delta, kept=kept, turn=after.peak - kept,
                 floor=max(before.peak, meter.between(start, marks["backward"]).delta + later.peak))


def _warn_many_captures(before: tuple, key: tuple, args, kwargs) -> None:
    """:data:`MANY_CAPTURES` input signatures: say where the latest differs from the one before (keys of
    :meth:`AutoCheckpointed._key`, whose leaves follow ``(args, sorted kwargs)``)."""
    paths = [pytree.keystr(path) for path, _ in pytree.tree_flatten_with_path((args, dict(sorted(kwargs.items()))))[0]]
    where = [f"argument {_argument_name(path)} ({'shape' if a[0] == 'T' else 'value'})"
             for path, a, b in zip(paths, before[0], key[0]) if a != b] if len(before[0]) == len(key[0]) else []
    if before[2:] != key[2:]:
        where.append("the modules' training modes, which parameters require grad, their dtypes, the modules' "
                     "attributes or forward hooks, or autocast")
    warnings.warn(f"auto_checkpoint: {MANY_CAPTURES} input signatures captured so far, each captured once, and "
                  f"profiled and solved once unless a planned one with larger sizes serves it (reuse_within: Note "
                  f"[Sizes that vary between calls] in torch_exec/executor.py); the latest differs from the one before "
                  f"in {', '.join(where[:3]) or 'its arguments'}. Pass numbers that change every step (a token count, "
                  f"a step number) as tensors, and pad batches to a few lengths", UserWarning, stacklevel=4)


def _argument_name(path: str) -> str:
    """``[0][1]`` -> ``1`` (positional), ``[1]['labels']`` -> ``'labels'``, inner keys kept."""
    rest = path[path.index("]") + 1:]  # without [0] (the positional arguments) or [1] (the keywords)
    first, _, more = rest[1:].partition("]")
    return first + more


def _sequential(stages: list) -> nn.Sequential:
    names = [f"{i + 1}:{s.label}".replace(".", "/") for i, s in enumerate(stages)]  # no dots in module names
    return nn.Sequential(OrderedDict(zip(names, stages)))


def _executor_inputs(cap: Capture, flat: list) -> list:
    """The executor's inputs: a_0's tensors for a chain; for a join one per branch (a tensor or a tuple)."""
    if cap.branches is None:
        return [flat[i] for i in cap.chain_input]
    return [flat[pos[0]] if len(pos) == 1 else tuple(flat[i] for i in pos) for pos in cap.branch_inputs]


def _run_plain(stages, state, cut: bool = False):
    """The stages one after the other; ``cut``: each on its input detached, and the output detached
    (each stage's autograd graph apart from the others', none reaching the caller's)."""
    for s in stages:
        state = s(U.detach(state) if cut else state)
    return U.detach(state) if cut else state


def _graph_reaches(outputs: list, params: set) -> bool:
    """Whether the autograd graph of ``outputs`` reaches a parameter whose ``id`` is in ``params``."""
    for node in U.graph_nodes([t.grad_fn for t in outputs]):
        variable = U.accumulated_leaf(node)
        if variable is not None and id(variable) in params:
            return True
    return False


def auto_checkpoint(model: nn.Module, budget, *, backend: str = "auto", bucket=None, sample=None,
                    max_stages: int | None = None, capture: str = "auto", join: bool = True,
                    **executor_kwargs) -> AutoCheckpointed:
    """``model`` trained under ``budget`` with gpusolve's optimal checkpointing, in one call.

    ``budget``: bytes, a string with units (``"8GiB"``) or a percentage of the model's plain-autograd
    peak (``"50%"``); ``None`` runs plain autograd. The result is called exactly like ``model`` and
    returns the same outputs; ``parameters()``, ``named_parameters()`` and ``state_dict()`` are the
    model's. ``.plan`` is the solved plan of the latest call; ``.capture`` says how the chain was found.

    ``sample``: inputs to capture, profile and solve for right away (a tensor, a tuple of positional
    arguments, or a dict of keyword arguments); otherwise the first call does it. ``max_stages``: most
    chain stages (default per backend, :data:`DEFAULT_MAX_STAGES`; a join network's branches share
    them). ``capture``: ``"auto"`` (the graph with torch.export, else the model's blocks), ``"export"``
    or ``"blocks"``. ``join``: run a model whose inputs' branches meet at a head (two towers, Siamese,
    triplet) as a join network (:class:`~torch_exec.join.CheckpointedJoin`, Note [Join detection] in
    torch_exec/auto.py); ``False`` cuts it as one chain. Other keywords go to
    :class:`~torch_exec.CheckpointedSequential` (``profile_passes``, ``preserve_rng_state``,
    ``caller_keeps``, ``reuse_within``, ...). ``caller_keeps="loss"`` says that the training loop keeps and back-propagates
    only the model's scalar loss (``loss = model(**batch).loss; loss.backward()``, transformers'
    ``Trainer``): the plans then reserve nothing for the rest of the output, such as a language model's
    logits, nor for its gradient (Note [The caller holds a_N] in torch_exec/executor.py).
    """
    wrapper = AutoCheckpointed(model, budget, backend=backend, bucket=bucket, max_stages=max_stages, capture=capture,
                               join=join, **executor_kwargs)
    if sample is not None and budget is not None:
        if isinstance(sample, dict):
            wrapper.prepare(**sample)
        elif isinstance(sample, tuple):
            wrapper.prepare(*sample)
        else:
            wrapper.prepare(sample)
    return wrapper
