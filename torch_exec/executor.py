"""Run a gpusolve schedule on real PyTorch stages: :class:`CheckpointedSequential`.

The schedule IR is interpreted by ONE loop, :func:`interpret`, over ``plan.schedule``:

- ``FWD_NOGRAD(s, keep)``: under ``no_grad`` run fused stage s on a_{s-1} (a held checkpoint, the
  detached output of a tape, or the input a_0); hold the result as checkpoint a_s; drop a_{s-1}
  unless ``keep``.
- ``FWD_TAPE(s)``: run stage s under ``enable_grad``. Its input is a fresh segment input made from
  a_{s-1} (Note [Segment inputs]), or, when the op before it was ``FWD_TAPE(s-1)``, the recorded
  output of that tape itself: a run of consecutive tapes is ONE autograd segment (see
  Note [Tape runs]). Hold (segment input, output) as the tape of s.
- ``BWD(s)``: for the last stage t of a segment, back-propagate the held gradient of a_t through
  the whole segment (parameter ``.grad`` accumulate as usual); the gradient of the segment's input
  is what the engine hands its segment input. The ``BWD`` of the segment's other stages follow it in
  the schedule and have nothing left to do. The held gradient is handed to the engine without a
  reference left behind (Note [Releasing the incoming gradient]).
- ``FREE(s)``: drop checkpoint a_s.
- ``OFFLOAD(s)``, ``RELEASE(s)``, ``PREFETCH(s)``, ``ACQUIRE(s)`` (plans that move checkpoints to host
  memory, ``offload=``): the step's :class:`torch_exec.offload.StepCopies` copies the held checkpoint a_s
  to the host on the plan's copy stream (a_s stays held), waits for that copy and drops a_s, allocates
  a_s again and copies it back, and makes the compute stream wait for that copy (a_s is held again).
  Exactly the simulator's copy timeline (:mod:`gpusolve.simulate`); see :mod:`torch_exec.offload`.
- ``TURN`` (join schedules only, :mod:`torch_exec.join`): the head over the k branch outputs. Its
  forward (recording, on segment inputs made from the branch outputs) and its backward (handing each branch
  the gradient of its output) are two program entries, so the join's autograd Function splits
  between them (Note [The head's graph] in :mod:`torch_exec.join`).

Ops of a join schedule carry their branch; :func:`interpret` runs them on that branch's
:class:`Runtime` (``rt.branches[b]``), so every op rule above is written once for chains and joins.

The autograd Function's ``forward`` interprets the ops up to and including the single
``FWD_TAPE(N)`` and returns a_N (detached from that tape); its ``backward`` receives the gradient
of a_N and interprets the rest (starting with ``BWD(N)``), returning the gradient of a_0.

Note [Tape runs]
    Nested tapes (``Tape(Tape(...))``) give consecutive ``FWD_TAPE(s), ..., FWD_TAPE(t)`` and later
    consecutive ``BWD(t), ..., BWD(s)``. Recording them as one graph costs one segment input and one backward
    call instead of t - s + 1, and autograd frees what no backward saved (a stage output that only
    fed the next stage) exactly as plain autograd does; the cost model, which keeps each tape
    whole until its backward, stays an upper bound. :func:`annotate` checks the structure of every
    run and records, per op, whether it attaches to the previous tape and which segment a ``BWD``
    closes; a run whose backwards are not consecutive is not merged.

Note [Shared leaves split tape runs]
    A leaf that two stages of one run read (a language model's input embedding tied to its output head)
    breaks that upper bound: the run's one backward call sums the two gradients in a buffer the size of
    the leaf, made at the backward of the later stage and kept until the earlier one's, which no stage's
    profile charges (each sees its own part). A run split between the two readers has two backward
    calls, and the engine of each accumulates its part into ``.grad`` at once. So the entry's ``breaks``
    (every reader of such a leaf after the first, as the profile read them off the autograd graph: Note
    [Leaves several stages read] in torch_exec/profiler.py, ``Chain.shared_leaves``) start a new
    segment, and a store-all plan runs as plain autograd (one backward call: the buffer) only where plain
    autograd's measured peak fits, or where it was not measured and no stages share a leaf. On the CPU a
    model with a 2 MB tied weight measured 2 048 000 B over its plan, 25 % over the budget, before
    (``bench/results/shared_leaves_cpu_before.md``; now ``shared_leaves_cpu.md``, tests/test_shared_leaves.py).
    Where a stage reads the leaf through a closure, the profiler's plain step does not see the buffer either
    (its stand-ins replace the modules' parameters, not the tensor the closure holds: two leaves, the
    profile's ``summed`` false), nor the sum the first reader's backward makes beside it, so plain autograd
    must fit with twice the leaf on top (``Entry.unseen_shared_bytes``; an upper bound: the tied model's
    plain step measured one leaf above its profile); a given ``schedule_fn`` never runs as plain autograd
    over such stages (its simulated peak does not count the buffer).
    The profiler's whole pass sums each stage's parts of such a leaf as one of these calls does, so a stage's
    readings are its own call's (Note [Leaves summed stage by stage] in torch_exec/profiler.py); a fused stage
    whose members read the leaf holds a buffer across them: charged to that stage (Note [A leaf read twice in one
    stage] in gpusolve/chain.py).
    What this leaves (a review, 2026-11-27):

    - A stage that reads another stage's intermediate result through module state (not through the
      chain) is not seen as a reader of the leaves behind it (Note [Leaves several stages read]).
    - Split, the parts are added into ``.grad`` in another order than plain autograd's one sum, so the
      tied gradient can differ in its last bits; and a gradient hook on the leaf runs once per backward
      call, on each part, as it already did wherever a checkpoint split two readers.

Note [Hooks on a leaf several segments read]
    A parameter two stages (or two join branches) read gets its gradient from each one's segment backward: the
    engine runs its AccumulateGrad once per part, where plain autograd sums the parts first and runs it once.
    ``.grad`` ends the same; what runs per accumulation did not. A post-accumulate-grad hook (PyTorch's
    optimizer step in the backward) stepped Adam once per part, on a partial gradient: the tied weight of a
    language model, and every weight of a Siamese encoder run as a join, drifted from plain autograd's from the
    first step (a review, 2026-11-28: bench/repros/rv6_train_tied_optimizer_in_backward.py). So a backward that
    fills ``.grad`` suspends the post-accumulate hooks of the parameters the modules of several stages hold
    (``Entry.shared_params``, :func:`torch_exec._util.params_read_by_several`; a tensor a callable closes
    over is not seen) and calls each once when the schedule's backward ends, with the whole gradient in
    ``.grad``. DistributedDataParallel's own hook sits on the AccumulateGrad node in C++, out of reach: it
    all-reduced the first part alone and each rank kept its own rest, so ranks drifted apart
    (bench/repros/rv6_train_ddp_shared_leaf.py). A wrapper whose stages share parameters refuses to run
    inside DDP's forward (:func:`refuse_shared_hazards`), naming the remedy (``no_sync`` and an all-reduce
    of its own). Gradient hooks (``register_hook``) ran once per part too: a clamp of each part is not the
    clamp of their sum (a tied weight clipped at 2e-3 read 2e-3 off plain autograd's gradient: a review,
    2026-11-28, bench/repros/rv7_train_tied_grad_hook_clamp.py). They are suspended as
    well, the parameter's ``.grad`` set aside for the backward, and at its end they run once on the whole
    gradient, which is then added to the gradient set aside, as plain autograd's AccumulateGrad does
    (:func:`torch_exec._util.leaf_hooks_deferred`). Where ``.grad`` is already set (gradient accumulation), the
    whole gradient is a buffer the size of the parameter beside it, as plain autograd's sum of the parts is,
    which the plans of split readers do not count: measured 768 B over a budget (tests/test_shared_leaves.py).
    Such a step is refused before it runs (:func:`refuse_shared_hazards`), naming the remedies. Since then, hooked
    parameters go through the parameter tap (Note [Hooks of routed parameters]), which covers a parameter the
    caller's code reads too; the deferral here takes the parameters that rule leaves out.

Note [Hooks across calls before one backward]
    Several calls of a wrapper before one backward (two views of a batch, R-Drop) back-propagate each call's
    schedule apart, so every parameter's gradient arrives in one part per call, where plain autograd sums the
    calls' parts and runs the parameter's hooks once. A gradient hook (a clamp) then ran on each part, and a
    post-accumulate-grad hook (an optimizer step in the backward) once per call: a review's model clipped at 2e-3
    read 6e-3 (its tied weight) and 2e-3 (the others) off plain autograd's gradients (a review, 2026-11-28:
    bench/repros/rv7_diff_two_calls_grad_hook.py, bench/results/repros_session7_cpu_before.md). So a schedule
    backward that finds another step of the same parameters waiting for its backward (``IN_FLIGHT``: the runtimes
    whose forward ran; one leaves at the end of its backward, or with its graph) defers the hooks of every
    parameter with hooks of the user's to the end of the backward pass (:func:`_deferred_hook_params`,
    :func:`torch_exec._util.leaf_hooks_deferred`: one deferral per pass, an engine callback), where they run once
    on the whole gradient. Where the other step is never back-propagated (a validation loss kept for logging), the
    hooks run at the end of this pass, on this call's gradient, as they would have. A first version refused the
    second call instead, and refused that validation loop too (bench/repros/rv7_rev_hooked_refusal_val_alive.py).
    A pass that raises leaves the hooks suspended until the wrapper's next forward puts them back, with ``.grad``
    as it was before that pass (:func:`torch_exec._util.settle_deferred_hooks`). Where ``.grad`` was set before
    the pass, the whole gradient is a buffer beside it, as plain autograd's sum of the calls' parts is. Since
    then, each call's parameter tap hands its part of a hooked parameter's gradient to the engine, which sums the
    calls' parts (Note [Hooks of routed parameters]); this deferral takes the parameters that rule leaves out.

Note [Two groupings of unsaved boundaries]
    Stages whose boundary no backward saves are merged by default (Note [Tensors no backward saves] in
    gpusolve/chain.py): exact, but the boundary is no checkpoint, and six residual blocks that begin with a
    dropout (or a bias added) merged into one stage whose least budget was plain autograd's peak (a review,
    2026-11-28: bench/repros/rv7_train_seq_unsaved_boundaries.py). Where the profile has such boundaries, the
    signature's entry has a second face, ``Entry.regrouped``: the same profile with the boundaries kept as
    stages, whose tape runs count the tensor until the earlier stage's backward where autograd frees it sooner
    (an over-count: safe). :meth:`CheckpointedSequential._plan_entry` plans both and runs the merged grouping's
    plan unless the other's is faster; the least budget is the lesser (``min_budget_bytes``). Measured on the
    CPU (bench/results/repros_session8_cpu.md, rv8_seq_unsaved_groupings_fidelity): the least budget went from
    100 % to 37.8 % (dropout first) and 34.8 % (bias first; the same blocks without either: 31.3 %); every
    step held its budget and its prediction, at 0.897 to 0.996 of the predicted peak (the over-count). A
    ``schedule_fn`` is given the profile's own grouping; the offloading paper's runner
    (torch_exec/paper_offload.py) keeps it too, whatever the wrapper's budget chose. A join is planned over both
    groupings of its branches in the same way (:meth:`torch_exec.join.CheckpointedJoin._plan_entry`): planned over
    its branches' own grouping only, a branch of transformer layers was one stage and the join's least budget plain
    autograd's peak (review rv19). A review of this
    (bench/repros/rv8_rg_*.py) made four rules, each once it had gone wrong: the other grouping runs only where
    it adds no parameter read by several stages (a tied weight with a gradient hook was refused where the merged
    grouping ran); a percentage falls back to another signature's budget (:meth:`_percent_ceiling`) only where
    neither grouping fits the signature's own; a percentage of a store-all peak the profiler did not measure is
    the merged grouping's (:func:`merged_face`; the other's over-count made "70%" 74.2 % of plain autograd's
    peak); and what a backward learns of a_N (:func:`_share_learned`) reaches both faces, since a step in
    flight learns on the face its forward ran (a replan in between lost it, and the next step measured 451784 B
    against a budget of 424555 B).

Note [Segment inputs]
    A segment's input tensors that need a gradient are the outputs of one small autograd node
    (:class:`torch_exec._util.SegmentInput`) whose backward keeps the gradients the engine hands it, as
    it hands them: what plain autograd holds at that point of its backward, and what the profiler's
    boundaries see. Leaves (``detach().requires_grad_()``) took them through ``AccumulateGrad``, which
    copies a gradient that does not have the leaf's strides, in the middle of the segment's backward:
    the gradient of a tensor read only by a ``cat`` is a slice of the ``cat``'s gradient, and that
    copy, with the whole ``cat`` gradient and the backward's workspace still alive, took a DenseNet
    layer cut between its convolution and its ``cat`` (two tensors crossing) 14 % over its budget
    (``bench/max_crossing.py --trace``); an expanded gradient (of a ``sum``) was made whole. Kept as
    it is, though, such a slice holds the whole ``cat`` gradient, part of which the segment consumed,
    until the next backward: 9 of 200 random chains with ``cat`` stages then went over (by up to 11 %;
    ``bench/results/tuple_fuzz_views_cpu_uncopied.md``). So once the segment's backward is done, a gradient in a storage
    the handed-over gradients do not cover is copied: the plans count the gradient of a_{s-1} beside
    that of a_s until the backward ends, so the copy fits where the slice's storage is still held, and
    after it exactly the gradient of a_{s-1} is. A stage may not write in place into those tensors
    (they alias the held a_{s-1}; a leaf raised, so does :func:`interpret`). The tensors of a_{s-1} that
    need a gradient are those the profile's plain run made so (``Entry.state_rg``, the profile's
    ``out_requires_grad``): every floating tensor did, and a tuple member plain autograd carried without one
    (a mask, a passed-on input) got a gradient and its graph in every segment, up to 1.12x the budget (a
    review, 2026-11-28: bench/repros/rv6_manual_tuple_nograd_member_grad.py). A profile made before records
    none: every floating tensor, as before.

Note [Releasing the incoming gradient]
    ``torch.autograd.backward(out, grad)`` would keep ``grad`` referenced by the caller until the
    whole segment's backward returns; plain autograd frees the gradient of a stage's output as soon
    as the node that consumes it has run. So the gradient goes into a one-element box read by a
    tiny root node (:class:`torch_exec._util.Feed`) whose backward pops it and returns it to the engine: from then
    on the engine holds the only reference, and frees it when plain autograd would.

Note [The gradient of a_N]
    The engine hands the gradient of a_N to the Function's ``backward`` and keeps its own
    reference until that ``backward`` returns, i.e. for the whole backward part of the step. The
    plans count it: it is reserved for the step (:func:`executor_chain`), as much of it as the
    outputs that get a gradient hold (Note [Outputs without a gradient]).

Note [Outputs without a gradient]
    A model returning its loss beside its logits (transformers' ``outputs.loss.backward()``) gives
    the logits no gradient. The Function does not have the engine materialise one
    (``set_materialize_grads(False)``): a zero gradient of a_N's largest tensor was allocated and
    back-propagated in every step before, one logits tensor above plain autograd (GPT-2 small's
    widths at 4 x 128 tokens on the CPU: 102 926 336 B, 12-20 % of the step's peak at the budgets
    tried; ``bench/results/output_grads_cpu.md``).
    Which outputs get a gradient is known only at the first backward, after the plan was made, so
    the first plan reserves the gradient of every output (safe; with ``caller_keeps="loss"``, only
    the scalar outputs', Note [The caller holds a_N]), and the backward records which
    outputs got one (:func:`learn_output_grads`): when fewer did, the next step re-plans with the
    gradients of those only (their dense sizes, in the allocator's blocks), and the plan's notes
    say so. Should a later backward give a gradient to an output the plan counted without one, that
    step may exceed the plan by it (the engine made it outside the schedule): a
    :class:`~torch_exec.report.MemoryBudgetWarning` says so with the size, and the next steps
    count it. A percentage budget is still taken of plain autograd's peak measured with a gradient
    for every output (the profiler's reference), a little above a loss-only step's.

Note [The caller holds a_N]
    The usual training step keeps the model's output through the backward::

        out = model(x)
        loss = criterion(out, y)
        loss.backward()     # `out` is still referenced here

    So a_N lives from the forward of stage N to the end of the step, whatever the plan: it is
    reserved for the whole step and taken out of stage N's tape (and out of the part of it that
    its backward holds, where the backward saves a_N). Before a_N exists, the reserve over-counts
    by act[N]. That only matters where the forward is what binds, and there the plan stays within
    the budget. A caller that drops the output before the backward uses less than planned. Without
    this reserve, holding the output went over the budget by up to a_N's size. An example is
    auto_checkpoint on a transformer returning logits: +15 % at its least budget
    (``bench/results/auto_models_cpu_hold.md``). What is reserved is every storage behind the
    output (the profile's ``held_nbytes``), such as a language model's logits returned beside its
    loss. What stage N made of them (``Chain.made_bytes``: the logits too, where the head and the
    loss are fused into stage N; Note [Outputs passed through] in ``gpusolve/chain.py``) leaves
    its tape. Storages made before stage N and passed on to a_N are counted twice while their own
    stage holds them. The branches of a join are the exception: the head consumes their outputs
    inside the step.

    Many callers do drop it: a training step that returns only the loss (transformers' ``Trainer``,
    Lightning's ``training_step``) or ``del out`` before the backward. Then the reserve holds a
    language model's logits through the whole backward for nothing (8.4 GB for 8 x 2048 tokens of a
    128 k vocabulary in float32), and their gradient too until the first backward shows none comes
    (Note [Outputs without a gradient]); a budget between the two least budgets is refused at the
    first call. Such a caller says so: ``caller_keeps="loss"``. The plans then reserve, from the first
    step, only the scalar outputs (the loss) and their gradients, and stage N's tape holds the rest of
    a_N again (as much of it as stage N made: :func:`learned_chain`), and a percentage budget is taken
    of plain autograd's peak in that loop (:func:`reference_peak_bytes`). It is checked: each backward that
    does not keep the graph looks, at its end, once the executor has dropped its own references,
    whether a storage counted as dropped is still alive (weak references to a_N's storages, taken in
    the forward; a view or a detached alias the caller kept counts as holding it). If one is, that step
    may have exceeded the plan by its bytes: a :class:`~torch_exec.report.MemoryBudgetWarning` says
    so, and the next steps count it (:func:`learn_output_holds`). Copies of the output made outside
    the model are the caller's own memory and cannot be seen this way: DistributedDataParallel clones
    the output when ``find_unused_parameters=True`` (and in the first step of ``static_graph=True``),
    Accelerate's mixed precision casts it to float32. So this is a declaration, never inferred: by
    default (``caller_keeps="output"``) the whole of a_N stays reserved. An infeasible budget's error
    says when ``caller_keeps="loss"`` would make it feasible.

Note [The caller's turn]
    Between the wrapper's forward and its backward the caller's own code runs: the loss, from the model's
    output. The plans count a_N and its gradients for the whole step (Note [The caller holds a_N]), not what
    that code makes beyond them: a target made with ``ones_like``, a softmax it saves, the loss scalar. Measured
    steps showed it go over: ``mse_loss(y, ones_like(y))`` 4 B over at the least budget,
    ``y.softmax(-1).square().sum()`` 115 816 B, at every step, with a warning that named no remedy but to lower
    the budget (a review, 2026-11-28: bench/repros/rv12_train_caller_loss_over_budget.py). A measured step now
    marks the forward's return and the backward's start (``StepMeter.turn_start``/``turn_end``): the peak
    between them above the first mark, and what is still held at the second beyond a_N's gradients, is what that
    code used beyond the plan's reserve of a_N's gradients. A measured step over its budget learns both parts: what
    that code still holds at the backward's start (a target a loss saved), held through the backward, is reserved
    for the whole step, grown by at most how far the step went above the plan's prediction (the excess over the
    budget and the plan's slack below it); and that code's peak above what the plan holds at its moment (a_N, a_N's
    gradients' reserve and that reserve) is counted whole at that moment alone, the caller's turn right after stage
    N's forward with tape (``Entry.caller_turn``, :func:`with_turn`, the rule the block fallback's code after the
    blocks follows: Note [The rest of the model] in torch_exec/auto.py), from the next call on
    (:func:`learn_caller_turn`, ``Entry.caller_reserve``, a re-plan as for Note [Outputs without a gradient];
    the step is recorded at the start of the next call, ``StepMeter.record_ended``, so that call plans with it).
    Where the budget then fits no plan, that call raises, naming what was learned. That peak is the loss's
    backward as often as the loss: ``out.pow(2).mean()`` holds three temporaries of the output's size beyond its
    gradient in PowBackward0 (the mean's gradient expanded, ``out ** 1``, ``2 * out ** 1``), above the checkpoints
    the forward left. On 6 spectral-normed residual Linear(32, 32) at 50 % it reached 24 576 B above them, and a
    reserve for the whole step grown by the step's excess over the budget (708 B), then by its shortfall against
    the prediction (2952 B), let plans as high at the turn run again and go over at the next steps too; likewise 5
    channels-last residual conv blocks at 1.1 x their least budget, 55 296 B (review rv20a:
    bench/repros/rv20a_caller_turn_learns_excess_not_shortfall.py; every op of the executor measured at or below
    the chain's count, the profile short of nothing). The profile cannot see the caller's code: the first measured
    step may go over by it, and only that one. A step over its budget elsewhere grows no reserve (a stage's
    workspace the profile missed was blamed on the caller's code, and the reserve grew at every step: a review,
    bench/repros/rv12_diff_caller_turn_blamed_for_chain_excess.py); its turn's peak, counted at its moment only,
    is learned as it was measured, never added up. A step within its budget teaches nothing: the plans' other
    margins (a_N's gradient reserved before it exists) held the caller's code; reserving what it holds for the
    whole step from the first step would have raised the least budget by a whole target tensor for a loss 4 B
    over. Only measured steps learn (on CUDA the first steps, on the CPU those after ``measure_memory()``), and
    only steps of one call and one backward. On CUDA, where the meter's marks between
    the two leave the peak counter alone, the peak between them is known only where it rose above the step's
    peak so far (``MemoryMeter.rose_between``); otherwise what is held at the backward's start is taken.
    A step run as plain autograd (a budget at or above its profiled peak) has no such marks: what it measured above
    its prediction, where it went over the budget, is reserved whole (:func:`learn_plain_step`), and plain
    autograd's least budget counts the reserve (:func:`plain_least_bytes`): "100%" went 12 168 B over at every step
    by the loss's own tensor (review rv20a: bench/repros/rv20a_plain_budget_caller_turn_never_learned.py).

Note [Allocator blocks learned]
    On CUDA every plan reserves one block the caching allocator may hand over unsplit (Note [Allocator blocks] in
    torch_exec/_util.py); more at the peak are possible, and which depends on what the process did before, not on
    the plan. On an H200 (2026-11-28) ``auto_checkpoint`` on DenseNet-121 (batch 16, 50 %) measured 1 049 170 432 B
    against a budget of 1 046 950 912 B in a process that had run ~60 other tests, and held it in a fresh one,
    whose allocator counter peaked 18.9 MB above the bytes asked for (23 800 B with expandable segments;
    bench/results/gpu_runs/2026-11-28_nvidia_h200_202252/README.md). A measured step's closing mark reads how far
    the allocator's peak was above the requested bytes' peak, less the rounding of what was held when the step
    started (``torch_exec.meter.unsplit_bytes``: a lower bound of the step's own rounding there; unknown, 0, where
    the allocator reports no requested bytes). Of that, only what is beyond the block every plan reserves is
    evidence. Where the step went over its budget, what the caller's turn does not take (Note [The caller's turn],
    learned first) is added to ``Entry.blocks_reserve``, which never exceeds the largest such evidence a step
    showed: the next call re-plans with it, as for the caller's turn, and raises naming it where the budget then
    fits no plan. A step whose excess is beyond that evidence learns only the evidence: the rest is the profile's,
    and the warning names re-profiling (later steps over by that rest learn nothing more). The first measured step
    may still go over; the next ones plan for what it showed (the steps of a training loop repeat their
    allocations, and read alike: 4 of 4 in that fresh process). With
    ``expandable_segments:True`` the rounding is the 512-byte granule the byte model counts, and nothing is learned
    beyond a step's own excess. The same steps learn this as learn the caller's turn (CheckpointedSequential's
    measured steps of one call and one backward).

Note [Autograd calls that name tensors]
    The segment backwards are nested engine calls. In a plain ``backward()`` (no tensor named:
    ``torch.autograd._is_checkpoint_valid()``) they accumulate into every ``.grad``, as plain
    autograd does. ``torch.autograd.grad(...)`` and ``backward(inputs=...)`` name tensors: then each
    segment runs as ``torch.autograd.grad`` over its input (and the parameters below), so no ``.grad``
    is filled, and the Function returns the gradient of a_0 as usual; the engine captures it or
    accumulates it into exactly the named tensors. Parameters are not inputs of the Function, so a
    call naming only parameters would never reach it: each step routes the trainable parameters
    through :class:`_ParamTap`, whose (empty) output feeds the Function. When the engine will run the
    tap (``torch._C._will_engine_execute_node``), the segments also compute the parameters'
    gradients (summed over segments) and the tap hands them to the engine, which captures them
    (``autograd.grad``) or accumulates the named ones (``backward(inputs=...)``), as in plain autograd.
    In a plain ``backward()`` the tap hands back None for a parameter without hooks: the engine calls each
    routed parameter's AccumulateGrad once more with nothing to add (about 5-8 us per parameter tensor per
    step on the CPU side). A hooked parameter is routed too, and what the tap hands back for it is Note
    [Hooks of routed parameters]; a call naming it gets the segments' part without its gradient hooks
    applied (the engine applies them to the whole, as in plain autograd). Every parameter a stage uses is
    the wrapper's (a module stage's, or one of a module given as ``modules=``): a callable stage reaching
    other parameters is refused when the wrapper is built. A named call holds the parameters' gradients
    until the wrapper's backward ends. A join step (torch_exec/join.py) does the same
    (``_PlannedModule._parameter_tap``, :func:`interpret_backward`): its head's segment has one input per
    branch, each given its slice of the gradients.

Note [Hooks of routed parameters]
    A parameter that the stages and the caller's code both read (a head tied to an embedding the wrapped
    stages hold, computed outside the wrapper) got its gradient in two parts, the segments' and the outer
    graph's, and its hooks ran once per part: an optimizer step in the backward stepped Adam twice per
    backward, a clamp clipped each part (a review, 2026-11-28: bench/repros/rv6_diff_hooks_param_read_outside.py).
    So a hooked parameter is routed through :class:`_ParamTap` like any other: the engine's AccumulateGrad call
    for it after the tap, which runs after the schedule's backward, gets whatever else reached it. Whether
    anything else will is unknown in the backward (the caller's graph is out of sight), and waiting costs
    memory: an optimizer in the backward frees each gradient as soon as it has stepped, and held to the end of
    the schedule's backward, every gradient was alive at once (9 layers: 2 130 472 B against 312 840 B; a review,
    bench/repros/rv9_hooks_optimizer_in_backward_peak.py, bench/results/repros_session9_cpu{,_356cf20}.md). So in
    a backward that fills ``.grad`` (:class:`_RoutedHooks`), a hooked parameter's hooks wait for the whole gradient
    where it comes in several parts whatever the caller does (several stages read it; another call of it waits for
    its backward, or handed its part earlier in this pass), in its first backward through the wrapper, and where a
    part came from outside before; else they run in the segments, as plain autograd runs them, once:
    - waiting, with gradient hooks (``register_hook``) and no ``.grad``: the hooks are taken out while the
      segments run, what they add to ``.grad`` is taken back out (the stages' part; ``.grad`` None again) and
      the tap hands it to the engine, which sums it with the other parts and calls AccumulateGrad once: the
      gradient hooks on the whole, ``.grad`` set, then the post-accumulate hooks, as in plain autograd;
    - waiting, with post-accumulate hooks only: the segments add to ``.grad`` in place (no buffer beside a
      ``.grad`` already set) with the hooks taken out, and the engine's one call, after every part, runs them;
    - gradient hooks and a ``.grad`` already set (gradient accumulation): they run in the segments (handing the
      part over would need a buffer beside ``.grad`` that no plan counts; Note [Hooks on a leaf several segments
      read] where several stages read it), and a part from outside runs them once more;
    - inside a DistributedDataParallel forward (``find_unused_parameters=True``: else nothing is routed) they run
      in the segments: DDP's own hook on the accumulator counts the calls (routed but left out, a hooked
      parameter was marked unused and then ready, an error: bench/repros/rv9_hooks_ddp_find_unused.py).
    The engine's call after the tap is watched until the pass ends (:meth:`torch_exec._util._PassHooks.watch`):
    a detector, first among the gradient hooks, sees what it brings. It tells the first backward whether a part
    came from outside (what the engine brings is not what the tap handed), which the wrapper remembers per
    parameter; a later backward whose hooks ran in the segments and finds a part from outside (a reader added
    later) warns that its hooks ran once per part, and the next ones wait. And where the tap handed nothing
    (no stage gave a gradient, or the hooks ran in the segments), the user's hooks skip a call that brings
    None, which plain autograd never makes. The hooks PyTorch's ``_apply_optimizer_in_backward`` puts on the
    accumulator node count as post-accumulate hooks (Note [Hooks on the accumulator node] in torch_exec/_util.py;
    they ran per part: bench/repros/rv9_hooks_accumulator_node_tied.py); one put on the node by hand is not seen.
    The deferrals to the end of the pass (Note [Hooks on a leaf several segments read], Note [Hooks across calls
    before one backward]) take the parameters this does not hand over or suspend. Checked against plain
    autograd on the CPU (tests/test_routed_hooks.py): hook calls, gradients and weights bit for bit (while
    gradients accumulate, a tied weight's to the last bits: its parts are added in another order); an optimizer
    in the backward frees each gradient from the second step on. The profile measures the gradient hooks'
    temporaries in each stage's backward; where they run after the schedule, the step uses less than its plan
    (a clamp on every parameter of a 4-layer MLP, at the least budget: 0.62 x the predicted peak while waiting,
    0.98 x in the segments; bench/results/hook_temporaries_cpu.md, and asserted in
    tests/test_torch_exec.py::test_parameter_gradient_hooks_are_profiled).

Note [One walk of the model per call]
    Each call of a wrapper walks its modules for the input signature (``module_state_key``: modes, which
    parameters require grad, dtypes, devices), and its parameter tap needs the trainable parameters, a second
    walk (``parameters()``). On a host-bound network each costs: DenseNet-121's layout with tiny widths on the
    CPU (489 modules, 364 parameters), 0.95 ms for the key and 0.78 ms for the tap's list, of a 33 ms step
    (bench/host_bound_overhead.py). So the key's walk also collects the trainable parameters, in
    ``parameters()``'s order, and the call's tap takes those (``walked``); the list is the call's own, so a
    parameter replaced between calls (``load_state_dict(assign=True)``) is the new one. Where the owner keys the
    state (``auto_checkpoint``'s captures) the tap walks the parameters itself, with the key's walk and rule
    (:func:`torch_exec._util.trainable_parameters`): through ``parameters()``'s generators that list took 0.23 ms
    a call on 48 stages of ``Linear`` + ``ReLU`` (145 modules, CPU), 0.13 ms now (bench/results/host_overhead_cpu.md,
    "Per-call parts").

Note [Retained graphs]
    Every refusal happens when the Function's backward starts, before it consumes any state or
    touches any ``.grad``. Double backward (``create_graph=True``, seen as grad mode on in the
    backward) is refused: the recomputations and segment backwards record no graph of the
    gradient; the graph is kept, so a plain backward can still follow. A backward with
    ``retain_graph=True`` (``torch._C._autograd._get_current_graph_task_keep_graph``) keeps what
    the forward left (its checkpoints and tapes, the recorded RNG states) and back-propagates the
    forward's tapes with ``retain_graph``; each later backward starts again from that state, so it
    replays the same random numbers, and recomputation leaves BatchNorm statistics untouched. The
    forward's checkpoints then stay held until the graph is freed, so such a step can exceed the
    plan's peak by them (plain autograd keeps its whole graph). A second backward after one that
    freed the graph raises.

Note [Data bound to a call]
    A stage may read, beside the chain's state, data that belongs to one call of the model:
    auto_checkpoint's side values (a mask, position ids, a frozen encoder's output: Note [Cut points]
    in torch_exec/auto.py) and the block fallback's other arguments. They lived on the capture, one
    slot per input signature, set by each call: two calls before one backward (two views of a batch,
    R-Drop, micro-batches summed) recomputed the first call's stages with the second call's mask
    (gradients 3.4e-2 off, the largest 7.8e-3; losses equal), and the last step's values stayed held
    after its backward, through the optimizer step and validation, until the next call replaced them
    (a frozen backbone's output: 1.5x the budget, unseen by the step meter; a review, 2026-11-27).
    Now the caller binds them around its call (:class:`torch_exec._util.CallData`, the wrapper's
    ``call_data``, per thread), the step's runtime keeps what was bound when its forward ran
    (:class:`torch_exec._util.HeldCallData`) and :func:`interpret` binds it again around every op, so
    each recomputation reads its own call's data; it goes with the runtime, which a backward that
    frees the graph lets go even while the caller still holds the loss (:func:`kept_graph_leaves`). A
    step that runs as plain autograd keeps what autograd saved of them, as plain autograd does.

Note [A step keeps its plan]
    A plan may change between a step's forward and its backward: ``replan()`` by the user, or the
    wrapper itself re-planning at the next forward once a backward showed which outputs get a gradient
    (Note [Outputs without a gradient]) while an earlier step is still pending (two forwards before
    their backwards). The entry's program was rewritten in place, and the pending step's backward ran
    the new plan's ops over the old plan's held state: 14 of 18 parameters got no gradient, silently,
    or "a_5 is not held" / ``KeyError`` (a review, 2026-11-27). Each step's runtime keeps the ops and the
    recomputed stages of the plan its forward ran (:class:`Runtime`, the join's runtime too), and its
    host copies (``HostCopies.step``), so a new plan applies from the next forward on.

Note [A failed plan keeps its profile]
    Profiling a signature (``_build``, about 16 plain steps) and planning it (``_plan_entry``) are two
    steps. A budget below the signature's least raised after the profile was made and threw it away, so
    ``replan(err.min_bytes)`` (which re-solves cached signatures only) did not reach it and the next call
    profiled it all over again, while ``min_budget_bytes`` still named the previous signature's least
    (a review, bench/repros/rv5_manual_failed_prepare_discards_profile.py). The entry is cached before it
    is planned: without a plan, it is planned at its next call (raising again if it still does not fit)
    and tried by ``replan``, where a budget it still does not fit leaves it without a plan rather than
    refusing a budget the signatures that ran fit; ``plans`` lists the planned ones only. The failed
    signature is the latest, so ``min_budget_bytes`` is its least.

Note [Recomputing from the step's buffers]
    A re-run of a stage must compute what its first run computed. Its buffers are swapped for
    clones so that the step updates them once (BatchNorm's statistics), but clones of the buffers as
    the first run left them recompute something else wherever a module updates a buffer and then
    reads it: spectral norm's power iteration (``_u``, ``_v``), a running centre subtracted in
    training. A review measured gradients 0.01 % (spectral norm) and 0.35 % (an EMA centre) off plain
    autograd's at the least budget (bench/repros/rv_loop_buffer_read_recompute.py); BatchNorm, whose
    training forward never reads its statistics, was exact. So a recomputed stage's buffers are cloned
    before its first run (``Runtime.buffers``) and every re-run starts from clones of those. They are
    held through the step: :func:`executor_chain` reserves the buffer bytes of every stage whose forward
    writes a buffer (the profile's ``buffer_writes``: the buffers' version counters moved; the plan is not
    known then), a few hundred bytes per BatchNorm. A stage that only reads its buffers (a table of
    targets, a mask) needs no copy and reserves nothing: its predictions stay exact.

Note [Recomputing in the forward's mode]
    Plain autograd's graph keeps what the forward computed in the mode it ran in; a recomputation calls the
    stage's modules again, in the mode they are in then. A step whose modules changed mode between its forward
    and its backward (``model.eval()`` before ``loss.backward()``, a validation pass in eval mode inside the
    step, an eval-mode forward back-propagated after ``model.train()``) recomputed BatchNorm with its running
    statistics and dropout switched off or on: gradients up to 6.65 off plain autograd's (5.1e4 with offloading;
    a review, 2026-11-28: bench/repros/rv10_offload_mode_switch_before_backward.py). So a step that recomputes
    records, as its forward starts, the training flags of every module of its stages (each once:
    ``Entry.mode_modules``, ``Runtime.modes``); where its backward finds any changed, every re-run sets the
    recorded flags, and puts back those of then after (:func:`torch_exec._util.training_from`). Once per step, not
    per stage: a first version walked each recomputed stage's modules at its first run, and 48 callable stages
    given ``modules=[model]`` walked the whole model each: 28.31 ms a step, 14.79 ms without the walk, 13.65 ms
    now (bench/repros/rv10_diff_perf_mode_walk_callable_stages.py,
    bench/results/repros_session10_review_cpu{_before,}.md).

Note [A Sequential's own names]
    ``CheckpointedSequential(seq)`` for an ``nn.Sequential`` shares the Sequential's ``_parameters``,
    ``_buffers`` and ``_modules`` dictionaries (as ``auto_checkpoint`` shares the model's: Note
    [Sharing the model's state] in torch_exec/auto.py), so its ``state_dict()`` keys are the
    Sequential's (``0.weight``, ``encoder.bias``) and a checkpoint saved from either loads into the
    other. Before, the stages sat in a ``ModuleList`` named ``stages``: ``stages.0.weight``, numbered
    over the module stages only. A list of stages, or ``modules=`` given, keeps ``stages.<i>`` (and
    ``extra_modules.<i>``): there is no model whose names to keep.

Note [Autocast's cache]
    Inside ``torch.autocast`` (its default ``cache_enabled=True``) each parameter's low-precision cast
    is kept until the outermost autocast region exits: a plan's forward phase, which frees what its
    no-grad stages made, would still hold a cast of every parameter it used, and no profile counts
    them (plans went over their budgets by them). So the wrapper's steps (``_scheduled``, plain autograd's path included), its profiling
    (``_entry``) and the recomputations (the recorded autocast state) run with the cache off: every
    use casts again, a transient each stage's measurement includes. Casting is deterministic, so the
    values are the same; only the casts of a parameter used twice in a forward are repeated, and its
    gradient is then the float32 sum of each use's (one cast's gradient summed the uses in bfloat16
    first): the last bits differ, as a review saw on a join's head read by both branches (2026-11-27;
    not recorded).

Note [torch.compile]
    ``forward`` keeps the plain path (``budget=None``, or grad disabled) traceable: torch.compile
    compiles the stages as plain autograd. A step under a plan runs in ``_scheduled``, which dynamo
    never traces (:func:`_compiler_disable`, i.e. ``torch.compiler.disable`` with a reason): dynamo
    breaks the graph there and runs it eagerly, so the first call profiles and solves (NumPy, CuPy)
    outside dynamo, and the forward and its recomputations run the same eager stages, drawing from
    the same generator (a traced forward would draw inductor's random numbers, which the eager
    recomputation cannot replay: wrong gradients). Code around the wrapper compiles as usual;
    ``fullgraph=True`` raises dynamo's error naming the reason. Stages compiled by the user
    (``torch.compile(stage)``) run compiled inside the schedule: the forward (often under
    ``no_grad``) and the recomputation (under grad) are two compiled graphs, but inductor draws its
    seeds from torch's generator, which the executor records and replays, so both draw the same
    numbers (checked bitwise for dropout on the CPU).

Note [DistributedDataParallel]
    DDP's reducer hooks each parameter's gradient accumulator (a C++ post hook on its AccumulateGrad
    node, which ``_tap_params`` cannot see) and expects one call per parameter and step; the segment
    backwards make that call, with the gradient, as plain autograd would. Two things would add calls:
    - :class:`_ParamTap`'s empty call after the schedule backward: DDP ignores it when it has already
      finished the step (the wrapper is DDP's module), but with parameters upstream of the wrapper
      still waiting it raises "Expected to mark a variable ready only once", and with
      ``static_graph=True`` it counts it and all-reduces only after the wrapper's backward. DDP does
      not support calls that name tensors (``autograd.grad``) anyway, so inside a DDP forward
      (``DistributedDataParallel._active_ddp_module``) no parameter is routed, unless DDP searches
      its graph for unused parameters (``find_unused_parameters=True`` without ``static_graph``):
      the search must find them, and then the wrapper must be the last part of DDP's module to
      receive gradients.
    - Profiling inside DDP's first forward: with ``static_graph=True`` DDP counts every call in its
      first iteration (even outside its backward) and waits for as many in later ones, so it never
      all-reduced again (silently wrong gradients). Profiling runs on stand-ins for the parameters
      (:func:`_standin_params`): fresh leaves sharing their storage, whose accumulators have no hooks.
    FSDP2's parameters (DTensors) are not stood in for: FSDP swaps them itself. A stage re-run during
    the backward unshards its parameters (FSDP2 does not reshard after a forward inside the backward)
    until its own backward: no extra all-gather, but the unsharded parameters of the re-run stages stay
    (outside the budget, which counts no parameter); and every rank must run the same plan.
"""
from __future__ import annotations

import contextlib
import functools
import math
import numbers
import os
import sys
import threading
import types
import warnings
import weakref
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._pytree import tree_leaves

from gpusolve.baselines import store_all
from gpusolve.chain import Chain, clones_input
from gpusolve.dp.buckets import parse_bucket
from gpusolve.errors import FallbackWarning, InfeasibleBudgetError
from gpusolve.exact_peak import solve_within
from gpusolve.offload.link import Link
from gpusolve.offload.solver import OFFLOAD_BACKENDS, OffloadPlan, solve_offload
from gpusolve.schedule import SWAP_OPS, Op, OpKind, policy_to_schedule
from gpusolve.simulate import budget_bytes_of, simulate, store_all_peak_bytes, store_all_time_ms
from gpusolve.solve import BACKENDS, Curve, Plan, release_device_memory, solve
from gpusolve.units import check_flag, exact_bytes, format_bytes, parse_budget, parse_percentage, percent_hint

from . import _util as U
from . import opclock
from .offload import HostCopies, measure_link
from .profiler import (a_wrapper_step, chain_from_profile, input_facts, param_bytes_of, profile_dict,
                       runs_as_a_stage)
from .report import MemoryBudgetWarning, StepMeter


# ---------------------------------------------------------------------------- plan entries
def split_schedule(schedule: list[Op], n: int) -> int:
    """Index of the one ``FWD_TAPE(n)``; checks that it is followed by ``BWD(n)`` and that the ops
    before it run every stage exactly once, in order (so the first run of each stage is in forward).
    Only ``PREFETCH`` ops may come between ``FWD_TAPE(n)`` and ``BWD(n)`` (an overlapping ``Swap k``
    with k = n - 1 issues its prefetch right before ``BWD(n)``): they run first in the backward.
    """
    at = [i for i, op in enumerate(schedule) if op.kind is OpKind.FWD_TAPE and op.stage == n]
    if len(at) != 1:
        raise ValueError(f"a schedule must hold exactly one FWD_TAPE({n}), found {len(at)}")
    idx = at[0]
    nxt = idx + 1
    while nxt < len(schedule) and schedule[nxt].kind is OpKind.PREFETCH:
        nxt += 1
    if nxt >= len(schedule) or schedule[nxt] != Op(OpKind.BWD, n):
        raise ValueError(f"FWD_TAPE({n}) must be immediately followed by BWD({n}) (prefetches aside)")
    stages = [op.stage for op in schedule[:idx + 1] if op.kind in (OpKind.FWD_NOGRAD, OpKind.FWD_TAPE)]
    if stages != list(range(1, n + 1)) or any(op.kind in (OpKind.BWD, OpKind.FREE) for op in schedule[:idx]):
        raise ValueError("the ops before FWD_TAPE(N) must be one forward of each stage 1..N in order")
    return idx


# Program codes of the annotated schedule (ints: the interpreter loop compares them cheaply).
NOGRAD, TAPE, BWD, FREE, TURN = 0, 1, 2, 3, 4
OFFLOAD, RELEASE, PREFETCH, ACQUIRE = 5, 6, 7, 8  # copy ops (plans that offload, torch_exec.offload)
_CODES = {OpKind.FWD_NOGRAD: NOGRAD, OpKind.FWD_TAPE: TAPE, OpKind.BWD: BWD, OpKind.FREE: FREE,
          OpKind.TURN: TURN, OpKind.OFFLOAD: OFFLOAD, OpKind.RELEASE: RELEASE, OpKind.PREFETCH: PREFETCH,
          OpKind.ACQUIRE: ACQUIRE}


def annotate(schedule: list[Op], breaks=frozenset()) -> list[tuple[int, int, int, int | None]]:
    """The schedule as ``(code, stage, arg, branch)`` entries for :func:`interpret` (Note [Tape runs]).

    ``arg``: FWD_NOGRAD keep_input (0/1); FWD_TAPE 1 when it attaches to the tape of s-1 (same
    segment), else 0; BWD the first stage of the segment it back-propagates, or 0 when an earlier
    BWD of the same segment already did; FREE and the copy ops 0. ``branch``: the op's branch (None
    in a chain schedule). A join's ``TURN`` gives two entries: arg 0 runs the head's forward, arg 1
    its backward. Tape runs are found per branch: a run is consecutive tapes of one branch.

    The copy ops touch no tape. An overlapping ``Swap k`` puts ``PREFETCH(i)`` right before
    ``BWD(k+1)``: the backwards of a run k+1..t are then not consecutive, so the run is split there
    and stage k+1 is a segment of its own, whose backward runs after the prefetch is issued (the
    copy overlaps it, as simulated; merged, the segment's backward would run at ``BWD(t)``, before
    the prefetch).

    ``breaks``: ``(branch, stage)`` pairs whose ``FWD_TAPE`` never attaches to the tape before it (Note
    [Shared leaves split tape runs]).
    """
    program = [[_CODES[op.kind], op.stage, int(op.keep_input), op.branch] for op in schedule]
    first = {}  # (branch, stage) -> first stage of its tape segment
    for idx, (code, s, _, b) in enumerate(program):
        if code == TAPE:
            prev = program[idx - 1] if idx > 0 else None
            attach = (prev is not None and prev[0] == TAPE and prev[1] == s - 1 and prev[3] == b
                      and (b, s) not in breaks)
            program[idx][2] = int(attach)
            first[b, s] = first[b, s - 1] if attach else s
    # A run s..t merges only if BWD(t), BWD(t-1), ..., BWD(s) are consecutive; otherwise split it
    # where the backwards are not (each piece then starts its own segment).
    bwd_at = {(b, s): idx for idx, (code, s, _, b) in enumerate(program) if code == BWD}
    tape_at = {(b, s): idx for idx, (code, s, _, b) in enumerate(program) if code == TAPE}
    order = sorted(first, key=lambda key: (key[0] is not None, key[0] or 0, key[1]))
    for b, s in order:
        if first[b, s] != s and bwd_at.get((b, s)) != bwd_at.get((b, s - 1), -2) - 1:
            program[tape_at[b, s]][2] = 0
    for b, s in order:  # recompute segment starts after any split
        first[b, s] = first[b, s - 1] if program[tape_at[b, s]][2] else s
    last = {}
    for b, s in order:
        last[b, first[b, s]] = s
    for idx, (code, s, _, b) in enumerate(program):
        if code == BWD:
            program[idx][2] = first[b, s] if last.get((b, first[b, s])) == s else 0
        elif code in (FREE, TURN) or code >= OFFLOAD:
            program[idx][2] = 0
    out = []
    for p in program:
        out.append(tuple(p))
        if p[0] == TURN:
            out.append((TURN, p[1], 1, p[3]))
    return out


def plan_from_schedule(chain: Chain, schedule, budget=None, link: Link | None = None) -> Plan:
    """A :class:`gpusolve.Plan` for a given schedule (or policy), with the simulator's figures.

    For baselines and tests: ``schedule`` is a list of ops or a policy tree over (0, N). The plan
    is feasible when its simulated peak fits ``budget`` (no budget: the peak is the budget; a percentage
    is of the chain's store-all peak). A schedule that offloads (``Swap`` nodes, ``OFFLOAD`` ops) is
    simulated over ``link`` (:class:`gpusolve.offload.link.Link`), which it needs.
    """
    if not isinstance(schedule, list):
        schedule = policy_to_schedule(schedule, 0, chain.n)
    if link is None and any(op.kind in SWAP_OPS for op in schedule):
        raise ValueError("the schedule moves checkpoints to host memory (OFFLOAD/RELEASE/PREFETCH/ACQUIRE ops): "
                         "it is simulated over a link; give one (CheckpointedSequential(..., offload='12GB/s') "
                         "or plan_from_schedule(..., link=Link.parse('12GB/s')))")
    sim = simulate(chain, schedule, link=link)
    budget_bytes = sim.peak_bytes if budget is None else budget_bytes_of(chain, budget)
    feasible = sim.peak_bytes <= budget_bytes
    notes = ["schedule given, not solved"]
    if not feasible:
        notes.append(f"its simulated peak {sim.peak_bytes} B exceeds the budget {budget_bytes} B")
    if link is not None:  # as solve_offload's plans: the link, the number of swaps (no DP value)
        return OffloadPlan(feasible=feasible, predicted_time_ms=sim.time_ms, predicted_peak_bytes=sim.peak_bytes,
                           budget_bytes=budget_bytes, bucket_bytes=0, buckets=0, backend="given", solve_seconds=0.0,
                           curve=Curve(np.zeros(0, dtype=np.int64), np.zeros(0)), schedule=list(schedule),
                           store_all_time_ms=store_all_time_ms(chain), notes=notes, link=link,
                           swaps=sum(1 for op in schedule if op.kind is OpKind.OFFLOAD), chain=chain)
    # the chain: its least budget (min_feasible_bytes, to_dict()) is computed when asked for
    return Plan(feasible=feasible, predicted_time_ms=sim.time_ms, predicted_peak_bytes=sim.peak_bytes,
                budget_bytes=budget_bytes, bucket_bytes=0, buckets=0, backend="given", solve_seconds=0.0,
                curve=Curve(np.zeros(0, dtype=np.int64), np.zeros(0)), schedule=list(schedule),
                store_all_time_ms=store_all_time_ms(chain), notes=notes, chain=chain)


def output_out_of_tape(tape: int, bwd_tape: int, made: int) -> tuple[int, int]:
    """(tape, bwd_tape) of the last stage without the ``made`` bytes of its output that it made itself
    (``Chain.made_bytes``), which are reserved instead (Note [The caller holds a_N]); the backward's
    part drops them too where it saved them."""
    tape = max(0, int(tape) - int(made))
    return tape, min(int(bwd_tape), tape)


def caller_chain(chain: Chain, output_bytes: int, output_grad_held: bool = True, remainder: int = 0
                 ) -> tuple[Chain, int, str]:
    """(``chain`` with what a step holds beside its stages' tensors reserved, the bytes reserved, words
    saying what), for the interpreter and plain autograd alike (``PaperOffloadRunner`` plans on it):

    - The gradient of a_N: autograd's engine keeps it until the Function's backward returns, i.e.
      for the whole backward (Note [The gradient of a_N]; plain autograd's ``backward()`` keeps the
      seed it made as long); so it is reserved, not freed by BWD(N). Not so for a branch of a join
      (``output_grad_held=False``): the head's backward makes that gradient inside the step and the
      branch's BWD frees it, as the chain model counts it.
    - a_N, which the caller may hold through the backward (Note [The caller holds a_N]):
      ``output_bytes`` (:func:`caller_output_bytes`) are reserved, and the bytes of a_N that stage N
      made leave its tape. Not for a join's branches (``output_grad_held=False``): the head consumes
      their outputs inside the step.
    - ``remainder``: one cached block the caching allocator may hand over unsplit (Note [Allocator
      blocks] in torch_exec/_util.py; :func:`torch_exec._util.allocator_reserve_bytes`)."""
    grads = chain.grad_bytes.copy()
    reserved = int(grads[-1]) if output_grad_held else 0
    if output_grad_held:
        grads[-1] = 0
    tape, bwd_tape = chain.tape_bytes.copy(), chain.bwd_tape_bytes.copy()
    output = int(output_bytes) if output_grad_held else 0
    if output:
        reserved += output
        tape[-1], bwd_tape[-1] = output_out_of_tape(tape[-1], bwd_tape[-1], chain.made_bytes(chain.n))
    reserved += int(remainder)
    held = "the gradient of a_N, held by autograd's engine through the backward, " if output_grad_held else ""
    held += f"a_N ({output} B), which the caller may hold through the backward, " if output else ""
    held += f"one unsplit allocator block ({remainder} B, Note [Allocator blocks]), " if remainder else ""
    return (replace(chain, grad_bytes=grads, reserved_bytes=chain.reserved_bytes + reserved, tape_bytes=tape,
                    bwd_tape_bytes=bwd_tape), reserved, held)


def executor_chain(chain: Chain, rng: list, sample, preserve_rng: bool, group_modules: list,
                   output_grad_held: bool = True, output_bytes: int = 0, allocator: bool = True,
                   buffer_writes: list | None = None, generators: tuple = (), rng_bytes: list | None = None) -> Chain:
    """The chain as the executor runs it: what it holds beyond the stages' tensors is reserved.

    - What any step holds beside the stages (:func:`caller_chain`): the gradient of a_N, a_N itself
      (``output_bytes``) and, on a CUDA device, one unsplit allocator block (``allocator=False`` for a
      join's branches, whose step, the join's, reserves it once).
    - The RNG states it records, on the sample's device: one per recomputed stage that draws random
      numbers (counted for every such stage: the plan is not known yet), of the generators its profiled run
      advanced (``rng_bytes``, per stage; None, or None for a stage: the default generators and all the model's
      own ``generators``: Note [Draws found at the first run] in torch_exec/_util.py), plus the copy ``fork_rng``
      takes while one is replayed (Note [Generators of the model's own] in torch_exec/_util.py).
    - The clones of a stage's buffers that its re-runs work on: workspace of a no-grad re-run, part
      of a recorded re-run's tape; and, for a stage whose forward writes them (``buffer_writes``, indexed
      by stage, 0 unused; None: every stage), the buffers as they were before its first run, which its
      re-runs start from, held through the step (counted for every such stage: Note [Recomputing from
      the step's buffers]).
    """
    device_type = U.tensors(sample)[0].device.type
    remainder = U.allocator_reserve_bytes(device_type) if allocator else 0
    held_chain, reserved, held = caller_chain(chain, output_bytes, output_grad_held, remainder)
    # Buffer clones (U.scratch_buffers) of each stage, counted for every run (the first does not
    # clone; a few hundred bytes).
    scratch = np.array([sum(b.numel() * b.element_size() for b in U.buffers_of(mods) if b.device.type == device_type)
                        for mods in group_modules], dtype=np.int64)
    writes = scratch if buffer_writes is None else scratch * np.asarray(buffer_writes[1:], dtype=bool)
    reserved += int(writes.sum())  # the buffers before each recomputed stage's first run (Runtime.buffers)
    drawing = sum(rng[1:])
    if preserve_rng and drawing:
        devices = U.cuda_devices(sample)
        # the records and the copy a replay forks (the first runs' watch holds nothing: U.RngMark)
        reserved += rng_records_bytes(rng, rng_bytes, devices, generators, device_type)
    notes = list(chain.provenance.get("notes", [])) + [
        f"executor: {reserved} B reserved for the step ({held}{drawing} recorded RNG state(s))"]
    return replace(held_chain, reserved_bytes=chain.reserved_bytes + reserved,
                   fwd_nograd_extra=chain.fwd_nograd_extra + scratch, tape_bytes=held_chain.tape_bytes + scratch,
                   bwd_tape_bytes=held_chain.bwd_tape_bytes + scratch,
                   # Note [Storage-exact peaks] in gpusolve/exact_peak.py: the reserve holds every storage of a_N
                   provenance=dict(chain.provenance, notes=notes,
                                   output_reserved=bool(output_grad_held and output_bytes)))


def output_facts_of(entry: Entry, facts: dict) -> None:
    """Record what the byte model needs of a_N (:func:`torch_exec._util.output_facts`: from the profile,
    or from the first forward where the profile does not have it)."""
    entry.out_grad_nbytes = list(facts["grad_nbytes"])
    entry.out_scalar = list(facts["scalar"])
    entry.out_storage_of = list(facts["storage"])
    entry.out_storage_nbytes = list(facts["storage_nbytes"])
    entry.out_storage_external = list(facts.get("storage_external", [False] * len(facts["storage_nbytes"])))


def loss_only_uses(entry: Entry) -> tuple[frozenset, frozenset]:
    """``caller_keeps="loss"`` (Note [The caller holds a_N]): (the outputs that get a gradient, the storages
    of a_N the caller drops) when the caller back-propagates and keeps only the scalar outputs of the model
    (its loss). Raises ValueError when a_N has no scalar output that carries a gradient."""
    losses = frozenset(i for i, (scalar, grad) in enumerate(zip(entry.out_scalar, entry.out_grad_nbytes, strict=True))
                       if scalar and grad)
    if not losses:
        raise ValueError("CheckpointedSequential: caller_keeps='loss' but the model's output has no scalar tensor that "
                         "carries a gradient (a loss); a model returning logits for a loss computed outside it needs "
                         "caller_keeps='output' (the default)")
    kept = {entry.out_storage_of[i] for i in losses}
    kept |= {i for i, external in enumerate(entry.out_storage_external) if external}  # alive whatever the caller does
    return losses, frozenset(range(len(entry.out_storage_nbytes))) - kept


def learn_output_grads(entry: Entry, present: list[bool]) -> None:
    """Note [Outputs without a gradient]: record which outputs of a_N got a gradient in this backward
    (``present``); sets ``entry.replan_due`` when the plan should count other gradients than it does."""
    seen = frozenset(i for i, p in enumerate(present) if p and entry.out_grad_nbytes[i])
    if entry.out_grads is not None and seen <= entry.out_grads:
        return
    if entry.out_grads is not None:
        new = sorted(seen - entry.out_grads)
        warnings.warn(f"CheckpointedSequential: the backward gave a gradient to output(s) {new} of the model, "
                      f"which earlier backwards gave none and the plan counted without one: this step may exceed "
                      f"the plan by up to {sum(entry.out_grad_nbytes[i] for i in new)} B; the next steps count it",
                      MemoryBudgetWarning, stacklevel=3)
        seen = seen | entry.out_grads
    entry.out_grads = seen
    entry.replan_due = entry.replan_due or _grad_reserve(entry, seen) != entry.grad_reserve
    _share_learned(entry)


def output_storages(entry: Entry, outs: list) -> list:
    """Weak references to the distinct storages of a_N's tensors ``outs``, in the order of
    ``entry.out_storage_nbytes`` (Note [The caller holds a_N]); empty when the output's storages are not
    those the byte model knows (then nothing is learned)."""
    first: dict = {}  # storage key -> the first tensor on it (U.storages' order)
    for t in outs:
        first.setdefault(U.storage_key(t), t)
    first.pop(None, None)
    if [U.block_bytes(key) for key in first] != entry.out_storage_nbytes:
        return []
    return [StorageWeakRef(t.untyped_storage()) for t in first.values()]


def learn_output_holds(entry: Entry, refs: list) -> None:
    """Note [The caller holds a_N] (``caller_keeps="loss"``): at the end of a backward, with the executor's
    own references gone, a storage of a_N that the plan counts as dropped but is still alive was held by
    the caller: warn, and count it from the next step on (``entry.replan_due``)."""
    if not refs or entry.out_dropped is None:
        return
    held = sorted(i for i in entry.out_dropped if not refs[i].expired())
    if not held:
        return
    warnings.warn(f"CheckpointedSequential: the caller held storage(s) {held} of the model's output through the "
                  f"backward, which caller_keeps='loss' counts as dropped: this step may have exceeded the plan by up "
                  f"to {sum(entry.out_storage_nbytes[i] for i in held)} B; the next steps count it",
                  MemoryBudgetWarning, stacklevel=3)
    entry.out_dropped = entry.out_dropped - frozenset(held)
    entry.replan_due = True
    _share_learned(entry)


def learn_caller_turn(entry: Entry, peak: int, kept: int, grads: int, over: int, excess: int,
                      slack: int = 0) -> None:
    """Note [The caller's turn]: a measured step's reading from the forward's return to the backward's start
    (``peak`` above the moment the forward returned, ``kept`` still held at the backward's start, of which ``grads``
    are a_N's gradients), how far that code's own peak went ``over`` the budget (not needed: the turn is counted at
    its own moment), the step's ``excess`` over it, and the plan's ``slack`` (its predicted peak's distance below the
    budget). What that code holds through the backward beyond a_N's gradients, at most the step's shortfall against
    its prediction, is added to the reserve for the whole step; its peak above what the plan holds at that moment
    (a_N, its gradients' reserve and that reserve) is counted whole at the moment it runs, right after stage N's
    forward (``Entry.caller_turn``, :func:`with_turn`); the next call re-plans (``entry.replan_due``)."""
    kept_more = max(0, int(kept) - int(grads))
    short = max(0, int(excess) + max(0, int(slack)))
    _reserve_for_caller(entry, _grown(entry.caller_reserve, min(short, kept_more), kept_more),
                        f"the code between the model's forward and its backward (the loss) held {kept_more} B beyond "
                        f"the model's output and its gradient into the backward, which the plan did not count, and the "
                        f"step went {int(excess)} B over the budget")
    # its peak in the turn is counted at the turn alone (review rv20a: the loss's backward, PowBackward0's three
    # output-sized temporaries, reserved for the whole step a little at a time, went over at the next steps too)
    turn = max(0, int(peak) - int(entry.grad_reserve) - entry.caller_reserve)
    if turn <= entry.caller_turn:
        return
    entry.caller_turn = turn
    warnings.warn(f"CheckpointedSequential: the code between the model's forward and its backward (the loss and its "
                  f"backward) reached {turn} B above the model's output, its gradient and what the plan reserves for "
                  f"that code, and the step went {int(excess)} B over the budget: the next plans count it at that "
                  f"moment, right after the model's forward (Note [The caller's turn] in torch_exec/executor.py)",
                  MemoryBudgetWarning, stacklevel=3)
    entry.replan_due = True
    _share_learned(entry)


def with_turn(chain: Chain, nbytes: int) -> Chain:
    """``chain`` with the caller's code counted at its turn: ``nbytes`` above what is held right after stage N's
    forward with tape, the last op of every plan's forward (stage N's forward transient is at least that; Note [The
    caller's turn], Note [The rest of the model] in torch_exec/auto.py). The chain itself where it already is."""
    if int(nbytes) <= int(chain.fwd_grad_extra[-1]):
        return chain
    extra = chain.fwd_grad_extra.copy()
    extra[-1] = int(nbytes)
    return replace(chain, fwd_grad_extra=extra)


def turn_peak_bytes(chain: Chain, nbytes: int) -> int:
    """What counting ``nbytes`` at the caller's turn (:func:`with_turn`) adds to ``chain``'s store-all peak."""
    return store_all_peak_bytes(with_turn(chain, nbytes)) - store_all_peak_bytes(chain)


def _reserve_for_caller(entry: Entry, reserve: int, what: str) -> None:
    """Note [The caller's turn]: the entry's caller reserve raised to ``reserve`` (where that is more), saying
    ``what`` the step showed, and a re-plan due at the next call (``entry.replan_due``)."""
    if reserve <= entry.caller_reserve:
        return
    entry.caller_reserve = reserve
    warnings.warn(f"CheckpointedSequential: {what}: the next steps reserve {entry.caller_reserve} B for it (Note [The "
                  f"caller's turn] in torch_exec/executor.py)", MemoryBudgetWarning, stacklevel=4)
    entry.replan_due = True
    _share_learned(entry)


def learn_from_step(entry: Entry, peak: int, kept: int, grads: int, over: int, excess: int, unsplit: int,
                    slack: int = 0) -> None:
    """What a measured step over its budget teaches (``StepMeter._learn_turn``): the caller's turn first (Note [The
    caller's turn]), then, from what it left of the shortfall, the allocator's blocks (Note [Allocator blocks
    learned]). A plan made on a larger signature's profile learns none of it: its signature is profiled instead
    (:func:`reuse_failed`)."""
    if entry.covered_note:
        reuse_failed(entry, excess)
        return
    before = entry.caller_reserve + entry.caller_turn
    learn_caller_turn(entry, peak, kept, grads, over, excess, slack)
    learned = entry.caller_reserve + entry.caller_turn - before
    learn_allocator_blocks(entry, max(0, int(excess) + max(0, int(slack)) - learned), unsplit)


def reuse_failed(entry: Entry, excess: int) -> None:
    """Note [Sizes that vary between calls]: a measured step of a plan made on a larger signature's profile went
    ``excess`` B over its budget: the stages' memory does not shrink with the sizes here (or the caller's code needs
    more than that signature's steps showed). Its wrapper profiles this signature at the next call, and every
    signature from then on (:meth:`_PlannedModule._stop_reuse`)."""
    for face in faces_of(entry):
        face.reuse_failed = face.replan_due = True
    warnings.warn(f"CheckpointedSequential: a step planned on the profile of an input signature with larger sizes went "
                  f"{int(excess)} B over its budget: the stages' memory does not shrink with the sizes here (a branch "
                  f"on a size, another algorithm for small sizes); from the next call on every input signature is "
                  f"profiled (reuse_within=None does so from the start; Note [Sizes that vary between calls] in "
                  f"torch_exec/executor.py)", MemoryBudgetWarning, stacklevel=4)


def learn_plain_step(entry: Entry, short: int) -> None:
    """Note [The caller's turn] for a step run as plain autograd (a budget at or above its profiled peak): no mark
    splits its forward from the caller's code, so what it measured above its prediction (``short``, over the budget)
    is reserved, and the next call plans within the budget less it, or raises (a review: "100%" went 12 168 B over
    at every step, the loss's own tensor, bench/repros/rv20a_plain_budget_caller_turn_never_learned.py). A plan made
    on a larger signature's profile learns none of it: its signature is profiled instead (:func:`reuse_failed`)."""
    if entry.covered_note:
        reuse_failed(entry, short)
        return
    _reserve_for_caller(entry, entry.caller_reserve + max(0, int(short)),
                        f"a step run as plain autograd measured {int(short)} B above its prediction and went over the "
                        f"budget (the code between the model's forward and its backward, the loss, which the profile "
                        f"does not see)")


def learn_allocator_blocks(entry: Entry, excess: int, unsplit: int) -> None:
    """Note [Allocator blocks learned]: a measured step went ``excess`` B over its budget beyond what the caller's
    turn took, while the allocator's blocks held at least ``unsplit`` B beyond the bytes asked for at its peak: the
    smaller of the two is added to the reserve, which never exceeds the most such a step showed (a profile's
    shortfall is not taken, step by step, for the allocator's), and the next call re-plans (``entry.replan_due``)."""
    # the plan already reserves one unsplit block (Note [Allocator blocks] in torch_exec/_util.py): only the
    # rounding beyond it is evidence of blocks the plan did not count
    beyond = max(0, int(unsplit) - U.allocator_reserve_bytes(getattr(entry.device, "type", "cuda")))
    reserve = _grown(entry.blocks_reserve, min(int(excess), beyond), beyond)
    if reserve <= entry.blocks_reserve:
        return
    blamed, entry.blocks_reserve = reserve - entry.blocks_reserve, reserve
    rest = (f"; the other {int(excess) - blamed} B are the profile's: re-profile (model.replan(profile=True))"
            if excess > blamed else "")
    warnings.warn(f"CheckpointedSequential: at the step's peak the CUDA caching allocator held at least {int(unsplit)} "
                  f"B beyond the bytes asked for (cached blocks handed over unsplit), {beyond} B beyond the block the "
                  f"plan reserves, and the step went {int(excess)} B "
                  f"over the budget: the next steps reserve {entry.blocks_reserve} B for them{rest} (Note [Allocator "
                  f"blocks learned] in torch_exec/executor.py; expandable_segments:True in PYTORCH_ALLOC_CONF, set "
                  f"before CUDA starts, makes the allocator split every block)", MemoryBudgetWarning, stacklevel=3)
    entry.replan_due = True
    _share_learned(entry)


def replay_copy_bytes(devices: list, generators: tuple, largest: int, device_type: str) -> int:
    """Bytes on ``device_type`` of the copy ``U.fork_rng`` takes while a record is replayed: the default generators'
    states and the record's own generators' (at most ``largest``, the largest record), never more than all of
    them (``devices``' and ``generators``')."""
    return min(U.RngState.capture(devices, generators).nbytes(device_type),
               U.RngState.capture(devices).nbytes(device_type) + largest)


def rng_records_bytes(rng: list, rng_bytes: list | None, devices: list, generators: tuple, device_type: str) -> int:
    """Bytes on ``device_type`` of the RNG records of the stages ``rng`` marks as drawing (per fused stage, 0 unused;
    ``rng_bytes``: each one's record, None where not known: the default generators' and all ``generators``' states)
    and of the one copy ``U.fork_rng`` takes while the largest is replayed: what a plan reserves for them (executor_chain,
    and learn_draws, which reserves the difference a stage found drawing makes)."""
    state = None
    records = []
    for s in range(1, len(rng)):
        if rng[s]:
            if rng_bytes is None or rng_bytes[s] is None:
                if state is None:
                    state = U.RngState.capture(devices, generators).nbytes(device_type)
                records.append(state)
            else:
                records.append(int(rng_bytes[s]))
    return sum(records) + replay_copy_bytes(devices, generators, max(records), device_type) if records else 0


def rng_flags(data: dict, chain: Chain) -> tuple[list, list]:
    """Per fused stage of ``chain`` (0 unused): whether it draws random numbers, and the bytes of its RNG record on
    the device (None: the profile does not say), from the profile ``data`` (its stages' ``rng``, ``rng_bytes``)."""
    by_name = {stage["name"]: stage for stage in data["stages"]}
    rng, nbytes = [False], [0]
    for members in chain.provenance["members"]:
        stages = [by_name[m] for m in members]
        rng.append(any(st.get("rng", True) for st in stages))
        known = [st.get("rng_bytes") for st in stages if st.get("rng", True)]
        nbytes.append(None if any(b is None for b in known) else sum(int(b) for b in known))
    return rng, nbytes


def learn_draws(entry: Entry, s: int, record: "U.RngMark") -> None:
    """Note [Draws found at the first run] in torch_exec/_util.py: stage ``s``, which its profile did not see draw,
    advanced the generators of ``record`` at its first run. Marked as drawing from now on, in the profile (its
    members) and on both faces of the signature; where the record's bytes are on the device the plan counts (a CPU
    model's), they are reserved and the next call re-plans (``entry.replan_due``)."""
    members = entry.plain_chain.provenance["members"][s - 1]
    device_type = getattr(entry.device, "type", "cuda")
    nbytes = record.nbytes(device_type)
    devices: list = []  # a CUDA generator's state is host memory: nothing of theirs counts on the device
    before = rng_records_bytes(entry.rng, entry.rng_bytes, devices, entry.generators, device_type)
    for stage in entry.profile["stages"]:
        if stage["name"] in members:  # the record once per fused stage (rng_flags sums its members')
            stage["rng"], stage["rng_bytes"] = True, (nbytes if stage["name"] == members[0] else 0)
    for face in faces_of(entry):
        face.rng, face.rng_bytes = rng_flags(face.profile, face.plain_chain)
        face.draws_new = True
    # the record, and the copy a replay forks grown to the largest record: every stage found drawing counts there,
    # not only the first (the rule executor_chain plans by, rng_records_bytes, before and after)
    added = rng_records_bytes(entry.rng, entry.rng_bytes, devices, entry.generators, device_type) - before
    if added:
        entry.rng_reserve += added
        entry.replan_due = True
        _share_learned(entry)


def report_draws_found(entries_found: list, what: str) -> None:
    """Say once which stages a step found drawing that their profile did not see draw (Note [Draws found at the first
    run] in torch_exec/_util.py): ``entries_found`` holds (entry, stages, a branch label or "")."""
    parts = []
    for entry, found, label in entries_found:
        if not found:
            continue
        members = entry.plain_chain.provenance["members"]
        names = ", ".join(f"{s} ({'+'.join(members[s - 1])})" for s in found)
        parts.append(f"{label}stage(s) {names}")
    if not parts:
        return
    warnings.warn(f"{what}: {'; '.join(parts)} drew random numbers at this call, which their profile did not see "
                  f"them draw (a draw that depends on the data, or on an attribute set after profiling, such as a drop "
                  f"rate raised from 0): their recomputations replay the forward's draws from this step on (Note "
                  f"[Draws found at the first run] in torch_exec/_util.py)", U.DrawsFoundWarning, stacklevel=4)


def learned_reserve_notes(entry: Entry) -> list[str]:
    """The plan's notes for what measured steps over their budget made it reserve (Note [The caller's turn], Note
    [Allocator blocks learned])."""
    reserves = ((entry.caller_reserve, "the caller's code between the model's forward and its backward",
                 "The caller's turn"),
                (entry.blocks_reserve, "cached blocks the CUDA allocator handed over unsplit",
                 "Allocator blocks learned"))
    notes = [f"the plan reserves {nbytes} B for {what}, which measured steps showed over the budget by that (Note "
             f"[{note}] in torch_exec/executor.py)" for nbytes, what, note in reserves if nbytes]
    if entry.caller_turn:
        notes.append(f"the plan counts {entry.caller_turn} B right after the model's forward for the caller's code "
                     f"between the forward and the backward (the loss and its backward), which a measured step over "
                     f"the budget reached (Note [The caller's turn] in torch_exec/executor.py)")
    return notes


def _grown(reserve: int, blamed: int, cap: int) -> int:
    """A learned reserve grown by ``blamed`` bytes, never above ``cap`` (what the step showed the cause used) unless
    it was already (Note [The caller's turn], Note [Allocator blocks learned])."""
    return min(reserve + max(int(blamed), 0), max(reserve, int(cap)))


def _share_learned(entry: Entry) -> None:
    """What a backward showed of a_N holds for both faces of the signature (Note [Two groupings of unsaved
    boundaries]): a step in flight learns on the face its forward ran, which a re-plan may have replaced."""
    other = getattr(entry, "regrouped", None)
    if other is not None:
        _copy_learned(entry, other)
        other.replan_due = other.replan_due or entry.replan_due


def _profiled_on(entry: Entry, key: tuple) -> Entry:
    """``entry`` with both faces marked as planned on a profile of the sizes in input signature key ``key`` (Note
    [Sizes that vary between calls])."""
    for face in faces_of(entry):
        face.sizes_key = key
    return entry


def _copy_learned(source: Entry, entry: Entry) -> None:
    """What ``source``'s backwards showed of a_N and the reserves its steps learned, given to ``entry``: the other face
    of its signature (:func:`_share_learned`), or a signature planned on its profile (Note [Sizes that vary between
    calls])."""
    entry.out_grads, entry.out_dropped = source.out_grads, source.out_dropped
    entry.caller_reserve, entry.blocks_reserve = source.caller_reserve, source.blocks_reserve
    entry.caller_turn = source.caller_turn
    entry.rng_reserve = source.rng_reserve


def _grad_reserve(entry: Entry, grads: frozenset | None) -> int:
    """Bytes the gradients of a_N take when only the outputs ``grads`` get one (None: every output): the
    chain's gradient of a_N (``grad_bytes[N]``) for every output, else their dense sizes in the
    allocator's blocks."""
    every = int(entry.plain_chain.grad_bytes[-1])
    differentiable = {i for i, nbytes in enumerate(entry.out_grad_nbytes) if nbytes}
    if grads is None or grads >= differentiable:
        return every
    return min(every, sum(entry.out_grad_nbytes[i] for i in grads))


def _output_reserve(entry: Entry, dropped: frozenset | None) -> int:
    """Bytes reserved for a_N when the caller drops its storages ``dropped`` (None: none): the whole
    reserve (:func:`caller_output_bytes`) less theirs."""
    whole = caller_output_bytes(entry.plain_chain, entry.profile)
    if not dropped:
        return whole
    return max(0, whole - sum(entry.out_storage_nbytes[i] for i in dropped))


def learned_chain(entry: Entry, grads: frozenset | None, dropped: frozenset | None) -> tuple[Chain, int, int]:
    """(``entry.exec_chain`` reserving :func:`_grad_reserve` for the gradients of a_N and
    :func:`_output_reserve` for a_N itself instead of what it reserves now, those two reserves). Stage N's
    tape takes back the dropped bytes that stage N made (Note [Outputs without a gradient], Note [The
    caller holds a_N])."""
    plain, chain = entry.plain_chain, entry.exec_chain
    grad_reserve, output = _grad_reserve(entry, grads), _output_reserve(entry, dropped)
    tape_n, bwd_n = int(plain.tape_bytes[-1]), int(plain.bwd_tape_bytes[-1])
    if output:  # as executor_chain does, with the dropped bytes back in the tape (at most what stage N made)
        gone = caller_output_bytes(plain, entry.profile) - output
        tape_n, bwd_n = output_out_of_tape(tape_n, bwd_n, max(0, plain.made_bytes(plain.n) - gone))
    scratch = int(chain.fwd_nograd_extra[-1] - plain.fwd_nograd_extra[-1])  # executor_chain's buffer clones
    tape, bwd_tape = chain.tape_bytes.copy(), chain.bwd_tape_bytes.copy()
    tape[-1], bwd_tape[-1] = tape_n + scratch, bwd_n + scratch
    reserved = chain.reserved_bytes - entry.grad_reserve - entry.out_reserve + grad_reserve + output
    reserved += entry.caller_reserve - entry.caller_applied  # Note [The caller's turn]
    reserved += entry.blocks_reserve - entry.blocks_applied  # Note [Allocator blocks learned]
    reserved += entry.rng_reserve - entry.rng_applied  # Note [Draws found at the first run] in torch_exec/_util.py
    # the reserve holds every storage of a_N only where the caller drops none (Note [Storage-exact peaks])
    whole = bool(output) and output == caller_output_bytes(plain, entry.profile)
    return (with_turn(replace(chain, reserved_bytes=reserved, tape_bytes=tape, bwd_tape_bytes=bwd_tape,
                              provenance=dict(chain.provenance, output_reserved=whole)),
                      entry.caller_turn),  # Note [The caller's turn]
            grad_reserve, output)


def with_learned_outputs(entry: Entry) -> Chain:
    """:func:`learned_chain` for what the backwards so far showed (``entry.out_grads``,
    ``entry.out_dropped``); updates the entry's two reserves."""
    chain, entry.grad_reserve, entry.out_reserve = learned_chain(entry, entry.out_grads, entry.out_dropped)
    entry.caller_applied, entry.blocks_applied = entry.caller_reserve, entry.blocks_reserve
    entry.turn_applied, entry.rng_applied = entry.caller_turn, entry.rng_reserve
    return chain


def output_grads_note(entry: Entry) -> str | None:
    """The plan's note when it reserves the gradients of only some outputs of a_N, else None."""
    every = int(entry.plain_chain.grad_bytes[-1])
    if entry.grad_reserve == every:
        return None
    why = "caller_keeps='loss'" if entry.loss_only else "what the backwards so far gave"
    return (f"only the model's outputs {sorted(entry.out_grads)} get a gradient ({why}): the plan reserves "
            f"theirs, {entry.grad_reserve} B instead of {every} B for every output's (Note [Outputs without a "
            f"gradient] in torch_exec/executor.py)")


def caller_output_bytes(chain: Chain, profile: dict) -> int:
    """Bytes of a_N a caller holding the output keeps (Note [The caller holds a_N]): the profile's
    ``held_nbytes`` of the last stage (every storage behind the output, those it shares with the
    stage's input included), else ``act_bytes[N]``; less the storages of the chain's input a_0 that
    the output returns (``held_from`` origin 0: the caller's, outside every budget) unless the
    executor clones the input (:func:`gpusolve.chain.clones_input`: then the clone is the step's)."""
    last = profile["stages"][-1]
    held = last.get("held_nbytes")
    if held is None:
        return int(chain.act_bytes[-1])
    if "held_from" in last and not clones_input(profile["stages"][0]):
        held -= sum(int(nbytes) for origin, nbytes in last["held_from"] if int(origin) == 0)
    return int(held)


def output_holds_note(entry: Entry) -> str | None:
    """The plan's note when it reserves less than the whole of a_N (``caller_keeps="loss"``), else None."""
    whole = caller_output_bytes(entry.plain_chain, entry.profile)
    if entry.out_reserve == whole:
        return None
    return (f"caller_keeps='loss': the plan reserves {entry.out_reserve} B for the model's output, its scalar "
            f"loss, instead of {whole} B for all of it (Note [The caller holds a_N] in torch_exec/executor.py)")


def least_budget_bytes(chain: Chain, link: Link | None) -> int:
    """The least budget a plan for ``chain`` fits in: recomputing only, or also offloading over ``link``
    (:func:`gpusolve.offload.solver.min_budget_bytes`)."""
    if link is None:
        from gpusolve.dp.minpeak import min_feasible_bytes
        return min_feasible_bytes(chain)
    from gpusolve.offload.solver import min_budget_bytes
    return min_budget_bytes(chain, link)


NOT_MEASURED = ("the model's store-all peak: the stages were profiled one at a time (Note [Profiling stage by stage] "
                "in torch_exec/profiler.py)")


def plain_peak_measured(entry) -> bool:
    """Whether the profile measured plain autograd's step (not when profiled stage by stage: Note
    [Profiling stage by stage] in torch_exec/profiler.py)."""
    return bool(entry.profile.get("reference", {}).get("store_all_peak_bytes"))


def below_floor_message(budget: int, floor: int, least: int) -> str:
    """An infeasible budget's message where the step reaches ``floor`` outside the stages; ``least``: the least
    budget, the floor or the stages' own least where higher (the floor alone was named, and a budget raised to it
    was refused again: a review, bench/repros/rv19d_hf_floor_error_names_wrong_least.py)."""
    return (f"budget {exact_bytes(budget)} is below the {floor} B the step reaches outside the stages, which "
            f"checkpointing them cannot lower (the model's code before its blocks, or the part that needs no "
            f"gradient, such as a frozen encoder: Note [The rest of the model], Note [Side values nothing reads] in "
            f"torch_exec/auto.py); raise the budget to at least {least} B"
            + (" (the stages' own least budget with that code beside them)" if least > floor else ""))


def below_plain_message(budget: int, plain_least: int, model_least: int) -> str:
    """An infeasible budget's message where plain autograd's measured peak, at which the step runs, is
    below the model's least budget (``plain_least_bytes``)."""
    return (f"budget {exact_bytes(budget)} is below plain autograd's measured peak {plain_least} B, at which it "
            f"runs (the model's least budget, {model_least} B, is above it); raise the budget to at least "
            f"{plain_least} B")


def plan_faces(merged, kept, plan_face, keeps=None):
    """Note [Two groupings of unsaved boundaries]: plan the two faces of a signature's entry (a chain's, a join's) with
    ``plan_face(face, fallback)``, which raises :class:`InfeasibleBudgetError` where the face does not fit; a budget
    below a face's least falls back to another signature's (``fallback``) only where neither face fits its own.
    Returns the face whose plan runs; raises where neither fits, naming the lesser least budget. ``keeps(face)``:
    whether its plan keeps plain autograd's results (a join's draw order): such a face runs before a faster one."""
    for fallback in (False, True):
        planned, errors = [], []
        for face in (merged, kept):
            try:
                plan_face(face, fallback)
                planned.append(face)
            except InfeasibleBudgetError as err:
                # a fresh error: the caught one's traceback holds this frame, and through it the caller's frames
                # with their locals (the model's outputs) until the garbage collector runs, so a dropped output
                # read as held by the caller (a review: bench/repros/rv12_hf_gptj_output_held_by_error_cycle.py)
                errors.append(InfeasibleBudgetError(str(err), err.min_bytes))
        if planned:
            break
    if not planned:
        raise min(errors, key=lambda err: err.min_bytes)
    if len(planned) == 2:
        # the merged grouping's plan (its prediction is exact) unless the other's is faster (beyond rounding: a
        # merged stage's time is its members' sum) and holds no parameter in several stages that the merged
        # one does not (a step would be refused, or defer hooks, where the merged grouping's is not)
        faster = kept.plan.predicted_time_ms < merged.plan.predicted_time_ms * (1 - 1e-6)
        shared = {id(p) for p in kept.shared_params} <= {id(p) for p in merged.shared_params}
        if keeps is not None and keeps(merged) != keeps(kept) and (keeps(merged) or shared):
            return merged if keeps(merged) else kept
        return kept if faster and shared else merged
    return planned[0]


def faces_of(entry) -> tuple:
    """The faces of an input signature's entry, a chain's or a join's (Note [Two groupings of unsaved boundaries]): the
    entry and the other grouping's, or the entry alone (a profile without such boundaries)."""
    other = getattr(entry, "regrouped", None)
    return (entry,) if other is None else (entry, other)


def merged_face(entry):
    """The face of an input signature's entry over the profile's own grouping of the stages (Note [Two groupings of
    unsaved boundaries]): ``entry`` itself unless it keeps the boundaries no backward saves. Its figures are exact,
    and the signature's reference peak and a given ``schedule_fn`` are taken from it."""
    return entry.regrouped if getattr(entry, "unsaved_kept", False) else entry


def _with_beside(entry, measured: int) -> int:
    """A step peak the profiler measured (it held nothing beside the stages) with what the entry counts
    beside them: its reserves, what its turn adds (the profile's own grouping's), and its floor."""
    return max(int(measured) + entry.reserved_beside + merged_face(entry).turn_peak_bytes, entry.floor_bytes)


def plain_peak_bytes(entry) -> int:
    """Plain autograd's step peak for this entry: measured by the profiler (the plain path runs
    exactly that step, its caller holding every output and seeding a gradient for each), else the
    model's store-all peak over the profile's own grouping (exact: the other face over-counts)."""
    if plain_peak_measured(entry):
        return _with_beside(entry, entry.profile["reference"]["store_all_peak_bytes"])
    return max(store_all_peak_bytes(merged_face(entry).plain_chain), entry.floor_bytes)


def plain_least_bytes(entry) -> int | None:
    """The least budget at which the plain path runs this entry: plain autograd's measured peak in the
    caller's loop (:func:`reference_peak_bytes`) and the shared leaves' buffers it does not see, or None
    where it was not measured. The chain model's least budget can be above it (a frozen prefix: a review's
    BERT linear probe, 102.6 % of it); the lower of the two is the wrapper's least budget. What measured steps
    showed the caller's code add (Note [The caller's turn]) is added: the profile's plain step runs no loss of the
    caller's."""
    if not plain_peak_measured(entry):
        return None
    learned = 0
    if getattr(entry, "caller_turn", 0):  # counted at the turn of plain autograd's step too (with_turn)
        learned = turn_peak_bytes(merged_face(entry).plain_chain, entry.caller_turn)
    return reference_peak_bytes(entry)[0] + entry.unseen_shared_bytes + getattr(entry, "caller_reserve", 0) + learned


def entry_budget_bytes(budget, entry) -> int:
    """``budget`` in bytes for one input signature: bytes, or a percentage of that signature's plain
    autograd peak (:func:`reference_peak_bytes`, measured when profiling)."""
    return parse_budget(budget, lambda: reference_peak_bytes(entry)[0], "budget")


def reference_peak_bytes(entry) -> tuple[int, str]:
    """(the plain autograd peak a percentage budget is taken of, what step it is): with
    ``caller_keeps="loss"`` the profiler's step that keeps and back-propagates only the loss (the
    caller's own loop), else :func:`plain_peak_bytes`."""
    loss_only = entry.profile.get("reference", {}).get("loss_only_peak_bytes")
    if entry.loss_only and loss_only:
        return _with_beside(entry, loss_only), "a step keeping only the loss, measured when profiling"
    if not plain_peak_measured(entry):
        return plain_peak_bytes(entry), NOT_MEASURED
    if entry.loss_only:  # a profile given to prepare() that was made without caller_keeps='loss'
        return plain_peak_bytes(entry), ("a step holding every output, measured when profiling: the profile given "
                                         "has no step keeping only the loss")
    return plain_peak_bytes(entry), "measured when profiling"


class ProgramSplit:
    """The annotated program of a plan cut where its autograd Function splits: ``program[:split + 1]``
    runs in its forward, the rest in its backward (an :class:`Entry`, a join's
    :class:`torch_exec.join.JoinEntry`: dataclasses with ``program``, ``split``, ``held_bytes`` and
    ``beside_bytes`` fields)."""

    @property
    def reserved_beside(self) -> int:
        """Bytes beside the stages every plan of this signature reserves (its ``held_bytes`` and
        ``beside_bytes`` fields)."""
        return self.held_bytes + self.beside_bytes

    @property
    def forward_ops(self):
        return self.program[:self.split + 1]

    @property
    def backward_ops(self):
        return self.program[self.split + 1:]


@dataclass
class Entry(ProgramSplit):
    """Everything one input signature needs: the profile, chain, plan and the fused stage groups.
    ``chain`` is the chain the plan was made for (``plain_chain`` when it runs as plain autograd,
    else ``exec_chain``)."""

    profile: dict
    chain: Chain
    plan: Plan
    groups: list[list]              # callables of each chain stage (base first, then aliasing members)
    group_modules: list[list]       # modules of each chain stage (their buffers are protected)
    clone_input: bool               # stage 1 aliases a_0: clone a_0 before running it
    split: int                      # index of FWD_TAPE(N) in plan.schedule
    program: list = field(default_factory=list)     # annotate(plan.schedule)
    recomputed: list = field(default_factory=list)  # [s]: stage s runs again during backward
    rng: list = field(default_factory=list)         # [s]: stage s draws random numbers (profiled, or found since)
    # [s]: bytes of stage s's RNG record on the device (None: not known, the whole state); Note [Draws found at the
    # first run] in torch_exec/_util.py
    rng_bytes: list | None = None
    has_buffers: list = field(default_factory=list)  # [s]: stage s's modules hold buffers (BatchNorm)
    # [s]: stage s's forward writes a buffer (the profile's buffer_writes; True where it does not say):
    # Note [Recomputing from the step's buffers]
    buffer_writes: list = field(default_factory=list)
    mode_modules: tuple | None = None  # the stages' modules, once found (Note [Recomputing in the forward's mode])
    plain: bool = False             # the plan is store-all: run the stages as plain autograd
    breaks: frozenset = frozenset()  # (None, s): FWD_TAPE(s) starts a segment (Note [Shared leaves split tape runs])
    # what the profiler's plain step missed of the shared leaves it did not sum (one reader read a parameter,
    # another the profiler's stand-in for it): the buffer and the sum, each the leaf's size (Note [Shared
    # leaves split tape runs])
    unseen_shared_bytes: int = 0
    # parameters the modules of two or more stages hold (Note [Hooks on a leaf several segments read])
    shared_params: tuple = ()
    # the torch.Generator objects of the model's own the stages may draw from, as profiling found them, and where
    # (U.GeneratorSites: each call looks them up there again; Note [Generators of the model's own])
    generators: tuple = ()
    generator_sites: object = None
    # [s]: which tensors of a_s need a gradient, as the profile's plain run made them (None: all that can;
    # a profile made before it recorded them): a segment input asks for no other (Note [Segment inputs])
    state_rg: list = field(default_factory=list)
    plain_chain: Chain | None = None  # the profiled chain: plain autograd's costs (nothing reserved)
    exec_chain: Chain | None = None   # executor_chain(plain_chain): what the interpreter holds
    held_bytes: int = 0               # held through each step beside the stages (CheckpointedSequential.held_bytes)
    beside_bytes: int = 0             # made in each step beside the stages (CheckpointedSequential.beside_bytes)
    turn_peak_bytes: int = 0          # what turn_bytes adds to the model's store-all peak
    floor_bytes: int = 0              # the least budget whatever the plan (CheckpointedSequential.floor_bytes)
    device: torch.device | None = None  # the sample input's (first tensor's) device
    link: Link | None = None          # the host link the plan was made for (offload=), else None
    copies: HostCopies | None = None  # host buffers and copy stream of a plan that offloads (one per plan)
    # Note [Outputs without a gradient]: the outputs of a_N whose gradient the plan counts (None: every
    # one), each output's gradient in the allocator's blocks (0: carries none), and the bytes reserved
    out_grads: frozenset | None = None
    out_grad_nbytes: list = field(default_factory=list)
    grad_reserve: int = 0
    # Note [The caller holds a_N]: per output tensor, whether it is a scalar (a loss) and its storage's index;
    # a_N's distinct storages in the allocator's blocks; those the plan counts as dropped by the caller
    # (caller_keeps="loss"; None: none), and the bytes reserved for a_N
    out_scalar: list = field(default_factory=list)
    out_storage_of: list = field(default_factory=list)
    out_storage_nbytes: list = field(default_factory=list)
    out_storage_external: list = field(default_factory=list)  # the input's, a parameter's or a buffer's
    out_dropped: frozenset | None = None
    out_reserve: int = 0
    loss_only: bool = False           # caller_keeps="loss"
    replan_due: bool = False          # a backward showed other gradients of a_N, or other holds, than planned
    # Note [The caller's turn]: bytes reserved for the caller's code between the forward and the backward, learned
    # from measured steps over their budget; and as exec_chain reserves them now
    caller_reserve: int = 0
    caller_applied: int = 0
    # and the peak of that code above what the plan holds when it runs, counted at that moment (with_turn); and as
    # exec_chain counts it now
    caller_turn: int = 0
    turn_applied: int = 0
    # Note [Allocator blocks learned]: bytes the allocator's blocks held beyond the plan in measured steps over their
    # budget; and as exec_chain reserves them now
    blocks_reserve: int = 0
    blocks_applied: int = 0
    # Note [Draws found at the first run] in torch_exec/_util.py: bytes of the RNG records of stages found drawing
    # since the profile (and the copy a replay takes); and as exec_chain reserves them now
    rng_reserve: int = 0
    rng_applied: int = 0
    draws_new: bool = False  # a stage was found drawing since the plan (a join re-plans its draw order: join.py)
    # the same signature over the other grouping of the stages at boundaries no backward saves (None: the profile
    # has none): Note [Two groupings of unsaved boundaries]
    regrouped: "Entry | None" = None
    unsaved_kept: bool = False        # this face keeps those boundaries (False: the profile's own grouping)
    # the input signature's key whose sizes the profile holds (Note [Sizes that vary between calls]): this entry's
    # own, or the one of the signature it was planned on (None: not cached under a key, a join's)
    sizes_key: tuple | None = None
    covered_note: str = ""  # the plans' note where that is another signature's
    reuse_failed: bool = False  # a measured step of a plan so made went over its budget (reuse_failed())


# ---------------------------------------------------------------------------- the interpreter
# The runtimes of the steps whose forward ran and whose backward has not (Note [Hooks across calls before one
# backward]): a runtime leaves at the end of its backward, or with its graph
IN_FLIGHT: "weakref.WeakSet" = weakref.WeakSet()


class Runtime:
    """The held state of one step: checkpoints, tapes, gradients, RNG states per stage."""

    def __init__(self, entry: Entry, a0, input_requires_grad: list[bool], autocast: dict, preserve_rng: bool,
                 call_data: U.CallData | None = None):
        self.entry = entry
        self.call = U.HeldCallData(call_data)  # Note [Data bound to a call]
        self.n = entry.chain.n
        # Note [A step keeps its plan]: what the step runs is its forward's plan, whatever happens to the entry
        self.forward_ops, self.backward_ops, self.recomputed = entry.forward_ops, entry.backward_ops, entry.recomputed
        self.acts: dict = {0: a0}
        self.tapes: dict = {}   # s -> (segment leaf, output of s); only the segment's newest stage
        self.grads: dict = {}
        self.rng: dict = {}
        self.buffers: dict = {}  # s -> the stage's buffers before its first run (recomputed stages)
        # Note [Recomputing in the forward's mode]: the stages' modules and their flags as the forward starts
        self.mode_modules = _mode_modules(entry) if any(self.recomputed) else ()
        self.modes = U.training_flags(self.mode_modules)
        self.mode_changed = False  # set when the backward starts
        self.ran = [False] * (self.n + 1)
        self.rg0 = input_requires_grad
        self.autocast = autocast
        self.preserve_rng = preserve_rng
        self.devices = U.cuda_devices(a0)
        # Note [Generators of the model's own] (_util.py): those at the places profiling found them, now (one the
        # training loop put there since, in a list too, is recorded and replayed)
        sites = getattr(entry, "generator_sites", None)
        self.generators = sites.now() if sites is not None else getattr(entry, "generators", ())
        # Note [Draws found at the first run] (_util.py): first runs watched beside the recomputed stages' (a join
        # whose forward phase interleaves branches: a draw found there changes the order of the draws), and the
        # stages found drawing that their profile did not see draw
        self.watch_all = False
        self.found: list = []
        self.free_marks = not self.devices  # a model on the CPU: its meter sees the host allocations (U.RngMark)
        self.in_backward = False
        self.cast_in_backward = False  # set when the backward starts: recomputation must re-enter autocast
        copies = getattr(entry, "copies", None)
        self.copies = copies.step() if copies is not None else None  # this step's host copies (offload ops)

    def snapshot(self) -> tuple:
        """What the forward left (checkpoints, tapes, the stages on the host), for backwards that keep
        the graph (Note [Retained graphs]): copies, since a segment backward empties its tape."""
        return (dict(self.acts), {s: list(t) for s, t in self.tapes.items()},
                None if self.copies is None else self.copies.on_host())

    def restart(self, snapshot: tuple) -> None:
        """Start a backward again from :meth:`snapshot`'s state (the forward's host copies serve again)."""
        acts, tapes, on_host = snapshot
        self.acts, self.tapes, self.grads = dict(acts), {s: list(t) for s, t in tapes.items()}, {}
        if self.copies is not None:
            self.copies.restart(on_host)

    @staticmethod
    def leaves(snapshot: tuple) -> list:
        """The forward's segment leaves in :meth:`snapshot`'s state."""
        return [tape[0] for tape in snapshot[1].values()]

    def held_storages(self, skip: int) -> set:
        """Storage keys of every state held now but a_``skip`` (checkpoints, the input, tapes): a tensor
        of an offloaded checkpoint that one of them shares is not copied (Note [Shared storages] in
        :mod:`torch_exec.offload`)."""
        keys = set()
        for s, state in self.acts.items():
            if s != skip:
                keys.update(U.storages(state))
        for leaf, out in self.tapes.values():
            keys.update(U.storages(leaf.state))
            keys.update(U.storages(out))
        return keys

    def host_copies(self):
        if self.copies is None:
            raise RuntimeError("internal error: a copy op (offload/release/prefetch/acquire) in a step whose plan "
                               "has no host copies")
        return self.copies

    def start_backward(self) -> None:
        """Recomputations in the backward run under the forward's autocast state; re-entering it is
        needed only when it was on, or when autocast is on around the backward."""
        self.in_backward = True
        self.cast_in_backward = bool(self.autocast) or U.autocast_enabled_now()
        self.mode_changed = bool(self.mode_modules) and U.training_flags(self.mode_modules) != self.modes

    def input_of(self, s: int):
        if s - 1 in self.tapes:
            return U.detach(self.tapes[s - 1][1])
        if s - 1 in self.acts:
            return self.acts[s - 1]
        raise RuntimeError(f"internal error: a_{s - 1} is not held when stage {s} runs")

    def run_stage(self, s: int, state):
        """Run fused stage s. Its first run in a step records the RNG state when the stage runs
        again later; later runs replay it, with the recorded autocast state, the modules' training
        flags of the first run (Note [Recomputing in the forward's mode]) and scratch copies of the
        stage's buffers (BatchNorm statistics are updated once per step)."""
        entry = self.entry
        if s == 1 and entry.clone_input:
            state = U.clone(state)  # an in-place first stage must not overwrite the caller's input
        if not self.ran[s]:
            self.ran[s] = True
            # Note [Draws found at the first run] (_util.py): every stage that runs again is watched, the profile's
            # rng flag notwithstanding; the record keeps the generators the run advanced
            watch = (self.preserve_rng and (self.recomputed[s] or self.watch_all)
                     and not torch._C._len_torch_dispatch_stack())  # traced (torch.export): nothing runs again
            if watch:
                before = U.RngMark.capture(self.devices, self.generators, self.free_marks)
            if self.recomputed[s] and entry.buffer_writes[s]:  # Note [Recomputing from the step's buffers]
                self.buffers[s] = U.buffer_values(entry.group_modules[s - 1])
            for fn in entry.groups[s - 1]:
                state = fn(state)
            if watch:
                record = before.advanced(U.RngMark.capture(self.devices, self.generators, self.free_marks, keep=False))
                if record is not None:
                    if self.recomputed[s]:
                        self.rng[s] = record
                    if not entry.rng[s]:
                        learn_draws(entry, s, record)
                        self.found.append(s)
            return state
        rng = self.preserve_rng and s in self.rng
        cast = self.in_backward and self.cast_in_backward
        buffers = entry.has_buffers[s]
        mode = self.mode_changed  # only ever set as the backward starts
        if not (rng or cast or buffers or mode):  # nothing to restore: the cheap path
            for fn in entry.groups[s - 1]:
                state = fn(state)
            return state
        with contextlib.ExitStack() as stack:
            if rng:  # the record's own generators and the default ones are put back after
                stack.enter_context(U.fork_rng(self.devices, self.rng[s].generators))
                self.rng[s].restore()
            if cast:
                stack.enter_context(U.autocast_from(self.autocast))
            if mode:
                stack.enter_context(U.training_from(self.mode_modules, self.modes))
            if buffers:
                stack.enter_context(U.scratch_buffers(entry.group_modules[s - 1], self.buffers.get(s)))
            for fn in entry.groups[s - 1]:
                state = fn(state)
        return state


def _mode_modules(entry) -> tuple:
    """The modules of ``entry``'s stages, each once, found once per entry (Note [Recomputing in the forward's mode];
    all stages': a replan changes which are recomputed)."""
    found = getattr(entry, "mode_modules", None)
    if found is None:
        found = U.submodules(m for mods in entry.group_modules for m in mods)
        entry.mode_modules = found
    return found


def _backward_segment(tape: list, grad: list) -> None:
    """Back-propagate ``grad`` (one entry per tensor of the tape's output, None for none) from the
    output ``tape[1]`` of a segment. Both lists are emptied before the engine runs, so neither the
    output nor the gradient stays referenced here: plain autograd frees them when their nodes ran.
    A backward that names tensors or keeps the graph runs the segment through its mode instead
    (:class:`_SegmentMode`)."""
    mode = getattr(_SEGMENT, "mode", None)
    if mode is not None:
        return mode.backward_segment(tape, grad)
    U.backward_segment(tape, grad)


def interpret(program, runtime) -> None:
    """The one interpreter of the schedule IR (see the module docstring for each op), over
    :func:`annotate`'s ``(code, stage, arg, branch)`` entries.

    ``runtime`` is the :class:`Runtime` of a chain, or a join's runtime (:class:`torch_exec.join.JoinRuntime`):
    an op of branch b then runs on ``runtime.branches[b]``, a ``TURN`` on the join's runtime itself.
    Every branch drops its local references before the next op, so that a tensor the schedule
    frees is really freed then (the memory model counts it gone). An active
    :class:`torch_exec.opclock.OpClock` marks the end of every op (diagnosis only).
    """
    # Note [Data bound to a call]; a wrapper a stage calls runs plainly (Note [A wrapper inside another's step])
    with runtime.call.bound(), a_wrapper_step():
        _interpret(program, runtime)


def _interpret(program, runtime) -> None:
    clock = opclock.ACTIVE
    if clock is not None:
        marks = clock.begin()
    for code, s, arg, b in program:
        rt = runtime if b is None else runtime.branches[b]
        if code == TAPE:
            if arg:  # same segment as the tape of s-1: its output itself is the input
                leaf, inp = rt.tapes.pop(s - 1)
            else:
                leaf = U.SegmentInput(rt.input_of(s), rt.rg0 if s == 1 else state_requires_grad(rt.entry, s - 1))
                inp = leaf.state
            with torch.enable_grad():
                rt.tapes[s] = [leaf, rt.run_stage(s, inp)]
            if leaf.written():
                raise RuntimeError(_WRITTEN_ERROR.format(s=s))
            del leaf, inp
        elif code == NOGRAD:
            inp = rt.input_of(s)
            with torch.no_grad():
                rt.acts[s] = rt.run_stage(s, inp)
            del inp
            if not arg:
                del rt.acts[s - 1]
        elif code == BWD:
            if arg:  # else done by the backward of its segment
                tape = rt.tapes.pop(s)
                _backward_segment(tape, rt.grads.pop(s))
                rt.grads[arg - 1] = tape.pop().take_grads()
                del tape
        elif code == FREE:
            del rt.acts[s]
        elif code == TURN:  # join schedules only; arg 0 the head's forward, 1 its backward
            rt.turn(arg)
        elif code == OFFLOAD:  # a_s stays held while its copy to the host runs
            rt.host_copies().offload(s, rt.acts[s], rt.held_storages(s))
        elif code == RELEASE:  # wait for that copy, then a_s's last reference goes
            state = rt.acts.pop(s)
            rt.host_copies().release(s, state, rt.held_storages(s))
            del state
        elif code == PREFETCH:  # a_s's blocks are held from here; the copy back is issued
            rt.host_copies().prefetch(s)
        else:  # ACQUIRE: the compute stream waits for the copy back; a_s is a held checkpoint again
            rt.acts[s] = rt.host_copies().acquire(s)
        if clock is not None:
            clock.mark(marks, code, s, b)


# ---------------------------------------------------------------------------- backward modes
_SEGMENT = threading.local()  # .mode: the _SegmentMode of the schedule backward running on this thread

_DOUBLE_BACKWARD_ERROR = (
    "CheckpointedSequential: double backward (create_graph=True) is not supported through a checkpointed "
    "schedule: its recomputations and segment backwards run inside the backward and record no graph of the "
    "gradient. Run this model with budget=None (plain autograd) for higher-order gradients")
_TWICE_ERROR = (
    "CheckpointedSequential: backward ran twice through the same step, and the first backward freed it; "
    "pass retain_graph=True to the earlier backward (as plain autograd needs) to run it again")
_WRITTEN_ERROR = (
    "CheckpointedSequential: stage {s} wrote in place into a tensor of its autograd segment's input, which the "
    "schedule holds (a checkpoint or an earlier stage's output) and may read again. Make that operation out of place "
    "(e.g. nn.ReLU(inplace=False)), or fuse it into the stage that makes the tensor")
_COMPILE_REASON = (
    "CheckpointedSequential runs its checkpointed schedule eagerly, outside the compiled graph: the first call "
    "profiles the stages and solves with NumPy, and the recomputations in its backward must redraw exactly the "
    "random numbers of its forward. fullgraph=True cannot include it; compile the stages instead "
    "(Note [torch.compile] in torch_exec/executor.py)")


def _detached_results(ctx, outs, grad_only: bool = False) -> tuple:
    """An autograd Function's results: ``outs`` detached; those that carry no gradient (not of a
    differentiable dtype, or with ``grad_only`` not requiring grad) are marked non-differentiable."""
    results = tuple(t.detach() for t in outs)
    nondiff = [r for r, t in zip(results, outs, strict=True)
               if not U.differentiable(t) or (grad_only and not t.requires_grad)]
    if nondiff:
        ctx.mark_non_differentiable(*nondiff)
    return results


# Note [Parameters written before the backward]
#     A parameter written in place between a step's forward and its backward (a second optimizer stepping after
#     ``loss.backward(retain_graph=True)``, a weight clipped before the backward): plain autograd raises at the
#     backward ("modified by an inplace operation"), since the tensor it saved moved on. A schedule saves no
#     parameter across the two: its recomputations read the parameters as they are at the backward, and the step
#     returned a loss of one function with the gradients of another, silently (a review:
#     bench/repros/rv20b_param_written_before_backward_unchecked.py). So the forward records the versions of the
#     parameters the step routes (its trainable ones, ``ctx.tap``), and the backward refuses as plain autograd does
#     where one moved (also a parameter no op saved, which plain autograd lets pass: a bias).
def mark_parameters(ctx) -> None:
    """At a schedule Function's forward: the versions of the step's routed parameters (Note [Parameters written
    before the backward])."""
    ctx.param_versions = [p._version for p in ctx.tap[1]]


def _backward_runtime(ctx, double_backward_error: str, twice_error: str):
    """The first refusals of a schedule Function's backward (before any state is consumed): double
    backward, a second backward after the first freed the step, and a parameter written since the forward
    (Note [Parameters written before the backward]); returns the step's runtime."""
    if torch.is_grad_enabled():
        raise RuntimeError(double_backward_error)
    rt = getattr(ctx, "rt", None)
    if rt is None:
        raise RuntimeError(twice_error)
    written = [p for p, v in zip(ctx.tap[1], ctx.param_versions) if p._version != v]
    if written:
        raise RuntimeError(
            f"one of the variables needed for gradient computation has been modified by an inplace operation: "
            f"{len(written)} parameter(s) (shapes {', '.join(str(tuple(p.shape)) for p in written[:3])}) were written "
            f"in place after the forward of this checkpointed step and before its backward (an optimizer step after "
            f"backward(retain_graph=True), a clipping of the weights), which would recompute its stages with the new "
            f"values; run the backward before writing them, as plain autograd requires (Note [Parameters written "
            f"before the backward] in torch_exec/executor.py)")
    return rt


def _keep_graph() -> bool:
    """Whether the backward running on this thread keeps the graph (``retain_graph=True``)."""
    get = getattr(torch._C._autograd, "_get_current_graph_task_keep_graph", None)
    return bool(get()) if get is not None else False


def kept_graph_leaves(ctx, rt) -> list | None:
    """Note [Retained graphs], at the start of a schedule Function's backward (the chain's or the join's:
    ``rt`` a :class:`Runtime` or :class:`torch_exec.join.JoinRuntime`): a backward after one that kept
    the graph starts again from the forward's state (``ctx.snapshot``), one that keeps it takes that
    state first, and one that does not lets the step go. Returns the forward's segment leaves, whose
    graphs are kept, or None when this backward frees the step."""
    keep, snapshot = _keep_graph(), ctx.snapshot
    if snapshot is not None:
        rt.restart(snapshot)
    elif keep:
        snapshot = ctx.snapshot = rt.snapshot()
    if not keep:
        ctx.rt = ctx.snapshot = None
        return None
    return rt.leaves(snapshot)


def _will_run(node) -> bool:
    """Whether the backward running on this thread will run ``node`` (True when torch cannot say)."""
    will = getattr(torch._C, "_will_engine_execute_node", None)
    return bool(will(node)) if will is not None else True


def _compiler_disable(fn):
    """``fn`` as ``torch.compiler.disable(fn)`` with :data:`_COMPILE_REASON` (Note [torch.compile]),
    made when first needed: importing ``torch._dynamo`` costs seconds, and until something imported it
    nothing can be compiling."""
    @functools.wraps(fn)
    def eager(*args, **kwargs):
        disabled = _EAGER.get(fn)
        if disabled is None:
            if "torch._dynamo" not in sys.modules:
                return fn(*args, **kwargs)
            disable = getattr(getattr(torch, "compiler", None), "disable", None)
            if disable is None:  # pragma: no cover - torch without torch.compiler
                disabled = fn
            else:
                try:
                    disabled = disable(fn, reason=_COMPILE_REASON)
                except TypeError:  # pragma: no cover - torch.compiler.disable without reason=
                    disabled = disable(fn)
            _EAGER[fn] = disabled
        return disabled(*args, **kwargs)
    # What dynamo reads off a disabled function: tracing graph-breaks here (fullgraph=True raises)
    # naming the reason, instead of inlining this wrapper.
    eager._torchdynamo_disable = True
    eager._torchdynamo_disable_msg = _COMPILE_REASON
    return eager


_EAGER: dict = {}  # fn -> torch.compiler.disable(fn), made by _compiler_disable's wrapper


def _tap_params(module: nn.Module, ddp, walked: list | None = None) -> list:
    """The parameters routed through :class:`_ParamTap` (Note [Autograd calls that name tensors]): the trainable
    ones, hooked or not (Note [Hooks of routed parameters]); none in the forward of a DistributedDataParallel
    (``ddp``: :func:`_ddp_forward`) that does not search its graph for unused parameters (Note
    [DistributedDataParallel]). ``walked``: those the call's input signature found (Note [One walk of the model
    per call]), else ``module``'s are walked (:func:`torch_exec._util.trainable_parameters`, ``parameters()``'s list)."""
    if ddp is not None and (ddp.static_graph or not ddp.find_unused_parameters):
        return []
    return walked if walked is not None else U.trainable_parameters(module)


def _ddp_forward():
    """The DistributedDataParallel whose forward runs now (DDP's own marker ``_active_ddp_module``),
    or None (also when DDP was never imported)."""
    ddp = sys.modules.get("torch.nn.parallel.distributed")
    return getattr(getattr(ddp, "DistributedDataParallel", None), "_active_ddp_module", None)


def with_shared_leaves(chain: Chain, groups) -> Chain:
    """``chain``, saying which of its stages (callables ``groups``) read one leaf tensor
    (:meth:`gpusolve.chain.Chain.shared_leaves`): as the profile read them off the autograd graph (Note
    [Leaves several stages read] in the profiler), or, for a profile made before they were recorded, found
    from the stages' modules and the state their callables reach (:func:`torch_exec._util.shared_leaves`;
    summed unless a callable reaches the leaf itself), saying so in one line."""
    if chain.shared_leaves() is not None:
        return chain
    warnings.warn("the profile does not record which stages read one leaf tensor (made before this version): "
                  "found from the stages' modules and what their callables reach; profile again (drop profile=, "
                  "or replan(profile=True)) to read them off the autograd graph", FallbackWarning, stacklevel=4)
    direct = {id(t) for group in groups for t in U.stage_leaves(group, own=False)}
    found = [{"stages": stages, "nbytes": U.device_block_bytes(t.device, t.numel() * t.element_size()),
              "summed": id(t) not in direct} for t, stages in U.shared_leaves(groups)]
    return replace(chain, provenance={**chain.provenance, "shared_leaves": found})


@contextlib.contextmanager
def _standin_params(modules):
    """Profiling runs on stand-ins for the trainable parameters of ``modules``: fresh leaves sharing their
    storage, so that its backward passes run no hook of a parameter's gradient accumulator, not even the
    C++ ones DistributedDataParallel registers (Note [DistributedDataParallel]). The parameters' Python
    gradient hooks (``register_hook``: clipping, scaling) are registered on the stand-ins too: their
    temporaries are part of the backward the profile measures. Tensor subclasses (FSDP2's DTensor
    parameters, which FSDP swaps itself) are left as they are."""
    swapped, standins, seen = [], {}, set()
    for mod in modules:
        for m in mod.modules():
            if id(m) in seen:
                continue
            seen.add(id(m))
            for name, p in list(m._parameters.items()):
                if p is None or not p.requires_grad or type(p.data) is not torch.Tensor:
                    continue
                if id(p) not in standins:
                    standins[id(p)] = nn.Parameter(p.detach(), requires_grad=True)
                    U.mark_standin(standins[id(p)], p)  # Note [Leaves several stages read] in the profiler
                    for hook in (p._backward_hooks or {}).values():
                        standins[id(p)].register_hook(hook)
                swapped.append((m, name, p))
                setattr(m, name, standins[id(p)])  # setattr: modules caching parameters (RNNs) follow
    try:
        yield
    finally:
        for m, name, p in reversed(swapped):
            setattr(m, name, p)


class _ParamTap(torch.autograd.Function):
    """Makes the wrapper's parameters reachable from its output in the outer graph, so that a call
    naming them reaches :class:`_ScheduleFunction`'s backward, which leaves their gradients in the box;
    ``backward`` hands them to the engine (in a plain ``backward()``, whose segment backwards accumulated into
    ``.grad``, None but for hooked parameters: Note [Hooks of routed parameters]; None for all when the box is
    empty). Note [Autograd calls that name tensors]."""

    @staticmethod
    def forward(ctx, box, *params):
        ctx.box = box
        ctx.n = len(params)
        ctx.set_materialize_grads(False)
        return params[0].new_empty(0)

    @staticmethod
    def backward(ctx, _unused):
        grads = ctx.box.pop() if ctx.box else (None,) * ctx.n
        return (None, *grads)


class _SegmentMode:
    """How the segment backwards of one schedule backward run when it names tensors (``autograd.grad``,
    ``backward(inputs=...)``) or keeps the graph (``retain_graph=True``): Note [Autograd calls that name
    tensors], Note [Retained graphs]. :func:`_backward_segment` hands the segments to it."""

    __slots__ = ("named", "params", "param_grads", "retained", "box", "meter")

    def __init__(self, named: bool, params: list, retained: set, box: list | None = None, meter=None):
        self.named = named              # fill no .grad: gradients of the leaves and `params` only
        self.params = params            # parameters whose gradients the outer call wants (through the tap)
        self.param_grads = [None] * len(params)
        self.retained = retained        # ids of the forward's segment leaves: their graphs are kept
        self.box = box                  # the parameter tap's box: param_grads go there (None: not wanted)
        self.meter = meter              # the step's StepMeter (or None): told of each parameter gradient made

    @classmethod
    def of(cls, tap: tuple, named: bool, retained: set | None, meter=None) -> "_SegmentMode | None":
        """The mode of a schedule backward (the chain's or the join's): ``tap`` the ``(box, params,
        tap node)`` of its parameter tap, ``named`` whether the call names tensors, ``retained`` the
        ids of the leaves whose graphs are kept (None: the graph is not kept), ``meter`` the step's
        StepMeter when it is measured. None: a plain ``.backward()``, whose segment backwards accumulate
        into ``.grad`` themselves."""
        if not named and retained is None:
            return None
        box, params, tap_node, _ = tap
        wanted = named and tap_node is not None and _will_run(tap_node)
        return cls(named, params if wanted else [], retained or set(), box if wanted else None, meter)

    @contextlib.contextmanager
    def _marked(self):
        """While a measured step's segment computes the parameters' gradients: the step meter is told of each
        one as the engine makes it, the first time in the step (Note [Gradients set during the step] in
        torch_exec/report.py), through a gradient hook that is removed again."""
        if self.meter is None or not self.meter.measuring:
            yield
            return
        acc = self.param_grads

        def made(i):
            def hook(g):
                if acc[i] is None and i not in noted:
                    noted.add(i)
                    self.meter.note_param_grad(g)
            return hook
        noted: set = set()
        handles = [p.register_hook(made(i)) for i, p in enumerate(self.params) if acc[i] is None]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()

    def backward_segment(self, tape: list, grad: list) -> None:
        # a segment's tape starts with its input; a join head's, with one input per branch
        group = tape[0] if isinstance(tape[0], list) else [tape[0]]
        retain = any(id(leaf) in self.retained for leaf in group)
        outs, box = U.take_output_and_gradients(tape, grad)
        if not outs:
            return
        leaves = [t for leaf in group for t in leaf.inputs]
        inputs = leaves + self.params
        with torch.enable_grad():
            root = U.Feed.apply(box, *outs)
            del outs
            if not self.named:
                torch.autograd.backward(root, root.new_empty(0), retain_graph=retain)
                return
            if not inputs:
                return
            with self._marked():
                got = torch.autograd.grad(root, inputs, root.new_empty(0), retain_graph=retain, allow_unused=True)
        del root
        start = 0
        for leaf in group:  # the segment inputs' gradients: read by interpret's BWD (the join's TURN)
            leaf.box[:] = got[start:start + len(leaf.inputs)]
            start += len(leaf.inputs)
        acc = self.param_grads
        for i, g in enumerate(got[len(leaves):]):
            if g is not None:
                acc[i] = g if acc[i] is None else acc[i] + g


def entry_params(entry) -> tuple:
    """The trainable parameters the stages of an entry hold (a chain's, or a join's branches' and head's); cached
    on the entry."""
    cached = getattr(entry, "hook_params", None)
    if cached is None:
        groups = list(getattr(entry, "group_modules", []))
        for branch in getattr(entry, "branches", []):
            groups += list(getattr(branch, "group_modules", []))
        head = getattr(entry, "head", None)
        modules = [m for mods in groups for m in mods] + (U.modules_of([head]) if head is not None else [])
        cached = tuple(p for p in U.params_of(modules) if p.requires_grad)
        entry.hook_params = cached
    return cached


def _deferred_hook_params(rt, mode) -> list:
    """The parameters whose hooks a schedule backward that fills ``.grad`` defers to the end of the backward pass
    (:func:`torch_exec._util.leaf_hooks_deferred`): those several of its stages hold (Note [Hooks on a leaf several
    segments read]), and, while another step of the same parameters waits for its backward (a second call before
    one backward), every one with hooks of the user's (Note [Hooks across calls before one backward])."""
    if mode is not None and mode.named:
        return []
    params = list(rt.entry.shared_params)
    others = [other for other in list(IN_FLIGHT) if other is not rt]
    if others:  # most backwards: none, and no walk over the parameters
        mine = entry_params(rt.entry)
        ids = {id(p) for p in mine}
        if any(id(p) in ids for other in others for p in entry_params(other.entry)):
            params += user_hooked(mine)
    return params


_HOOK_READERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # wrapper -> {id(p): (weak p, outside)}


class _RoutedHooks:
    """What a schedule backward does with the hooks of the parameters routed through the parameter tap (Note
    [Hooks of routed parameters]): a context around the backward's ops. ``several``: the ids of the parameters
    whose gradient comes in several parts whatever the caller does (several stages read them, another call of
    theirs waits for its backward). ``ids``: the parameters it hands over or suspends, which no other deferral
    takes."""

    def __init__(self, tap: tuple, mode: _SegmentMode | None, several=frozenset()):
        box, params, _, readers = tap
        self.box, self.n, self.readers = box, len(params), readers
        self.named = mode is not None and mode.named
        self.work: list = []    # (index in the tap, p, how: "mute" | "harvest" | "suspend", probing)
        self.inline: list = []  # (p, watched for a reader outside): their hooks run in the segments
        several = several | U.watched_now() if box is not None and not self.named else several  # an earlier call's
        for i, p in enumerate(params if box is not None else ()):
            grad_hooked = U.users_grad_hooks(p)
            if self.named:
                if grad_hooked:
                    self.work.append((i, p, "mute", False))
                continue
            if not (grad_hooked or U.users_post_hooks(p)):
                continue
            if grad_hooked and p.grad is not None:  # handing its part over would need a buffer beside .grad
                self.inline.append((p, False))
                continue
            if readers is None:  # inside DDP's forward: the hooks stay in the segments
                self.inline.append((p, False))
                continue
            known = readers.get(id(p))
            outside = None if known is None or known[0]() is not p else known[1]
            if id(p) in several or outside is not False:
                probing = outside is None and id(p) not in several  # its first backward: learn of a reader outside
                self.work.append((i, p, "harvest" if grad_hooked else "suspend", probing))
            else:
                self.inline.append((p, True))
        self.ids = frozenset(id(p) for _, p, how, _ in self.work if how != "mute")
        self.taken: list = []

    def __enter__(self):
        for i, p, how, probing in self.work:
            grad_hooks = p._backward_hooks or {}
            moved = list(grad_hooks.items())
            grad_hooks.clear()  # the engine holds the dict: emptied and refilled in place
            users = U.take_post_accumulate_hooks(p, U.users_hook) if how != "mute" else []
            self.taken.append((i, p, how, probing, grad_hooks, moved, users, U.grad_seen(p)))
        return self

    def __exit__(self, kind, error, trace):
        handed = [None] * self.n
        state = U.pass_hooks() if self.inline or any(how != "mute" for _, _, how, *_ in self.taken) else None
        for i, p, how, probing, grad_hooks, moved, users, seen in self.taken:
            grad_hooks.update(moved)
            for hook in users:
                hook.put_back()
            verdict = self._probed if probing else None
            if how == "harvest":  # .grad was None: what the segments added is the stages' part
                if kind is None:
                    handed[i] = p.grad
                p.grad = None
                if state is not None:
                    state.watch(p, skip=handed[i] is None, handed=handed[i], verdict=verdict)
            elif how == "suspend" and state is not None:  # .grad holds the stages' part: the engine's call runs them
                state.watch(p, skip=U.grad_unchanged(p, seen), verdict=verdict)
        for p, learn in self.inline if state is not None else ():  # their hooks ran with the stages' part
            state.watch(p, skip=True, verdict=self._found_outside if learn else None)
        self.taken = []
        if kind is None and self.box is not None and not self.named:
            self.box.append(handed)
        return False

    def _probed(self, p, outside: bool) -> None:
        """The first backward of a hooked parameter ran its hooks on the whole gradient: remember whether a part
        came from outside the wrapper (the next steps run the hooks in the segments where none did)."""
        if self.readers is not None:
            self.readers[id(p)] = (weakref.ref(p), outside)

    def _found_outside(self, p, outside: bool) -> None:
        """A parameter whose hooks ran in the segments got a part from outside the wrapper too (a reader the first
        backwards did not have): this step ran its hooks once per part; from the next on, once on the whole."""
        if not outside or self.readers is None:
            return
        self.readers[id(p)] = (weakref.ref(p), True)
        warnings.warn(f"a parameter of shape {tuple(p.shape)} held by the wrapper's stages got part of its gradient "
                      f"from code outside the wrapper, which earlier backwards did not: in this backward its hooks ran "
                      f"once per part; from the next on they run once, on the whole gradient (Note [Hooks of routed "
                      f"parameters] in torch_exec/executor.py)", stacklevel=2)


def interpret_backward(ops: list, rt, mode: _SegmentMode | None, tap: tuple = (None, [], None, None)) -> None:
    """:func:`interpret` a schedule's backward ops with the segment backwards in ``mode``; the named
    parameters' gradients then go to the parameter tap (Note [Autograd calls that name tensors]), and so do, in a
    backward that fills ``.grad``, the hooked parameters' (``tap``: the step's, Note [Hooks of routed
    parameters])."""
    outer = getattr(_SEGMENT, "mode", None)
    _SEGMENT.mode = mode
    several = _deferred_hook_params(rt, mode)
    routed = _RoutedHooks(tap, mode, frozenset(id(p) for p in several))
    try:
        with U.leaf_hooks_deferred(p for p in several if id(p) not in routed.ids):
            with routed, U.parametrize_cache_off():
                interpret(ops, rt)
    finally:
        _SEGMENT.mode = outer
    if mode is not None and mode.box is not None:
        mode.box.append(mode.param_grads)


def refuse_host_draws(mark, what: str) -> None:
    """Note [Python's and NumPy's generators] in torch_exec/_util.py: raise where the stages' forward of a step that
    recomputes moved Python's or NumPy's generator since ``mark`` (None: not watched)."""
    if mark is None:
        return
    moved = U.host_rng_moved_since(mark)
    if moved:
        raise U.host_rng_error(moved, f"{what}: a stage's forward at this call",
                               "a recomputation of the stage cannot replay (it would draw the next numbers: other "
                               "noise, other layers skipped)")


class _ScheduleFunction(torch.autograd.Function):
    """forward: ops up to FWD_TAPE(N), returns a_N; backward: the remaining ops, returns grad of a_0.

    ``tap`` is :class:`_ParamTap`'s output (or an empty leaf requiring grad when no parameter is
    routed): it makes the backward run even when no input needs a gradient."""

    @staticmethod
    def forward(ctx, runtime_args, tap, *inputs):
        entry, structure, preserve_rng, meter, tap_args, call_data = runtime_args
        ctx.meter = meter
        ctx.tap = tap_args
        mark_parameters(ctx)
        ctx.snapshot = None
        a0 = _rebuild(structure, [t.detach() for t in inputs])
        rt = Runtime(entry, a0, [t.requires_grad for t in inputs], U.autocast_state(), preserve_rng, call_data)
        host = U.host_rng_mark() if any(rt.recomputed) else None  # Note [Python's and NumPy's generators] (_util.py)
        interpret(rt.forward_ops, rt)
        refuse_host_draws(host, "CheckpointedSequential")
        report_draws_found([(entry, rt.found, "")], "CheckpointedSequential")
        IN_FLIGHT.add(rt)
        out = rt.tapes[rt.n][1]
        ctx.rt = rt
        ctx.n_inputs = len(inputs)
        ctx.save_for_backward(*inputs)
        outs = U.tensors(out)
        ctx.set_materialize_grads(False)  # Note [Outputs without a gradient]
        if not entry.out_grad_nbytes:  # a profile that does not record them (an older version's)
            facts = U.output_facts(outs)
            for face in faces_of(entry):  # Note [Two groupings of unsaved boundaries]
                output_facts_of(face, facts)
        ctx.out_is_tensor = isinstance(out, torch.Tensor)
        results = _detached_results(ctx, outs)
        ctx.out_refs = output_storages(entry, outs) if entry.loss_only else []  # Note [The caller holds a_N]
        if meter is not None:  # Note [The caller's turn]
            meter.turn_start(functools.partial(learn_from_step, entry))  # picklable (rv20b: a pending record)
        return results[0] if ctx.out_is_tensor else results

    @staticmethod
    def backward(ctx, *grad_outputs):
        # Every refusal comes first, before any state is consumed or any .grad touched.
        rt = _backward_runtime(ctx, _DOUBLE_BACKWARD_ERROR, _TWICE_ERROR)
        ctx.saved_tensors  # noqa: B018 - raises if the caller modified an input in place since forward
        if ctx.meter is not None:  # Note [The caller's turn]
            ctx.meter.turn_end(grad_outputs)
        named = not torch.autograd._is_checkpoint_valid()  # autograd.grad or backward(inputs=...)
        kept = kept_graph_leaves(ctx, rt)
        keep = kept is not None
        mode = _SegmentMode.of(ctx.tap, named, None if kept is None else {id(leaf) for leaf in kept}, ctx.meter)
        learn_output_grads(rt.entry, [g is not None for g in grad_outputs])
        rt.start_backward()
        rt.grads[rt.n] = list(grad_outputs)
        del grad_outputs
        interpret_backward(rt.backward_ops, rt, mode, ctx.tap)
        IN_FLIGHT.discard(rt)
        for leaf in kept or ():  # the forward's segment leaves serve again: drop the gradients they were given
            leaf.box.clear()
        grads = rt.grads.pop(0)
        rt.acts.clear()
        if rt.tapes or rt.acts or rt.grads:
            raise RuntimeError("internal error: the schedule left state behind")
        if rt.copies is not None and not keep:  # the step's host buffers go back to the plan's pool
            rt.copies.close()
        input_grads = [g if rg else None for g, rg in zip(grads, rt.rg0, strict=False)]
        if not keep and ctx.out_refs:  # the executor holds nothing of a_N now: what is alive, the caller holds
            entry = rt.entry
            del rt, grads
            learn_output_holds(entry, ctx.out_refs)
        if ctx.meter is not None:
            ctx.meter.end()
        return (None, None, *input_grads)


def state_requires_grad(entry, s: int):
    """Which tensors of a_s a segment input makes need a gradient (Note [Segment inputs]): as in the profile's
    plain run, or every one that can (True) where the profile does not say."""
    flags = entry.state_rg[s] if s < len(getattr(entry, "state_rg", ())) else None
    return True if flags is None else flags


def user_hooked(params) -> list:
    """The parameters among ``params`` with a gradient hook or a post-accumulate-grad hook of the user's (the step
    meter's own, marked ``meter_hook``, left out)."""
    return [p for p in params if p.requires_grad and (U.users_grad_hooks(p) or U.users_post_hooks(p))]


def refuse_shared_hazards(shared: tuple, who: str) -> None:
    """Note [Hooks on a leaf several segments read]: refused, naming the remedy, before the step runs:
    DistributedDataParallel around a wrapper whose stages share parameters (``shared``; empty where the step
    runs as plain autograd, one backward), which would all-reduce part of their gradients; and gradient hooks on
    such a parameter whose ``.grad`` is already set (gradient accumulation), whose whole gradient would need a
    buffer beside ``.grad`` that no plan counts."""
    if not shared or not torch.is_grad_enabled():
        return
    hooked = [p for p in shared if p._backward_hooks and p.grad is not None]
    if hooked:
        raise RuntimeError(
            f"{who}: {len(hooked)} parameter(s) read by several stages (shapes "
            f"{U.first_few(tuple(p.shape) for p in hooked)}, {U.state_nbytes(hooked)} B) have "
            f"gradient hooks (register_hook) and a .grad already set. The schedule back-propagates each stage apart, "
            f"so the hooks run once on the whole gradient at the end of the backward, which needs that gradient in a "
            f"buffer beside .grad that the plan does not count (Note [Hooks on a leaf several segments read] in "
            f"torch_exec/executor.py). Set the gradients to None before each step (optimizer.zero_grad()), or apply "
            f"the hook's change to .grad after the backward (all micro-batches' sum), or untie the parameters")
    if _ddp_forward() is not None:
        raise RuntimeError(
            f"{who} inside DistributedDataParallel: {len(shared)} parameter(s) (shapes "
            f"{U.first_few(tuple(p.shape) for p in shared)}) "
            f"are read by several stages (a tied embedding, a module applied twice). The schedule back-propagates "
            f"each stage apart, so each such parameter's gradient arrives in parts, and DDP would all-reduce the "
            f"first part alone (each rank keeping its own rest). Synchronise the gradients yourself: run the backward "
            f"inside ddp.no_sync() and all-reduce every parameter's .grad after it (Note [Hooks on a leaf several "
            f"segments read] in torch_exec/executor.py), or untie the parameters")


def _profile_argument(profile) -> dict:
    """``prepare(profile=...)``: a ``measured-chain/1`` dict, or the path of a JSON file holding one."""
    if isinstance(profile, (str, os.PathLike)):
        from gpusolve.chain import read_json_object
        profile, _ = read_json_object(profile)
    if not isinstance(profile, dict) or not isinstance(profile.get("stages"), list):
        raise TypeError(f"prepare(profile=...) takes a measured-chain/1 profile: the dict torch_exec.profile_dict "
                        f"returns, or the path of a JSON file holding one; got {type(profile).__name__}")
    if not isinstance(profile.get("args", {}), dict):
        raise ValueError(f"prepare(profile=...): args = {str(profile['args'])[:60]!r} is not an object (the profiler "
                         f"writes {{'input_shapes': ..., 'passes': ...}}); re-profile, or drop the field")
    with warnings.catch_warnings():  # each stage's fields, as planning reads them (its warnings come then)
        warnings.simplefilter("ignore")
        try:
            Chain.from_profile(profile)
        except ValueError as err:
            raise ValueError(f"prepare(profile=...): {err}") from None
    return profile


def _check_profile_names(names: list[str], own: list[str]) -> None:
    """``prepare(profile=...)``: the profile's stage names are this module's, in order; raises ``ValueError``
    naming the first that differs, or both counts."""
    if names == own:
        return
    if len(names) != len(own):
        where = f"the profile has {len(names)} stages, this module {len(own)}"
    else:
        i = next(i for i, (a, b) in enumerate(zip(names, own)) if a != b)
        where = f"stage {i + 1} is {names[i]!r} in the profile, {own[i]!r} here"
    raise ValueError(f"prepare(profile=...): the profile is not of this module's stages ({where}); profile these "
                     f"stages (drop profile=), or load the profile taken on them")


def _check_profile_input(profile: dict, state, param_bytes: int, shapes: bool = True) -> None:
    """A saved profile holds for the input it was taken on and the parameters it was taken with: other shapes,
    dtypes or another requires_grad make other activations (a batch-8 profile planned a batch-256 step 11.6x
    over its budget; a review, 2026-11-27), and so do other parameters behind the same stage names (a 64-wide
    MLP's profile ran the 512-wide one 16.9x over its budget: a review, 2026-11-28). Raises ``ValueError``
    naming both; fields a profile lacks are not checked. ``param_bytes``: the stages' (:func:`param_bytes_of`).
    ``shapes`` False: the input's sizes are checked by the caller (Note [Sizes that vary between calls])."""
    now = input_facts(U.tensors(state)) | {"parameter bytes": param_bytes}
    was = {"input shapes": (profile.get("args") or {}).get("input_shapes") if shapes else None,
           "dtype": profile.get("dtype"),
           "input_requires_grad": profile.get("input_requires_grad"), "parameter bytes": profile.get("param_bytes")}
    for what, value in was.items():
        if value is not None and value != now[what]:
            raise ValueError(f"prepare(profile=...): the profile was taken on {what} {value}, here they are "
                             f"{now[what]}; profile these stages on this input (drop profile=), or load the profile "
                             f"taken on them")


def _rebuild(structure, flat):
    if structure == "tensor":
        return flat[0]
    return tuple(flat)


# ---------------------------------------------------------------------------- construction checks
def _extra_modules(modules) -> list[nn.Module]:
    """The ``modules=`` argument as a list of modules (one module is accepted as is)."""
    if modules is None:
        return []
    if isinstance(modules, nn.Module) and not isinstance(modules, nn.ModuleList):
        return [modules]
    if isinstance(modules, (str, bytes)) or not hasattr(modules, "__iter__"):
        raise TypeError(f"modules={modules!r}: give an nn.Module or a list of them (the modules whose parameters and "
                        f"buffers callable stages use)")
    modules = list(modules)
    for i, m in enumerate(modules):
        if not isinstance(m, nn.Module):
            raise TypeError(f"modules[{i}] is a {type(m).__name__}, not an nn.Module: modules= takes the modules "
                            f"whose parameters and buffers callable stages use")
    return modules


def _check_callables(names: list[str], fns: list, visible: list[nn.Module]) -> None:
    """Refuse plain callable stages that use parameters, buffers or tensors requiring grad that the
    wrapper does not register (not in ``visible``: the stage modules and ``modules=``)."""
    for name, fn in zip(names, fns, strict=True):
        if isinstance(fn, nn.Module):
            continue
        hidden = U.hidden_state(fn, visible)
        if hidden:
            raise ValueError(
                f"CheckpointedSequential: stage {name!r} is a plain callable that uses state the wrapper cannot see: "
                f"{'; '.join(hidden)}. Its parameters would be missing from parameters() (an optimizer built from "
                f"it would never update them) and profiling and recomputation would not protect them. Wrap the stage "
                f"in an nn.Module (pass the module itself, or an nn.Sequential of the modules), or pass the modules it "
                f"uses explicitly: CheckpointedSequential(stages, ..., modules=[...]) registers their parameters and "
                f"buffers; a tensor requiring grad must be an nn.Parameter of such a module")


def _offload_setting(offload):
    """The wrapper's ``offload=`` as kept: None, a :class:`~gpusolve.offload.link.Link`, or ``"measure"``
    (the link of the input's CUDA device, measured when its first plan is made)."""
    if offload is None or isinstance(offload, Link):
        return offload
    if isinstance(offload, dict):  # measure_link()'s result, or Link.to_dict()
        return Link.from_dict(offload)
    if isinstance(offload, str):
        if offload.strip().lower() == "measure":
            if not torch.cuda.is_available():
                raise ValueError("offload='measure' measures the host link of a CUDA device, and none is available; "
                                 "give the link's figures instead (offload='12GB/s' or a gpusolve.offload.link.Link)")
            return "measure"
        return Link.parse(offload)
    raise TypeError(f"offload must be None, a gpusolve.offload.link.Link, a rate string such as '12GB/s' or "
                    f"'measure', got {offload!r}")


def check_offload_backend(offload, backend: str) -> None:
    """``offload=`` is solved by the combined DP, whose backends are :data:`OFFLOAD_BACKENDS`: another is
    refused when the wrapper is made (or re-planned), not at the first call, after profiling."""
    if offload is not None and backend not in OFFLOAD_BACKENDS:
        raise ValueError(f"offload= is solved by the combined recompute + offload DP, which has no {backend!r} "
                         f"backend: pass backend='auto' (the default), 'cpu' or 'cuda'")


def _caller_keeps_setting(value) -> str:
    """``caller_keeps``: what of the model's output the caller holds through the backward (Note [The caller
    holds a_N]): "output" (all of it, the default) or "loss" (its scalar loss only)."""
    if value not in ("output", "loss"):
        raise ValueError(f"caller_keeps={value!r}: give 'output' (the training loop may hold the model's output "
                         f"through the backward: the default) or 'loss' (it keeps and back-propagates only the "
                         f"model's scalar loss, e.g. loss = model(**batch).loss; loss.backward())")
    return value


def _budget_setting(budget):
    """The wrapper's budget as kept: None, bytes, or a percentage string resolved per input signature
    (checked now: :func:`gpusolve.units.parse_percentage`)."""
    if budget is None:
        return None
    if parse_percentage(budget, "budget") is not None:
        return budget.strip()
    return parse_budget(budget, None, "budget")  # bytes (a fraction of a byte refused: the one rule)


def kept(value) -> bool:
    """Whether a ``replan`` argument was left as it was (``"keep"``); compared only as a string (a schedule_fn, a
    Link or a dict is never "keep")."""
    return isinstance(value, str) and value == "keep"


def check_schedule_fn(schedule_fn) -> None:
    """A ``schedule_fn`` setting (the wrappers' and their ``replan``'s): a function or None."""
    if schedule_fn is not None and not callable(schedule_fn):
        raise TypeError(f"schedule_fn must be a function chain -> schedule (or None), got {schedule_fn!r}")


# Note [Sizes that vary between calls]
#     Plans are cached per input signature, and a new one is profiled (about 16 plain steps) and solved. A training
#     loop whose batches vary in size (dynamic padding to the longest sequence of each batch, an epoch's last short
#     batch) made a new signature at nearly every step: 40 steps of a 4-layer GPT-2 over 28 distinct lengths took 28
#     profiles, and CheckpointedSequential's loop 24.7 s, 9.6 s with the rule below (8 profiles; auto_checkpoint's
#     block fallback 29.3 -> 13.1 s, its export 45.6 -> 31.7 s, where each signature's export remains; CPU,
#     bench/results/size_reuse_cpu.md). A signature that differs from a planned
#     one only in its tensors' sizes, none larger (the same dtypes, devices, number of dimensions, model state and
#     non-tensor arguments: :func:`torch_exec._util.sizes_cover` over the keys, whose shapes are
#     :class:`torch_exec._util.Sizes`), is planned on that one's profile instead of its own: the same stages run
#     on smaller tensors, every size the profile holds is an upper bound of the new one's, and a schedule's peak only
#     grows with the sizes (sums and maxima of them), so the plan holds the budget; its measured steps are checked
#     as every step is (the memory report compares them with the larger prediction). What the planned signature's
#     steps taught (Note [The caller's turn], Note [Outputs without a gradient]) comes with it, its last measured step
#     recorded first. That holds for stages whose memory shrinks with the sizes, not for a stage that branches on a
#     size (``if x.shape[0] < 16:`` taking a path that saves more): a review's such stage went 2.4 x over its budget at
#     every step (bench/repros/rv22_seq_size_branch_over_budget.py). So a plan made so runs its first step measured
#     on CUDA (the allocator's counters: free; on the CPU where ``measure_memory`` asks), and a measured step of it over
#     the budget (:func:`reuse_failed`) learns nothing of the caller's turn: its signature is profiled at the next
#     call, and every signature of the wrapper (and of auto_checkpoint's siblings) from then on, with a warning. That
#     one step stays over its budget. The price is time:
#     the plan recomputes as the larger sizes needed, which smaller ones might not. So the planned signature serves
#     only where its tensors hold at most ``reuse_within`` (default :data:`REUSE_WITHIN`) times the new one's
#     elements, the closest such one; further off, or larger, the new signature is profiled (and may serve others
#     from then on). A percentage budget is the planned signature's in bytes (one memory envelope for the model, as
#     :meth:`_PlannedModule._percent_ceiling` has it). auto_checkpoint's captures (one per model call signature) reuse
#     a sibling's profile where the model's call signature is covered as well (the masks and position ids beside
#     the chain's input are smaller too) and the exported stages carry the same names: a new export is cut where
#     the covering one was (``AutoCheckpointed._cover_cuts``; cuts spread over the bytes each operation allocates
#     moved with the sizes, and an encoder-decoder whose two lengths shrank unevenly was cut elsewhere and profiled,
#     review rv22c). The capture itself (export) is still made per signature, and the block fallback meters a
#     covered capture's first step from the model's call (:meth:`_PlannedModule._may_reuse`). ``reuse_within=None``
#     profiles every signature, as before.
REUSE_WITHIN = 2.0


def check_settings(schedule_fn, profile_passes, profile_warmup, preserve_rng_state, measure_steps,
                   profile_isolated=None, network=None) -> None:
    """The wrappers' other settings, checked when the wrapper is made (they failed at the first call, after
    profiling, naming none of them, or were taken with another meaning: a review, 2026-11-27); auto_checkpoint checks
    the ones it passes on so too (:func:`check_sequential_settings`; it checked them at its first capture: review
    rv19)."""
    check_schedule_fn(schedule_fn)
    if network is not None and not isinstance(network, str):
        raise TypeError(f"network must be a name (str) for the profile, or None, got {network!r}")
    check_flag(profile_isolated, "profile_isolated", none="one stage at a time only where the whole step runs out "
               "of memory")
    for name, value, least in (("profile_passes", profile_passes, 1), ("profile_warmup", profile_warmup, 0),
                               ("measure_steps", measure_steps, 0)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
            raise ValueError(f"{name} must be a whole number >= {least}, got {value!r}")
    if not isinstance(preserve_rng_state, (bool, np.bool_)):
        raise TypeError(f"preserve_rng_state must be True or False, got {preserve_rng_state!r}")


def check_sequential_settings(backend: str, *, offload=None, modules=(), caller_keeps: str = "output",
                              reuse_within=REUSE_WITHIN, **settings) -> None:
    """Every keyword setting of :class:`CheckpointedSequential` but its budget and bucket, checked as its constructor
    checks them, for auto_checkpoint to check those it passes on before any capture (``offload='bogus'``,
    ``modules=3`` or ``network=5`` failed at the first call, after capture and profiling: a review, rv20)."""
    check_settings(**settings)
    _caller_keeps_setting(caller_keeps)
    _reuse_setting(reuse_within)
    _extra_modules(modules)
    check_offload_backend(_offload_setting(offload), _backend_setting(backend))


def _reuse_setting(reuse_within) -> float | None:
    """``reuse_within`` (Note [Sizes that vary between calls]): None, or a number >= 1, checked when the wrapper is
    made."""
    if reuse_within is None:
        return None
    if isinstance(reuse_within, bool) or not isinstance(reuse_within, numbers.Real) or not (
            1 <= float(reuse_within) < math.inf):
        raise ValueError(f"reuse_within must be a number >= 1 (how many times as many elements a planned input "
                         f"signature's tensors may hold as a new one's whose plan it serves; 1: equal sizes only) or "
                         f"None (every input signature profiled), got {reuse_within!r}")
    return float(reuse_within)


def _sizes_text(key) -> str:
    """The tensor sizes in an input signature's key (:class:`torch_exec._util.Sizes`), for a note."""
    found: list = []

    def walk(part):
        if isinstance(part, U.Sizes):
            found.append(list(part))
        elif type(part) is tuple:
            for item in part:
                walk(item)
    walk(key)
    return ", ".join(map(str, found)) or "()"


def _backend_setting(backend, backends=BACKENDS) -> str:
    """The solver backend, checked now (not at the first call, after profiling)."""
    if not isinstance(backend, str) or backend not in backends:
        raise ValueError(f"backend {backend!r} is not one of {', '.join(map(repr, backends))} ('auto': CUDA where "
                         f"CuPy sees a device, else the CPU)")
    return backend


# The remedy _merged_hint names: the stages' cuts are the caller's (CheckpointedSequential), or auto_checkpoint's,
# which sets its executors' ``cut_remedy`` (telling its user to wrap the model with auto_checkpoint told them what
# they had done: bench/repros/rv10_auto_infeasible_hint_wrap_again.py).
CUT_REMEDY = ("Cut the stages where an op saves its input (after a Linear or a LayerNorm, not before a dropout or an "
              "addition), or wrap the model with auto_checkpoint, which chooses its cuts")


def _merged_hint(chain: Chain, least: int, remedy: str = CUT_REMEDY) -> str:
    """What an infeasible budget's error adds where nothing below the store-all peak fits (``least``) and the
    profile's stages were merged because no backward saves the tensor between them (Note [Tensors no backward
    saves] in gpusolve/chain.py): those boundaries are no checkpoints, and the ``remedy`` (a review: blocks that
    begin with a dropout read 100 % as their least)."""
    unsaved = int(chain.provenance.get("merged_unsaved", 0))
    if unsaved <= 0 or least < store_all_peak_bytes(chain):
        return ""
    return (f"; {chain.stages_text()}: a boundary where no backward saves the tensor is merged into the stage "
            f"before it and cannot be a checkpoint (Note [Tensors no backward saves] in gpusolve/chain.py). {remedy}")


def _needs_at_least(err: InfeasibleBudgetError, budget: str, peak: int) -> str:
    """What an infeasible percentage budget's error adds: the peak it is a percentage of and the least
    percentage this input needs (:func:`gpusolve.units.percent_hint`)."""
    return percent_hint(budget, err.min_bytes, peak, "plain autograd's peak", "this input")


# ---------------------------------------------------------------------------- the modules
class _PlannedModule(nn.Module):
    """What :class:`CheckpointedSequential` and :class:`torch_exec.join.CheckpointedJoin` share: the
    solver settings, the plans cached per input signature (``_key``, ``_build`` and ``_plan_entry``
    are the subclass's), re-solving them, and the budget as ``extra_repr`` shows it."""

    OWN_SCALARS_UNKEYED = True  # its settings are no part of an input signature (U.scalar_attributes)
    reuse_within = None  # Note [Sizes that vary between calls]: CheckpointedSequential's setting (a join: none)

    def _set_solver(self, budget, bucket, backend, profile_passes, profile_warmup, schedule_fn, preserve_rng_state,
                    network, measure_steps: int, profile_isolated: bool | None = None, backends=BACKENDS) -> None:
        check_settings(schedule_fn, profile_passes, profile_warmup, preserve_rng_state, measure_steps, profile_isolated,
                       network)
        self.budget = _budget_setting(budget)
        self._meter = StepMeter(cuda_steps=measure_steps)
        self._measure_steps = measure_steps
        # Bytes the caller holds through each step beside the stages, made before the step (its meter
        # does not see them: each measured step adds them, StepRecord.held_before) and counted in every
        # plan as reserved: auto_checkpoint's side values, and the model's code before its blocks.
        self.held_bytes = 0
        # Bytes the code around the stages adds during the step (its meter sees them), counted in every
        # plan as reserved: the model's code after its blocks (Note [The rest of the model] in auto.py).
        self.beside_bytes = 0
        # The least bytes the step reaches outside the stages' part of it (auto_checkpoint's block fallback:
        # the model's code before the blocks, forward and backward; its prologue: a frozen encoder, Note [Side
        # values nothing reads]): no budget below it is planned for.
        self.floor_bytes = 0
        self.bucket = parse_bucket(bucket)
        self.backend = _backend_setting(backend, backends)
        self.profile_passes = profile_passes
        self.profile_warmup = profile_warmup
        self.profile_isolated = profile_isolated  # Note [Profiling stage by stage] in torch_exec/profiler.py
        self.schedule_fn = schedule_fn
        self.preserve_rng_state = preserve_rng_state
        self.network = network
        self._entries: dict = {}
        self._last = None
        self.siblings: list = []  # wrappers of the same model for other input signatures (auto_checkpoint's)
        # auto_checkpoint's key of the model's call this wrapper runs (None: its own calls): a sibling's profile
        # serves this wrapper only where that key covers this one (Note [Sizes that vary between calls])
        self.signature = None
        self.call_data: U.CallData | None = None  # what the stages read per call (Note [Data bound to a call])
        # auto_checkpoint keys its captures by the model's whole state (training modes, frozen parameters,
        # dtypes and devices: captured_state_key), each capture with its own wrapper; that wrapper's own key
        # then leaves the modules' state out (a second walk of every module, about 0.4 ms a call on GPT-2)
        self.state_keyed_outside = False
        # set by auto_checkpoint: the parameters whose gradients a step makes, the whole model's (a callable; None:
        # this wrapper's own: Note [The step's parameters]), and the remedy an unsaved boundary's error names
        # (_merged_hint: its cuts are the capture's, not the caller's)
        self.step_params = None
        self.cut_remedy = CUT_REMEDY

    def _state_key(self, walked: list | None = None):
        """The modules' part of an input signature (``module_state_key``), unless the owner keys it; ``walked``
        gets the trainable parameters met (Note [One walk of the model per call])."""
        return None if self.state_keyed_outside else U.module_state_key(self, walked)

    def _walk(self) -> list | None:
        """A list for a call's input signature to fill with the trainable parameters (:meth:`_state_key`),
        or None where the owner keys the state (Note [One walk of the model per call])."""
        return None if self.state_keyed_outside else []

    def _parameter_tap(self, walked: list | None = None) -> tuple:
        """``(tap, (box, params, tap node))`` for a step's Function: :class:`_ParamTap`'s output over the
        wrapper's routed parameters, so that a call naming them reaches the step's backward, which hands
        their gradients to the box (Note [Autograd calls that name tensors]); without such parameters an
        empty leaf requiring grad, which makes the backward run even when no input needs a gradient.
        ``walked``: the trainable parameters this call's input signature found (Note [One walk of the model
        per call])."""
        ddp = _ddp_forward()
        params = _tap_params(self, ddp, walked)
        if not params:
            return torch.empty(0, requires_grad=True), (None, [], None, None)
        box: list = []
        tap = _ParamTap.apply(box, *params)
        # inside DDP's forward (find_unused_parameters=True) the hooks stay in the segments: DDP's own hook on the
        # accumulator counts the calls (Note [Hooks of routed parameters])
        readers = _HOOK_READERS.setdefault(self, {}) if ddp is None else None
        return tap, (box, params, tap.grad_fn, readers)

    def _reserved_beside(self) -> int:
        """What every plan reserves for the memory beside the stages: ``held_bytes`` + ``beside_bytes``."""
        return int(self.held_bytes) + int(self.beside_bytes)

    @property
    def plan(self):
        """The plan of the latest call (or :meth:`prepare`); None under plain autograd (``budget=None``), where
        no plan runs (a review: the plan from before ``replan(None)`` was shown, which no step ran)."""
        return None if self._last is None or self._runs_plain() else self._last.plan

    @property
    def last_profile(self) -> dict | None:
        """The measured profile (``measured-chain/1``) the latest input signature was planned from, as
        :func:`torch_exec.profile_dict` makes it; None before the first call or :meth:`prepare`. Save it with
        :func:`torch_exec.save_profile` for :meth:`prepare` (``profile=``) on another process, or for the command
        line (``gpusolve solve|compare|curve PATH``)."""
        return None if self._last is None else self._last.profile

    @property
    def plans(self) -> dict:
        """Cached plans by input signature (none under plain autograd, ``budget=None``)."""
        return {} if self._runs_plain() else {key: entry.plan for key, entry in self._entries.items()
                                               if entry.plan is not None}

    def _runs_plain(self) -> bool:
        """Whether every step runs as plain autograd, without a plan (``budget=None`` and no ``schedule_fn``)."""
        return self.budget is None and self.schedule_fn is None

    @U.without_caches  # profiling too (Note [Autocast's cache])
    def _entry(self, inputs, walked: list | None = None):
        """The input signature's entry, profiled (``_build``) and planned (``_plan_entry``) on first use. A
        plan that fails keeps the profile and makes the signature the latest (Note [A failed plan keeps
        its profile]). ``walked``: :meth:`_state_key`'s."""
        key = self._key(inputs, walked)
        entry = self._entries.get(key)
        if entry is None or entry.plan is None:  # profiling and solving run their own meters
            self._meter.withdraw()  # Note [A step measured from the model's call] in torch_exec/auto.py
        cover = None
        if entry is None:
            cover = self._size_cover(key)  # Note [Sizes that vary between calls]
            if cover is not None:  # what the cover's last measured step showed comes with it
                for module in [self, *self.siblings]:
                    if any(e is cover[2] for e in module._entries.values()):
                        module._meter.record_ended()
                        cover = self._size_cover(key)  # (a step over its budget may have ended the reuse)
                        break
            if cover is not None and self._measure_steps:  # its first step is measured where that is free
                self._meter.cuda_steps = max(self._meter.cuda_steps, 1)
            entry = self._entries[key] = self._build(inputs) if cover is None else self._build_covered(inputs, *cover)
            if self.reuse_within is not None:
                _profiled_on(entry, key if cover is None else cover[2].sizes_key)
        if entry.plan is None:
            self._last = entry  # min_budget_bytes names this signature's least if the plan fails
            entry = self._last = self._entries[key] = self._plan_entry(entry)
        return entry

    def _size_cover(self, key) -> tuple | None:
        """Note [Sizes that vary between calls]: ``(ratio, its key, entry)`` of the planned input signature, of this
        wrapper or of a sibling whose model signature covers this one's (auto_checkpoint's), whose key covers ``key``
        with the fewest elements, at most :attr:`reuse_within` times this one's; None where there is none."""
        if self._reuse_stopped():
            return None

        def serves(module) -> bool:  # a join serves none (its entries are no chain's)
            return module is self or (self.signature is not None and module.signature is not None
                                      and module.reuse_within is not None
                                      and U.sizes_cover(module.signature, self.signature) is not None)
        names = list(self.names)
        return U.closest_cover(((entry.sizes_key, entry)  # against the sizes its profile holds
                                for module in [self, *self.siblings] if serves(module)
                                for entry in module._entries.values()
                                if entry.plan is not None and entry.sizes_key is not None
                                and [s["name"] for s in entry.profile["stages"]] == names), key, self.reuse_within)

    def _reuse_stopped(self) -> bool:
        """Whether no signature is planned on another's profile (``reuse_within=None``, or a plan so made went over its
        budget here or at a sibling: :func:`reuse_failed`, :meth:`_stop_reuse`)."""
        return self.reuse_within is None or any(module.__dict__.get("_reuse_off") or any(
            getattr(e, "reuse_failed", False) for e in module._entries.values()) for module in [self, *self.siblings])

    def _may_reuse(self) -> bool:
        """Note [Sizes that vary between calls]: whether this wrapper, with no signature yet, will likely plan its first
        call on a sibling's profile (auto_checkpoint's captures: the model's call signature covered within
        :attr:`reuse_within` by a planned sibling's), so that the call profiles nothing and its step may be metered
        from the model's call (a guess: a call that profiles after all withdraws that meter, as any call that
        profiles does; unguessed, the block fallback measured no such step, a review: bench/repros/
        rv22c_hf_blocks_covered_step_unmeasured.py)."""
        if self._entries or self.signature is None or self._reuse_stopped():
            return False
        planned = ((module.signature, module) for module in self.siblings
                   if module.signature is not None and module._has_plan())
        return U.closest_cover(planned, self.signature, self.reuse_within) is not None

    def _stop_reuse(self) -> None:
        """Note [Sizes that vary between calls], :func:`reuse_failed`: no signature of this wrapper or its siblings is
        planned on another's profile from now on, and those that were are profiled at their next call."""
        for module in [self, *self.siblings]:
            module._reuse_off = True
            for key, entry in list(module._entries.items()):
                if entry.covered_note:
                    del module._entries[key]

    def _build_covered(self, inputs, ratio: float, key, cover):
        """The entry of ``inputs`` built on the profile of the signature ``key`` (Note [Sizes that vary between calls]):
        ``cover``'s entry, with what its steps taught (Note [The caller's turn], Note [Outputs without a gradient]),
        or that profile given to :meth:`prepare`."""
        entry = self._build(inputs, cover if isinstance(cover, dict) else cover.profile)
        for face in faces_of(entry):
            if not isinstance(cover, dict):
                _copy_learned(cover, face)
                face.exec_chain = with_learned_outputs(face)
            face.covered_note = (f"planned on the profile of the input signature with sizes {_sizes_text(key)} (its "
                                 f"tensors hold {ratio:.2f} x these elements, within reuse_within="
                                 f"{self.reuse_within:g}): no profile was taken for these sizes, and the plan holds "
                                 f"the budget for those (Note [Sizes that vary between calls] in "
                                 f"torch_exec/executor.py)")
        return entry

    def _has_plan(self) -> bool:
        """Whether some input signature of this wrapper has a plan."""
        return any(entry.plan is not None for entry in self._entries.values())

    def _unsettled(self) -> bool:
        """Whether a call may still profile or plan: no signature cached, or one without a plan."""
        return not self._entries or any(entry.plan is None for entry in self._entries.values())

    def replan(self, budget="keep", schedule_fn="keep", profile: bool = False) -> None:
        """Change the budget and/or ``schedule_fn`` and re-solve every cached input signature from its
        profile (a percentage budget such as ``"35%"`` is resolved again for each signature against its
        measured plain autograd peak). ``budget=None`` switches to plain autograd. ``profile=True``
        drops the profiles: the next call with each input signature profiles again."""
        with self._all_or_nothing():
            if budget != "keep":
                self.budget = _budget_setting(budget)
            if not kept(schedule_fn):
                check_schedule_fn(schedule_fn)
                self.schedule_fn = schedule_fn
            if profile:
                for entry in self._entries.values():  # the faces refer to each other (Entry.regrouped)
                    if getattr(entry, "regrouped", None) is not None:
                        entry.regrouped.regrouped = entry.regrouped = None
                self._entries.clear()
                self._last = None
                return
            self._replan_all()

    @contextlib.contextmanager
    def _all_or_nothing(self):
        """A re-plan that raises (a budget below a signature's least) leaves the module as it was: its settings
        and every cached signature's plan, not some re-planned under a budget it then refuses."""
        settings = {name: getattr(self, name) for name in ("budget", "schedule_fn", "offload") if hasattr(self, name)}
        entries, last = dict(self._entries), self._last
        # each signature's faces: a re-plan plans both (Note [Two groupings of unsaved boundaries]); a join's branch
        # entries too, whose stages' recomputed flags its plan sets (a review, 2026-11-28: the flags of a refused
        # plan beside the old one's program left a recomputed dropout without its RNG state: wrong gradients,
        # bench/repros/rv9_join_refused_replan_keeps_new_recompute_flags.py)
        faces = [face for entry in entries.values() for face in faces_of(entry)]
        faces += [branch for face in faces for branch in getattr(face, "branches", ()) if hasattr(branch, "__dict__")
                  and not isinstance(branch, types.SimpleNamespace)]
        states = [(face, dict(vars(face))) for face in faces]
        try:
            yield
        except BaseException:
            for name, value in settings.items():
                setattr(self, name, value)
            self._entries, self._last = entries, last
            for face, state in states:
                vars(face).clear()
                vars(face).update(state)
            raise

    def _replan_all(self) -> None:
        """Re-solve every cached signature from its profiles (nothing to do under plain autograd). A signature
        whose plan failed is tried too and stays without a plan where it still does not fit (Note [A failed
        plan keeps its profile])."""
        if self._runs_plain():
            return
        for key, entry in list(self._entries.items()):
            planned = entry.plan is not None
            try:
                # sets entry.plan last: one that fails leaves it as it was; the face that runs is the signature's
                self._entries[key] = self._plan_entry(entry)
                if self._last is entry:
                    self._last = self._entries[key]
            except InfeasibleBudgetError:
                if planned:
                    raise

    def measure_memory(self, steps: int = 1) -> None:
        """Measure the peak memory of the next ``steps`` steps (forward to the end of backward) with
        the device's allocator: counters on CUDA (the first 3 steps are measured anyway, see
        ``measure_steps``), allocator events on the CPU (the step runs slower while measured). Under
        ``budget=None`` the steps are plain autograd's and are not measured: say so (it armed silently)."""
        if self._runs_plain():
            warnings.warn(f"{type(self).__name__}.measure_memory(): budget=None runs plain autograd, whose steps "
                          f"are not measured; measure them with torch_exec.measure_peak, or set a budget",
                          stacklevel=2)
            return
        self._meter.arm(steps)

    def memory_report(self):
        """Every measured step: budget, predicted and measured peak, parameter gradients allocated in
        the step, whether it held the budget (a :class:`torch_exec.report.MemoryReport`; print it)."""
        return self._meter.records

    def _begin_step(self, entry, device) -> bool:
        """A step's start: its measurement begins when one is due (:meth:`measure_memory`); whether the
        entry's plan runs as plain autograd (``entry.plain``: then :meth:`_plain_step` runs it)."""
        # a call while an earlier call's step waits for its backward joins its measurement, also one of another
        # input signature of the same model (auto_checkpoint's siblings); one whose step went without a backward
        # (its graph dropped) does not (Note [Calls before one backward] in report.py; a plain step leaves no
        # runtime: it joins)
        # each signature's faces: a step in flight keeps the one its forward ran (Note [Two groupings of unsaved boundaries])
        entries = {id(f) for module in [self, *self.siblings] for e in module._entries.values() for f in faces_of(e)}
        joins = entry.plain or any(id(rt.entry) in entries for rt in list(IN_FLIGHT))
        for sibling in self.siblings:  # another input signature's step (auto_checkpoint) waits and is measured
            if joins and sibling._meter.measuring:
                sibling._meter.join_call()
                return entry.plain
        # Note [The step's parameters]: the gradients a step makes are those of the parameters its code reads, which
        # for auto_checkpoint's block fallback include the rest of the model's (its head, its embedding): the meter,
        # given the stages' only, counted the rest's gradients as activations and reported a plain step at "100%"
        # 45 % over its budget (bench/repros/rv10_auto_blocks_rest_grads_as_activations.py). auto_checkpoint gives its
        # executors the model's (``step_params``: a bound method, no reference to the model as a module)
        self._meter.begin(device, (self.step_params or self.parameters)(), entry.plan,
                          None if self.budget is None else entry.plan.budget_bytes, entry.plain, entry.held_bytes,
                          join=joins)
        return entry.plain

    def _plain_step(self, run, learn=None):
        """A step as plain autograd (``run()``): a measured one ends with the backward that reaches its output,
        and ``learn(short)`` is told what it measured above its prediction where it went over the budget
        (:func:`learn_plain_step`). A wrapper among its stages runs plainly too (Note [A wrapper inside another's
        step])."""
        with a_wrapper_step():
            out = run()
        if self._meter.measuring:
            if learn is not None:
                self._meter.plain_turn(learn)
            self._meter.end_with_backward_of([t for t in tree_leaves(out) if isinstance(t, torch.Tensor)])
        return out

    def _percent_ceiling(self, entry, least: int) -> int | None:
        """A percentage resolves per input signature,
        and a smaller batch (the last of an epoch) can need a larger share of its own plain peak than
        the budget gives. Where another signature of this wrapper already resolved to a byte budget at
        or above this one's least, the step runs within that largest budget (the memory the training
        already uses) instead of raising mid-epoch; a FallbackWarning and the plan's notes say so
        (:meth:`_below_least`). None:
        not a percentage, or no such budget (the error stands)."""
        if not isinstance(self.budget, str):
            return None
        entries = [e for module in [self, *self.siblings] for e in module._entries.values()]
        mine = faces_of(entry)  # this signature's (Note [Two groupings of unsaved boundaries])
        budgets = [e.plan.budget_bytes for e in entries
                   if all(e is not face for face in mine) and e.plan is not None and e.plan.budget_bytes is not None]
        ceiling = max(budgets, default=None)
        return ceiling if ceiling is not None and ceiling >= least else None

    def _below_least(self, entry, budget: int, least: int, ceiling: int) -> str:
        """The warning (and plan note) of a step planned within ``ceiling`` (:meth:`_percent_ceiling`)."""
        message = (f"budget {self.budget} of this input signature's plain autograd peak is {budget} B, below its "
                   f"least budget {least} B; planned within {ceiling} B, the largest budget another input "
                   f"signature of this wrapper resolved to")
        warnings.warn(f"{type(self).__name__}: {message}", FallbackWarning, stacklevel=6)
        return message

    def _budget_repr(self) -> str:
        if self.budget is None:
            return "None (plain autograd)"
        if isinstance(self.budget, str):
            return f"{self.budget} of plain autograd's peak"
        return format_bytes(self.budget)


class CheckpointedSequential(_PlannedModule):
    """A sequence of stages trained under a memory budget with gpusolve's optimal checkpointing.

    ``stages``: an ``nn.Sequential`` or a list of modules/callables; the state between stages is a
    tensor or a tuple of tensors (call the module with the tensor, the tuple, or its elements).
    ``budget``: bytes (int), a string like ``"6GiB"``, or a percentage such as ``"50%"`` of plain
    autograd's step peak, resolved per input signature against the peak measured when profiling it
    (``plan.budget_bytes`` is the resolved budget; above 0 and at most 100 %). It counts everything but
    the input (the checkpoints, tapes, gradients of activations and workspace). ``None`` runs plain
    autograd. ``bucket``/``backend`` are passed to :func:`gpusolve.solve`.

    ``offload``: plans may also move held checkpoints to host memory while later stages run (the
    combined recompute + offload DP, :func:`gpusolve.offload.solver.solve_offload`, on the CPU or CUDA backend;
    spec ``offload.md`` B.4.1), over this host link: a :class:`gpusolve.offload.link.Link`, a rate string
    such as ``"12GB/s"`` (both directions), or ``"measure"`` (:func:`torch_exec.offload.measure_link` on
    the input's CUDA device, once per device). Host buffers are pinned once per plan and a copy stream
    overlaps the copies with compute (:mod:`torch_exec.offload`). It only makes sense on CUDA; on the CPU
    the plan runs (the copies are plain CPU tensors: a test path, nothing is saved) and ``"measure"``
    raises. ``schedule_fn`` may return policies with ``Swap`` nodes when ``offload`` is given.

    ``caller_keeps``: what of the model's output the training loop holds through the backward.
    ``"output"`` (the default): possibly all of it (``out = model(x); loss = f(out); loss.backward()``),
    so the plans reserve it for the whole step. ``"loss"``: only the model's scalar loss, which is also
    all it back-propagates (``loss = model(x)[0]; loss.backward()``; transformers' ``Trainer``): the plans
    reserve nothing for the rest of the output nor for its gradient, and a backward that ends with more
    of the output alive warns and has it counted (Note [The caller holds a_N]).

    ``profile_isolated``: profile the stages one at a time (True), which needs about one stage's memory
    instead of plain autograd's step; the whole step (False); or the whole step and, where it runs out
    of CUDA memory, one stage at a time (None, the default; a :class:`gpusolve.FallbackWarning` says
    so). Without a measured plain step, percentages are of the model's store-all peak (Note [Profiling
    stage by stage] in torch_exec/profiler.py).

    A stage that is a plain callable (not an ``nn.Module``) must not use parameters the wrapper cannot
    see: a callable reaching a module with parameters or buffers, or a tensor requiring grad, through its
    closure, defaults, ``functools.partial`` arguments, bound ``__self__`` or the globals it names is
    refused (its parameters would be missing from :meth:`parameters`, so no optimizer would update them,
    and profiling would not protect their gradients). Wrap it in an ``nn.Module``, or pass the modules
    it uses as ``modules=[...]``: the wrapper registers them (their parameters and buffers appear in
    ``parameters()``/``buffers()``, under the state_dict keys ``extra_modules.<i>.<name>`` with ``i``
    the module's position in the list; a module that is also a stage appears under both keys, like a
    tied weight), profiles them and protects their state. Plain callables without such state
    (``torch.relu``, ``lambda x: x.flatten(1)``) need nothing.

    The first call with a new input shape/dtype/device profiles the stages and solves (or call
    :meth:`prepare`); plans are cached per input signature. ``reuse_within``: an input whose tensors are no
    larger in any size than a planned signature's, which hold at most this many times its elements (default
    2), is planned on that signature's profile instead of being profiled (batches of varying length; Note [Sizes
    that vary between calls]); None profiles every signature. Profiling and solving leave parameters,
    buffers, gradients and RNG state as they were. ``schedule_fn(chain) -> schedule or policy`` replaces
    the solver (baselines, tests).
    """

    # Note [Planning to the exact peak] in gpusolve/exact_peak.py: a recompute-only plan is solved so that its
    # storage-exact peak fits the budget (False: the model's peak fits it, as before; an instance may set it)
    plan_exact_peak = True
    # Note [Planning to the exact peak]: whether every stage runs one graph on every call (auto_checkpoint's exported
    # stages), so that what the profile saw a stage drop, and checked freed (Note [Drops measured] in
    # torch_exec/profiler.py), it drops on every call: only then does planning free it. Python modules may read a
    # tuple's tensor on some calls only (a random route, a data-dependent branch): their drops are counted held.
    static_stages = False

    def __init__(self, stages, budget="6GiB", bucket=None, backend: str = "auto", *, profile_passes: int = 3,
                 profile_warmup: int = 1, schedule_fn=None, preserve_rng_state: bool = True, network: str | None = None,
                 measure_steps: int = 3, modules=(), offload=None, caller_keeps: str = "output",
                 profile_isolated: bool | None = None, reuse_within: float | None = REUSE_WITHIN):
        super().__init__()
        self.caller_keeps = _caller_keeps_setting(caller_keeps)
        self.reuse_within = _reuse_setting(reuse_within)
        self.names, fns = U.stage_list(stages)
        extras = _extra_modules(modules)
        module_stages = [f for f in fns if isinstance(f, nn.Module)]
        self._shares_sequential = isinstance(stages, nn.Sequential) and not extras
        # a Sequential's own module dict is what a user edits, also where modules= makes the wrapper register its
        # stages as a list (Note [Stages replaced after wrapping]; review rv20r: a new head not followed). Kept in
        # __dict__: registered, the Sequential would be a second name for every stage in state_dict()
        self.__dict__["_source"] = stages if isinstance(stages, nn.Sequential) else None
        if self._shares_sequential:  # Note [A Sequential's own names]
            for name in ("_parameters", "_buffers", "_modules", "_non_persistent_buffers_set"):
                self.__dict__[name] = getattr(stages, name)
        else:
            self._modules["stages"] = nn.ModuleList(module_stages)
        if extras:  # registered only when given: no empty entry in the module tree otherwise
            self.extra_modules = nn.ModuleList(extras)
        _check_callables(self.names, fns, module_stages + extras)
        self._fns = fns  # the callables, in order (modules are also registered above)
        self._registered = self._stage_modules()  # Note [Stages replaced after wrapping]
        self._set_solver(budget, bucket, backend, profile_passes, profile_warmup, schedule_fn, preserve_rng_state,
                         network, measure_steps, profile_isolated)
        self.offload = _offload_setting(offload)
        check_offload_backend(self.offload, self.backend)
        self._measured_links: dict = {}  # str(device) -> Link measured for offload="measure"
        # Bytes the caller's code adds right after the forward, above what the stages hold then, until the
        # backward reaches the output: counted at the end of stage N's forward (auto_checkpoint's block
        # fallback: the model after its blocks, Note [The rest of the model] in torch_exec/auto.py).
        self.turn_bytes = 0

    # ------------------------------------------------------------ plans
    @property
    def chain(self) -> Chain | None:
        return None if self._last is None else self._last.chain

    @property
    def min_budget_bytes(self) -> int | None:
        """The least budget under which this wrapper can run the latest input signature (bytes)."""
        if self._last is None:
            return None
        # Note [Two groupings of unsaved boundaries]: a given schedule is over the profile's own grouping
        faces = faces_of(self._last) if self.schedule_fn is None else (merged_face(self._last),)
        # what the measured steps showed and a re-plan that failed has not applied yet counts (the error named a least
        # above the one given here: a review, rv22b)
        model = min(max(least_budget_bytes(learned_chain(face, face.out_grads, face.out_dropped)[0] if face.replan_due
                                           else face.exec_chain, self._last.link), face.floor_bytes) for face in faces)
        plain = plain_least_bytes(self._last)
        return model if plain is None else min(model, plain)

    def prepare(self, *sample_input, profile: dict | None = None) -> Plan:
        """Profile and solve for inputs like ``sample_input`` now (otherwise the first call does it).

        ``profile``: a ``measured-chain/1`` dict of these stages (e.g. from :func:`torch_exec.profile_dict`
        or a saved file) to use instead of profiling; its stage names must be this module's.
        """
        self._follow_replaced_stages()  # Note [Stages replaced after wrapping]
        state = sample_input[0] if len(sample_input) == 1 else tuple(sample_input)
        U.refuse_inference_mode("CheckpointedSequential")
        if profile is not None:
            profile = _profile_argument(profile)
            _check_profile_names([stage["name"] for stage in profile["stages"]], self.names)
            key = self._key(state)
            covered = self._profile_covers(profile, key)  # Note [Sizes that vary between calls]
            _check_profile_input(profile, state, param_bytes_of(U.stage_state(self._fns, self._extras)),
                                 shapes=covered is None)
            entry = self._build(state, profile) if covered is None else self._build_covered(state, *covered, profile)
            self._entries[key] = _profiled_on(entry, key if covered is None else covered[1])
        entry = self._entry(state)
        self._last = entry
        return entry.plan

    def _key(self, state, walked: list | None = None):
        return (tuple((U.Sizes(t.shape), t.dtype, t.device, t.requires_grad) for t in U.tensors(state)),
                isinstance(state, torch.Tensor), self._state_key(walked), U.autocast_key())

    def _profile_covers(self, profile: dict, key) -> tuple | None:
        """``(ratio, key)`` where a given profile was taken on other input sizes than ``key``'s that cover them within
        :attr:`reuse_within` (a covered signature's ``last_profile``: Note [Sizes that vary between calls]): the key
        :meth:`_key` makes of those sizes, and how many times these elements they hold; else None."""
        shapes = (profile.get("args") or {}).get("input_shapes")
        if self.reuse_within is None or not shapes or len(shapes) != len(key[0]):
            return None
        big = (tuple((U.Sizes(shape), *rest) for shape, (_, *rest) in zip(shapes, key[0])), *key[1:])
        ratio = U.sizes_cover(big, key)
        return None if ratio is None or big == key or ratio > self.reuse_within else (ratio, big)

    def _build(self, state, data: dict | None = None, merge_unsaved: bool = True, regroup: bool = True) -> Entry:
        """The entry of an input signature (profiled on ``state`` unless ``data`` is its profile). ``regroup``: with
        boundaries no backward saves, also the face that keeps them (Note [Two groupings of unsaved boundaries];
        a join plans its branches over the profile's own grouping: False)."""
        sample = U.make_leaf(state, [t.requires_grad for t in U.tensors(state)])
        if data is None:
            U.refuse_meta("CheckpointedSequential", state, self)
            with _standin_params([self]):  # Note [DistributedDataParallel]
                data = profile_dict(list(self._fns), sample, passes=self.profile_passes,
                                    warmup=self.profile_warmup, network=self.network, names=self.names,
                                    modules=self._extras, loss_only=self.caller_keeps == "loss",
                                    isolated=self.profile_isolated)
        # Map the fused stages' member names back to the callables.
        chain = chain_from_profile(data, merge_unsaved=merge_unsaved)
        if self._reserved_beside():  # beside the stages through the whole step: reserved (budget and plans count it)
            chain = replace(chain, reserved_bytes=chain.reserved_bytes + self._reserved_beside())
        turn_peak = 0
        if self.turn_bytes:  # after FWD_TAPE(N), the last op of the forward (a transient of it)
            turn_peak = turn_peak_bytes(chain, self.turn_bytes)
            chain = with_turn(chain, self.turn_bytes)
        by_name = {stage["name"]: i for i, stage in enumerate(data["stages"])}
        groups, group_modules = [], []
        for members in chain.provenance["members"]:
            idx = [by_name[m] for m in members]
            groups.append([self._fns[i] for i in idx])
            group_modules.append(self._group_modules([self._fns[i] for i in idx]))
        clone_input = clones_input(data["stages"][0])
        rng, rng_bytes = rng_flags(data, chain)
        has_buffers = [False] + [bool(U.buffers_of(mods)) for mods in group_modules]
        writes = [False] + [has and any(data["stages"][by_name[m]].get("buffer_writes", True) for m in members)
                            for has, members in zip(has_buffers[1:], chain.provenance["members"])]
        output = caller_output_bytes(chain, data)
        # recorded and replayed beside torch's (Note [Generators of the model's own] in torch_exec/_util.py)
        sites = U.generator_sites([m for mods in group_modules for m in mods], self._fns)
        generators = sites.found
        chain = with_shared_leaves(chain, groups)
        shared = chain.shared_leaves()
        entry = Entry(profile=data, chain=chain, plan=None, held_bytes=int(self.held_bytes),
                      beside_bytes=int(self.beside_bytes), turn_peak_bytes=turn_peak,
                      floor_bytes=int(self.floor_bytes), groups=groups,
                      breaks=frozenset((None, s) for stages, _, _ in shared for s in stages[1:]),
                      unseen_shared_bytes=sum(2 * nbytes for _, nbytes, summed in shared if not summed),
                      shared_params=U.params_read_by_several(group_modules),
                      state_rg=[None] + [data["stages"][by_name[members[-1]]].get("out_requires_grad")
                                         for members in chain.provenance["members"]],
                      device=U.tensors(state)[0].device,
                      group_modules=group_modules,
                      clone_input=clone_input, split=0, rng=rng, rng_bytes=rng_bytes, has_buffers=has_buffers,
                      buffer_writes=writes, plain_chain=chain,
                      generators=generators, generator_sites=sites,
                      exec_chain=executor_chain(chain, rng, sample, self.preserve_rng_state, group_modules,
                                                output_bytes=output, buffer_writes=writes, generators=generators,
                                                rng_bytes=rng_bytes),
                      # executor_chain reserves every output's gradient, and the whole output
                      grad_reserve=int(chain.grad_bytes[-1]), out_reserve=output,
                      loss_only=self.caller_keeps == "loss")
        facts = data["stages"][-1].get("outputs")
        if facts is not None:
            output_facts_of(entry, facts)
        if entry.loss_only:  # Note [The caller holds a_N]: planned so from the first step
            if facts is None:
                raise ValueError("CheckpointedSequential: caller_keeps='loss' needs a profile that records the model's "
                                 "output (made by this version of torch_exec); profile again: drop the profile= "
                                 "argument, or call replan(profile=True)")
            entry.out_grads, entry.out_dropped = loss_only_uses(entry)
            entry.exec_chain = with_learned_outputs(entry)
        entry.unsaved_kept = not merge_unsaved
        if regroup and merge_unsaved and chain.provenance.get("merged_unsaved", 0) > 0:  # Note [Two groupings of ...]
            entry.regrouped = self._build(state, data, merge_unsaved=False)
            entry.regrouped.regrouped = entry
        return entry

    @property
    def stages(self) -> tuple[nn.Module, ...]:
        """The stages that are modules, in order (registered under ``stages.<i>``, or under the
        Sequential's own names: Note [A Sequential's own names]). A tuple: the stages are fixed when the
        wrapper is made (a ModuleList made here took item assignment and ``append`` and dropped them)."""
        return tuple(f for f in self._fns if isinstance(f, nn.Module))

    @property
    def _extras(self) -> list[nn.Module]:
        """The modules given as ``modules=`` (registered as ``extra_modules``)."""
        return list(self._modules.get("extra_modules") or ())

    def _group_modules(self, fns: list) -> list[nn.Module]:
        """The modules whose buffers a fused stage's re-runs protect: its module members, and for a plain
        callable member the modules it reaches and every ``modules=`` module (which callable uses one
        cannot always be told)."""
        mods = U.modules_of(fns)
        if any(not isinstance(fn, nn.Module) for fn in fns):
            reached = [v for fn in fns for _, v in U.reachable_state(fn) if isinstance(v, nn.Module)]
            mods = U.modules_of(mods + reached + self._extras)
        return mods

    def budget_bytes_for(self, entry: Entry) -> int | None:
        """The byte budget of one input signature (:func:`entry_budget_bytes`)."""
        if self.budget is None:
            return None
        return entry_budget_bytes(self.budget, entry)

    def link_for(self, device) -> Link | None:
        """The host link plans for inputs on ``device`` are made for (``offload=``), or None."""
        if self.offload is None or isinstance(self.offload, Link):
            return self.offload
        device = torch.device(device)
        if device.type != "cuda":
            raise ValueError(f"offload='measure' measures the host link of a CUDA device, but this input is on "
                             f"{device}; give the link's figures instead (offload='12GB/s' or a "
                             f"gpusolve.offload.link.Link)")
        key = str(device)
        if key not in self._measured_links:
            self._measured_links[key] = Link.from_dict(measure_link(device))
        return self._measured_links[key]

    def _solve(self, chain: Chain, budget: int, link: Link | None) -> Plan:
        """The one place that picks the solver: the chain DP, or with a link the combined recompute +
        offload DP (backends "auto", "cpu" and "cuda": ``solve_offload`` refuses "exact" and names them)."""
        progress = U.progress_setting()
        if link is None:
            return solve(chain, budget, bucket=self.bucket, backend=self.backend, progress=progress)
        return solve_offload(chain, budget, link, bucket=self.bucket, backend=self.backend, progress=progress)

    def _solve_above_floor(self, entry: Entry, chain: Chain, budget: int, link: Link | None) -> Plan:
        """:meth:`_solve`, after checking the budget against ``entry.floor_bytes`` (at or above it, the
        solver's least budget is the least). Recomputing only, the plan is solved so that its storage-exact
        peak fits the budget, which it predicts (Note [Planning to the exact peak] in gpusolve/exact_peak.py;
        ``plan_exact_peak = False``: the model's peak, as before)."""
        if budget < entry.floor_bytes:
            least = max(entry.floor_bytes, least_budget_bytes(chain, link))
            raise InfeasibleBudgetError(below_floor_message(budget, entry.floor_bytes, least), least)
        if link is not None or not self.plan_exact_peak:
            return self._solve(chain, budget, link)
        return solve_within(chain, budget, lambda at: self._solve(chain, at, link),
                            breaks={s for _, s in entry.breaks}, free_drops=self.static_stages)

    def _plan_entry(self, entry: Entry) -> Entry:
        """Plan ``entry`` (:meth:`_plan_grouping`) and return it; with a second grouping of its stages, plan both and
        return the face whose plan runs (Note [Two groupings of unsaved boundaries]): the caller keeps it as the
        signature's entry. A budget below a face's least falls back to another signature's budget (a percentage:
        :meth:`_percent_ceiling`) only where neither face fits its own. Raises where neither fits, naming the
        lesser least budget; a face that fails keeps its plan as it was."""
        merged = merged_face(entry)
        kept = merged.regrouped
        if kept is None or self.schedule_fn is not None:  # a given schedule is over the profile's own grouping
            self._plan_grouping(merged)
            return merged
        _share_learned(entry)
        kept.exec_chain, kept.replan_due = with_learned_outputs(kept), False  # what the backwards so far showed of a_N
        merged.exec_chain, merged.replan_due = with_learned_outputs(merged), False
        return plan_faces(merged, kept, lambda face, fallback: self._plan_grouping(face, fallback=fallback))

    def _plan_grouping(self, entry: Entry, fallback: bool = True) -> None:
        """Plan one face of a signature's entry. ``fallback``: a percentage budget below its least may fall back to
        another signature's budget (:meth:`_percent_ceiling`)."""
        plain = entry.plain_chain
        chain = entry.exec_chain
        budget = resolved = self.budget_bytes_for(entry)
        # plain autograd's measured peak in the caller's loop: with caller_keeps="loss", the step that keeps only
        # the loss (a "100%" budget is that peak, which the step holding every output is above)
        plain_peak = reference_peak_bytes(entry)[0]
        link = entry.link = self.link_for(entry.device) if entry.device is not None else None
        # the buffers of shared leaves read through a closure on top of the measured peak, which does not see them
        # (Note [Shared leaves split tape runs])
        plain_least = plain_least_bytes(entry)
        plain_fits = budget is None or (plain_least is not None and plain_least <= budget)
        if self.schedule_fn is not None:
            plan = plan_from_schedule(chain, self.schedule_fn(chain), budget, link=link)
        elif plain_fits:
            # Plain autograd fits: run it as such (no recomputation, nothing reserved, no overhead).
            # Not measured (profiled stage by stage): the solver's store-all schedule runs instead,
            # whose peak the model predicts (plain autograd's can be above the model's store-all peak).
            chain = plain
            plan = plan_from_schedule(plain, store_all(plain), plain_peak if budget is None else budget, link=link)
            plan.predicted_peak_bytes = plain_peak
            plan.feasible = True  # judged by the measured peak of this very step
            plan.notes = [f"plain autograd fits the budget (its peak {plan.predicted_peak_bytes} B, measured when "
                          f"profiling); running the stages as plain autograd"]
            if self._last is entry:  # the plan's least is this wrapper's, not the store-all chain's
                plan.known_min_bytes = self.min_budget_bytes
        else:
            try:
                plan = self._solve_above_floor(entry, chain, budget, link)
            except InfeasibleBudgetError as err:
                solver_least = err.min_bytes
                # a ceiling the solver can plan within
                ceiling = self._percent_ceiling(entry, err.min_bytes) if fallback else None
                if ceiling is None and plain_least is not None and plain_least < err.min_bytes:
                    # the plain path's least is the wrapper's least (plain_least_bytes)
                    err = InfeasibleBudgetError(below_plain_message(budget, plain_least, err.min_bytes), plain_least)
                if ceiling is None:
                    more = _merged_hint(chain, solver_least, self.cut_remedy)
                    more += (_needs_at_least(err, self.budget, plain_peak)
                             if isinstance(self.budget, str) else "")
                    more += self._loss_only_hint(entry, budget, link)
                    if not more:
                        raise
                    raise InfeasibleBudgetError(f"{err}{more}", err.min_bytes) from None
                # a smaller batch than the others (the last of an epoch): _percent_ceiling
                message = self._below_least(entry, budget, err.min_bytes, ceiling)
                budget = ceiling
                plan = self._solve(chain, budget, link)
                plan.notes.append(message)
            release_device_memory()  # the solver's device workspace goes back to training
        if isinstance(self.budget, str):  # a percentage: say what it resolved to
            reference, what = reference_peak_bytes(entry)
            plan.notes = [f"budget {self.budget} of plain autograd's peak {reference} B ({what}): {resolved} B"
                          ] + list(plan.notes)
        # the notes of a plan that counts less of a_N or its gradients than all of them
        learned = ([n for n in (output_grads_note(entry), output_holds_note(entry)) if n] + learned_reserve_notes(entry)
                   if chain is not plain else [])
        plan.notes = list(plan.notes) + learned + ([entry.covered_note] if entry.covered_note else [])
        entry.chain = chain
        entry.split = split_schedule(plan.schedule, chain.n)
        entry.program = annotate(plan.schedule, entry.breaks)
        recomputed = {op.stage for op in plan.schedule[entry.split + 1:]
                      if op.kind in (OpKind.FWD_NOGRAD, OpKind.FWD_TAPE)}
        entry.recomputed = [s in recomputed for s in range(chain.n + 1)]
        # A store-all plan is plain autograd: run it as such (same graph, same memory, no overhead). Not when
        # it counts less of a_N than all of it (the notes above): plain autograd would not check that. Not
        # when plain autograd was measured above the budget, nor where stages share a leaf and plain autograd
        # was not measured, nor for a given schedule over stages that share a leaf (Note [Shared leaves split
        # tape runs]).
        if self.schedule_fn is not None:
            may_run_plain = not entry.breaks  # the schedule's simulated peak does not count the buffer
        elif plain_fits:
            may_run_plain = True
        else:
            may_run_plain = not plain_peak_measured(entry) and not entry.breaks
        entry.plain = (not recomputed and all(code != NOGRAD for code, *_ in entry.program) and not learned
                       and may_run_plain)
        # Note [Pinned buffers once per plan] in torch_exec/offload.py: one pool and copy stream per plan.
        swaps = sum(1 for op in plan.schedule if op.kind is OpKind.OFFLOAD)
        entry.copies = HostCopies(entry.device) if swaps else None
        if entry.copies is not None:
            entry.copies.meter = self._meter
        if swaps and entry.device.type != "cuda":
            plan.notes = list(plan.notes) + [
                f"offloading on {entry.device}: the 'host' copies are plain tensors in the same memory (a test path: "
                f"nothing is saved; offloading only makes sense on a CUDA device)"]
        entry.plan = plan

    def _loss_only_hint(self, entry: Entry, budget: int, link: Link | None) -> str:
        """What an infeasible budget's error adds when the caller may hold the whole output
        (``caller_keeps="output"``) but a loop keeping only the loss would fit: the remedy."""
        if entry.loss_only or not entry.out_scalar:
            return ""
        try:
            grads, dropped = loss_only_uses(entry)
        except ValueError:  # no scalar loss among the outputs
            return ""
        least = least_budget_bytes(learned_chain(entry, grads, dropped)[0], link)
        if least > budget:
            return ""
        how = ("pass caller_keeps='loss'" if not isinstance(self.budget, str) else
               f"pass caller_keeps='loss' with a budget of at least {least} B in bytes (a percentage would then be "
               f"taken of that loop's own plain peak, which is lower)")
        return (f"; a training loop that keeps and back-propagates only the model's scalar loss (loss = "
                f"model(...).loss; loss.backward(), as transformers' Trainer does) needs only {least} B: {how} "
                f"(Note [The caller holds a_N] in torch_exec/executor.py)")

    def replan(self, budget="keep", schedule_fn="keep", profile: bool = False, offload="keep") -> None:
        """As :meth:`_PlannedModule.replan`, and ``offload`` may change too."""
        with self._all_or_nothing():
            if not kept(offload):
                self.offload = _offload_setting(offload)
                check_offload_backend(self.offload, self.backend)
            super().replan(budget, schedule_fn, profile)

    # ------------------------------------------------------------ stages replaced
    # Note [Stages replaced after wrapping]
    #     Transfer learning replaces a layer of the model it trains (``net[-1] = nn.Linear(64, 5)`` for a new task).
    #     The wrapper registers the Sequential's own module dict (Note [A Sequential's own names]), or a ModuleList
    #     of a list's modules, so the new layer showed in ``parameters()`` and ``state_dict()``, but the steps ran
    #     the callables taken at construction: the old layer, which no optimizer held any more, and the new one got
    #     no gradient (a review: bench/repros/rv20b_seq_replaced_stage_still_runs_old.py). Each call compares the
    #     registered modules with those taken (the objects, in order: a copy's are other objects, its own); a change
    #     takes the stages again, as a new model: every plan is dropped and the next step profiles and solves anew.
    #     CheckpointedJoin asks its branches the same at each call.
    def _stage_modules(self) -> tuple:
        """The modules registered as stages, in order (Note [Stages replaced after wrapping]): the Sequential's given,
        else the list's, as the wrapper registers them."""
        registered = (self._source if self._source is not None else self._modules["stages"])._modules
        return tuple([m for m in registered.values() if m is not None])

    def _follow_replaced_stages(self) -> bool:
        """Take the stages again where a registered one was replaced, dropping every plan (Note [Stages replaced
        after wrapping]); whether they were."""
        modules = self._stage_modules()
        if len(modules) == len(self._registered) and all(a is b for a, b in zip(modules, self._registered)):
            return False
        if self._source is not None:  # a Sequential: taken as at construction
            names, fns = U.stage_list(self._source)
            if not self._shares_sequential:  # registered as a list (modules= given)
                self._modules["stages"] = nn.ModuleList([f for f in fns if isinstance(f, nn.Module)])
        else:  # a list: its modules' positions among the callables, in order
            taken = iter(modules)
            names = list(self.names)
            fns = [next(taken, None) if isinstance(f, nn.Module) else f for f in self._fns]
            if any(f is None for f in fns) or next(taken, None) is not None:
                raise ValueError("CheckpointedSequential: stages were added to or removed from its module list after "
                                 "it was made; make a new wrapper over the new stages")
        _check_callables(names, fns, [f for f in fns if isinstance(f, nn.Module)] + self._extras)
        self.names, self._fns, self._registered = names, fns, modules
        self._entries.clear()
        self._last = None
        return True

    # ------------------------------------------------------------ forward
    def _plain(self, state):
        for fn in self._fns:
            state = fn(state)
        return state

    def forward(self, *inputs):
        self._follow_replaced_stages()  # Note [Stages replaced after wrapping]
        state = inputs[0] if len(inputs) == 1 else tuple(inputs)
        flat = U.tensors(state)
        if len(flat) != (1 if isinstance(state, torch.Tensor) else len(state)):
            raise TypeError("CheckpointedSequential takes a tensor or a tuple of tensors")
        if self._runs_plain() or not torch.is_grad_enabled() or runs_as_a_stage():
            # torch.compile traces this path (Note [torch.compile]); inside the profiling or the step of an
            # outer wrapper this one is one of its stages: it runs plainly, as it was measured (Note [A
            # wrapper inside another's step] in torch_exec/profiler.py).
            return self._plain(state)
        if U.nothing_requires_grad(flat, self, self._fns):  # no backward comes
            return U.ran_without_grad(self._plain(state), type(self).__name__)
        return self._scheduled(state, flat)

    @_compiler_disable
    @U.without_caches  # Note [Autocast's cache]
    def _scheduled(self, state, flat):
        """A step under a plan: never traced by torch.compile (Note [torch.compile])."""
        walked = self._walk()  # Note [One walk of the model per call]
        entry = self._entry(state, walked)
        refuse_shared_hazards(() if entry.plain else entry.shared_params, "CheckpointedSequential")
        U.settle_deferred_hooks()  # a backward that raised left hooks suspended
        self._meter.record_ended()  # what the last measured step showed plans this one (Note [The caller's turn])
        if entry.reuse_failed:  # Note [Sizes that vary between calls]: this signature is profiled now
            self._stop_reuse()
            entry = self._entry(state)
        elif entry.replan_due:  # Note [Outputs without a gradient], Note [The caller holds a_N], [The caller's turn]
            entry = self._entries[self._key(state)] = self._replan_learned(entry)
        self._last = entry
        if self._begin_step(entry, flat[0].device):
            return self._plain_step(lambda: self._plain(state), functools.partial(learn_plain_step, entry))
        structure = "tensor" if isinstance(state, torch.Tensor) else "tuple"
        tap, tap_args = self._parameter_tap(walked)
        return _ScheduleFunction.apply((entry, structure, self.preserve_rng_state, self._meter, tap_args,
                                        self.call_data), tap, *flat)

    def _replan_learned(self, entry: Entry) -> Entry:
        """The entry re-planned for what its backwards showed of a_N (``replan_due``: Note [Outputs without a
        gradient], Note [The caller holds a_N]). Where the budget no longer fits, the error says what was
        learned and the remedies, and the re-plan stays due (the next call tries again, never the old plan)."""
        was = (entry.exec_chain, entry.grad_reserve, entry.out_reserve, entry.caller_applied,  # learned_chain's base
               entry.blocks_applied, entry.turn_applied)
        rng_applied = entry.rng_applied  # Note [Draws found at the first run] in torch_exec/_util.py
        entry.exec_chain, entry.replan_due = with_learned_outputs(entry), False
        try:
            return self._plan_entry(entry)
        except InfeasibleBudgetError as err:
            # what this re-plan counts anew (a review: output gradients planned from the start were named beside
            # the caller's turn that made the re-plan)
            moved = [now != before for now, before in zip((entry.grad_reserve, entry.out_reserve, entry.caller_applied,
                                                             entry.blocks_applied, entry.turn_applied), was[1:],
                                                            strict=True)]
            (entry.exec_chain, entry.grad_reserve, entry.out_reserve, entry.caller_applied,
             entry.blocks_applied, entry.turn_applied), entry.replan_due = was, True
            drawn, entry.rng_applied = entry.rng_applied != rng_applied, rng_applied
            grads = sorted((entry.out_grads or frozenset()) - {i for i, scalar in enumerate(entry.out_scalar) if scalar})
            grads = grads if moved[0] else []
            held = sorted(loss_only_uses(entry)[1] - entry.out_dropped) if entry.loss_only and moved[1] else []
            shown = "; ".join(x for x in (
                f"output(s) {grads} of the model get a gradient" if grads else "",
                f"the caller holds output storage(s) {held} through the backward" if held else "",
                f"the code between the forward and the backward needs {entry.caller_reserve} B the plan did not count"
                if moved[2] else "",
                f"the code between the forward and the backward (the loss and its backward) reaches "
                f"{entry.caller_turn} B above the model's output and its gradient right after the forward, which the "
                f"plan did not count"
                if moved[4] else "",
                f"the CUDA allocator's blocks held {entry.blocks_reserve} B beyond the plan (Note [Allocator blocks "
                f"learned])" if moved[3] else "",
                f"stages found drawing random numbers record {entry.rng_reserve} B of RNG state the plan did not count "
                f"(Note [Draws found at the first run] in torch_exec/_util.py)" if drawn else "") if x)
            remedy = (" or drop the output before the backward (keep only the loss), or pass caller_keeps='output'"
                      if entry.loss_only else "")
            raise InfeasibleBudgetError(
                f"{type(self).__name__}: the budget was feasible for the plan made before the first backward, but the "
                f"{'steps' if drawn else 'backwards'} since showed more to count "
                f"({shown or 'other gradients of the output'}; "
                f"Note [The caller holds a_N] in torch_exec/executor.py): {err}{remedy}", err.min_bytes) from None

    def extra_repr(self) -> str:
        offload = "" if self.offload is None else f", offload={self.offload!r}"
        return f"stages={len(self._fns)}, budget={self._budget_repr()}{offload}"


__all__ = ["CheckpointedSequential", "annotate", "interpret", "plan_from_schedule", "split_schedule", "Runtime",
           "Entry"]
